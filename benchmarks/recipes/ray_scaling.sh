#!/usr/bin/env bash
# The Ray collector past one machine (issue 24): docs/algorithms/ray_collector.md, "Scaling". Run from the
# repository root on an otherwise idle machine; writes CSV/JSON/PNG into $OUT.
set -euo pipefail
OUT=${OUT:-results/ray}

# A simulated environment whose step sleeps 5 ms (no CPU), one environment per worker, 64-step segments, each
# worker asking Ray for 2/16 of a CPU: the collector alone, IMPACT's learner alone, and learn(), 1 to 16 workers.
python -m benchmarks ray_scaling --workers 1 2 4 8 16 --step-sleep 0.005 --n-steps 64 --seconds 20 \
    --learn-steps 20000 --repeats 2 --out "$OUT/scaling_sleep5ms"

# What the two cuts of a worker's cost did (ray_collector.md, "What the two cuts did"): the collector alone at 1 and
# 16 workers, 3 interleaved repeats, each sampler in a worktree of its commit with this benchmark script copied in
# as it was before it moved to benchmarks/profiling/ (commit d807ac2: the imports and collector calls those commits
# have): before = 70a000f, checks_off = 6abae79 (torch.distributions' checks off in workers), shortcut = c0da69d.
OUT_ABS=$(realpath -m "$OUT")
for repeat in 1 2 3; do
    for version in before:70a000f checks_off:6abae79 shortcut:c0da69d; do
        name=${version%%:*}
        tree="$OUT_ABS/trees/$name"
        if [ ! -d "$tree" ]; then
            git worktree add -f --detach "$tree" "${version#*:}"
            git show d807ac2:benchmarks/ray_scaling.py >"$tree/benchmarks/ray_scaling.py"
        fi
        (cd "$tree" && PYTHONPATH="$tree" python -m benchmarks ray_scaling --workers 1 16 --modes collect \
            --step-sleep 0.005 --n-steps 64 --seconds 20 --repeats 1 --out "$OUT_ABS/scaling_cuts/$name/r$repeat")
    done
done

# Two Ray nodes (a head and a second node started with `ray start`, one CPU each): one worker on each.
python examples/ray_two_nodes.py --steps 20000
