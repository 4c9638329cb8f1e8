"""
What every benchmark run stores beside its returns, so that a collapse can be seen rather than inferred: at each
evaluation point, the SB3 logger's ``train/``, ``rollout/`` and ``collector/`` values that the algorithm wrote since
the previous point (each the mean over the values dumped in between and those recorded since the last dump, each
counted once: entropy, approximate KL, clip fraction, learning rate, value loss, PPO-AMBER's active batches,
PTR-PPO's replay share and importance ratios, ...), and, for ``Box`` actions, ``action_mean_abs``: the mean over the
evaluation's observations and the action's dimensions of ``|mu(s)|``, the policy's Gaussian mean before any
clipping or squashing (a mean that drifts out of the action box shows here, where clipped actions cannot show it),
and ``action_log_std``: the mean of its ``log sigma(s)`` (a policy that collapses, or is held wide, shows here).

Each run writes ``OUT/records/ENV/diagnostics/ALGO_seedN.csv`` (``benchmarks/recorders.py``: one row per evaluation
point, joined to ``ENV.csv`` by algo, seed and steps); ``python -m benchmarks run ... --plot-diagnostics KEY ...``
(also with ``--summarize``) draws ``ENV_diagnostics.png``: the return curve with one panel per key under it.
"""

import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch as th
from gymnasium import spaces
from stable_baselines3.common.logger import KVWriter
from stable_baselines3.common.policies import ActorCriticPolicy

from benchmarks.output import EvalPoint
from benchmarks.plot import plot_panels
from benchmarks.recorders import DIAGNOSTICS, ROW_KEYS, Recorder, read_records, record_path

LOGGED_PREFIXES = ("train/", "rollout/", "collector/")
MAX_OBSERVATIONS = 4096  # of an evaluation, for action_mean_abs and action_log_std


class LoggedValues(KVWriter):
    """
    An SB3 logger output that keeps every numeric value of the logged prefixes the logger dumps, and those an
    evaluation takes before their dump (``take``): a value taken so is not counted again when it is dumped (unless
    the algorithm recorded its key anew, with another value, in between).
    """

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = defaultdict(list)
        self.taken: dict[str, Any] = {}

    def add(self, key_values: dict[str, Any]) -> dict[str, Any]:
        """Keep the logged numeric values of ``key_values`` not taken yet; returns all of them."""
        numbers = (int, float, np.integer, np.floating)
        logged = {k: v for k, v in key_values.items() if k.startswith(LOGGED_PREFIXES) and isinstance(v, numbers)}
        for key, value in logged.items():
            if self.taken.get(key) != value:
                self.values[key].append(float(value))
        return logged

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        self.add(key_values)
        self.taken = {}

    def take(self, recorded: dict[str, Any]) -> dict[str, float]:
        """Each key's mean over the values dumped since the last call and ``recorded`` (the logger's, not dumped)."""
        self.taken.update(self.add(recorded))
        means = {key: float(np.mean(values)) for key, values in sorted(self.values.items()) if values}
        self.values.clear()
        return means

    def close(self) -> None:
        """Nothing to release."""


def action_gaussian(policy: Any, observations: np.ndarray) -> tuple[th.Tensor, th.Tensor | None] | None:
    """
    ``(mean, log_std)`` of the policy's action distribution over ``observations``, before any clipping or squashing:
    the Gaussian of SB3's actor-critic policies, of SAC's actor (before tanh) or V-RACER's; TD3's deterministic
    action (scaled to [-1, 1]) with no ``log_std``. None for a policy whose Gaussian needs more than the observation
    (a recurrent policy's hidden state) or that has none.
    """
    if policy.__class__.__name__.startswith("Recurrent") or "Lstm" in policy.__class__.__name__:
        return None
    with th.no_grad():
        obs_tensor, _ = policy.obs_to_tensor(observations)
        if isinstance(policy, ActorCriticPolicy):
            distribution = policy.get_distribution(obs_tensor).distribution
            if not isinstance(distribution, th.distributions.Normal):
                return distribution.mean, None
            return distribution.mean, distribution.stddev.log()
        if hasattr(policy, "forward_parts"):  # V-RACER
            return tuple(policy.forward_parts(obs_tensor)[:2])  # type: ignore[return-value]
        if hasattr(policy, "actor") and hasattr(policy.actor, "get_action_dist_params"):  # SAC
            return tuple(policy.actor.get_action_dist_params(obs_tensor)[:2])  # type: ignore[return-value]
        if hasattr(policy, "actor"):  # TD3
            return policy.actor(obs_tensor), None
    return None


def action_mean_abs(policy: Any, observations: np.ndarray) -> float:
    """Mean ``|mu(s)|`` over ``observations`` and the action's dimensions (:func:`action_gaussian`); NaN without one."""
    gaussian = action_gaussian(policy, observations)
    return float("nan") if gaussian is None else float(gaussian[0].abs().mean().item())


def action_log_std(policy: Any, observations: np.ndarray) -> float:
    """
    Mean ``log sigma(s)`` over ``observations`` and the action's dimensions: the policy's width (its entropy less a
    constant, per dimension, before squashing), which shows a collapse or a policy held wide. NaN without one.
    """
    gaussian = action_gaussian(policy, observations)
    return float("nan") if gaussian is None or gaussian[1] is None else float(gaussian[1].mean().item())


class DiagnosticsRecorder(Recorder):
    """Attached to every run: the logger's values, ``action_mean_abs`` and ``action_log_std`` at every evaluation point."""

    name = DIAGNOSTICS
    algo = ""  # every algorithm

    def __init__(self, algo: str, seed: int) -> None:
        super().__init__(algo, seed)
        self.logged = LoggedValues()
        self.observations: list[np.ndarray] = []

    def _on_training_start(self) -> None:
        self.model.logger.output_formats.append(self.logged)

    def wants_observations(self) -> bool:
        return isinstance(self.model.action_space, spaces.Box)

    def observe(self, observation: Any) -> None:
        if len(self.observations) < MAX_OBSERVATIONS and isinstance(observation, np.ndarray):
            self.observations.append(np.array(observation))

    def on_evaluation(self) -> None:
        row = self.logged.take(self.model.logger.name_to_value)
        if self.wants_observations():
            observations = np.stack(self.observations) if self.observations else None
            for key, statistic in (("action_mean_abs", action_mean_abs), ("action_log_std", action_log_std)):
                row[key] = float("nan") if observations is None else statistic(self.model.policy, observations)
        self.observations = []
        self.add_row(**row)


def diagnostics_path(out: Path, env_id: str, algo: str, seed: int) -> Path:
    return record_path(out, env_id, DIAGNOSTICS, algo, seed)


def logged_key(rows: pd.DataFrame, name: str) -> str:
    """The column ``name`` stands for: itself, or the one logged key ending in ``/name`` (``entropy_loss``)."""
    if name in rows:
        return name
    matches = sorted(key for key in rows if key.endswith(f"/{name}"))
    if len(matches) != 1:
        found = ", ".join(matches) or "none; the runs logged " + ", ".join(sorted(set(rows) - set(ROW_KEYS)))
        raise ValueError(f"diagnostic {name!r}: {'ambiguous, ' if matches else ''}{found}")
    return matches[0]


def plot_diagnostics(out: Path, env_id: str, points: list[EvalPoint], names: list[str]) -> Path | None:
    """
    ``OUT/ENV_diagnostics.png``: the evaluation return against env steps, and under it one panel per diagnostic in
    ``names`` (a logged key or its last part). Nothing where the runs stored no diagnostics.

    The figure is drawn again after every finished run, so a name that the runs finished so far did not log (a key
    only another algo of the invocation logs, or a typo) or that is ambiguous gets a warning naming what they logged,
    and the figure has the other panels: a figure never ends an invocation whose runs are still going
    (``--summarize`` draws it again from the stored runs).
    """
    rows = read_records(out, env_id, DIAGNOSTICS)
    if rows.empty or not names:
        return None
    keys = []
    for name in names:
        try:
            keys.append(logged_key(rows, name))
        except ValueError as error:
            warnings.warn(f"{env_id}_diagnostics.png has no panel for {error}", stacklevel=2)
    if not keys:
        return None
    path = out / f"{env_id}_diagnostics.png"
    plot_panels(points, rows, keys, path, env_id)
    return path
