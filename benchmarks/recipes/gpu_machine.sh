#!/usr/bin/env bash
# What asynchrony gives where it is meant to pay, on a lent GPU machine (16 CPU cores, one H100 or H200), in ONE
# device call of at most 8 minutes (issue 67): docs/results.md, "Past two cores: one GPU machine". In this order,
# each part under a time limit (its own, or less when the budget has less left):
#   1. cuda_tests  tests/test_cuda.py, its output in test_cuda.txt                                        (60 s)
#   2. impact      IMPACT on BreakoutNoFrameskip-v4, 14 env processes (SubprocVecEnv) behind the process
#                  collector, learner on CUDA: C, L, T_async and T_sync (`benchmarks throughput`)           (110 s)
#   3. ppo         SB3 PPO on the same 14 env processes, learner on CUDA: env steps per second (`benchmarks
#                  run`, no evaluation)                                                                     (60 s)
#   4. ray         the Ray collector's learn() at 1, 2, 4, 8 and 14 workers against the learner's ceiling
#                  measured in the same call, at the 2-core recipe's settings (benchmarks/recipes/
#                  ray_scaling.sh: SimulatedEnv sleeping 5 ms per step, one env per worker, 64-step segments)  (110 s)
#   5. impala      IMPALA as IMPACT in 2                                                                    (100 s)
# After each part the data so far are packed into $OUT/gpu_machine.tar.gz (the parts' logs: $OUT/logs.tar.gz), so a
# call killed at its limit still returns what finished; at the end $OUT/summary.txt holds each part's exit status
# (124: stopped at its limit) and time, and the tables as `python -m benchmarks tables` renders them. BUDGET (440 s)
# is the whole script's, installs included; the device call's own limit (480 s) leaves the rest for the transfers.
#
# SIZE=small runs every part on a 2-core CPU machine (tests/test_gpu_machine.py runs it): learner on the CPU, Breakout
# with 2 env processes and 2 batches, 3 s of PPO, 1 and 2 Ray workers. About 30 s of CPU; 100-175 s of wall time on
# the 2-core machine with two benchmark runs beside it.
#
# The GPU machine has no network and starts bare. Before the call, here, from the root of the checkout the device
# call sends (the GPU machine's Python is 3.12):
#   bash ../shared/device/prepare.sh                 # the SB3 stack as cp312 wheels into .whl/ (about 25 MB)
#   bash benchmarks/recipes/gpu_machine.sh pack-ray  # Ray, slimmed, into .whl/ray-VERSION-cp312-slim.tar.xz
# Ray's wheel (79 MB for 2.60.0) is over the 64 MiB a call carries, and prepare.sh only says to split it over two
# calls. `pack-ray` makes it fit one: Ray (this machine's version) with the packages it needs that the GPU machine's
# image lacks (jsonschema, jsonschema-specifications, referencing, rpds-py), without its Java jars, its dashboard's
# web client and the libraries on top of its core (RLlib, Data, Serve, Tune, Train, LLM), the binaries' symbol tables
# stripped, xz-compressed: 18 MiB, so .whl/ (about 42 MiB with it) and the checkout (14 MiB) stay under the 64 MiB.
# The device call:
#   run(command='set -o pipefail; bash benchmarks/recipes/gpu_machine.sh 2>&1 | tee "$OUT/console.txt"',
#       carry=[".whl"], timeout_s=480)
# The script installs the carried wheels into /tmp/site and Ray into /tmp/ray-site when they are not importable.
# After the call, here, with FILES_AT the folder the tool names (files_at):
#   rm -rf docs/benchmarks/gpu_machine && tar -xzf FILES_AT/gpu_machine.tar.gz -C docs/benchmarks
#   python -m benchmarks tables     # writes docs/results.md's gpu-machine-* blocks from docs/benchmarks/gpu_machine/
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
PYTHON=${PYTHON:-python3}

pack_ray() (  # a subshell: its own errexit and temporary folder
    set -e
    version=${RAY_VERSION:-$("$PYTHON" -c 'import ray; print(ray.__version__)' 2>/dev/null || echo 2.60.0)}
    target=${RAY_PACK:-.whl/ray-$version-cp312-slim.tar.xz}
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "$PYTHON" -m pip install -q --no-deps --no-compile --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
        --target "$work/site" "ray==$version" jsonschema jsonschema-specifications referencing rpds-py
    rm -rf "$work/site/bin"
    (cd "$work/site/ray" && rm -rf jars dashboard/client/build rllib data serve tune train llm)
    if command -v strip >/dev/null; then
        strip --strip-unneeded "$work/site/ray/_raylet.so" "$work/site/ray/core/src/ray/gcs/gcs_server" \
            "$work/site/ray/core/src/ray/raylet/raylet"
    fi
    mkdir -p "$(dirname "$target")"
    echo "compressing Ray $version (a few minutes)"
    "$PYTHON" -c 'import sys, tarfile
with tarfile.open(sys.argv[1], "w:xz", preset=9) as archive:
    archive.add(sys.argv[2], arcname=".")' "$target" "$work/site"
    tracked=$(git ls-files -z | xargs -0 du -cb | tail -n 1 | cut -f1)
    wheels=$(du -sm .whl 2>/dev/null | cut -f1)
    echo "wrote $target ($(du -m "$target" | cut -f1) MiB); tracked files $((tracked / 1048576)) MiB," \
        ".whl/ ${wheels:-0} MiB: a call carries 64 MiB"
    if [ -z "${RAY_PACK:-}" ] && ! git check-ignore -q "$target"; then
        echo "warning: git does not ignore $target: add /.whl/ to .git/info/exclude (prepare.sh does)"
    fi
)

if [ "${1:-}" = pack-ray ]; then
    pack_ray
    exit
elif [ $# -gt 0 ]; then
    echo "usage: [SIZE=full|small] [OUT=dir] bash $0 [pack-ray]" >&2
    exit 2
fi

SIZE=${SIZE:-full}
case $SIZE in
    full)
        DEVICE=cuda N_ENVS=14 WORKERS="1 2 4 8 14" LEARN_STEPS=4000 IMPACT_BATCHES=30 IMPALA_BATCHES=45
        PPO_SECONDS=30 PPO_EVAL_SECONDS=10 BUDGET=${BUDGET:-440}
        LIMIT_TESTS=60 LIMIT_IMPACT=110 LIMIT_PPO=60 LIMIT_RAY=110 LIMIT_IMPALA=100
        ;;
    small)
        DEVICE=cpu N_ENVS=2 WORKERS="1 2" LEARN_STEPS=512 IMPACT_BATCHES=2 IMPALA_BATCHES=2 PPO_SECONDS=3
        PPO_EVAL_SECONDS=1 BUDGET=${BUDGET:-1500}
        # Generous: the small size checks that every part runs and writes its data (the test suite, on a 2-core
        # machine that may be busy), not how fast; its parts take about 30 CPU-seconds in all.
        LIMIT_TESTS=300 LIMIT_IMPACT=300 LIMIT_PPO=300 LIMIT_RAY=300 LIMIT_IMPALA=300
        export OMP_NUM_THREADS=1  # two cores: one PyTorch thread per process, as the test suite runs
        ;;
    *)
        echo "SIZE must be full or small, got $SIZE" >&2
        exit 2
        ;;
esac
OUT=${OUT:-results/gpu_machine}
WORK=$(mktemp -d)
DATA=$WORK/gpu_machine
LOGS=$WORK/logs
GRACE=10     # seconds between a part's SIGTERM at its limit and its SIGKILL
RESERVE=20   # seconds kept for the summary
mkdir -p "$OUT" "$DATA" "$LOGS"
trap 'rm -rf "$WORK"' EXIT
printf 'part\texit\tseconds\tlimit\n' >"$DATA/parts.tsv"

pack() {  # the data and logs so far into $OUT, each replaced in one move
    tar -czf "$OUT/gpu_machine.tar.gz.part" -C "$WORK" gpu_machine && mv "$OUT/gpu_machine.tar.gz.part" "$OUT/gpu_machine.tar.gz"
    tar -czf "$OUT/logs.tar.gz.part" -C "$WORK" logs && mv "$OUT/logs.tar.gz.part" "$OUT/logs.tar.gz"
}

part() {  # part NAME LIMIT COMMAND...: COMMAND under min(LIMIT, the budget left) seconds, logged, then packed
    local name=$1 limit=$2 left start rc
    shift 2
    left=$((BUDGET - RESERVE - GRACE - SECONDS))
    if [ "$left" -lt "$limit" ]; then limit=$left; fi
    if [ "$limit" -lt 10 ]; then
        printf '%s\tskipped: %ss of the budget left\t0\t0\n' "$name" "$left" >>"$DATA/parts.tsv"
        echo "[$SECONDS s] $name skipped: ${left}s of the budget left"
        return
    fi
    echo "[$SECONDS s] $name (at most ${limit}s): $*"
    start=$SECONDS
    timeout -k "$GRACE" "$limit" "$@" >"$LOGS/$name.log" 2>&1
    rc=$?
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - start))" "$limit" >>"$DATA/parts.tsv"
    echo "[$SECONDS s] $name: exit $rc after $((SECONDS - start))s"
    if [ "$rc" -ne 0 ]; then tail -n 15 "$LOGS/$name.log"; fi
    pack
}

# The carried SB3 stack and Ray, where this Python lacks them (the GPU machine; see the header).
if compgen -G '.whl/*.whl' >/dev/null && ! "$PYTHON" -c 'import stable_baselines3, rl_zoo3, ale_py' 2>/dev/null; then
    echo "[$SECONDS s] installing the carried wheels into /tmp/site"
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >"$LOGS/pip.log" 2>&1 ||
        tail "$LOGS/pip.log"
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
RAY=yes
if ! "$PYTHON" -c 'import ray' 2>/dev/null; then
    RAY=$(compgen -G '.whl/ray-*-slim.tar.xz' | head -n 1)
    if [ -n "$RAY" ]; then
        echo "[$SECONDS s] unpacking $RAY into /tmp/ray-site"
        "$PYTHON" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="tar")' "$RAY" /tmp/ray-site &&
            export PYTHONPATH=/tmp/ray-site:$PYTHONPATH
    fi
    "$PYTHON" -c 'import ray' 2>/dev/null && RAY=yes
fi
"$PYTHON" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
    "cuda:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)' | tee "$DATA/machine.txt"
nproc >>"$DATA/machine.txt"

BREAKOUT=(--env BreakoutNoFrameskip-v4 --vec-env subproc --collector process --device "$DEVICE" --out "$DATA/breakout")
PPO="ppo[n_envs=$N_ENVS]"
# shellcheck disable=SC2016  # $0 and $1 are the inner shell's
part cuda_tests "$LIMIT_TESTS" bash -c 'set -o pipefail; "$0" -m pytest tests/test_cuda.py -q -rs -p no:cacheprovider | tee "$1"' \
    "$PYTHON" "$DATA/test_cuda.txt"
part impact "$LIMIT_IMPACT" "$PYTHON" -m benchmarks throughput --algo "impact[n_envs=$N_ENVS]" --batches "$IMPACT_BATCHES" \
    "${BREAKOUT[@]}"
part ppo "$LIMIT_PPO" "$PYTHON" -m benchmarks run --algos "$PPO" --subproc "$PPO" --env BreakoutNoFrameskip-v4 --seeds 1 \
    --max-seconds "$PPO_SECONDS" --eval-seconds "$PPO_EVAL_SECONDS" --eval-episodes 0 --device "$DEVICE" --out "$DATA/ppo"
if [ "$RAY" = yes ]; then
    # shellcheck disable=SC2086  # the worker counts are words
    part ray "$LIMIT_RAY" "$PYTHON" -m benchmarks ray_scaling --workers $WORKERS --modes ceiling learn --step-sleep 0.005 \
        --n-steps 64 --learn-steps "$LEARN_STEPS" --repeats 1 --out "$DATA/ray_scaling"
else
    printf 'ray\tskipped: no Ray (pack-ray, see the header)\t0\t0\n' >>"$DATA/parts.tsv"
fi
part impala "$LIMIT_IMPALA" "$PYTHON" -m benchmarks throughput --algo "impala[n_envs=$N_ENVS]" --batches "$IMPALA_BATCHES" \
    "${BREAKOUT[@]}"

"$PYTHON" - "$DATA" >"$DATA/summary.txt" 2>&1 <<'PY'
"""Each part's exit status and time, then the tables as `python -m benchmarks tables` renders them."""
import sys
from pathlib import Path

from benchmarks.profiling.tables import gpu_overlap_table, ray_scaling_table

data = Path(sys.argv[1])
print((data / "parts.tsv").read_text())
tests = (data / "test_cuda.txt").read_text().strip().splitlines() if (data / "test_cuda.txt").is_file() else []
print("tests/test_cuda.py:", tests[-1] if tests else "no output", "\n")
entry = {"page": "docs/results.md", "recipe": "benchmarks/recipes/gpu_machine.sh"}
breakout = sorted(data.glob("breakout/*.json")) + sorted(data.glob("ppo/*.csv"))
print(gpu_overlap_table({**entry, "data": [str(path) for path in breakout]}, Path("/")))
print(ray_scaling_table({**entry, "data": [str(data / "ray_scaling" / "ray_scaling.json")]}, Path("/")))
PY
cp "$DATA/summary.txt" "$OUT/summary.txt"
pack
cat "$DATA/summary.txt"
echo "[$SECONDS s] done: $OUT/gpu_machine.tar.gz, $OUT/logs.tar.gz, $OUT/summary.txt"
