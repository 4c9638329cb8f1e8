#!/usr/bin/env bash
# The CartPole-v1 and Pendulum-v1 tables of docs/results_before_protocol.md: IMPACT against PPO over 5 seeds (IMPACT section),
# every algorithm against PPO at 50k steps (Baselines, "All algorithms on CartPole-v1 and Pendulum-v1 at 50k
# steps"), PPO-AMBER's active batches and V-RACER's ReF-ER ablation on Pendulum-v1. The 2-core development
# machine; run from the repository root. The wall ratios want the machine otherwise idle.
# Each algorithm uses the yml it ships today; the 50k-step tables were measured with the yml of 2026-11-22.
set -euo pipefail
OUT=${OUT:-results/classic_control}

# IMPACT against PPO, 5 seeds, each at its yml's budget (100k), torch's default threads.
python -m benchmarks run --algos ppo impact --env CartPole-v1 --seeds 5 --eval-freq 5000 --eval-episodes 10 --out "$OUT/small5"
python -m benchmarks run --algos ppo impact --env Pendulum-v1 --seeds 5 --eval-freq 5000 --eval-episodes 10 --out "$OUT/small5"

# Every algorithm at 50k steps, 3 seeds, one torch thread (V-RACER is for Box actions, PTR-PPO has no Pendulum entry).
python -m benchmarks run --algos ppo impact impala ppo_amber ptr_ppo --env CartPole-v1 --seeds 3 --steps 50000 \
    --eval-freq 2500 --eval-episodes 10 --torch-threads 1 --out "$OUT/harness"
python -m benchmarks run --algos ppo impact impala ppo_amber vracer --env Pendulum-v1 --seeds 3 --steps 50000 \
    --eval-freq 2500 --eval-episodes 10 --torch-threads 1 --out "$OUT/harness"

# PPO-AMBER's active batches over training (recorded then with benchmarks.ppo_amber_active_batches): its logged
# train/active_batches ..., evaluated after every iteration (1024 steps) so that each diagnostics row is one iteration's.
OMP_NUM_THREADS=1 python -m benchmarks run --algos ppo_amber --env Pendulum-v1 --seeds 3 --steps 50000 --eval-freq 1024 \
    --plot-diagnostics active_batches stored_batches replay_ratio_mean batch_drop_factor --out "$OUT/ppo_amber"

# V-RACER's ReF-ER ablation, 1 seed: rules (1, 2), (1,), (2,) and none (recorded then with benchmarks.vracer_ablation).
OMP_NUM_THREADS=1 python -m benchmarks run --algos "vracer[refer_rules=[1,2]]" "vracer[refer_rules=[1]]" \
    "vracer[refer_rules=[2]]" "vracer[refer_rules=[]]" --env Pendulum-v1 --seeds 1 --steps 20000 --eval-freq 2500 \
    --eval-episodes 5 --record refer --out "$OUT/vracer"
