"""The segment: what every collector hands to every learner, whatever the algorithm, and how it enters a memory."""

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from sb3_impact.common.observations import Observation, index_observation


@dataclass
class Segment:
    """
    ``n_steps`` consecutive vector steps of ``n_envs`` environments, collected with one policy version.

    Arrays are time-major ``[n_steps, n_envs, ...]``. ``observations[t]`` is the observation the action
    ``actions[t]`` was taken in; ``next_observations`` is the observation after the last step (used for the
    bootstrap at learning time). Where an episode was truncated by a time limit at ``(t, env)``, the real
    last observation of that episode is ``final_observations[i]`` with ``final_observation_indices[i] == (t, env)``
    (the observation stored at ``t + 1`` already belongs to the next episode).

    ``env_ids`` says which environments the columns are among all those of the collector (the Ray collector:
    ``worker index * envs_per_worker + j``); None means ``0 .. n_envs - 1``, one VecEnv. ``envs_reset`` is True
    when those environments were built and reset just before this segment (a new Ray worker, or the
    replacement of a failed one): an episode of those ids left open by earlier segments ended unfinished there.

    With a recurrent policy, ``episode_starts`` ``[T, B]`` says which observations start an episode (the LSTM
    states are zeroed before them) and ``lstm_states`` holds the states the segment started from (actor hidden and
    cell, critic hidden and cell, each ``[layers, B, H]``); both are None otherwise.
    """

    observations: Observation
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    behaviour_log_probs: np.ndarray
    behaviour_params: np.ndarray
    next_observations: Observation
    final_observations: Observation | None
    final_observation_indices: np.ndarray
    infos: list[list[dict[str, Any]]]
    policy_version: int
    collect_seconds: float = 0.0
    extras: dict[str, Any] = field(default_factory=dict)
    env_ids: np.ndarray | None = None
    envs_reset: bool = False
    episode_starts: np.ndarray | None = None
    lstm_states: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def n_steps(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def n_envs(self) -> int:
        return int(self.rewards.shape[1])

    @property
    def size(self) -> int:
        """Number of environment steps in the segment."""
        return self.n_steps * self.n_envs

    @property
    def column_env_ids(self) -> np.ndarray:
        """The id of each column's environment (``env_ids``, or ``0 .. n_envs - 1``)."""
        return np.arange(self.n_envs) if self.env_ids is None else self.env_ids

    @property
    def dones(self) -> np.ndarray:
        return self.terminations | self.truncations

    def observation_after(self, step: int) -> Observation:
        """Observation returned by the VecEnv after vector step ``step`` (the ``new_obs`` of SB3's loop)."""
        if step + 1 < self.n_steps:
            return index_observation(self.observations, step + 1)
        return self.next_observations


@dataclass
class SegmentValues:
    """The learner's value estimates of a segment's steps when it enters a memory, time-major ``[T, B]``."""

    values: np.ndarray  # V(s_t)
    final_values: np.ndarray  # V(final observation) where an episode was truncated at (t, env), zero elsewhere


@runtime_checkable
class SegmentMemory(Protocol):
    """
    How a segment enters a replay memory, the same for every memory fed by the segment loop (the algorithm's
    ``_store_segment`` or ``train`` calls it): PTR-PPO's trajectory memory
    (:class:`~sb3_impact.ptr_ppo.memory.TrajectoryMemory`) and V-RACER's episode memory
    (:class:`~sb3_impact.vracer.memory.EpisodeReplayMemory`).
    """

    def add_segment(self, segment: Segment, values: SegmentValues | None = None) -> np.ndarray:
        """
        Store ``segment``; ``values`` are the learner's estimates of its steps, for a memory that keeps them (V-RACER's,
        for its Retrace targets) and None for one that scores what it replays with the network of that replay
        (PTR-PPO's).

        :return: the memory slots the segment's steps were written to, in the memory's own unit (a slot per
            segment column for PTR-PPO, a slot per step for V-RACER), in the order they were written
        """
