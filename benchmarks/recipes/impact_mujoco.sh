#!/usr/bin/env bash
# IMPACT against SB3 PPO at equal wall time on two cores (issue 22): 600 s of training per run, one run at a time
# on an otherwise idle machine (IMPACT's collector takes the second core), one torch thread per process.
# Seeds may be added in later sittings on the same machine kind and software: --first-seed N --append.
set -euo pipefail
OUT=${OUT:-results/impact_600s}
export OMP_NUM_THREADS=1
python -m benchmarks run --algos ppo impact --env HalfCheetah-v5 Hopper-v5 --seeds 3 --max-seconds 600 \
    --eval-seconds 60 --eval-episodes 5 --jobs 1 --out "$OUT"
