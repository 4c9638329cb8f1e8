"""
The peers a user would pick instead of this package, run by the same runner as our algorithms: ``python -m
benchmarks run --algos impact rllib_appo --env HalfCheetah-v5 ...`` (docs/results.md, "Peers").

- ``rllib_appo``, ``rllib_impala``: RLlib's APPO and IMPALA (Ray 2.60) with our entry's adaptations for the task
  carried over, on the same env as ours; ``rllib_appo_example``, ``rllib_impala_example``: with RLlib's tuned
  example for it (their settings: ``benchmarks/peers.yml``). RLlib pins its own gymnasium, so a run goes to a
  subprocess started with the Python of RLlib's virtual environment (``--peer-python``, default
  ``$SB3_IMPACT_PEER_PYTHON`` or ``.venv-rllib/bin/python``; ``benchmarks/recipes/peers.sh`` makes it), which runs
  :mod:`benchmarks.rllib_run` from the repository's root (the yml beside it comes with the checkout). Its points
  come back in the rows of :class:`benchmarks.output.EvalPoint`, so the same CSV/JSON, tables, statistics and plots
  serve both, and RLlib's own metrics at each point come back as the run's diagnostics
  (``OUT/records/ENV/diagnostics/ALGO_seedN.csv``, as our runs' logger values).
- ``sf_appo``: Sample Factory's APPO (sample-factory 2.1.1) with its MuJoCo and Atari examples' settings on the
  2-core machine (``benchmarks/peers.yml``, section ``sample_factory``), on HalfCheetah-v4 (SF pins gymnasium 0.29)
  and Breakout (our AtariWrapper, with SB3 and ale-py installed in SF's environment). Its
  runs go the same way to :mod:`benchmarks.sf_run`, started with the Python of SF's own virtual environment
  (``$SB3_IMPACT_SF_PYTHON``, default ``.venv-sf/bin/python``); SF's metrics at each point are its diagnostics.
- Each peer run's record names its ``stack`` and carries its environment's package versions; the protocol compares
  a peer with our runs on the machine, the settings and the packages both environments have, except the ones the
  peer's stack pins itself (:data:`benchmarks.protocol.STACK_PACKAGES`).
"""

import contextlib
import functools
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.output import machine_id
from benchmarks.rllib_run import PEER_ALGOS, peer_settings
from benchmarks.sf_run import SF_ALGOS, sf_settings
from benchmarks.variants import split_variant

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PEER_PYTHON = REPO_ROOT / ".venv-rllib" / "bin" / "python"
DEFAULT_SF_PYTHON = REPO_ROOT / ".venv-sf" / "bin" / "python"
PEER_STACK = "rllib"  # RLlib's runs' stack
SF_STACK = "sf"  # Sample Factory's
# Each stack's runner module, run with its environment's Python from the repository's root.
RUNNERS = {PEER_STACK: "benchmarks.rllib_run", SF_STACK: "benchmarks.sf_run"}
STOP_GRACE_SECONDS = 30.0  # after SIGINT, for the peer to stop Ray and exit
# The RunSpec fields a peer run gets (its SPEC.json, with torch_threads; benchmarks.rllib_run).
SPEC_FIELDS = ("algo", "env_id", "seed", "steps", "max_seconds", "eval_freq", "eval_seconds", "eval_episodes", "deterministic")


def is_peer(algo: str) -> bool:
    """Whether ``algo`` (a name or a variant) is one of the peers."""
    base = split_variant(algo)[0]
    return base in PEER_ALGOS or base in SF_ALGOS


def peer_stack(algo: str) -> str:
    """The stack a peer runs on: ``sf`` for Sample Factory's algos (``sf_*``), else ``rllib``."""
    return SF_STACK if split_variant(algo)[0] in SF_ALGOS else PEER_STACK


def peer_python(given: str | None = None, algo: str | None = None) -> str:
    """
    The Python of a peer's environment. RLlib's (any ``algo`` but ``sf_*``): ``given`` (``--peer-python``), else
    ``$SB3_IMPACT_PEER_PYTHON``, else ``.venv-rllib``; Sample Factory's: ``$SB3_IMPACT_SF_PYTHON``, else ``.venv-sf``.
    """
    if algo is not None and peer_stack(algo) == SF_STACK:
        return os.environ.get("SB3_IMPACT_SF_PYTHON") or str(DEFAULT_SF_PYTHON)
    return given or os.environ.get("SB3_IMPACT_PEER_PYTHON") or str(DEFAULT_PEER_PYTHON)


def check_peer(algo: str, env_id: str, python: str) -> None:
    """``ValueError`` before anything runs: no settings for the pair, or no peers' environment to run it in."""
    if peer_stack(algo) == SF_STACK:
        sf_settings(algo, env_id)
        if not Path(python).is_file():
            raise ValueError(
                f"{algo} runs in Sample Factory's own environment, and {python} does not exist: make it (sample-factory "
                '2.1.1 with our mujoco, ale-py and stable-baselines3; docs/guide/benchmarks.md, "Peers") or set '
                "SB3_IMPACT_SF_PYTHON"
            )
        return
    peer_settings(algo, env_id)
    if not Path(python).is_file():
        raise ValueError(
            f"{algo} runs in RLlib's own environment, and {python} does not exist: make it with "
            "benchmarks/recipes/peers.sh (or pass --peer-python / set SB3_IMPACT_PEER_PYTHON)"
        )


def peer_hyperparams_source(algo: str, env_id: str) -> str:
    settings = sf_settings(algo, env_id) if peer_stack(algo) == SF_STACK else peer_settings(algo, env_id)
    return settings["source"]


@functools.cache
def peer_software(python: str, stack: str = PEER_STACK) -> dict[str, str | None]:
    """The package versions of a peer's environment (its runner's ``--software``)."""
    command = [python, "-m", RUNNERS[stack], "--software"]
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])


def run_peer(spec: Any, python: str, torch_threads: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """
    One peer run (a :class:`benchmarks.pool.RunSpec`) in its stack's environment, by its stack's runner
    (:data:`RUNNERS`): its points as ``EvalPoint`` fields (this machine's name where the runner leaves it out), and its
    diagnostics rows (RLlib's or SF's metrics at each point, keyed by algo, seed and steps).
    The subprocess leads its own process group (Ray's processes join it); Ctrl-C or any exit here stops it: SIGINT,
    :data:`STOP_GRACE_SECONDS` for it to shut Ray down, then SIGKILL to the group. Raises ``RuntimeError`` with
    the end of its output when it fails.
    """
    run = {name: getattr(spec, name) for name in SPEC_FIELDS} | {"torch_threads": torch_threads}
    with tempfile.TemporaryDirectory(prefix="peer-run-") as folder:
        spec_path, result_path, log_path = (Path(folder) / name for name in ("spec.json", "result.json", "output.log"))
        spec_path.write_text(json.dumps(run))
        with open(log_path, "w") as log:
            process = subprocess.Popen(
                [python, "-m", RUNNERS[peer_stack(spec.algo)], str(spec_path), str(result_path)],
                cwd=REPO_ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                _wait_unreaped(process)
            finally:
                _stop_group(process)
            returncode = process.wait()
        if returncode != 0 or not result_path.is_file():
            tail = log_path.read_text()[-3000:]
            raise RuntimeError(f"{spec.algo} exited with code {returncode}: {tail}")
        result = json.loads(result_path.read_text())
        points = [{"machine": machine_id("cpu"), **point} for point in result["points"]]
        return points, result["diagnostics"]


def _wait_unreaped(process: subprocess.Popen, timeout: float | None = None) -> bool:
    """
    Wait until ``process`` exits, without reaping it (its pid, and so its process group's id, stays reserved until
    ``wait()``); False if ``timeout`` seconds pass first.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _stop_group(process: subprocess.Popen) -> None:
    """
    SIGINT to a still running peer's group and :data:`STOP_GRACE_SECONDS` for it to exit, then SIGKILL to the
    group (what its Ray left behind too), all before the peer is reaped, so that the group id is still its own.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if not _wait_unreaped(process, timeout=0):
            os.killpg(process.pid, signal.SIGINT)
            _wait_unreaped(process, timeout=STOP_GRACE_SECONDS)
        os.killpg(process.pid, signal.SIGKILL)
