#!/usr/bin/env bash
# PTR-PPO on CartPole-v1 and Acrobot-v1: the tables of docs/results_before_protocol.md's PTR-PPO section (CartPole-v1 at 40k steps,
# each trajectory priority, the replay ratio, the epoch split). The 2-core development machine; step-based (the
# steps and returns count; the wall seconds were taken on a shared machine). Run from the repository root; each
# command writes CSV/JSON/PNG into its --out. The Atari cost is ptr_ppo_atari.sh.
set -euo pipefail
OUT=${OUT:-results/ptr_ppo}

# CartPole-v1, 3 seeds, 40k steps.
python -m benchmarks run --algos ppo ptr_ppo --env CartPole-v1 --seeds 3 --steps 40000 --eval-freq 5000 \
    --eval-episodes 10 --out "$OUT/cartpole_40k"

# Each trajectory priority, 3 seeds, 50k steps, with the priority heatmap (recorded then with
# benchmarks.ptr_ppo_priorities, PPO's points taken from the 50k-step harness run).
OMP_NUM_THREADS=1 python -m benchmarks run --algos ppo "ptr_ppo[priority=max]" "ptr_ppo[priority=mean]" \
    "ptr_ppo[priority=reward]" --env CartPole-v1 --seeds 3 --steps 50000 --eval-freq 2500 --eval-episodes 10 \
    --torch-threads 1 --record priorities --out "$OUT/priorities"

# The replay ratio: pi / b, pi / pi_old backed up before the fresh update, pi / the round's start. Seeds 0-2 of
# every algo, then seeds 3-4 of the PTR-PPO variants. CartPole-v1's yml sets "behaviour"; Acrobot-v1's does not.
R=("ptr_ppo[replay_ratio=behaviour]" "ptr_ppo[replay_ratio=old_policy]" "ptr_ppo[replay_ratio=round_policy]")
export OMP_NUM_THREADS=1
python -m benchmarks run --algos ppo "${R[@]}" --env CartPole-v1 --seeds 3 --jobs 1 --torch-threads 1 \
    --out "$OUT/replay_ratio"
python -m benchmarks run --algos "${R[@]}" --env CartPole-v1 --first-seed 3 --seeds 2 --append --baseline ppo \
    --jobs 1 --torch-threads 1 --out "$OUT/replay_ratio"
python -m benchmarks run --algos ppo "${R[@]}" --env Acrobot-v1 --steps 200000 --eval-freq 10000 --threshold -100 \
    --seeds 3 --jobs 1 --torch-threads 1 --out "$OUT/replay_ratio"
python -m benchmarks run --algos "${R[@]}" --env Acrobot-v1 --steps 200000 --eval-freq 10000 --threshold -100 \
    --first-seed 3 --seeds 2 --append --baseline ppo --jobs 1 --torch-threads 1 --out "$OUT/replay_ratio"

# Splitting PPO's epochs between the fresh rollout and replay rounds, forked collector, 3 seeds.
python -m benchmarks run --algos ppo "ptr_ppo[collector=process,n_epochs=2,replay_rounds=8]" \
    "ptr_ppo[collector=process,n_epochs=4,replay_rounds=4]" "ptr_ppo[collector=process,n_epochs=5,replay_rounds=2]" \
    --env CartPole-v1 --seeds 3 --torch-threads 1 --out "$OUT/epoch_split"
