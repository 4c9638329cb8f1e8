"""Shared pieces of the benchmark scripts: zoo hyperparameters, timed evaluation, thresholds, output files."""

import csv
import json
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
import yaml
from rl_zoo3.utils import ALGOS as ZOO_ALGOS
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv, VecNormalize, sync_envs_normalization

from sb3_impact.zoo import ZOO_ALGOS as IMPACT_ALGOS
from sb3_impact.zoo import hyperparams_path

# Pseudo-algorithms: an algorithm with its constructor defaults on one env (what `IMPACT("MlpPolicy", env_id)` does).
DEFAULT_VARIANTS = {"impact_default": IMPACT_ALGOS["impact"], "impala_default": IMPACT_ALGOS["impala"]}
ALGOS = {**ZOO_ALGOS, **IMPACT_ALGOS, **DEFAULT_VARIANTS}
THRESHOLDS = {"CartPole-v1": 475.0, "Pendulum-v1": -200.0}
ZOO_ONLY_KEYS = {"n_envs", "n_timesteps", "normalize", "policy"}


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


def load_zoo_hyperparams(algo: str, env_id: str) -> dict[str, Any]:
    """The rl-zoo3 yml entry of ``env_id``, with ``lin_`` schedules and ``policy_kwargs`` strings resolved."""
    if algo not in ALGOS:
        raise ValueError(f"unknown algo {algo!r}; valid names: {', '.join(sorted(ALGOS))}")
    if algo in DEFAULT_VARIANTS:
        return {"policy": "MlpPolicy", "n_envs": 1, "n_timesteps": 100_000}
    config = yaml.safe_load(zoo_yml_path(algo).read_text())
    if env_id not in config:
        raise ValueError(f"{algo}: no hyperparameters for {env_id!r} in {zoo_yml_path(algo)}; valid: {', '.join(config)}")
    params = dict(config[env_id])
    unsupported = {"env_wrapper", "frame_stack", "callback", "vec_env_wrapper"} & set(params)
    if unsupported:
        raise ValueError(f"{algo}/{env_id}: the benchmark does not handle {sorted(unsupported)}")
    for key, value in params.items():
        if isinstance(value, str) and value.startswith("lin_"):
            params[key] = linear_schedule(float(value[len("lin_") :]))
    if isinstance(params.get("policy_kwargs"), str):
        params["policy_kwargs"] = eval(params["policy_kwargs"], {"nn": th.nn, "dict": dict})
    return params


def make_training_env(env_id: str, n_envs: int, seed: int, normalize: bool | str | dict, subproc: bool = False) -> VecEnv:
    """``n_envs`` copies of ``env_id`` (in subprocesses if asked), wrapped in ``VecNormalize`` if the yml says so."""
    vec_env_cls = SubprocVecEnv if subproc and n_envs > 1 else DummyVecEnv
    env = make_vec_env(env_id, n_envs=n_envs, seed=seed, vec_env_cls=vec_env_cls)
    if normalize:
        kwargs = eval(normalize) if isinstance(normalize, str) else (normalize if isinstance(normalize, dict) else {})
        env = VecNormalize(env, **kwargs)
    return env


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
        self.points.append(EvalPoint(*self.tag, self.num_timesteps, wall, float(np.mean(rewards)), float(np.std(rewards))))
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
    try:
        params = load_zoo_hyperparams(algo, env_id)
        n_envs = params.pop("n_envs", 1)
        n_timesteps = int(params.pop("n_timesteps"))
        normalize = params.pop("normalize", False)
        policy = params.pop("policy")
        env = make_training_env(env_id, n_envs, seed, normalize, subproc)
        eval_env = make_training_env(env_id, 1, seed + 10_000, normalize)
        if isinstance(eval_env, VecNormalize):
            eval_env.training, eval_env.norm_reward = False, False
        callback = TimedEvalCallback(eval_env, eval_freq, n_eval_episodes, algo, env_id, seed)
        model = ALGOS[algo](policy, env, seed=seed, device=device, **params)
        model.learn(steps or n_timesteps, callback=callback)
        env.close()
        return callback.points
    except KeyboardInterrupt:
        raise
    except Exception as error:  # a failed run is recorded, the others continue
        return [EvalPoint(algo, env_id, seed, 0, 0.0, float("nan"), float("nan"), status="failed", error=repr(error))]


def first_reaching(points: list[EvalPoint], threshold: float) -> EvalPoint | None:
    """
    The first evaluation point after training started whose mean return is >= threshold.

    The evaluation before any training (step 0) does not count: a lucky initialisation can balance
    CartPole deterministically (seen with seed 0), which says nothing about the algorithm.
    """
    return next((p for p in points if p.status == "ok" and p.steps > 0 and p.eval_mean >= threshold), None)


def ratio_summary(values: list[float]) -> dict[str, float | None]:
    finite = [value for value in values if value is not None and np.isfinite(value)]
    if not finite:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": float(np.median(finite)), "min": float(np.min(finite)), "max": float(np.max(finite)), "n": len(finite)}


def threshold_summary(points: list[EvalPoint], threshold: float, baseline: str) -> dict[str, Any]:
    """Steps and wall seconds to ``threshold`` per algo and seed, medians, and ratios against ``baseline`` (paired by seed)."""
    by_run: dict[tuple[str, int], list[EvalPoint]] = {}
    for point in points:
        by_run.setdefault((point.algo, point.seed), []).append(point)
    reached = {key: first_reaching(run, threshold) for key, run in by_run.items()}
    algos = sorted({algo for algo, _ in by_run})
    summary: dict[str, Any] = {"threshold": threshold, "baseline": baseline, "algos": {}}
    for algo in algos:
        seeds = sorted(seed for a, seed in by_run if a == algo)
        hits = [reached[(algo, seed)] for seed in seeds]
        entry = {
            "seeds": seeds,
            "steps_to_threshold": [hit.steps if hit else None for hit in hits],
            "wall_seconds_to_threshold": [round(hit.wall_seconds, 2) if hit else None for hit in hits],
            "final_eval_mean": [by_run[(algo, seed)][-1].eval_mean for seed in seeds],
            "best_eval_mean": [max(p.eval_mean for p in by_run[(algo, seed)] if p.steps > 0) for seed in seeds],
            "best_eval_steps": [
                max((p for p in by_run[(algo, seed)] if p.steps > 0), key=lambda p: p.eval_mean).steps for seed in seeds
            ],
        }
        entry["median_steps"] = ratio_summary(entry["steps_to_threshold"])["median"]
        entry["median_wall_seconds"] = ratio_summary(entry["wall_seconds_to_threshold"])["median"]
        if algo != baseline:
            step_ratios, wall_ratios = [], []
            for seed in seeds:
                ours, base = reached.get((algo, seed)), reached.get((baseline, seed))
                if ours and base and base.steps > 0 and base.wall_seconds > 0:
                    step_ratios.append(ours.steps / base.steps)
                    wall_ratios.append(ours.wall_seconds / base.wall_seconds)
            entry["steps_ratio_vs_baseline"] = ratio_summary(step_ratios)
            entry["wall_ratio_vs_baseline"] = ratio_summary(wall_ratios)
        summary["algos"][algo] = entry
    return summary


def machine_description() -> dict[str, Any]:
    import os

    return {
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
    algos = sorted({point.algo for point in points if point.status == "ok"})
    for algo in algos:
        runs: dict[int, list[EvalPoint]] = {}
        for point in points:
            if point.algo == algo and point.status == "ok":
                runs.setdefault(point.seed, []).append(point)
        for axis, attribute in zip(axes, ("steps", "wall_seconds"), strict=True):
            grid = np.linspace(0, max(getattr(run[-1], attribute) for run in runs.values()), 100)
            curves = np.array(
                [np.interp(grid, [getattr(p, attribute) for p in run], [p.eval_mean for p in run]) for run in runs.values()]
            )
            (line,) = axis.plot(grid, np.median(curves, axis=0), label=f"{algo} ({len(runs)} seeds)")
            axis.fill_between(grid, curves.min(axis=0), curves.max(axis=0), alpha=0.2, color=line.get_color())
    for axis, label in zip(axes, ("environment steps", "wall seconds (evaluation excluded)"), strict=True):
        axis.set_xlabel(label)
        axis.set_ylabel("deterministic evaluation return")
        if threshold is not None:
            axis.axhline(threshold, color="gray", linestyle="--", linewidth=1)
        axis.legend()
    figure.suptitle(points[0].env if points else "")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
