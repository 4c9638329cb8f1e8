"""One benchmark run (training with evaluation on a step or wall-time schedule) and the process pool that runs
many at once, with its clean stop on Ctrl-C and SIGTERM."""

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
from stable_baselines3.common.vec_env import (
    VecEnv,
    VecNormalize,
    sync_envs_normalization,
)
from tqdm.auto import tqdm

from benchmarks.config import algo_class, load_zoo_hyperparams, make_training_env, split_env_params
from benchmarks.diagnostics import DiagnosticsRecorder, diagnostics_path
from benchmarks.output import EvalPoint, machine_id, write_rows
from benchmarks.peers import is_peer, run_peer
from benchmarks.recorders import Recorder, record_path, recorders_for


class TimedEvalCallback(BaseCallback):
    """
    Evaluate the policy (deterministic, or stochastic as the Atari protocol wants) for ``n_eval_episodes`` whole
    episodes (0: record steps and wall time only, with a NaN return, for throughput runs) every ``eval_freq``
    environment steps, or,
    with ``eval_seconds``, every ``eval_seconds`` of training wall time instead (the same number of points for a
    fast and a slow algorithm). With ``max_seconds``, training stops once its wall time reaches that budget.

    The recorded wall time is the time since training started, minus the time spent evaluating. Each evaluation
    is also written to stderr as one line, so that a long run's progress can be followed in its log (its rows
    reach the CSV only when it finishes).
    """

    def __init__(
        self,
        eval_env: VecEnv,
        eval_freq: int,
        n_eval_episodes: int,
        algo: str,
        env_id: str,
        seed: int,
        eval_seconds: float | None = None,
        max_seconds: float | None = None,
        recorders: list[Recorder] | None = None,
        deterministic: bool = True,
    ) -> None:
        super().__init__()
        self.eval_env = eval_env
        self.deterministic = deterministic
        self.recorders = recorders or []
        self.eval_freq = eval_freq
        self.eval_seconds = eval_seconds
        self.max_seconds = max_seconds
        self.n_eval_episodes = n_eval_episodes
        self.tag = (algo, env_id, seed)
        self.points: list[EvalPoint] = []
        self._next_eval = 0
        self._next_eval_seconds = 0.0
        self._start = 0.0
        self._eval_seconds = 0.0

    def training_seconds(self) -> float:
        """Wall time since training started, evaluation excluded."""
        return time.perf_counter() - self._start - self._eval_seconds

    def _on_training_start(self) -> None:
        self._start = time.perf_counter()
        self._next_eval = self.eval_freq
        self._next_eval_seconds = self.eval_seconds or 0.0
        self.evaluate()

    def evaluate(self) -> None:
        eval_start = time.perf_counter()
        if isinstance(self.model.get_vec_normalize_env(), VecNormalize):
            sync_envs_normalization(self.training_env, self.eval_env)
        if self.n_eval_episodes > 0:
            observers = [recorder for recorder in self.recorders if recorder.wants_observations()]

            def observe(locals_: dict[str, Any], globals_: dict[str, Any]) -> None:
                for recorder in observers:
                    recorder.observe(locals_["observations"][locals_["i"]])

            rewards, _ = evaluate_policy(
                self.model,
                self.eval_env,
                self.n_eval_episodes,
                deterministic=self.deterministic,
                return_episode_rewards=True,
                callback=observe if observers else None,
            )
        else:  # throughput only: the point records steps and wall time, no return
            rewards = [float("nan")]
        for recorder in self.recorders:
            recorder.on_evaluation()
        wall = eval_start - self._start - self._eval_seconds
        device = self.model.device.type
        self.points.append(
            EvalPoint(
                *self.tag,
                self.num_timesteps,
                wall,
                float(np.mean(rewards)),
                float(np.std(rewards)),
                device=device,
                machine=machine_id(device),
            )
        )
        self._eval_seconds += time.perf_counter() - eval_start
        point = self.points[-1]
        line = f"{point.algo} {point.env} seed {point.seed}: {point.steps} steps, {point.wall_seconds:.0f} s of training"
        if self.n_eval_episodes > 0:
            line += f", return {point.eval_mean:.1f} (std {point.eval_std:.1f}, {len(rewards)} episodes)"
        tqdm.write(line, file=sys.stderr)

    def _on_step(self) -> bool:
        seconds = self.training_seconds()
        if self.eval_seconds:
            if seconds >= self._next_eval_seconds:
                self._next_eval_seconds += self.eval_seconds
                self.evaluate()
        elif self.num_timesteps >= self._next_eval:
            self._next_eval += self.eval_freq
            self.evaluate()
        return self.max_seconds is None or seconds < self.max_seconds

    def _on_training_end(self) -> None:
        if not self.points or self.points[-1].steps != self.num_timesteps:
            self.evaluate()


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


def failed_point(spec: RunSpec, error: BaseException | str) -> EvalPoint:
    """The single point that records a failed run and its error."""
    device_type = th.device(spec.device if spec.device != "auto" else ("cuda" if th.cuda.is_available() else "cpu")).type
    message = error if isinstance(error, str) else repr(error)
    failed = EvalPoint(spec.algo, spec.env_id, spec.seed, 0, 0.0, float("nan"), float("nan"), status="failed", error=message)
    failed.device, failed.machine = device_type, machine_id(device_type)
    return failed


def run_benchmark(spec: RunSpec) -> list[EvalPoint]:
    """Train ``spec.algo`` with its zoo hyperparameters on ``spec.env_id``; a failed run returns one point with its error."""
    env = None
    try:
        if is_peer(spec.algo):  # in its own environment, with this process' PyTorch threads
            points, diagnostics = run_peer(spec, spec.peer_python, th.get_num_threads())
            if spec.record_dir:  # RLlib's metrics at each point, as our runs' diagnostics
                write_rows(diagnostics_path(Path(spec.record_dir), spec.env_id, spec.algo, spec.seed), diagnostics)
            return [EvalPoint(**point) for point in points]
        env_params, params = split_env_params(load_zoo_hyperparams(spec.algo, spec.env_id))
        wrappers = {"env_wrapper": env_params.get("env_wrapper"), "frame_stack": env_params.get("frame_stack")}
        normalize = env_params.get("normalize", False)
        env = make_training_env(spec.env_id, env_params.get("n_envs", 1), spec.seed, normalize, spec.subproc, **wrappers)
        eval_env = make_training_env(spec.env_id, 1, spec.seed + 10_000, normalize, **wrappers)
        if isinstance(eval_env, VecNormalize):
            eval_env.training, eval_env.norm_reward = False, False
        recorders = [DiagnosticsRecorder(spec.algo, spec.seed), *recorders_for(spec.algo, spec.records, spec.seed)]
        callback = TimedEvalCallback(
            eval_env,
            spec.eval_freq,
            spec.eval_episodes,
            spec.algo,
            spec.env_id,
            spec.seed,
            eval_seconds=spec.eval_seconds,
            max_seconds=spec.max_seconds,
            recorders=recorders,
            deterministic=spec.deterministic,
        )
        model = algo_class(spec.algo)(env_params["policy"], env, seed=spec.seed, device=spec.device, **params)
        model.learn(spec.steps or int(env_params["n_timesteps"]), callback=CallbackList([callback, *recorders]))
        eval_env.close()
        for recorder in recorders if spec.record_dir else []:
            recorder.write(record_path(Path(spec.record_dir), spec.env_id, recorder.name, spec.algo, spec.seed))
        return callback.points
    except KeyboardInterrupt:
        raise
    except Exception as error:  # a failed run is recorded, the others continue
        return [failed_point(spec, error)]
    finally:
        if env is not None:
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
