#!/usr/bin/env bash
# SACReFER against SB3 SAC on HalfCheetah-v5: docs/results_before_protocol.md, "SACReFER and TD3ReFER" section, both tables (C=10,
# D=0.2 at 100k steps; the paper's constants at 60k steps, beside V-RACER with the paper's settings). The 2-core
# development machine, two runs at a time, one torch thread each; step-based, so the runs may share the machine.
# Run from the repository root; each command writes CSV/JSON/PNG into its --out.
set -euo pipefail
OUT=${OUT:-results/refer_sac}

# SACReFER with its MuJoCo yml (C=10, D=0.2), 100k steps. SAC's points of that table are the first 100k steps of
# its 20-minute runs (the second command, also in vracer_mujoco.sh).
python -m benchmarks run --algos sac_refer --env HalfCheetah-v5 --seeds 3 --steps 100000 --eval-freq 10000 \
    --eval-episodes 5 --jobs 2 --out "$OUT/sac_refer_100k"
python -m benchmarks run --algos sac --env HalfCheetah-v5 --seeds 3 --steps 1000000 --max-seconds 1200 \
    --eval-freq 10000 --eval-episodes 5 --jobs 2 --out "$OUT/sac_20min"

# The paper's constants (C=4, A=5e-7, D=0.1: SACReFER's constructor defaults, then its HalfCheetah-v5 entry) and
# V-RACER with the paper's settings (then its yml entry, vracer_default today), 60k steps, against SAC.
python -m benchmarks run --algos sac "sac_refer[refer_c=4.0,refer_d=0.1]" vracer_default --env HalfCheetah-v5 \
    --seeds 3 --steps 60000 --eval-freq 10000 --eval-episodes 5 --jobs 2 --baseline sac --out "$OUT/sac_refer_60k"
