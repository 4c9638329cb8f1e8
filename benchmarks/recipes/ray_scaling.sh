#!/usr/bin/env bash
# The Ray collector past one machine (issue 24): docs/algorithms/ray_collector.md, "Scaling". Run from the
# repository root on an otherwise idle machine; writes CSV/JSON/PNG into $OUT.
set -euo pipefail
OUT=${OUT:-results/ray}

# A simulated environment whose step sleeps 5 ms (no CPU), one environment per worker, 64-step segments, each
# worker asking Ray for 2/16 of a CPU: the collector alone, IMPACT's learner alone, and learn(), 1 to 16 workers.
python -m benchmarks ray_scaling --workers 1 2 4 8 16 --step-sleep 0.005 --n-steps 64 --seconds 20 \
    --learn-steps 20000 --repeats 2 --out "$OUT/scaling_sleep5ms"

# Two Ray nodes (a head and a second node started with `ray start`, one CPU each): one worker on each.
python examples/ray_two_nodes.py --steps 20000
