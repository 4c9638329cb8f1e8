"""One benchmark run (training with evaluation on a step or wall-time grid) and the process pool that runs many at
once, with its clean stop on Ctrl-C and SIGTERM."""

import contextlib
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecEnv, sync_envs_normalization
from tqdm.auto import tqdm

from benchmarks.config import EVAL_SEED_OFFSET, ZooExperiment
from benchmarks.diagnostics import DiagnosticsRecorder, diagnostics_path
from benchmarks.output import EvalPoint, machine_id, write_rows
from benchmarks.peers import is_peer, run_peer
from benchmarks.recorders import Recorder, record_path, recorders_for


@dataclass(frozen=True)
class RunSpec:
    """One benchmark run: ``algo`` with its zoo hyperparameters on ``env_id`` with ``seed``, and how it is measured."""

    algo: str
    env_id: str
    seed: int
    steps: int | None = None
    eval_freq: int = 5000
    eval_episodes: int = 10
    device: str = "cpu"
    subproc: bool = False
    eval_seconds: float | None = None
    max_seconds: float | None = None
    records: tuple[str, ...] = ()  # recorder names (benchmarks/recorders.py); each writes under record_dir
    record_dir: str = ""  # where the recorders and the diagnostics write (empty: nowhere, as a run outside the runner)
    deterministic: bool = True  # the evaluation policy (benchmarks.protocol.eval_policy: stochastic for Atari)
    peer_python: str = ""  # the Python of a peer's own environment (benchmarks.peers)


class TimedEvalCallback(BaseCallback):
    """
    Evaluate the policy (``spec.deterministic``: stochastic on Atari) for ``spec.eval_episodes`` whole episodes (0:
    steps and wall time only, with a NaN return, for throughput runs) when training starts, every ``spec.eval_freq``
    environment steps or, with ``spec.eval_seconds``, every so many seconds of training wall time (the same number
    of points for a fast and a slow algorithm), and when it ends; with ``spec.max_seconds``, stop training at that
    wall time. A point's wall time is the time since training started less the time spent evaluating. Each
    evaluation is also a line of stderr, so that a long run's progress can be followed in its log.

    Not SB3's ``EvalCallback``, which counts calls rather than steps, has no wall-time grid and dumps the logger at
    each evaluation: that dump would cut short the training values the diagnostics average between two points.
    """

    def __init__(self, eval_env: VecEnv, spec: RunSpec, recorders: list[Recorder]) -> None:
        super().__init__()
        self.eval_env, self.spec, self.recorders = eval_env, spec, recorders
        self.points: list[EvalPoint] = []
        self._start = self._eval_seconds = 0.0
        self._next_eval = 0.0  # in steps, or in seconds of training with spec.eval_seconds

    def training_seconds(self) -> float:
        """Wall time since training started, evaluation excluded."""
        return time.perf_counter() - self._start - self._eval_seconds

    def _on_training_start(self) -> None:
        self._start = time.perf_counter()
        self._next_eval = self.spec.eval_seconds or self.spec.eval_freq
        self.evaluate()

    def _on_step(self) -> bool:
        seconds = self.training_seconds()
        if (seconds if self.spec.eval_seconds else self.num_timesteps) >= self._next_eval:
            self._next_eval += self.spec.eval_seconds or self.spec.eval_freq
            self.evaluate()
        return self.spec.max_seconds is None or seconds < self.spec.max_seconds

    def _on_training_end(self) -> None:
        if not self.points or self.points[-1].steps != self.num_timesteps:
            self.evaluate()

    def evaluate(self) -> None:
        eval_start = time.perf_counter()
        if self.model.get_vec_normalize_env() is not None:
            sync_envs_normalization(self.training_env, self.eval_env)
        rewards = [float("nan")]
        if self.spec.eval_episodes > 0:
            observers = [recorder for recorder in self.recorders if recorder.wants_observations()]

            def observe(locals_: dict[str, Any], globals_: dict[str, Any]) -> None:
                for recorder in observers:
                    recorder.observe(locals_["observations"][locals_["i"]])

            rewards, _ = evaluate_policy(
                self.model,
                self.eval_env,
                self.spec.eval_episodes,
                deterministic=self.spec.deterministic,
                return_episode_rewards=True,
                callback=observe if observers else None,
            )
        for recorder in self.recorders:
            recorder.on_evaluation()
        spec, device, wall = self.spec, self.model.device.type, eval_start - self._start - self._eval_seconds
        mean, std = float(np.mean(rewards)), float(np.std(rewards))
        point = EvalPoint(spec.algo, spec.env_id, spec.seed, self.num_timesteps, wall, mean, std, device=device)
        point.machine = machine_id(device)
        self.points.append(point)
        self._eval_seconds += time.perf_counter() - eval_start
        line = f"{spec.algo} {spec.env_id} seed {spec.seed}: {point.steps} steps, {wall:.0f} s of training"
        if spec.eval_episodes > 0:
            line += f", return {mean:.1f} (std {std:.1f}, {len(rewards)} episodes)"
        tqdm.write(line, file=sys.stderr)


def failed_point(spec: RunSpec, error: BaseException | str) -> EvalPoint:
    """The single point that records a failed run and its error."""
    device = th.device(spec.device if spec.device != "auto" else ("cuda" if th.cuda.is_available() else "cpu")).type
    message = error if isinstance(error, str) else repr(error)
    failed = EvalPoint(spec.algo, spec.env_id, spec.seed, 0, 0.0, float("nan"), float("nan"), "failed", message, device)
    failed.machine = machine_id(device)
    return failed


def run_benchmark(spec: RunSpec) -> list[EvalPoint]:
    """Train ``spec.algo`` with its zoo hyperparameters on ``spec.env_id``; a failed run returns one point with its error."""
    envs: list[VecEnv] = []
    try:
        if is_peer(spec.algo):  # in its own environment, with this process' PyTorch threads
            points, diagnostics = run_peer(spec, spec.peer_python, th.get_num_threads())
            if spec.record_dir:  # RLlib's metrics at each point, as our runs' diagnostics
                write_rows(diagnostics_path(Path(spec.record_dir), spec.env_id, spec.algo, spec.seed), diagnostics)
            return [EvalPoint(**point) for point in points]
        experiment = ZooExperiment(spec.algo, spec.env_id, spec.seed, spec.device, spec.subproc)
        envs.append(experiment.create_envs(experiment.n_envs))
        evaluation = ZooExperiment(spec.algo, spec.env_id, spec.seed + EVAL_SEED_OFFSET)
        envs.append(evaluation.create_envs(1, eval_env=True))
        recorders = [DiagnosticsRecorder(spec.algo, spec.seed), *recorders_for(spec.algo, spec.records, spec.seed)]
        callback = TimedEvalCallback(envs[1], spec, recorders)
        model = experiment.model(envs[0])
        model.learn(spec.steps or experiment.n_timesteps, callback=CallbackList([callback, *recorders]))
        for recorder in recorders if spec.record_dir else []:
            recorder.write(record_path(Path(spec.record_dir), spec.env_id, recorder.name, spec.algo, spec.seed))
        return callback.points
    except Exception as error:  # a failed run is recorded, the others continue (Ctrl-C is no Exception)
        return [failed_point(spec, error)]
    finally:
        for env in envs:
            env.close()


def _run_in_worker(index: int, spec: RunSpec, torch_threads: int, results: Any) -> None:
    """
    Body of a ``--jobs`` worker process: one run, its points sent back through ``results``. The worker leads a
    process group of its own (its env subprocesses and collectors join it), so the terminal's Ctrl-C reaches only
    the parent, which then interrupts and, if needed, kills each group as a whole.
    """
    os.setpgrp()
    # SIGINT is how the parent stops this worker, so it must raise KeyboardInterrupt here even when this process
    # inherited SIGINT ignored: a harness started in the background (``cmd &``, nohup) has it ignored, Python then
    # installs no handler, and the parent's stop would wait out its grace period and kill the run unrecorded.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    th.set_num_threads(torch_threads)
    try:
        points = run_benchmark(spec)
    except BaseException as error:  # KeyboardInterrupt from the parent: report it as the run's failure
        points = [failed_point(spec, error)]
    results.put((index, points))


def worker_context() -> multiprocessing.context.BaseContext:
    """
    Where ``--jobs`` workers come from: a fork server (where the platform has one) that has imported this module,
    and with it PyTorch, SB3 and the package, once. Each worker is forked from that server, so it shares no state
    with this process (as with ``spawn``) but skips the 3-5 CPU-seconds of imports a spawned worker pays per run.
    Elsewhere, ``spawn``.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


def run_in_parallel(
    specs: list[RunSpec],
    jobs: int,
    torch_threads: int,
    on_result: Callable[[int, list[EvalPoint]], None],
    grace_seconds: float = 20.0,
) -> None:
    """
    Run ``specs`` in up to ``jobs`` fresh processes at once (``worker_context``: no state shared with this one), calling
    ``on_result(index, points)`` here as each finishes. A worker that dies without answering (killed, out of
    memory) gives a failed point. On ``KeyboardInterrupt`` the running workers are interrupted and given
    ``grace_seconds`` to answer (each interrupted run is recorded as failed with its ``KeyboardInterrupt``),
    then killed with everything they started; the interrupt is re-raised.
    """
    context = worker_context()
    results = context.Queue()
    pending = list(enumerate(specs))
    running: dict[int, multiprocessing.process.BaseProcess] = {}
    try:
        while pending or running:
            while pending and len(running) < jobs:
                index, spec = pending.pop(0)
                worker = context.Process(
                    target=_run_in_worker, args=(index, spec, torch_threads, results), name=f"benchmark-{spec.algo}"
                )
                running[index] = worker  # before start(): a Ctrl-C during start() must still stop it
                worker.start()
            try:
                index, points = results.get(timeout=1.0)
            except queue.Empty:
                for index, worker in list(running.items()):
                    if worker.exitcode not in (None, 0):
                        running.pop(index)
                        _signal_worker(worker, signal.SIGKILL)  # what the dead worker started
                        on_result(index, [failed_point(specs[index], f"worker process exited with code {worker.exitcode}")])
                continue
            running.pop(index).join()
            on_result(index, points)
    except KeyboardInterrupt:
        _stop_workers(running, results, grace_seconds, on_result)
        for index, worker in running.items():
            why = "not started" if worker.pid is None else f"killed: no answer {grace_seconds:g} s after SIGINT"
            on_result(index, [failed_point(specs[index], f"KeyboardInterrupt ({why})")])
        raise
    finally:
        results.close()


@contextlib.contextmanager
def sigterm_as_keyboard_interrupt() -> Any:
    """
    Inside the block SIGTERM (``kill``, a job scheduler's stop, ``timeout``) raises ``KeyboardInterrupt`` as
    Ctrl-C does, so that the same clean-up runs: the workers and everything they started are stopped and the
    finished runs are written. Only in the main thread (where Python delivers signals); the old handler is
    restored on exit.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _signal_worker(worker: multiprocessing.process.BaseProcess, signum: int) -> None:
    """
    ``signum`` to the worker's process group, or to the worker alone while it leads none yet: a worker still
    starting up (importing, before its ``os.setpgrp()``) is in this process's group, which a signal to "its"
    group would miss, and then the SIGKILL too, leaving ``join()`` waiting on a live worker. A worker already
    reaped may have left processes in its group: they get the signal.
    """
    if worker.pid is None:  # interrupted before it started
        return
    try:
        leads_group = os.getpgid(worker.pid) == worker.pid
    except ProcessLookupError:  # exited and joined: its group, if it made one, may outlive it
        leads_group = True
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if leads_group:
            os.killpg(worker.pid, signum)
        else:
            os.kill(worker.pid, signum)


def _stop_workers(
    running: dict[int, multiprocessing.process.BaseProcess],
    results: Any,
    grace_seconds: float,
    on_result: Callable[[int, list[EvalPoint]], None],
) -> None:
    """
    SIGINT to each running worker (and its process group); for ``grace_seconds`` the answers of the interrupted
    workers (each its run's failed point) go to ``on_result`` and leave ``running``; then SIGKILL to every
    worker's group (env subprocesses and collectors it started) and to those that did not answer, which stay in
    ``running``.
    """
    workers = list(running.values())
    for worker in workers:
        _signal_worker(worker, signal.SIGINT)
    deadline = time.monotonic() + grace_seconds
    try:
        while running and time.monotonic() < deadline:
            try:
                index, points = results.get(timeout=0.2)
            except queue.Empty:
                continue
            running.pop(index).join()
            on_result(index, points)
    finally:  # a second Ctrl-C cuts the grace short, not the clean-up
        for worker in workers:
            _signal_worker(worker, signal.SIGKILL)
            if worker.pid is not None:
                worker.join()
