"""
What a run records besides its evaluation returns: ``python -m benchmarks run ... --record NAME`` attaches a
recorder to every run of the algorithm it is for, and draws ``ENV_NAME.png`` from what the runs recorded.

- ``refer`` (``vracer``): at every evaluation point, the far-policy fraction of the replay memory (against the
  current c_max), the mean ``D_KL(mu || pi)`` between the current policy and the behaviours of 2048 steps drawn
  from the memory, ReF-ER's beta and c_max (the paper's Figures 4-5, with ``vracer[refer_rules=...]`` variants);
- ``active_batches`` (``ppo_amber``): after every iteration, the active and stored batches, the mean and max R'
  of the stored past batches and the batch drop factor (the AMBER paper's Figure 5);
- ``priorities`` (``ptr_ppo``): after every iteration, the priority of every segment in the memory, oldest
  first (the PTR-PPO paper's Figures 8 and 10, drawn as a heatmap of each algo's first seed).

Each run writes ``OUT/records/ENV/NAME/ALGO_seedN.csv`` itself (from its worker process with ``--jobs``); the
parent draws the figure from all of them after every finished run.
"""

import csv
import re
from abc import abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import obs_as_tensor

from benchmarks.config import ALGOS, algo_class
from benchmarks.output import add_legend_below, curve_colors, plot_median_band
from sb3_impact.common.refer import diag_gaussian_kl


class Recorder(BaseCallback):
    """A callback that collects rows of model statistics; ``fields`` are its columns after algo, seed and steps."""

    name: ClassVar[str]  # what --record calls it
    algo: ClassVar[str]  # the algorithm it applies to
    fields: ClassVar[list[str]]

    def __init__(self, algo: str, seed: int) -> None:
        super().__init__()
        self.algo_name, self.seed = algo, seed
        self.rows: list[dict[str, Any]] = []

    def add_row(self, **values: Any) -> None:
        self.rows.append(dict(algo=self.algo_name, seed=self.seed, steps=self.model.num_timesteps, **values))

    def on_evaluation(self) -> None:
        """Called by the evaluation callback at each evaluation point (its time is excluded from the wall time)."""

    def wants_observations(self) -> bool:
        """Whether the evaluation callback should pass each observation the evaluated policy acts on to ``observe``."""
        return False

    def observe(self, observation: Any) -> None:
        """One observation of an evaluation episode, before the policy acts on it (see ``wants_observations``)."""

    def _on_step(self) -> bool:
        return True

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=["algo", "seed", "steps", *self.fields])
            writer.writeheader()
            writer.writerows(self.rows)


class ReFERRecorder(Recorder):
    name = "refer"
    algo = "vracer"
    fields: ClassVar[list[str]] = ["far_fraction", "kl_mu_pi", "beta", "c_max"]
    kl_samples = 2048

    def memory_kl(self) -> float:
        """Mean D_KL(mu_k || pi(.|s_k)) over steps drawn uniformly from the replay memory (the paper's Figure 5)."""
        model = self.model
        memory = model.replay_buffer
        if len(memory) == 0:
            return float("nan")
        slots = memory.sample_slots(self.kl_samples)
        with th.no_grad():
            mean, log_std, _ = model.policy.forward_parts(obs_as_tensor(memory.observations_at(slots), model.device))
            mu_mean, mu_log_std = th.as_tensor(memory.behaviour_params[slots], device=model.device).chunk(2, dim=1)
            return diag_gaussian_kl(mu_mean, mu_log_std, mean, log_std).mean().item()

    def on_evaluation(self) -> None:
        rng_state = np.random.get_state()  # the memory draws with numpy's global RNG: leave training's draws alone
        kl = self.memory_kl()
        np.random.set_state(rng_state)
        model = self.model
        self.add_row(far_fraction=model.replay_buffer.far_fraction(), kl_mu_pi=kl, beta=model.beta, c_max=model.c_max)


class IterationRecorder(Recorder):
    """Records after every training phase: read at the start of the next rollout, and at the end of training."""

    def __init__(self, algo: str, seed: int) -> None:
        super().__init__(algo, seed)
        self._recorded_at = -1

    @abstractmethod
    def record_iteration(self) -> None:
        """Add this iteration's rows."""

    def _record_once(self) -> None:
        if self.model.num_timesteps != self._recorded_at:  # training may end right after a rollout start
            self._recorded_at = self.model.num_timesteps
            self.record_iteration()

    def _on_rollout_start(self) -> None:
        self._record_once()

    def _on_training_end(self) -> None:
        self._record_once()


class ActiveBatchesRecorder(IterationRecorder):
    name = "active_batches"
    algo = "ppo_amber"
    fields: ClassVar[list[str]] = [
        "active_batches",
        "stored_batches",
        "replay_ratio_mean",
        "replay_ratio_max",
        "batch_drop_factor",
    ]

    def record_iteration(self) -> None:
        model = self.model
        if model.active_batches == 0:  # no training phase yet
            return
        past = model.replay_ratios[1:] or [1.0]
        self.add_row(
            active_batches=model.active_batches,
            stored_batches=len(model.replay_memory or []),
            replay_ratio_mean=float(np.mean(past)),
            replay_ratio_max=float(np.max(past)),
            batch_drop_factor=model.batch_drop_factor(model._current_progress_remaining),
        )


class PrioritiesRecorder(IterationRecorder):
    name = "priorities"
    algo = "ptr_ppo"
    fields: ClassVar[list[str]] = ["position", "priority"]

    def record_iteration(self) -> None:
        memory = self.model.replay_memory
        if len(memory) == 0:
            return
        for position, priority in enumerate(memory.priorities[memory.filled_slots()]):
            self.add_row(position=position, priority=float(priority))


RECORDERS: dict[str, type[Recorder]] = {
    recorder.name: recorder for recorder in (ReFERRecorder, ActiveBatchesRecorder, PrioritiesRecorder)
}


def applies(name: str, algo: str) -> bool:
    """Whether recorder ``name`` records ``algo`` (a name, a ``[key=value]`` variant, or a ``_default`` one)."""
    return algo_class(algo) is ALGOS[RECORDERS[name].algo]


def recorders_for(algo: str, names: list[str] | tuple[str, ...], seed: int) -> list[Recorder]:
    """The recorders among ``names`` that apply to ``algo``."""
    return [RECORDERS[name](algo, seed) for name in names if applies(name, algo)]


def validate_recorders(names: list[str], algos: list[str]) -> None:
    """Raise ``ValueError`` for an unknown recorder, or one for an algorithm that is not among ``algos``."""
    for name in names:
        if name not in RECORDERS:
            raise ValueError(f"unknown recorder {name!r}; valid names: {', '.join(RECORDERS)}")
        if not any(applies(name, algo) for algo in algos):
            raise ValueError(f"recorder {name!r} records {RECORDERS[name].algo} runs, and --algos has none")


def record_path(out: Path, env_id: str, name: str, algo: str, seed: int) -> Path:
    return out / "records" / env_id / name / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', algo)}_seed{seed}.csv"


def read_records(out: Path, env_id: str, name: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in sorted((out / "records" / env_id / name).glob("*.csv")):
        with open(path) as file:
            rows += list(csv.DictReader(file))
    return rows


def _runs_by_algo(rows: list[dict[str, Any]]) -> dict[str, dict[int, list[dict[str, Any]]]]:
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for row in rows:
        runs.setdefault(row["algo"], {}).setdefault(int(row["seed"]), []).append(row)
    return runs


def plot_record_curves(rows: list[dict[str, Any]], fields: list[str], path: Path, title: str) -> None:
    """One panel per field against env steps: each algo's median over seeds with a min/max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(fields), figsize=(4.8 * len(fields), 4), squeeze=False)
    runs_by_algo = _runs_by_algo(rows)
    for (algo, runs), color in zip(runs_by_algo.items(), curve_colors(len(runs_by_algo)), strict=True):
        for axis, field in zip(axes[0], fields, strict=True):
            xy = [([float(row["steps"]) for row in run], [float(row[field]) for row in run]) for run in runs.values()]
            plot_median_band(axis, xy, f"{algo} ({len(runs)} seeds)", color)
    for axis, field in zip(axes[0], fields, strict=True):
        axis.set_xlabel("environment steps")
        axis.set_ylabel(field)
    figure.suptitle(title)
    add_legend_below(figure, axes[0][0])
    figure.savefig(path, dpi=100)
    plt.close(figure)


def plot_heatmaps(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """Each algo's first seed: one row per iteration, the memory's priorities right-aligned (newest last)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = _runs_by_algo(rows)
    figure, axes = plt.subplots(1, len(runs), figsize=(4.5 * len(runs), 4), squeeze=False)
    for axis, (algo, by_seed) in zip(axes[0], runs.items(), strict=True):
        iterations: dict[int, list[float]] = {}
        for row in by_seed[min(by_seed)]:
            iterations.setdefault(int(row["steps"]), []).append(float(row["priority"]))
        width = max(len(values) for values in iterations.values())
        image = np.full((len(iterations), width), np.nan)
        for index, values in enumerate(iterations.values()):
            image[index, width - len(values) :] = values
        shown = axis.imshow(image, aspect="auto", origin="lower", interpolation="nearest", cmap="viridis")
        axis.set_title(f"{algo}, seed {min(by_seed)}", fontsize=9)
        axis.set_xlabel("position in memory (left: oldest)")
        axis.set_ylabel("iteration")
        figure.colorbar(shown, ax=axis)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


PLOTS: dict[str, Callable[[list[dict[str, Any]], Path, str], None]] = {
    "refer": lambda rows, path, title: plot_record_curves(rows, ["far_fraction", "kl_mu_pi", "beta"], path, title),
    "active_batches": lambda rows, path, title: plot_record_curves(rows, ["active_batches", "replay_ratio_mean"], path, title),
    "priorities": plot_heatmaps,
}


def plot_records(out: Path, env_id: str, names: list[str] | tuple[str, ...]) -> None:
    """Draw ``OUT/ENV_NAME.png`` for each recorder from every run's records so far."""
    for name in names:
        rows = read_records(out, env_id, name)
        if rows:
            PLOTS[name](rows, out / f"{env_id}_{name}.png", f"{env_id}: {name}")
