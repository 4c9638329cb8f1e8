#!/usr/bin/env bash
# The shared-memory process collector's overlap and the thread policy on the 2-core machine
# (docs/algorithms/collectors.md, "Overlap on two cores" and "Threads"). Wall-clock lines: run with nothing else on the
# machine. $OUT is copied to docs/benchmarks/overlap_two_cores/ (the manifest's data files) and `python -m benchmarks
# tables` writes the pages.
set -euo pipefail
OUT=${OUT:-results/overlap_and_threads}

# V-RACER's env step outside training against SAC's, in one invocation.
python -m benchmarks step_cost --algos sac vracer "vracer[collector=sync,train_freq=1]" --env Pendulum-v1 HalfCheetah-v5 \
    --steps 2000 --repeats 5 --torch-threads 1 --out "$OUT/step_cost"

# Overlap (C, L, T_async, T_sync): IMPACT on Breakout and HalfCheetah-v5, IMPALA on Breakout, with the process
# collector, medians of 3 interleaved repeats.
python -m benchmarks throughput --algo impact --env BreakoutNoFrameskip-v4 --collector process --batches 40 --repeats 3 --out "$OUT"
python -m benchmarks throughput --algo impact --env HalfCheetah-v5 --collector process --batches 60 --repeats 3 --out "$OUT"
python -m benchmarks throughput --algo impala --env BreakoutNoFrameskip-v4 --collector process --batches 40 --repeats 3 --out "$OUT"
# The same with the thread collector, the Atari entries' (ALE's steps and the convolutions release the GIL).
python -m benchmarks throughput --algo impact --env BreakoutNoFrameskip-v4 --collector thread --batches 40 --repeats 3 --out "$OUT/thread"
python -m benchmarks throughput --algo impala --env BreakoutNoFrameskip-v4 --collector thread --batches 40 --repeats 3 --out "$OUT/thread"

# Every algorithm's default, idle and beside two CPU-bound processes (CPU per env step, whole learn()).
python -m benchmarks step_cost --algos impact impala ppo_amber ptr_ppo --env CartPole-v1 --train --defaults --busy 2 \
    --steps 2048 --repeats 3 --out "$OUT/busy_defaults_onpolicy"
python -m benchmarks step_cost --algos vracer sac_refer td3_refer --env Pendulum-v1 --train --defaults --busy 2 \
    --steps 1000 --repeats 3 --out "$OUT/busy_defaults_offpolicy"

# Which collector for IMPACT's and IMPALA's constructor defaults (the README demo's setting), idle and busy.
python -m benchmarks step_cost --algos "impact[collector=thread]" "impact[collector=process]" "impact[collector=sync]" \
    "impala[collector=thread]" "impala[collector=process]" "impala[collector=sync]" --env CartPole-v1 --train --defaults \
    --busy 2 --steps 4096 --repeats 3 --out "$OUT/default_collector"

# The thread policy: 1 or 2 learner threads with each collector, MLP and CNN, idle and busy.
VARIANTS=()
for collector in sync thread process; do
    for threads in 1 2; do VARIANTS+=("impact[collector=$collector,learner_threads=$threads]"); done
done
python -m benchmarks step_cost --algos "${VARIANTS[@]}" --env HalfCheetah-v5 --train --busy 2 --steps 2048 --repeats 1 \
    --out "$OUT/threads_mlp"
python -m benchmarks step_cost --algos "${VARIANTS[@]}" --env BreakoutNoFrameskip-v4 --train --busy 2 --steps 4096 \
    --repeats 1 --out "$OUT/threads_cnn"

# The README demo, idle and then beside two CPU-bound processes (its output under /usr/bin/time -v).
mkdir -p "$OUT/demo"
/usr/bin/time -v python examples/cartpole.py > "$OUT/demo/idle.txt" 2>&1
for _ in 1 2; do python -c "while True: pass" & done
/usr/bin/time -v python examples/cartpole.py > "$OUT/demo/busy.txt" 2>&1
kill %1 %2
