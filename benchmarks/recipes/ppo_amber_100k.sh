#!/usr/bin/env bash
# PPO-AMBER against SB3 PPO on HalfCheetah-v5 at 100k steps: docs/results_before_protocol.md, PPO-AMBER section, "HalfCheetah-v5
# at 100k steps". The 2-core development machine; step-based, so the runs may share the machine. Run from the
# repository root; writes CSV/JSON/PNG into $OUT. The search behind the entry is ppo_amber_mujoco.sh.
set -euo pipefail
OUT=${OUT:-results/ppo_amber_mujoco}

# PPO-AMBER's values are pinned to the yml entry of the day (L = 8, eps_b = lin_0.25, clip 0.2 as the yml).
python -m benchmarks run --algos ppo "ppo_amber[replay_length=8,batch_drop_factor=lin_0.25]" --env HalfCheetah-v5 \
    --seeds 3 --steps 100000 --eval-freq 20000 --eval-episodes 5 --jobs 1 --out "$OUT"
