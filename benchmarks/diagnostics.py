"""
What every benchmark run stores beside its returns, so that a collapse can be seen rather than inferred: at each
evaluation point, the SB3 logger's ``train/``, ``rollout/`` and ``collector/`` values that the algorithm wrote since
the previous point (each the mean over the values dumped in between and those recorded since the last dump, each
counted once: entropy, approximate KL, clip fraction, learning rate, value loss, PPO-AMBER's active batches,
PTR-PPO's replay share and importance ratios, ...), and, for ``Box`` actions, ``action_mean_abs``: the mean over the
evaluation's observations and the action's dimensions of ``|mu(s)|``, the policy's Gaussian mean before any
clipping or squashing (a mean that drifts out of the action box shows here, where clipped actions cannot show it).

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
MAX_OBSERVATIONS = 4096  # of an evaluation, for action_mean_abs


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
            row["action_mean_abs"] = (
                action_mean_abs(self.model.policy, np.stack(self.observations)) if self.observations else float("nan")
            )
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
