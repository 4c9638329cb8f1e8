"""Shared pieces of the benchmark scripts: zoo hyperparameters, timed evaluation, thresholds, output files."""

import csv
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
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
DEFAULT_VARIANTS = {"impact_default": IMPACT_ALGOS["impact"], "impala_default": IMPACT_ALGOS["impala"]}
ALGOS = {**ZOO_ALGOS, **IMPACT_ALGOS, **DEFAULT_VARIANTS}
# Default "solved" thresholds (rl-zoo3 / gymnasium reward thresholds); --threshold overrides, other envs get none.
THRESHOLDS = {
    "CartPole-v1": 475.0,
    "Pendulum-v1": -200.0,
    "LunarLander-v3": 200.0,
    "LunarLanderContinuous-v3": 200.0,
}
ZOO_ONLY_KEYS = {"n_envs", "n_timesteps", "normalize", "policy", "env_wrapper", "frame_stack"}


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
    if algo not in ALGOS:
        raise ValueError(f"unknown algo {algo!r}; valid names: {', '.join(sorted(ALGOS))}")
    if algo in DEFAULT_VARIANTS:
        return {}
    return yaml.safe_load(zoo_yml_path(algo).read_text())


def load_zoo_hyperparams(algo: str, env_id: str) -> dict[str, Any]:
    """The rl-zoo3 yml entry of ``env_id``, with ``lin_`` schedules and ``policy_kwargs`` strings resolved."""
    config = zoo_entries(algo)
    if algo in DEFAULT_VARIANTS:
        return {"policy": "MlpPolicy", "n_envs": 1, "n_timesteps": 100_000}
    key = "atari" if is_atari(env_id) and env_id not in config else env_id
    if key not in config:
        raise ValueError(f"{algo}: no hyperparameters for {env_id!r} in {zoo_yml_path(algo)}; valid: {', '.join(config)}")
    params = dict(config[key])
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
    unknown = [algo for algo in algos if algo not in ALGOS]
    if unknown:
        raise ValueError(f"unknown algos {unknown}; valid names: {', '.join(sorted(ALGOS))}")
    for env_id in env_ids:
        if env_id not in gym.registry:
            if is_atari(env_id):
                try:  # registers the ALE ids
                    import ale_py

                    gym.register_envs(ale_py)
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
    if is_atari(env_id):
        import ale_py

        gym.register_envs(ale_py)
    wrapper_class: Callable[[gym.Env], gym.Env] | None = None
    if env_wrapper:
        wrapper_class = get_wrapper_class({"env_wrapper": env_wrapper})
    vec_env_cls = SubprocVecEnv if subproc and n_envs > 1 else DummyVecEnv
    env = make_vec_env(env_id, n_envs=n_envs, seed=seed, vec_env_cls=vec_env_cls, wrapper_class=wrapper_class)
    if frame_stack:
        env = VecFrameStack(env, int(frame_stack))
    if normalize:
        kwargs = eval(normalize) if isinstance(normalize, str) else (normalize if isinstance(normalize, dict) else {})
        env = VecNormalize(env, **kwargs)
    return env


def machine_id(device: str = "cpu") -> str:
    """A short name of this machine's compute: CPU model and count, plus the GPU when the learner uses one."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as file:
            cpu = next(line.split(":", 1)[1].strip() for line in file if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
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
    Every ``eval_freq`` environment steps, evaluate the deterministic policy for ``n_eval_episodes`` episodes.

    The recorded wall time is the time since training started, minus the time spent evaluating.
    """

    def __init__(self, eval_env: VecEnv, eval_freq: int, n_eval_episodes: int, algo: str, env_id: str, seed: int) -> None:
        super().__init__()
        self.eval_env = eval_env
        self.eval_freq = eval_freq
        self.n_eval_episodes = n_eval_episodes
        self.tag = (algo, env_id, seed)
        self.points: list[EvalPoint] = []
        self._next_eval = 0
        self._start = 0.0
        self._eval_seconds = 0.0

    def _on_training_start(self) -> None:
        self._start = time.perf_counter()
        self._next_eval = self.eval_freq
        self.evaluate()

    def evaluate(self) -> None:
        eval_start = time.perf_counter()
        if isinstance(self.model.get_vec_normalize_env(), VecNormalize):
            sync_envs_normalization(self.training_env, self.eval_env)
        rewards, _ = evaluate_policy(
            self.model, self.eval_env, self.n_eval_episodes, deterministic=True, return_episode_rewards=True
        )
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
        if self.num_timesteps >= self._next_eval:
            self._next_eval += self.eval_freq
            self.evaluate()
        return True

    def _on_training_end(self) -> None:
        if not self.points or self.points[-1].steps != self.num_timesteps:
            self.evaluate()


def train_and_evaluate(
    algo: str,
    env_id: str,
    seed: int,
    steps: int | None,
    eval_freq: int,
    n_eval_episodes: int,
    device: str = "cpu",
    subproc: bool = False,
) -> list[EvalPoint]:
    """Train ``algo`` with its zoo hyperparameters on ``env_id``; a failed run returns one point with its error."""
    env = None
    try:
        env_params, params = split_env_params(load_zoo_hyperparams(algo, env_id))
        wrappers = {"env_wrapper": env_params.get("env_wrapper"), "frame_stack": env_params.get("frame_stack")}
        normalize = env_params.get("normalize", False)
        env = make_training_env(env_id, env_params.get("n_envs", 1), seed, normalize, subproc, **wrappers)
        eval_env = make_training_env(env_id, 1, seed + 10_000, normalize, **wrappers)
        if isinstance(eval_env, VecNormalize):
            eval_env.training, eval_env.norm_reward = False, False
        callback = TimedEvalCallback(eval_env, eval_freq, n_eval_episodes, algo, env_id, seed)
        model = ALGOS[algo](env_params["policy"], env, seed=seed, device=device, **params)
        model.learn(steps or int(env_params["n_timesteps"]), callback=callback)
        eval_env.close()
        return callback.points
    except KeyboardInterrupt:
        raise
    except Exception as error:  # a failed run is recorded, the others continue
        device_type = th.device(device if device != "auto" else ("cuda" if th.cuda.is_available() else "cpu")).type
        failed = EvalPoint(algo, env_id, seed, 0, 0.0, float("nan"), float("nan"), status="failed", error=repr(error))
        failed.device, failed.machine = device_type, machine_id(device_type)
        return [failed]
    finally:
        if env is not None:
            env.close()


def first_reaching(points: list[EvalPoint], threshold: float | None) -> EvalPoint | None:
    """
    The first evaluation point after training started whose mean return is >= threshold.

    The evaluation before any training (step 0) does not count: a lucky initialisation can balance
    CartPole deterministically (seen with seed 0), which says nothing about the algorithm.
    """
    if threshold is None:
        return None
    return next((p for p in points if p.status == "ok" and p.steps > 0 and p.eval_mean >= threshold), None)


def spread(values: list[float | None]) -> dict[str, float | None]:
    """Median, min and max of the finite values (``None`` entries are runs that never got there)."""
    finite = [value for value in values if value is not None and np.isfinite(value)]
    if not finite:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": float(np.median(finite)), "min": float(np.min(finite)), "max": float(np.max(finite)), "n": len(finite)}


def threshold_summary(points: list[EvalPoint], threshold: float | None, baseline: str) -> dict[str, Any]:
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
        trained = [[p for p in by_run[key] if p.status == "ok" and p.steps > 0] for key in runs]
        entry: dict[str, Any] = {
            "seeds": [seed for _, seed, _ in runs],
            "failed": [by_run[key][0].error for key in runs if by_run[key][0].status == "failed"],
            "final_eval_mean": [run[-1].eval_mean if run else None for run in trained],
            "best_eval_mean": [max(p.eval_mean for p in run) if run else None for run in trained],
            "final_steps": [run[-1].steps if run else None for run in trained],
        }
        entry["final_eval"] = spread(entry["final_eval_mean"])
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
    """Median and min/max band over seeds of the evaluation return, against env steps and against wall seconds."""
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
            curves = np.array(
                [np.interp(grid, [getattr(p, attribute) for p in run], [p.eval_mean for p in run]) for run in runs.values()]
            )
            (line,) = axis.plot(grid, np.median(curves, axis=0), label=f"{label} ({len(runs)} seeds)")
            axis.fill_between(grid, curves.min(axis=0), curves.max(axis=0), alpha=0.2, color=line.get_color())
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
