"""
What every benchmark run stores beside its returns, so that a collapse can be seen rather than inferred: at each
evaluation point, the SB3 logger's ``train/``, ``rollout/`` and ``collector/`` values that the algorithm wrote since
the previous point (each the mean over the logger's dumps in between: entropy, approximate KL, clip fraction,
learning rate, value loss, PPO-AMBER's active batches, PTR-PPO's replay share and importance ratios, ...), and,
for ``Box`` actions, ``action_mean_abs``: the mean over the evaluation's observations and the action's
dimensions of ``|mu(s)|``, the policy's Gaussian mean before any clipping or squashing (an action mean that
drifts out of the action box shows here, where clipped actions cannot show it).

Each run writes ``OUT/records/ENV/diagnostics/ALGO_seedN.csv`` (one row per evaluation point, joined to
``ENV.csv`` by algo, seed and steps); ``python -m benchmarks run ... --plot-diagnostics KEY ...`` (also with
``--summarize``) draws ``ENV_diagnostics.png``: the return curve with one panel per key under it.
"""

import csv
from collections import defaultdict
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.logger import KVWriter
from stable_baselines3.common.policies import ActorCriticPolicy

from benchmarks.output import EvalPoint, add_legend_below, curve_colors, plot_median_band
from benchmarks.recorders import Recorder, read_records, record_path

LOGGED_PREFIXES = ("train/", "rollout/", "collector/")
MAX_OBSERVATIONS = 4096  # of an evaluation, for action_mean_abs


class DumpedValues(KVWriter):
    """An SB3 logger output that keeps every numeric value of the logged prefixes the logger dumps."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = defaultdict(list)

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        add_logged(self.values, key_values)

    def close(self) -> None:
        """Nothing to release."""


def add_logged(values: dict[str, list[float]], key_values: dict[str, Any]) -> None:
    for key, value in key_values.items():
        if key.startswith(LOGGED_PREFIXES) and isinstance(value, (int, float, np.integer, np.floating)):
            values[key].append(float(value))


def action_mean_abs(policy: Any, observations: np.ndarray) -> float:
    """
    Mean ``|mu(s)|`` over ``observations`` and the action's dimensions: the Gaussian mean of SB3's actor-critic
    policies, of SAC's actor (before tanh), TD3's deterministic action (scaled to [-1, 1]) or V-RACER's. NaN for a
    policy whose mean needs more than the observation (a recurrent policy's hidden state).
    """
    if policy.__class__.__name__.startswith("Recurrent") or "Lstm" in policy.__class__.__name__:
        return float("nan")
    with th.no_grad():
        obs_tensor, _ = policy.obs_to_tensor(observations)
        if isinstance(policy, ActorCriticPolicy):
            mean = policy.get_distribution(obs_tensor).distribution.mean
        elif hasattr(policy, "forward_parts"):  # V-RACER
            mean = policy.forward_parts(obs_tensor)[0]
        elif hasattr(policy, "actor") and hasattr(policy.actor, "get_action_dist_params"):  # SAC
            mean = policy.actor.get_action_dist_params(obs_tensor)[0]
        elif hasattr(policy, "actor"):  # TD3
            mean = policy.actor(obs_tensor)
        else:
            return float("nan")
    return float(mean.abs().mean().item())


class DiagnosticsRecorder(Recorder):
    """Attached to every run: the logger's values and ``action_mean_abs`` at every evaluation point."""

    name = "diagnostics"
    algo = ""  # every algorithm
    fields: ClassVar[list[str]] = []  # the columns are the keys the run logged (``write``)

    def __init__(self, algo: str, seed: int) -> None:
        super().__init__(algo, seed)
        self.dumped = DumpedValues()
        self.observations: list[np.ndarray] = []

    def _on_training_start(self) -> None:
        self.model.logger.output_formats.append(self.dumped)

    def wants_observations(self) -> bool:
        return isinstance(self.model.action_space, spaces.Box)

    def observe(self, observation: Any) -> None:
        if len(self.observations) < MAX_OBSERVATIONS and isinstance(observation, np.ndarray):
            self.observations.append(np.array(observation))

    def on_evaluation(self) -> None:
        logged = self.dumped.values
        add_logged(logged, self.model.logger.name_to_value)  # recorded since the last dump
        row: dict[str, Any] = {key: float(np.mean(values)) for key, values in sorted(logged.items()) if values}
        logged.clear()
        if self.wants_observations():
            row["action_mean_abs"] = (
                action_mean_abs(self.model.policy, np.stack(self.observations)) if self.observations else float("nan")
            )
        self.observations = []
        self.add_row(**row)

    def write(self, path: Path) -> None:
        write_rows(path, self.rows)


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """Diagnostics rows as a CSV, with the union of their keys as columns (empty where a row lacks one)."""
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)


def diagnostics_path(out: Path, env_id: str, algo: str, seed: int) -> Path:
    return record_path(out, env_id, DiagnosticsRecorder.name, algo, seed)


def logged_key(rows: list[dict[str, Any]], name: str) -> str:
    """The column ``name`` stands for: itself, or the one logged key ending in ``/name`` (``entropy_loss``)."""
    columns = {key for row in rows for key in row}
    if name in columns:
        return name
    matches = sorted(key for key in columns if key.endswith(f"/{name}"))
    if len(matches) != 1:
        found = ", ".join(matches) or "none; the runs logged " + ", ".join(sorted(columns - {"algo", "seed", "steps"}))
        raise ValueError(f"diagnostic {name!r}: {'ambiguous, ' if matches else ''}{found}")
    return matches[0]


def plot_diagnostics(out: Path, env_id: str, points: list[EvalPoint], names: list[str]) -> Path | None:
    """
    ``OUT/ENV_diagnostics.png``: the evaluation return against env steps (median and min/max band over seeds of
    each algo), and under it one panel per diagnostic in ``names`` (a logged key or its last part). Nothing where
    the runs stored no diagnostics.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_records(out, env_id, DiagnosticsRecorder.name)
    if not rows or not names:
        return None
    keys = [logged_key(rows, name) for name in names]
    figure, axes = plt.subplots(1 + len(keys), 1, figsize=(8, 2.6 * (1 + len(keys))), sharex=True, squeeze=False)
    algos = sorted({point.algo for point in points if point.status == "ok"})
    for algo, color in zip(algos, curve_colors(len(algos)), strict=True):
        runs: dict[int, list[EvalPoint]] = defaultdict(list)
        for point in points:
            if point.algo == algo and point.status == "ok":
                runs[point.seed].append(point)
        xy = [([p.steps for p in run], [p.eval_mean for p in run]) for run in runs.values()]
        plot_median_band(axes[0][0], xy, f"{algo} ({len(runs)} seeds)", color)
        for axis, key in zip(axes[1:, 0], keys, strict=True):
            curves = defaultdict(list)
            for row in rows:
                if row["algo"] == algo and row.get(key) not in (None, ""):
                    curves[row["seed"]].append((float(row["steps"]), float(row[key])))
            if curves:
                plot_median_band(axis, [tuple(zip(*curve, strict=True)) for curve in curves.values()], algo, color)
    axes[0][0].set_ylabel("evaluation return")
    for axis, key in zip(axes[1:, 0], keys, strict=True):
        axis.set_ylabel(key, fontsize=8)
    axes[-1][0].set_xlabel("environment steps")
    figure.suptitle(env_id)
    add_legend_below(figure, axes[0][0])
    path = out / f"{env_id}_diagnostics.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
