#!/usr/bin/env bash
# Run from the repository root. IMPALA's HalfCheetah-v5 entry alone on the machine, 120 s of training, with OMP_NUM_THREADS=1 (as the runs before the
# protocol) and without (as the protocol's), interleaved, two of each; steps per second of training from the CSV.
for i in 1 2; do
  OMP_NUM_THREADS=1 python -m benchmarks run --algos impala --env HalfCheetah-v5 --first-seed 0 --seeds 1 --steps 10000000 \
      --max-seconds 120 --eval-seconds 30 --eval-episodes 10 --out docs/benchmarks/tuning/impala_halfcheetah_rate/omp1_$i
  env -u OMP_NUM_THREADS python -m benchmarks run --algos impala --env HalfCheetah-v5 --first-seed 0 --seeds 1 --steps 10000000 \
      --max-seconds 120 --eval-seconds 30 --eval-episodes 10 --out docs/benchmarks/tuning/impala_halfcheetah_rate/default_$i
done
