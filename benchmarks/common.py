"""Shared pieces of the benchmark scripts: zoo hyperparameters, timed evaluation, thresholds, output files."""

import contextlib
import csv
import functools
import json
import multiprocessing
import os
import platform
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import scipy.stats
import torch as th
import yaml
from rl_zoo3.utils import ALGOS as ZOO_ALGOS
from rl_zoo3.utils import get_wrapper_class
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    SubprocVecEnv,
    VecEnv,
    VecFrameStack,
    VecNormalize,
    sync_envs_normalization,
)

from sb3_impact.zoo import ZOO_ALGOS as IMPACT_ALGOS
from sb3_impact.zoo import hyperparams_path

# Pseudo-algorithms: an algorithm with its constructor defaults on one env (what `IMPACT("MlpPolicy", env_id)` does).
# Constructor defaults instead of the yml (V-RACER's are the paper's settings, appendix A).
DEFAULT_VARIANTS = {
    "impact_default": IMPACT_ALGOS["impact"],
    "impala_default": IMPACT_ALGOS["impala"],
    "vracer_default": IMPACT_ALGOS["vracer"],
}
ALGOS = {**ZOO_ALGOS, **IMPACT_ALGOS, **DEFAULT_VARIANTS}
# Default "solved" thresholds (rl-zoo3 / gymnasium reward thresholds); --threshold overrides, other envs get none.
THRESHOLDS = {
    "CartPole-v1": 475.0,
    "Pendulum-v1": -200.0,
    "LunarLander-v3": 200.0,
    "LunarLanderContinuous-v3": 200.0,
}
ZOO_ONLY_KEYS = {"n_envs", "n_timesteps", "normalize", "policy", "env_wrapper", "frame_stack"}
# rl-zoo3 tunes MuJoCo on the v4 ids only (PPO, SAC, TD3...); its v4 entry serves the v5 id of the same task.
# The substitution is recorded in the harness' JSON (``hyperparams``) and on the results page.
ZOO_VERSION_FALLBACK = {"-v5": "-v4"}


def split_variant(algo: str) -> tuple[str, dict[str, Any]]:
    """
    ``"ppo_amber[collector=process]"`` -> ``("ppo_amber", {...})``: an algo name may carry
    hyperparameters that replace its yml's (values read as YAML), so that variants run side by side in one
    invocation. A plain name has none.
    """
    if not algo.endswith("]") or "[" not in algo:
        return algo, {}
    base, _, body = algo[:-1].partition("[")
    overrides: dict[str, Any] = {}
    for item in filter(None, body.split(",")):
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise ValueError(f"{algo!r}: variants are written NAME[key=value,...], got item {item!r}")
        overrides[key.strip()] = yaml.safe_load(value)
    return base, overrides


def algo_class(algo: str) -> Any:
    """The algorithm class of a name or variant."""
    return ALGOS[split_variant(algo)[0]]


def zoo_yml_path(algo: str) -> Path:
    """Our yml for sb3-impact algorithms, rl-zoo3's tuned yml for the others."""
    if algo in IMPACT_ALGOS:
        return hyperparams_path(algo)
    import rl_zoo3

    return Path(rl_zoo3.__file__).parent / "hyperparams" / f"{algo}.yml"


def linear_schedule(initial_value: float):
    def schedule(progress_remaining: float) -> float:
        return progress_remaining * initial_value

    return schedule


def is_atari(env_id: str) -> bool:
    """rl-zoo3's rule: Atari ids are read from the yml's ``atari`` entry."""
    return "NoFrameskip" in env_id or env_id.startswith("ALE/")


def zoo_entries(algo: str) -> dict[str, Any]:
    """All entries of ``algo``'s yml (raises ``ValueError`` listing the valid algos for an unknown one)."""
    algo = split_variant(algo)[0]
    if algo not in ALGOS:
        raise ValueError(f"unknown algo {algo!r}; valid names: {', '.join(sorted(ALGOS))}")
    if algo in DEFAULT_VARIANTS:  # (a variant name was split above)
        return {}
    return yaml.safe_load(zoo_yml_path(algo).read_text())


def zoo_entry_key(algo: str, env_id: str, config: dict[str, Any]) -> str:
    """
    The yml entry that serves ``env_id``: its own, ``atari`` for Atari ids, or -- for rl-zoo3's algorithms only --
    the entry of the previous version of the same task (``HalfCheetah-v4`` for ``HalfCheetah-v5``).
    """
    algo = split_variant(algo)[0]
    if env_id in config:
        return env_id
    if is_atari(env_id) and "atari" in config:
        return "atari"
    if algo not in IMPACT_ALGOS:
        for new, old in ZOO_VERSION_FALLBACK.items():
            if env_id.endswith(new) and env_id[: -len(new)] + old in config:
                return env_id[: -len(new)] + old
    raise ValueError(f"{algo}: no hyperparameters for {env_id!r} in {zoo_yml_path(algo)}; valid: {', '.join(config)}")


def hyperparams_source(algo: str, env_id: str) -> str:
    """Where ``algo``'s hyperparameters on ``env_id`` come from, e.g. ``rl_zoo3/hyperparams/ppo.yml: HalfCheetah-v4``."""
    base, overrides = split_variant(algo)
    if base in DEFAULT_VARIANTS:
        return "constructor defaults" + (f" with {overrides}" if overrides else "")
    key = zoo_entry_key(algo, env_id, zoo_entries(algo))
    origin = "sb3_impact/hyperparams" if base in IMPACT_ALGOS else "rl_zoo3/hyperparams"
    changed = f" with {overrides}" if overrides else ""
    return f"{origin}/{base}.yml: {key}{changed}"


def load_zoo_hyperparams(algo: str, env_id: str) -> dict[str, Any]:
    """The rl-zoo3 yml entry of ``env_id``, with ``lin_`` schedules and ``policy_kwargs`` strings resolved."""
    config = zoo_entries(algo)
    base, overrides = split_variant(algo)
    if base in DEFAULT_VARIANTS:
        entry: dict[str, Any] = {"policy": "MlpPolicy", "n_envs": 1, "n_timesteps": 100_000}
    else:
        entry = config[zoo_entry_key(algo, env_id, config)]
    params = {**entry, **overrides}
    unsupported = {"callback", "vec_env_wrapper", "env_kwargs"} & set(params)
    if unsupported:
        raise ValueError(f"{algo}/{env_id}: the benchmark does not handle {sorted(unsupported)}")
    for name, value in params.items():
        if isinstance(value, str) and value.startswith("lin_"):
            params[name] = linear_schedule(float(value[len("lin_") :]))
    if isinstance(params.get("policy_kwargs"), str):
        params["policy_kwargs"] = eval(params["policy_kwargs"], {"nn": th.nn, "dict": dict})
    return params


def validate_names(algos: list[str], env_ids: list[str]) -> None:
    """Raise ``ValueError`` listing the valid names if an algo is unknown or an env lacks a yml entry or a gym id."""
    unknown = [algo for algo in algos if split_variant(algo)[0] not in ALGOS]
    if unknown:
        raise ValueError(f"unknown algos {unknown}; valid names: {', '.join(sorted(ALGOS))}")
    for env_id in env_ids:
        if env_id not in gym.registry:
            if is_atari(env_id):
                try:
                    register_atari()
                except ImportError as error:
                    raise ValueError(f"{env_id!r} needs ale-py: pip install 'sb3-impact[atari]'") from error
            if env_id not in gym.registry:
                raise ValueError(f"unknown env {env_id!r}: not a registered gymnasium id")
        for algo in algos:
            load_zoo_hyperparams(algo, env_id)


def split_env_params(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separate the zoo-only keys (env construction, budget, policy) from the algorithm's constructor arguments."""
    env_params = {key: params.pop(key) for key in list(params) if key in ZOO_ONLY_KEYS}
    return env_params, params


def register_atari() -> None:
    """Register the ALE ids with gymnasium (``ale-py`` registers them when imported)."""
    import ale_py

    gym.register_envs(ale_py)


def make_registered_env(env_id: str, **kwargs: Any) -> gym.Env:
    """
    ``gym.make`` after registering the ALE ids. ``SubprocVecEnv`` workers start with a fresh interpreter
    (forkserver/spawn), where the parent's registration is gone: they build Atari envs through this function.
    """
    if is_atari(env_id):
        register_atari()
    return gym.make(env_id, **kwargs)


def make_training_env(
    env_id: str,
    n_envs: int,
    seed: int,
    normalize: bool | str | dict = False,
    subproc: bool = False,
    env_wrapper: Any = None,
    frame_stack: int | None = None,
) -> VecEnv:
    """
    ``n_envs`` copies of ``env_id`` as rl-zoo3 builds them: its ``env_wrapper`` (e.g. ``AtariWrapper``) around
    each Monitor-wrapped env, ``VecFrameStack`` and ``VecNormalize`` when the yml says so.
    """
    wrapper_class: Callable[[gym.Env], gym.Env] | None = None
    if env_wrapper:
        wrapper_class = get_wrapper_class({"env_wrapper": env_wrapper})
    vec_env_cls = SubprocVecEnv if subproc and n_envs > 1 else DummyVecEnv
    make_env = functools.partial(make_registered_env, env_id)  # picklable, so SubprocVecEnv workers can build it
    env = make_vec_env(make_env, n_envs=n_envs, seed=seed, vec_env_cls=vec_env_cls, wrapper_class=wrapper_class)
    if frame_stack:
        env = VecFrameStack(env, int(frame_stack))
    if normalize:
        kwargs = eval(normalize) if isinstance(normalize, str) else (normalize if isinstance(normalize, dict) else {})
        env = VecNormalize(env, **kwargs)
    return env


def machine_id(device: str = "cpu") -> str:
    """A short name of this machine's compute: CPU model and count, plus the GPU when the learner uses one."""
    cpu = platform.processor() or platform.machine()
    # No /proc/cpuinfo, or no model name in it: keep platform's name.
    with contextlib.suppress(OSError, StopIteration), open("/proc/cpuinfo") as file:
        cpu = next(line.split(":", 1)[1].strip() for line in file if line.startswith("model name"))
    name = f"{cpu} x{os.cpu_count()}"
    if device.startswith("cuda") and th.cuda.is_available():
        name += f" + {th.cuda.get_device_name(0)}"
    return name


@dataclass
class EvalPoint:
    algo: str
    env: str
    seed: int
    steps: int
    wall_seconds: float
    eval_mean: float
    eval_std: float
    status: str = "ok"
    error: str = ""
    device: str = ""
    machine: str = ""


class TimedEvalCallback(BaseCallback):
    """
    Evaluate the deterministic policy for ``n_eval_episodes`` episodes (0: record steps and wall time only, with
    a NaN return, for throughput runs) every ``eval_freq`` environment steps, or,
    with ``eval_seconds``, every ``eval_seconds`` of training wall time instead (the same number of points for a
    fast and a slow algorithm). With ``max_seconds``, training stops once its wall time reaches that budget.

    The recorded wall time is the time since training started, minus the time spent evaluating.
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
    ) -> None:
        super().__init__()
        self.eval_env = eval_env
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
            rewards, _ = evaluate_policy(
                self.model, self.eval_env, self.n_eval_episodes, deterministic=True, return_episode_rewards=True
            )
        else:  # throughput only: the point records steps and wall time, no return
            rewards = [float("nan")]
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
        env_params, params = split_env_params(load_zoo_hyperparams(spec.algo, spec.env_id))
        wrappers = {"env_wrapper": env_params.get("env_wrapper"), "frame_stack": env_params.get("frame_stack")}
        normalize = env_params.get("normalize", False)
        env = make_training_env(spec.env_id, env_params.get("n_envs", 1), spec.seed, normalize, spec.subproc, **wrappers)
        eval_env = make_training_env(spec.env_id, 1, spec.seed + 10_000, normalize, **wrappers)
        if isinstance(eval_env, VecNormalize):
            eval_env.training, eval_env.norm_reward = False, False
        callback = TimedEvalCallback(
            eval_env,
            spec.eval_freq,
            spec.eval_episodes,
            spec.algo,
            spec.env_id,
            spec.seed,
            eval_seconds=spec.eval_seconds,
            max_seconds=spec.max_seconds,
        )
        model = algo_class(spec.algo)(env_params["policy"], env, seed=spec.seed, device=spec.device, **params)
        model.learn(spec.steps or int(env_params["n_timesteps"]), callback=callback)
        eval_env.close()
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


def run_in_parallel(
    specs: list[RunSpec],
    jobs: int,
    torch_threads: int,
    on_result: Callable[[int, list[EvalPoint]], None],
    grace_seconds: float = 20.0,
) -> None:
    """
    Run ``specs`` in up to ``jobs`` fresh processes at once (``spawn``: no state shared with this one), calling
    ``on_result(index, points)`` here as each finishes. A worker that dies without answering (killed, out of
    memory) gives a failed point. On ``KeyboardInterrupt`` the running workers are interrupted and given
    ``grace_seconds`` to answer (each interrupted run is recorded as failed with its ``KeyboardInterrupt``),
    then killed with everything they started; the interrupt is re-raised.
    """
    context = multiprocessing.get_context("spawn")
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
                        with contextlib.suppress(ProcessLookupError):  # what the dead worker started
                            os.killpg(worker.pid, signal.SIGKILL)
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


def first_reaching(points: list[EvalPoint], threshold: float | None) -> EvalPoint | None:
    """
    The first evaluation point after training started whose mean return is >= threshold.

    The evaluation before any training (step 0) does not count: a lucky initialisation can balance
    CartPole deterministically (seen with seed 0), which says nothing about the algorithm.
    """
    if threshold is None:
        return None
    return next((p for p in points if p.status == "ok" and p.steps > 0 and p.eval_mean >= threshold), None)


def interquartile_mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """Mean of the middle 50% of ``values`` (25% cut from each end, as rliable does)."""
    return scipy.stats.trim_mean(values, 0.25, axis=axis)


def iqm_confidence_interval(values: list[float], confidence: float = 0.95, resamples: int = 2000) -> tuple[float, float]:
    """
    Percentile-bootstrap confidence interval of the interquartile mean over runs (rliable's method for one
    task: resample the runs with replacement). Seeded, so the same values give the same interval.
    """
    if len(values) == 1 or min(values) == max(values):
        return float(values[0]), float(values[0])
    result = scipy.stats.bootstrap(
        (np.asarray(values, dtype=float),),
        interquartile_mean,
        n_resamples=resamples,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(0),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def spread(values: list[float | None]) -> dict[str, Any]:
    """
    Median, min and max of the finite values (``None`` entries are runs that never got there), and their
    interquartile mean with its 95% bootstrap confidence interval.
    """
    finite = [value for value in values if value is not None and np.isfinite(value)]
    if not finite:
        return {"median": None, "min": None, "max": None, "n": 0, "iqm": None, "iqm_ci95": None}
    return {
        "median": float(np.median(finite)),
        "min": float(np.min(finite)),
        "max": float(np.max(finite)),
        "n": len(finite),
        "iqm": float(interquartile_mean(np.asarray(finite))),
        "iqm_ci95": list(iqm_confidence_interval(finite)),
    }


def return_at(run: list[EvalPoint], attribute: str, budget: float) -> float | None:
    """The return of the last evaluation at or before ``budget`` (steps or wall seconds); None if the run stopped earlier."""
    if not run or getattr(run[-1], attribute) < budget * 0.98:  # the last point may land a little short of the budget
        return None
    before = [p.eval_mean for p in run if getattr(p, attribute) <= budget * 1.02]
    return before[-1] if before else None


def threshold_summary(
    points: list[EvalPoint], threshold: float | None, baseline: str, wall_checkpoints: tuple[float, ...] = ()
) -> dict[str, Any]:
    """
    Per algo: steps and wall seconds to ``threshold`` per seed, final and best returns, each with its median
    and min/max over seeds; ratios against ``baseline`` paired by seed *and machine* (runs from different
    machines are never compared). Without a threshold only the returns and the final-return ratio are given.
    """
    by_run: dict[tuple[str, int, str], list[EvalPoint]] = {}
    for point in points:
        by_run.setdefault((point.algo, point.seed, point.machine), []).append(point)
    reached = {key: first_reaching(run, threshold) if threshold is not None else None for key, run in by_run.items()}
    summary: dict[str, Any] = {"threshold": threshold, "baseline": baseline, "algos": {}}
    summary["machines"] = sorted({machine for _, _, machine in by_run})
    for algo in sorted({algo for algo, _, _ in by_run}):
        runs = sorted(key for key in by_run if key[0] == algo)
        evaluated = [[p for p in by_run[key] if p.status == "ok"] for key in runs]
        trained = [[p for p in run if p.steps > 0] for run in evaluated]
        entry: dict[str, Any] = {
            "seeds": [seed for _, seed, _ in runs],
            "failed": [by_run[key][0].error for key in runs if by_run[key][0].status == "failed"],
            "final_eval_mean": [run[-1].eval_mean if run else None for run in trained],
            "best_eval_mean": [max(p.eval_mean for p in run) if run else None for run in trained],
            "final_steps": [run[-1].steps if run else None for run in trained],
        }
        entry["final_eval"] = spread(entry["final_eval_mean"])
        entry["steps_done"] = spread(entry["final_steps"])
        entry["return_at_seconds"] = {
            f"{seconds:g}": spread([return_at(run, "wall_seconds", seconds) for run in evaluated])
            for seconds in wall_checkpoints
        }
        if threshold is not None:
            hits = [reached[key] for key in runs]
            entry["steps_to_threshold"] = [hit.steps if hit else None for hit in hits]
            entry["wall_seconds_to_threshold"] = [round(hit.wall_seconds, 2) if hit else None for hit in hits]
            entry["reached"] = f"{sum(hit is not None for hit in hits)}/{len(hits)}"
            entry["steps"] = spread(entry["steps_to_threshold"])
            entry["wall_seconds"] = spread(entry["wall_seconds_to_threshold"])
            entry["median_steps"] = entry["steps"]["median"]
            entry["median_wall_seconds"] = entry["wall_seconds"]["median"]
        if algo != baseline:
            step_ratios, wall_ratios, final_ratios = [], [], []
            for _, seed, machine in runs:
                base_run = by_run.get((baseline, seed, machine))
                if base_run is None:
                    continue
                ours, base = reached.get((algo, seed, machine)), reached.get((baseline, seed, machine))
                if ours and base and base.steps > 0 and base.wall_seconds > 0:
                    step_ratios.append(ours.steps / base.steps)
                    wall_ratios.append(ours.wall_seconds / base.wall_seconds)
                ours_final, base_final = by_run[(algo, seed, machine)][-1], base_run[-1]
                if ours_final.status == base_final.status == "ok" and base_final.eval_mean != 0:
                    final_ratios.append(ours_final.eval_mean / base_final.eval_mean)
            if threshold is not None:
                entry["steps_ratio_vs_baseline"] = spread(step_ratios)
                entry["wall_ratio_vs_baseline"] = spread(wall_ratios)
            entry["final_return_ratio_vs_baseline"] = spread(final_ratios)
        summary["algos"][algo] = entry
    return summary


def machine_description(device: str = "cpu") -> dict[str, Any]:
    return {
        "name": machine_id(device),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "torch_threads": th.get_num_threads(),
        "cuda": th.cuda.get_device_name(0) if th.cuda.is_available() else None,
        "date": time.strftime("%Y-%m-%d"),
    }


def write_csv(points: list[EvalPoint], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(asdict(points[0]).keys()) if points else list(EvalPoint.__annotations__))
        writer.writeheader()
        for point in points:
            writer.writerow(asdict(point))


def read_csv(path: Path) -> list[EvalPoint]:
    with open(path) as file:
        return [
            EvalPoint(
                row["algo"],
                row["env"],
                int(row["seed"]),
                int(row["steps"]),
                float(row["wall_seconds"]),
                float(row["eval_mean"]),
                float(row["eval_std"]),
                row.get("status", "ok"),
                row.get("error", ""),
                row.get("device", ""),
                row.get("machine", ""),
            )
            for row in csv.DictReader(file)
        ]


def write_json(data: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))


def plot_curves(points: list[EvalPoint], path: Path, threshold: float | None = None) -> None:
    """
    Median and min/max band over seeds of the evaluation return, against env steps and against wall seconds;
    where runs ended at different points, over the runs that got that far.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    several_machines = len({point.machine for point in points}) > 1
    groups = sorted({(point.algo, point.machine) for point in points if point.status == "ok"})
    for algo, machine in groups:
        runs: dict[int, list[EvalPoint]] = {}
        for point in points:
            if (point.algo, point.machine) == (algo, machine) and point.status == "ok":
                runs.setdefault(point.seed, []).append(point)
        label = f"{algo} [{machine}]" if several_machines else algo
        for axis, attribute in zip(axes, ("steps", "wall_seconds"), strict=True):
            grid = np.linspace(0, max(getattr(run[-1], attribute) for run in runs.values()), 100)
            # A run ends where its last point is (right=nan): a curve is the median of the runs still going.
            curves = np.array(
                [
                    np.interp(grid, [getattr(p, attribute) for p in run], [p.eval_mean for p in run], right=np.nan)
                    for run in runs.values()
                ]
            )
            (line,) = axis.plot(grid, np.nanmedian(curves, axis=0), label=f"{label} ({len(runs)} seeds)")
            axis.fill_between(grid, np.nanmin(curves, axis=0), np.nanmax(curves, axis=0), alpha=0.2, color=line.get_color())
    for axis, label in zip(axes, ("environment steps", "wall seconds (evaluation excluded)"), strict=True):
        axis.set_xlabel(label)
        axis.set_ylabel("deterministic evaluation return")
        if threshold is not None:
            axis.axhline(threshold, color="gray", linestyle="--", linewidth=1)
        if axis.get_legend_handles_labels()[0]:
            axis.legend()
    figure.suptitle(points[0].env if points else "")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
