"""The segment: what every collector hands to every learner, whatever the algorithm."""

from dataclasses import dataclass, field
from typing import Any

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
    def dones(self) -> np.ndarray:
        return self.terminations | self.truncations

    def observation_after(self, step: int) -> Observation:
        """Observation returned by the VecEnv after vector step ``step`` (the ``new_obs`` of SB3's loop)."""
        if step + 1 < self.n_steps:
            return index_observation(self.observations, step + 1)
        return self.next_observations
