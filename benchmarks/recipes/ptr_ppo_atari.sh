#!/usr/bin/env bash
# PTR-PPO on Atari on CPU (issue 23): every table of docs/algorithms/ptr_ppo.md's Atari section, one command each.
# Run from the repository root; each writes CSV/JSON/PNG into its --out. The timings want the machine idle.
set -euo pipefail
OUT=${OUT:-results/ptr_ppo_atari}

# Where an iteration's time goes (collection, fresh epochs, replay steps, scoring, memory), PTR-PPO at the paper's
# settings against SB3 PPO with rl-zoo3's atari yml, one torch thread, 6144 env steps each. The "before" row of
# the docs is this command with sb3_impact at commit 912ad65 on the path.
python -m benchmarks iteration_cost --algos ptr_ppo ppo --env BreakoutNoFrameskip-v4 --steps 6144 \
    --out "$OUT/iteration_cost"

# Atari environment steps per second on two CPU cores (docs/results_before_protocol.md, "Atari on two CPU cores"): every algorithm
# with its yml, one 60 s run at a time, no evaluation; then the thread collector's overlap T / max(C, L).
python -m benchmarks run --algos ppo impact impala ptr_ppo --env BreakoutNoFrameskip-v4 PongNoFrameskip-v4 --seeds 1 \
    --max-seconds 60 --eval-seconds 20 --eval-episodes 0 --out "$OUT/atari_throughput_2core"
for env in BreakoutNoFrameskip-v4 PongNoFrameskip-v4; do
    for algo in impact impala; do
        python -m benchmarks throughput --algo "$algo" --env "$env" --batches 8 --vec-env dummy --collector thread \
            --out "$OUT/atari_throughput_2core"
    done
done
# IMPACT with the process collector instead of the yml's thread collector, same measurements.
for env in BreakoutNoFrameskip-v4 PongNoFrameskip-v4; do
    python -m benchmarks throughput --algo impact --env "$env" --batches 8 --vec-env dummy --collector process \
        --out "$OUT/atari_throughput_2core/process"
done
python -m benchmarks run --algos "impact[collector=process]" --env BreakoutNoFrameskip-v4 PongNoFrameskip-v4 --seeds 1 \
    --max-seconds 60 --eval-seconds 20 --eval-episodes 0 --out "$OUT/atari_throughput_2core/process"

# The paper's Table 2 on two CPU cores (issue 23): PTR-PPO (the shipped atari yml: the paper's schedule, priority
# max) against SB3 PPO (rl-zoo3's atari yml) at the paper's 160k environment steps, 3 seeds, 10 deterministic full
# games (all lives, unclipped) every 20k steps. Two runs at a time, one core and one torch thread each (step-based):
# about 45 minutes per PTR-PPO run and 17-20 per PPO run. One line per game; a sitting may run some seeds and add
# the others with --first-seed N --seeds K --append on the same machine kind and software. Invocations run side by
# side write separate --out folders (one writer per CSV); the line with --merge FOLDER ... then makes the one table.
T2="--seeds 3 --steps 160000 --eval-freq 20000 --eval-episodes 10 --jobs 2 --torch-threads 1 --order interleaved"
python -m benchmarks run --algos ptr_ppo ppo --env AtlantisNoFrameskip-v4 $T2 --out "$OUT/table2"
python -m benchmarks run --algos ptr_ppo ppo --env QbertNoFrameskip-v4 $T2 --out "$OUT/table2"
python -m benchmarks run --algos ptr_ppo ppo --env UpNDownNoFrameskip-v4 $T2 --out "$OUT/table2"
# Bowling's evaluations can cost more than its training: a deterministic policy that never releases the ball plays
# each test game to ALE's 108000-frame cap (27000 steps), so SB3 PPO's seed 0 took 42 minutes, 30 of them evaluating.
python -m benchmarks run --algos ptr_ppo ppo --env BowlingNoFrameskip-v4 $T2 --out "$OUT/table2"
# NameThisGame's test games are long too: SB3 PPO's seed 0 took 37 minutes, 13.8 of them training.
python -m benchmarks run --algos ptr_ppo ppo --env NameThisGameNoFrameskip-v4 $T2 --out "$OUT/table2"
python -m benchmarks run --algos ptr_ppo ppo --env BreakoutNoFrameskip-v4 $T2 --out "$OUT/table2"
# docs/results_before_protocol.md's table of games and every-evaluation tables came from `python -m benchmarks report
# --across-envs` and `report --evaluations` on "$OUT"/table2/*.json, removed after commit 3fe1ec7 (`git checkout
# 3fe1ec7 -- benchmarks/` brings them back); the protocol's table of games is `python -m benchmarks tables`'
# ptr_ppo_atari (benchmarks/tables.yml).

# The trajectory priorities on one game (3 seeds each): mean and reward against max (the yml's priority) and PPO.
# The docs' ppo and ptr_ppo (max) rows are the Qbert line's runs above, so a sitting runs only the two variants
# (--algos "ptr_ppo[priority=mean]" "ptr_ppo[priority=reward]", each into its own --out) and makes the table from
# the Qbert line's CSV/JSON copied into "$OUT/priorities" with this line plus --merge VARIANT_FOLDER ...
python -m benchmarks run --algos ppo ptr_ppo "ptr_ppo[priority=mean]" "ptr_ppo[priority=reward]" \
    --env QbertNoFrameskip-v4 $T2 --out "$OUT/priorities"
