"""The learner's view of one collected segment: :class:`TrainingBatch`, its tensors on the learner's device."""

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch as th
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import TensorDict

from sb3_impact.common.observations import (
    concatenate_observations,
    index_observation,
    merge_time_and_envs,
    observations_to_tensor,
)
from sb3_impact.common.segments import Segment


class Minibatch(NamedTuple):
    """Samples of a :class:`TrainingBatch` (``indices`` into its flat time-major ``[T * B]`` samples), flat."""

    indices: slice | th.Tensor
    observations: th.Tensor | TensorDict
    actions: th.Tensor
    behaviour_log_probs: th.Tensor


@dataclass
class TrainingBatch:
    """
    One segment on the learner's device, ready for loss computation.

    Per-step tensors are time-major ``[T, B]``; ``observations``, ``actions`` and ``behaviour_params`` are
    flattened to ``[T * B, ...]`` in time-major order. ``bootstrap_observations`` holds the ``B`` observations
    after the segment followed by the final observations of truncated episodes
    (at the ``(t, env)`` positions in ``final_observation_indices``). ``targets`` is the algorithm's own record of
    per-batch targets when it keeps them over several uses (IMPACT's, set at the batch's first use); ``uses`` and
    ``last_use`` are the circular buffer's count.
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
    targets: Any = None
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

    def minibatch_indices(self, batch_size: int | None) -> list[slice | th.Tensor]:
        """
        One pass over the batch in shuffled minibatches of ``batch_size`` samples: indices into its time-major
        ``[T * B]`` samples (``[slice(None)]``: the whole batch in one step, also when ``batch_size`` is None). The
        permutation is drawn over env-major positions, the order of SB3's rollout buffer, so that a seeded run takes
        the same minibatches as SB3's PPO.
        """
        if batch_size is None or batch_size >= self.size:
            return [slice(None)]
        env_major = np.random.permutation(self.size)
        time_major = (env_major % self.n_steps) * self.n_envs + env_major // self.n_steps
        indices = th.as_tensor(time_major, device=self.rewards.device)
        return [indices[start : start + batch_size] for start in range(0, self.size, batch_size)]

    def minibatch(self, indices: slice | th.Tensor) -> Minibatch:
        """The samples ``indices`` (from :meth:`minibatch_indices`) of the batch."""
        return Minibatch(
            indices,
            index_observation(self.observations, indices),
            self.actions[indices],
            self.behaviour_log_probs.flatten()[indices],
        )
