"""Learner-side storage: segments as tensors, IMPACT's circular buffer, and the behaviour-recording rollout buffer."""

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import TensorDict

from sb3_impact.common.observations import (
    Observation,
    concatenate_observations,
    merge_time_and_envs,
    observations_to_tensor,
)
from sb3_impact.common.segments import Segment


@dataclass
class TrainingBatch:
    """
    One segment on the learner's device, ready for loss computation.

    Per-step tensors are time-major ``[T, B]``; ``observations``, ``actions`` and ``behaviour_params`` are
    flattened to ``[T * B, ...]`` in time-major order. ``bootstrap_observations`` holds the ``B`` observations
    after the segment followed by the final observations of truncated episodes
    (at the ``(t, env)`` positions in ``final_observation_indices``).
    """

    observations: th.Tensor | TensorDict
    actions: th.Tensor
    rewards: th.Tensor
    terminations: th.Tensor
    truncations: th.Tensor
    behaviour_log_probs: th.Tensor
    behaviour_params: th.Tensor
    bootstrap_observations: th.Tensor | TensorDict
    final_observation_indices: th.Tensor
    policy_version: int
    n_steps: int
    n_envs: int
    target_log_probs: th.Tensor | None = None
    target_params: th.Tensor | None = None
    value_targets: th.Tensor | None = None
    advantages: th.Tensor | None = None
    uses: int = 0
    last_use: bool = False

    @property
    def size(self) -> int:
        return self.n_steps * self.n_envs

    @classmethod
    def from_segment(cls, segment: Segment, device: th.device) -> "TrainingBatch":
        def to_tensor(array: np.ndarray) -> th.Tensor:
            return th.as_tensor(array, device=device)

        bootstrap = segment.next_observations
        if segment.final_observations is not None:
            bootstrap = concatenate_observations([bootstrap, segment.final_observations])
        return cls(
            observations=observations_to_tensor(segment.observations, device, merge_time=True),
            actions=merge_time_and_envs(to_tensor(segment.actions)),
            rewards=to_tensor(segment.rewards),
            terminations=to_tensor(segment.terminations),
            truncations=to_tensor(segment.truncations),
            behaviour_log_probs=to_tensor(segment.behaviour_log_probs),
            behaviour_params=merge_time_and_envs(to_tensor(segment.behaviour_params)),
            bootstrap_observations=observations_to_tensor(bootstrap, device, merge_time=False),
            final_observation_indices=to_tensor(segment.final_observation_indices),
            policy_version=segment.policy_version,
            n_steps=segment.n_steps,
            n_envs=segment.n_envs,
        )

    @th.no_grad()
    def bootstrap_values(self, policy: BasePolicy) -> tuple[th.Tensor, th.Tensor]:
        """``V(next observation)`` ``[B]`` and ``V(final observation)`` ``[T, B]`` (zero where not truncated)."""
        values = policy.predict_values(self.bootstrap_observations).flatten()  # type: ignore[attr-defined]
        final_values = th.zeros_like(self.rewards)
        indices = self.final_observation_indices
        if len(indices) > 0:
            final_values[indices[:, 0], indices[:, 1]] = values[self.n_envs :]
        return values[: self.n_envs], final_values


class CircularBuffer:
    """
    IMPACT's circular buffer C(N, K) (Algorithm 1; section 3.2): ``size`` slots, each batch used at most
    ``max_reuse`` times and then replaced by the next worker batch.

    The learner walks the slots in turn; when the slot under the cursor is empty it needs a new batch
    (:meth:`needs_batch`), which it waits for. Each batch is used ``max_reuse`` times, interleaved with the
    other ``size - 1`` batches, as PPO interleaves minibatches over epochs, except for the first ``size``
    batches: the j-th of them gets ``max_reuse - j * max_reuse // size`` uses, so that the slots fall empty
    one at a time and new batches are needed every ``max_reuse`` steps rather than ``size`` at once
    (a collector one segment ahead then never leaves the learner waiting for a burst).
    """

    def __init__(self, size: int, max_reuse: int) -> None:
        if size < 1:
            raise ValueError(f"circular_buffer_size must be >= 1, got {size}")
        if max_reuse < 1:
            raise ValueError(f"max_batch_reuse must be >= 1, got {max_reuse}")
        self.size = size
        self.max_reuse = max_reuse
        self._slots: list[TrainingBatch | None] = [None] * size
        self._allowed_uses = [0] * size
        self._cursor = 0
        self.batches_put = 0
        self.released_batches = 0
        self.released_uses = 0

    def needs_batch(self) -> bool:
        return self._slots[self._cursor] is None

    def put(self, batch: TrainingBatch) -> None:
        if not self.needs_batch():
            raise RuntimeError("the slot under the cursor still holds a batch")
        batch.uses = 0
        self._slots[self._cursor] = batch
        warm_up = self.batches_put < self.size
        self._allowed_uses[self._cursor] = self.max_reuse - (self.batches_put * self.max_reuse // self.size if warm_up else 0)
        self.batches_put += 1

    def next_batch(self) -> TrainingBatch:
        """The batch to train on now; its ``uses`` counts this use. Advances the cursor."""
        batch = self._slots[self._cursor]
        if batch is None:
            raise RuntimeError("next_batch() on an empty slot: put() a batch first")
        batch.uses += 1
        batch.last_use = batch.uses >= self._allowed_uses[self._cursor]
        if batch.last_use:
            self._slots[self._cursor] = None
            self.released_batches += 1
            self.released_uses += batch.uses
        self._cursor = (self._cursor + 1) % self.size
        return batch

    def __len__(self) -> int:
        return sum(slot is not None for slot in self._slots)


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
