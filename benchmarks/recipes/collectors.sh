#!/usr/bin/env bash
# Collectors and throughput, docs/results_before_protocol.md: "One data path: collecting while learning" (PPO-AMBER and V-RACER on
# Pendulum-v1, PTR-PPO on CartPole-v1, by collector, 5 seeds), the 2-core rows of "IMPACT's collection/learning
# overlap" and the Ray collector's scaling on two cores. The one-data-path tables ran on a 16-core machine with
# 2 torch threads per run and 5 (Pendulum) or 3 (CartPole) runs at once, about two cores per run; the overlap and
# Ray rows on the 2-core development machine. Run from the repository root; the timings want the machine idle.
set -euo pipefail
OUT=${OUT:-results/collectors}

# One data path. The variants were written "ALGO[async_collection=True,collector=...]" before the collector
# parameter replaced async_collection; the yml of these three now collect in a forked process, so the synchronous
# rows name collector=sync.
python -m benchmarks run --algos ppo "ppo_amber[collector=process]" "ppo_amber[collector=thread]" \
    "vracer[collector=process,train_freq=4]" "vracer[collector=sync,train_freq=1]" --env Pendulum-v1 --seeds 5 \
    --jobs 5 --torch-threads 2 --out "$OUT/one_data_path"
python -m benchmarks run --algos ppo "ptr_ppo[collector=process]" "ptr_ppo[collector=thread]" "ptr_ppo[collector=sync]" \
    --env CartPole-v1 --seeds 5 --jobs 3 --torch-threads 2 --out "$OUT/one_data_path"

# IMPACT's collection/learning overlap on two cores, one command per row of the table.
python -m benchmarks throughput --algo impact --env CartPole-v1 --batches 300 --vec-env dummy --collector process --out "$OUT/throughput"
python -m benchmarks throughput --algo impact --env CartPole-v1 --batches 300 --vec-env dummy --collector thread --out "$OUT/throughput"
python -m benchmarks throughput --algo impact --env Pendulum-v1 --batches 100 --vec-env dummy --collector process --out "$OUT/throughput"
python -m benchmarks throughput --algo impact --env HalfCheetah-v5 --batches 30 --vec-env dummy --collector thread --out "$OUT/throughput"
python -m benchmarks throughput --algo impact --env HalfCheetah-v5 --batches 30 --vec-env dummy --collector process --out "$OUT/throughput"
python -m benchmarks throughput --algo impact --env Hopper-v5 --batches 30 --vec-env dummy --collector thread --out "$OUT/throughput"
python -m benchmarks throughput --algo impact --env BreakoutNoFrameskip-v4 --batches 8 --vec-env dummy --collector thread --out "$OUT/throughput"

# The Ray collector on CartPole-v1, 8 environments per worker, 1 to 4 workers (needs the ray extra). The scaling
# on a larger machine and the two-node example are ray_scaling.sh.
python -m benchmarks ray_scaling --env CartPole-v1 --envs-per-worker 8 --num-cpus-per-worker 1 --ray-cpus 4 \
    --workers 1 2 4 --modes collect learn --seconds 10 --learn-steps 20000 --repeats 2 --out "$OUT/ray"
