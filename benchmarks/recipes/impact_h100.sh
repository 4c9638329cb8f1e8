#!/usr/bin/env bash
# IMPACT and IMPALA against SB3 PPO on a GPU machine (16 CPU cores, one H100): docs/results_before_protocol.md, IMPACT section,
# "HalfCheetah-v5 and Hopper-v5 at equal wall time on the GPU machine" (IMPALA's row included) and "Atari:
# environment steps per second on the GPU machine", and the GPU-machine rows of "IMPACT's collection/learning
# overlap". Run from the repository root on an otherwise idle machine; each MuJoCo table runs all its runs at once
# (--jobs), so every algo sees the same load. Writes CSV/JSON/PNG into $OUT.
set -euo pipefail
OUT=${OUT:-results/impact_h100}

# MuJoCo at equal wall time, learners on the CPU; the thresholds are PPO's median return after its budget.
python -m benchmarks run --algos ppo impact impala --env HalfCheetah-v5 --seeds 3 --max-seconds 480 --eval-seconds 40 \
    --eval-episodes 5 --threshold 3826.0 --jobs 9 --out "$OUT/mujoco"
python -m benchmarks run --algos ppo impact --env Hopper-v5 --seeds 3 --max-seconds 240 --eval-seconds 30 \
    --eval-episodes 5 --threshold 987.0 --jobs 6 --out "$OUT/hopper"

# Atari environment steps per second: 40 s per run, one run at a time, no evaluation, learner on the GPU.
python -m benchmarks run --algos ppo impact impala --env BreakoutNoFrameskip-v4 PongNoFrameskip-v4 --seeds 1 \
    --max-seconds 40 --eval-seconds 10 --eval-episodes 0 --subproc ppo impact impala --device cuda --out "$OUT/atari_throughput"

# IMPACT's collection/learning overlap on Atari, 20 batches each.
for env in BreakoutNoFrameskip-v4 PongNoFrameskip-v4; do
    python -m benchmarks throughput --algo impact --env "$env" --batches 20 --vec-env subproc --collector thread \
        --device cuda --out "$OUT/atari_throughput"
done

# The learner on the GPU, the environments in the learner's process (DummyVecEnv), the Atari entries' thread
# collector against collecting then training: docs/algorithms/collectors.md, "With the learner on a GPU"
# (the table "overlap-gpu-learner", 2026-11-27: one repeat of 30 batches each, on an H200 machine).
for algo in impact impala; do
    python -m benchmarks throughput --algo "$algo" --env BreakoutNoFrameskip-v4 --batches 30 --repeats 1 --device cuda \
        --out "$OUT/overlap_gpu_learner"
done

# Not run yet (about 2.5 h per 10M-step IMPACT run at 2000 steps/s): learning on Atari at PPO's yml budget.
# python -m benchmarks run --algos ppo impact --env PongNoFrameskip-v4 BreakoutNoFrameskip-v4 --seeds 3 --steps 10000000 \
#     --eval-seconds 300 --eval-episodes 5 --subproc ppo impact --device cuda --jobs 2 --out "$OUT/atari"
