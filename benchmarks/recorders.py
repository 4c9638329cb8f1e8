"""
What a run records beside its evaluation returns: rows keyed by algo, seed and ``steps``, written through one path
(``Recorder.write``) to ``OUT/records/ENV/NAME/ALGO_seedN.csv`` by the run's own process (a ``--jobs`` worker too);
the parent draws ``OUT/ENV_NAME.png`` from every run's rows after each finished run. Every run records its
``diagnostics`` (``benchmarks/diagnostics.py``: the logger's values at each evaluation point); ``python -m
benchmarks run ... --record NAME`` adds, for the runs of NAME's algorithm, what that algorithm does not log:

- ``refer`` (``vracer``): at every evaluation point, the far-policy fraction of the whole replay memory (against the
  current c_max) and the mean ``D_KL(mu || pi)`` over 2048 steps drawn from it; drawn under the return with the
  diagnostics' ``train/beta`` (the paper's Figures 4-5, with ``vracer[refer_rules=...]`` variants);
- ``priorities`` (``ptr_ppo``): after every iteration, the priority of every segment in the memory, oldest first
  (the PTR-PPO paper's Figures 8 and 10, drawn as a heatmap of each algo's first seed).

What an algorithm logs is a diagnostic, not a recorder: PPO-AMBER's active and stored batches, R' and eps_b (the
AMBER paper's Figure 5; the ``active_batches`` recorder before) are ``train/active_batches``,
``train/stored_batches``, ``train/replay_ratio_mean`` and ``train/batch_drop_factor``; with ``--eval-freq`` equal to
an iteration's steps, each diagnostics row is one iteration's (``--plot-diagnostics active_batches ...``).
"""

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import obs_as_tensor

from benchmarks.config import ALGOS, algo_class
from benchmarks.output import EvalPoint, write_rows
from benchmarks.plot import plot_heatmaps, plot_panels
from benchmarks.protocol import run_file_name
from sb3_impact.common.refer import diag_gaussian_kl

ROW_KEYS = ["algo", "seed", "steps"]
DIAGNOSTICS = "diagnostics"


class Recorder(BaseCallback):
    """A callback that collects rows of model statistics, each keyed by algo, seed and the model's steps."""

    name: ClassVar[str]  # what --record calls it, and its folder under OUT/records/ENV/
    algo: ClassVar[str]  # the algorithm it applies to
    plotted: ClassVar[list[str]] = []  # the columns its figure draws under the return (none: a heatmap)

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
        write_rows(path, self.rows)


class ReFERRecorder(Recorder):
    name = "refer"
    algo = "vracer"
    plotted: ClassVar[list[str]] = ["far_fraction", "kl_mu_pi", "train/beta"]
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
        self.add_row(far_fraction=self.model.replay_buffer.far_fraction(), kl_mu_pi=kl)


class PrioritiesRecorder(Recorder):
    """After every training phase (read at the start of the next rollout, and at the end of training)."""

    name = "priorities"
    algo = "ptr_ppo"

    def __init__(self, algo: str, seed: int) -> None:
        super().__init__(algo, seed)
        self._recorded_at = -1

    def _on_rollout_start(self) -> None:
        memory = self.model.replay_memory
        if self.model.num_timesteps == self._recorded_at or len(memory) == 0:  # training may end after a rollout start
            return
        self._recorded_at = self.model.num_timesteps
        for position, priority in enumerate(memory.priorities[memory.filled_slots()]):
            self.add_row(position=position, priority=float(priority))

    def _on_training_end(self) -> None:
        self._on_rollout_start()


RECORDERS: dict[str, type[Recorder]] = {recorder.name: recorder for recorder in (ReFERRecorder, PrioritiesRecorder)}


def applies(name: str, algo: str) -> bool:
    """Whether recorder ``name`` records ``algo`` (a name, a ``[key=value]`` variant, or a ``_default`` one)."""
    return algo_class(algo) is ALGOS[RECORDERS[name].algo]


def recorders_for(algo: str, names: Sequence[str], seed: int) -> list[Recorder]:
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
    return out / "records" / env_id / name / f"{run_file_name(algo, seed)}.csv"


def copy_run_records(source: Path, out: Path, env_id: str, algo: str, seed: int) -> None:
    """
    One run's rows of every recorder (the diagnostics included) from ``source`` into ``out``, for ``--merge``: the
    run's own files replace those ``out`` had for it, and a recorder the run did not write leaves none behind.
    """
    names = {folder.name for root in (source, out) for folder in (root / "records" / env_id).glob("*") if folder.is_dir()}
    for name in sorted(names):
        path, target = record_path(source, env_id, name, algo, seed), record_path(out, env_id, name, algo, seed)
        if path.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        else:
            target.unlink(missing_ok=True)


def read_records(out: Path, env_id: str, name: str) -> pd.DataFrame:
    """Every run's rows of recorder ``name`` (no rows, with the key columns, where none recorded)."""
    frames = [pd.read_csv(path) for path in sorted((out / "records" / env_id / name).glob("*.csv"))]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=ROW_KEYS)


def plot_records(out: Path, env_id: str, points: list[EvalPoint], names: Sequence[str]) -> None:
    """Draw ``OUT/ENV_NAME.png`` for each recorder from every run's records so far."""
    for name in names:
        rows, path, title = read_records(out, env_id, name), out / f"{env_id}_{name}.png", f"{env_id}: {name}"
        if rows.empty:
            continue
        if RECORDERS[name].plotted:  # beside the diagnostics of the same evaluation points
            rows = rows.merge(read_records(out, env_id, DIAGNOSTICS), on=ROW_KEYS, how="left")
            plot_panels(points, rows, RECORDERS[name].plotted, path, title)
        else:
            plot_heatmaps(rows, "priority", path, title)
