#!/usr/bin/env bash
# sb3-impact beside the peers a user would pick instead: RLlib's APPO (IMPACT's own implementation, by IMPACT's
# authors) and IMPALA, Ray 2.60, on the same two cores. RLlib pins its own gymnasium (1.2.2), so its runs go to a
# virtual environment of their own, made here once from the package registry with this machine's torch
# (constraints.txt); `python -m benchmarks run` starts each RLlib run there (benchmarks/rllib_run.py: RLlib's tuned
# example for the task, one env runner process beside the learner, as our process collector). Both algorithms of a
# table run in one invocation, interleaved seed by seed, wall-clock: alone on the machine, one run at a time, equal
# training wall time, evaluated on the same time grid with the same episodes and policy (deterministic; Atari: the
# stochastic policy on 10 whole games). Reporting seeds from 100. Then `python -m benchmarks tables`.
# Sample Factory is not run: see docs/guide/benchmarks.md, "Peers".
set -euo pipefail
OUT=${OUT:-results}
PEER_VENV=$(realpath -m "${PEER_VENV:-.venv-rllib}")   # relative to the repository root, or absolute
if [ ! -x "$PEER_VENV/bin/python" ]; then
    python -m venv "$PEER_VENV"
    "$PEER_VENV/bin/pip" install -c constraints.txt "ray[rllib]==2.60.0" "gymnasium[mujoco]==1.2.2" ale-py opencv-python-headless "torch==2.13.0"
fi
export SB3_IMPACT_PEER_PYTHON="$PEER_VENV/bin/python"
WALL=(--first-seed 100 --seeds 3 --steps 100000000 --eval-episodes 10 --jobs 1)

python -m benchmarks run --algos impact rllib_appo --env HalfCheetah-v5 "${WALL[@]}" --max-seconds 600 --eval-seconds 60 \
    --out "$OUT/peers_appo_halfcheetah"
python -m benchmarks run --algos impact rllib_appo --env BreakoutNoFrameskip-v4 "${WALL[@]}" --max-seconds 600 \
    --eval-seconds 60 --out "$OUT/peers_appo_breakout"
python -m benchmarks run --algos impala rllib_impala --env BreakoutNoFrameskip-v4 "${WALL[@]}" --max-seconds 600 \
    --eval-seconds 60 --out "$OUT/peers_impala_breakout"
python -m benchmarks run --algos impala rllib_impala --env CartPole-v1 "${WALL[@]}" --max-seconds 120 --eval-seconds 10 \
    --out "$OUT/peers_impala_cartpole"
