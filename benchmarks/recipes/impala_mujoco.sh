#!/usr/bin/env bash
# IMPALA against SB3 PPO at equal wall time on two cores (issue 22): 600 s of training per run, one run at a time
# on an otherwise idle machine (IMPALA's process collector takes the second core), one torch thread per process.
# Seeds may be added in later sittings on the same machine kind and software: --first-seed N --append.
set -euo pipefail
OUT=${OUT:-results/impala_600s}
export OMP_NUM_THREADS=1
# --steps 5000000 lets the time budget end both runs (the ymls stop at 1M steps); neither entry has a schedule
# that the step budget would stretch. docs/results_before_protocol.md's table has PPO's rows of 2026-11-24 and IMPALA's of
# 2026-11-25 (its entry with value passes), from this line on the same machine kind and software.
python -m benchmarks run --algos ppo impala --env HalfCheetah-v5 --seeds 3 --max-seconds 600 --steps 5000000 \
    --eval-seconds 60 --eval-episodes 5 --jobs 1 --out "$OUT/HalfCheetah-v5"

# The search behind the yml's entry (one seed, 150 s each, one run at a time): several passes over each batch in
# minibatches (RLlib's num_epochs / minibatch_size), and one full-batch step per segment at other sizes and rates.
python -m benchmarks run --algos impala \
    "impala[n_steps=64,batch_size=128,n_epochs=4,learning_rate=1e-4]" \
    "impala[n_steps=64,batch_size=128,n_epochs=10,learning_rate=1e-4]" \
    "impala[n_steps=64,batch_size=64,n_epochs=10,learning_rate=5e-5]" \
    "impala[n_steps=32,batch_size=64,n_epochs=4,learning_rate=1e-4]" \
    "impala[n_steps=64,batch_size=64,n_epochs=20,learning_rate=2e-5]" \
    "impala[n_steps=64,batch_size=128,n_epochs=4,learning_rate=5e-5]" \
    "impala[n_steps=64,batch_size=256,n_epochs=2,learning_rate=1e-4]" \
    "impala[n_steps=64,batch_size=128,n_epochs=4,learning_rate=lin_3e-4]" \
    "impala[n_steps=32,learning_rate=2e-4]" \
    "impala[n_steps=64,batch_size=128,learning_rate=1e-4]" \
    "impala[n_steps=64,learning_rate=2e-4]" \
    --env HalfCheetah-v5 --seeds 1 --steps 5000000 --max-seconds 150 --eval-seconds 75 --eval-episodes 5 --jobs 1 \
    --out "$OUT/search"

# Value passes and collectors (step-based, 600k steps, 3 seeds, two runs at a time). Written for today's yml
# (four value passes, sync collector); the files in docs/benchmarks/impala_600s/value_passes/ ran at commit 49cf3eb,
# where the same four variants were named impala, impala[collector=sync], impala[n_value_epochs=4] and
# impala[n_value_epochs=4,collector=sync].
python -m benchmarks run --algos "impala[n_value_epochs=0,collector=process]" "impala[n_value_epochs=0]" \
    "impala[collector=process]" impala --env HalfCheetah-v5 --seeds 3 --steps 600000 --eval-freq 50000 \
    --eval-episodes 5 --jobs 2 --torch-threads 1 --order interleaved --out "$OUT/value_passes"

# The yml's Hopper-v5 and Walker2d-v5 entry and the search behind it (step-based, 1M steps, 3 seeds, two runs at a
# time). Written for today's yml, whose entry there is gamma 0.99, lambda 0.95 and ten value passes. The files in
# docs/benchmarks/impala_1m/ ran HalfCheetah's entry as "impala" at commit c4cab78 (halfcheetah_entry/), and the
# others at commit 06324d5 as variants of HalfCheetah's entry (search/: impala[gamma=0.99,gae_lambda=0.95,...]).
MUJOCO_1M="--seeds 3 --steps 1000000 --eval-freq 50000 --eval-episodes 5 --jobs 2 --torch-threads 1 --order interleaved"
python -m benchmarks run --algos "impala[gamma=0.98,gae_lambda=0.92,n_value_epochs=4]" "impala[n_value_epochs=4]" \
    impala "impala[n_value_epochs=4,learning_rate=5e-5]" --env Hopper-v5 Walker2d-v5 $MUJOCO_1M --out "$OUT/impala_1m"
python -m benchmarks run --algos "impala[gamma=0.999,gae_lambda=0.99,n_value_epochs=4]" --env Hopper-v5 $MUJOCO_1M \
    --append --out "$OUT/impala_1m"
python -m benchmarks run --algos "impala[learning_rate=5e-5]" --env Walker2d-v5 $MUJOCO_1M --append --out "$OUT/impala_1m"

# Issue 64's steps-per-second question: CPU milliseconds per env step of learn() with the HalfCheetah-v5 entry (sync
# collector, one torch thread, 30k steps after a 2k-step warm-up) at the commit of the runs before the protocol
# (e4e9e5a) and at d807ac2, five interleaved pairs. CPU time, so a busy machine blurs it less
# than wall time. Each commit is a git worktree; the files in docs/benchmarks/tuning/impala_halfcheetah_drift/ are
# this loop's output (2026-11-28, the 2-core machine, beside step-based runs).
learn_cost() {
    (cd "$1" && PYTHONPATH=. python - 30000 2>/dev/null <<'PY'
import sys, time
import torch as th
import sb3_impact
from benchmarks.config import algo_class, load_zoo_hyperparams, make_training_env, split_env_params
th.set_num_threads(1)
env_params, params = split_env_params(load_zoo_hyperparams("impala", "HalfCheetah-v5"))
env = make_training_env("HalfCheetah-v5", env_params.get("n_envs", 1), 0, env_params.get("normalize", False), False)
model = algo_class("impala")(env_params["policy"], env, seed=0, **params)
model.learn(2048)
cpu, wall, start = time.process_time(), time.perf_counter(), model.num_timesteps
model.learn(int(sys.argv[1]), reset_num_timesteps=False)
done = model.num_timesteps - start
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
print(f"{sb3_impact.__file__} steps {done} cpu_ms_per_step {1000 * cpu / done:.4f} wall_ms_per_step {1000 * wall / done:.4f}")
PY
    )
}
if [[ -n "${IMPALA_COST_TREES:-}" ]]; then  # e.g. IMPALA_COST_TREES="/tmp/at_e4e9e5a /tmp/at_d807ac2"
    for _ in 1 2 3 4 5; do for tree in $IMPALA_COST_TREES; do learn_cost "$tree"; done; done
fi
