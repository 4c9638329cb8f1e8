#!/usr/bin/env bash
# Baselines, docs/results_before_protocol.md: "SB3 PPO at 1M steps" (HalfCheetah-v5, Hopper-v5, Walker2d-v5; the same runs as in
# vracer_mujoco.sh) and "Six algorithms at 300 s on HalfCheetah-v5 and Hopper-v5". The 2-core development machine,
# one torch thread per run. The 1M-step runs are step-based and may share the machine; the 300 s table wants it
# otherwise idle. Run from the repository root; each command writes CSV/JSON/PNG into its --out.
set -euo pipefail
OUT=${OUT:-results/baselines}

# SB3 PPO with rl-zoo3's tuned yml (its -v4 entries) at 1M steps, 3 seeds.
python -m benchmarks run --algos ppo --env HalfCheetah-v5 --seeds 3 --steps 1000000 --eval-freq 50000 --eval-episodes 5 \
    --jobs 2 --out "$OUT/ppo_halfcheetah_1m"
python -m benchmarks run --algos ppo --env Hopper-v5 --seeds 3 --steps 1000000 --eval-freq 50000 --eval-episodes 5 \
    --jobs 1 --out "$OUT/ppo_hopper_1m"
python -m benchmarks run --algos ppo --env Walker2d-v5 --seeds 3 --steps 1000000 --eval-freq 20000 --eval-episodes 5 \
    --jobs 1 --out "$OUT/ppo_walker2d_1m"

# Every algorithm for Box actions at 300 s of training, 3 seeds, two runs at a time, interleaved seed by seed; then
# steps and seconds to PPO's median final return from the same rows.
python -m benchmarks run --algos ppo sac impact impala ppo_amber vracer --env HalfCheetah-v5 Hopper-v5 --seeds 3 \
    --max-seconds 300 --eval-seconds 30 --eval-episodes 5 --jobs 2 --out "$OUT/mujoco"
python -m benchmarks run --algos ppo sac impact impala ppo_amber vracer --env HalfCheetah-v5 --seeds 3 --max-seconds 300 \
    --eval-seconds 30 --eval-episodes 5 --jobs 2 --threshold 1920 --summarize --out "$OUT/mujoco"
python -m benchmarks run --algos ppo sac impact impala ppo_amber vracer --env Hopper-v5 --seeds 3 --max-seconds 300 \
    --eval-seconds 30 --eval-episodes 5 --jobs 2 --threshold 994 --summarize --out "$OUT/mujoco"

# At paper scale, on a 16-core machine (not run):
# python -m benchmarks run --algos ppo sac impact impala ppo_amber vracer --env HalfCheetah-v5 Hopper-v5 --seeds 3 \
#     --steps 1000000 --eval-freq 20000 --jobs 14 --out "$OUT/mujoco_1m"
