#!/usr/bin/env bash
# V-RACER on HalfCheetah-v5 (issue 21): every table of docs/algorithms/vracer.md and the V-RACER section of
# docs/results.md, one command each. Run from the repository root; each writes CSV/JSON/PNG into its --out.
# Two cores: the step-based runs (run) may share the machine; the timing (gradient_step_cost) needs it idle.
set -euo pipefail
OUT=${OUT:-results/vracer}

# Cost of a gradient step: V-RACER (eager and compiled), SAC, SACReFER on a 2^18-step memory, one thread.
python -m benchmarks gradient_step_cost --algos vracer "vracer[compile_loss=True]" sac sac_refer \
    --env HalfCheetah-v5 --memory-steps 262144 --steps 1000 --warmup 200 --repeats 3 --out "$OUT/gradient_step_cost"

# The authors' code's choices, one option at a time against the paper's settings (150k steps, 3 seeds).
python -m benchmarks run --algos vracer "vracer[observation_statistics_rate=0.001]" \
    "vracer[policy_kwargs={clip_env_actions: false}]" "vracer[policy_kwargs={weight_init: glorot}]" \
    "vracer[policy_kwargs={std_parameterization: smarties}]" "vracer[kl_direction=pi_mu]" \
    --env HalfCheetah-v5 --seeds 3 --steps 150000 --eval-freq 10000 --eval-episodes 5 --jobs 2 --out "$OUT/differences"

# SB3 PPO with rl-zoo3's tuned yml at 1M steps: the baseline of the 1M comparison.
python -m benchmarks run --algos ppo --env HalfCheetah-v5 Hopper-v5 --seeds 3 --steps 1000000 \
    --eval-freq 50000 --eval-episodes 5 --jobs 2 --out "$OUT/ppo_1m"
