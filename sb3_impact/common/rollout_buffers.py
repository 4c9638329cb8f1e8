"""SB3 rollout buffers filled from a :class:`Segment` that also record the behaviour policy (PPO-AMBER, PTR-PPO)."""

from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer

from sb3_impact.common.observations import Observation
from sb3_impact.common.segments import Segment


class BehaviourRecordingMixin:
    """
    A rollout buffer (SB3's, mixed in before it) filled from a :class:`Segment`, recording what a replaying
    algorithm needs beside SB3's fields: the behaviour distribution's parameters, the environment's rewards
    (no time-limit bootstrap folded in), truncations and the final observations of truncated episodes with
    their values. :meth:`compute_returns_and_advantage` folds ``gamma * V(final observation)`` into the
    reward of each time-limit end, as SB3's ``collect_rollouts`` does before adding a step, so GAE and the
    value targets are SB3 PPO's.
    """

    buffer_size: int
    n_envs: int
    gamma: float
    obs_shape: Any
    action_dim: int

    def reset(self) -> None:
        super().reset()  # type: ignore[misc]
        self.behaviour_params = np.zeros((self.buffer_size, self.n_envs, 0), dtype=np.float32)
        self.truncations = np.zeros((self.buffer_size, self.n_envs), dtype=bool)
        self.final_values = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.segment: Segment | None = None

    def _reshape_observations(self, observations: Observation) -> Observation:
        if isinstance(observations, dict):
            return {
                key: np.asarray(value).reshape(self.buffer_size, self.n_envs, *self.obs_shape[key])
                for key, value in observations.items()
            }
        return np.asarray(observations).reshape(self.buffer_size, self.n_envs, *self.obs_shape)

    def add_segment(
        self, segment: Segment, values: np.ndarray, final_values: np.ndarray, first_episode_starts: np.ndarray
    ) -> None:
        """
        Fill the buffer with ``segment`` (``n_steps`` = ``buffer_size``), ``values`` ``[T, E]`` of its observations
        and ``final_values`` ``[T, E]`` (V of the final observation where truncated, else 0), both from the
        policy that will train on it; ``first_episode_starts`` are the dones before the segment's first step.
        """
        if segment.n_steps != self.buffer_size or segment.n_envs != self.n_envs:
            raise ValueError(
                f"segment of {segment.n_steps} x {segment.n_envs} steps for a buffer of {self.buffer_size} x {self.n_envs}"
            )
        self.reset()
        observations = self._reshape_observations(segment.observations)
        if isinstance(observations, dict):
            for key, value in observations.items():
                self.observations[key][:] = value  # type: ignore[index]
        else:
            self.observations[:] = observations  # type: ignore[index]
        self.actions[:] = segment.actions.reshape(self.buffer_size, self.n_envs, self.action_dim)
        self.rewards[:] = segment.rewards
        self.episode_starts[0] = first_episode_starts
        self.episode_starts[1:] = segment.dones[:-1]
        self.values[:] = values
        self.log_probs[:] = segment.behaviour_log_probs
        self.behaviour_params = segment.behaviour_params.astype(np.float32, copy=False)
        self.truncations[:] = segment.truncations
        self.final_values[:] = final_values
        self.segment = segment
        self.pos = self.buffer_size
        self.full = True

    def compute_returns_and_advantage(self, last_values: th.Tensor, dones: np.ndarray) -> None:
        rewards = self.rewards
        self.rewards = rewards + np.where(self.truncations, self.gamma * self.final_values, 0.0).astype(np.float32)
        try:
            super().compute_returns_and_advantage(last_values, dones)  # type: ignore[misc]
        finally:
            self.rewards = rewards


class BehaviourRolloutBuffer(BehaviourRecordingMixin, RolloutBuffer):
    """SB3's ``RolloutBuffer`` with behaviour recording (see :class:`BehaviourRecordingMixin`)."""


class DictBehaviourRolloutBuffer(BehaviourRecordingMixin, DictRolloutBuffer):
    """SB3's ``DictRolloutBuffer`` with behaviour recording (see :class:`BehaviourRecordingMixin`)."""
