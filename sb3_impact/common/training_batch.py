"""The learner's view of one collected segment: :class:`TrainingBatch`, its tensors on the learner's device."""

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch as th
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.type_aliases import TensorDict

from sb3_impact.common.observations import (
    concatenate_observations,
    index_observation,
    merge_time_and_envs,
    observations_to_tensor,
)
from sb3_impact.common.policy_evaluation import evaluate_policy_and_values
from sb3_impact.common.recurrent import RecurrentOutput, lstm_states_from_numpy, recurrent_forward, select_envs
from sb3_impact.common.segments import Segment


class Minibatch(NamedTuple):
    """Samples of a :class:`TrainingBatch` (``indices`` into its flat time-major ``[T * B]`` samples), flat."""

    indices: slice | th.Tensor
    observations: th.Tensor | TensorDict
    actions: th.Tensor
    behaviour_log_probs: th.Tensor
    envs: slice | th.Tensor = slice(None)  # recurrent batches: the whole env columns the samples are


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

    A batch collected with a recurrent policy also holds ``episode_starts`` ``[T, B]`` (float) and the LSTM states
    the segment started from (``lstm_states``); its minibatches are then whole env columns, replayed through the
    LSTMs from those states (:meth:`evaluate`, :meth:`bootstrap_values`).
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
    episode_starts: th.Tensor | None = None
    lstm_states: RNNStates | None = None
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
            episode_starts=None if segment.episode_starts is None else to_tensor(segment.episode_starts).float(),
            lstm_states=None if segment.lstm_states is None else lstm_states_from_numpy(segment.lstm_states, device),
        )

    @property
    def recurrent(self) -> bool:
        return self.lstm_states is not None

    def evaluate(self, policy: ActorCriticPolicy, minibatch: Minibatch | None = None) -> tuple[Distribution, th.Tensor]:
        """
        ``policy``'s action distribution and values ``[N]`` on ``minibatch`` (None: the whole batch), one feature
        pass for both heads. A recurrent batch's env columns are replayed from their stored LSTM states.
        """
        minibatch = self.minibatch(slice(None)) if minibatch is None else minibatch
        if not self.recurrent:
            return evaluate_policy_and_values(policy, minibatch.observations)
        output = self._replay(policy, minibatch, actor=True)
        return policy._get_action_dist_from_latent(output.latent_pi), policy.value_net(output.latent_vf).flatten()

    def predict_values(self, policy: ActorCriticPolicy, minibatch: Minibatch | None = None) -> th.Tensor:
        """``policy``'s values ``[N]`` on ``minibatch`` (None: the whole batch), without the actor where it can."""
        minibatch = self.minibatch(slice(None)) if minibatch is None else minibatch
        if not self.recurrent:
            return policy.predict_values(minibatch.observations).flatten()
        return policy.value_net(self._replay(policy, minibatch, actor=False).latent_vf).flatten()

    def _replay(self, policy: ActorCriticPolicy, minibatch: Minibatch, actor: bool) -> RecurrentOutput:
        """The recurrent policy over the minibatch's env columns, from their stored LSTM states."""
        assert self.lstm_states is not None and self.episode_starts is not None
        return recurrent_forward(
            policy,  # type: ignore[arg-type]
            minibatch.observations,
            select_envs(self.lstm_states, minibatch.envs),
            self.episode_starts[:, minibatch.envs],
            actor=actor,
        )

    @th.no_grad()
    def bootstrap_values(self, policy: BasePolicy) -> tuple[th.Tensor, th.Tensor]:
        """``V(next observation)`` ``[B]`` and ``V(final observation)`` ``[T, B]`` (zero where not truncated)."""
        if self.recurrent:
            replay = self._replay_whole_segment(policy, actor=False)  # type: ignore[arg-type]
            return self._values_after(policy, replay)  # type: ignore[arg-type]
        return self._spread_bootstrap_values(policy.predict_values(self.bootstrap_observations).flatten())  # type: ignore[attr-defined]

    @th.no_grad()
    def evaluate_with_bootstrap(self, policy: ActorCriticPolicy) -> tuple[Distribution, th.Tensor, th.Tensor, th.Tensor]:
        """
        :meth:`evaluate` on the whole batch and :meth:`bootstrap_values`, without gradients and with ``policy`` in
        the mode it is in (IMPACT's target network: evaluation mode). A recurrent batch is replayed once for both:
        the bootstrap values continue from the LSTM states of the same replay.
        """
        if not self.recurrent:
            return (*self.evaluate(policy), *self.bootstrap_values(policy))
        replay = self._replay_whole_segment(policy, actor=True)
        distribution = policy._get_action_dist_from_latent(replay.latent_pi)
        return (distribution, policy.value_net(replay.latent_vf).flatten(), *self._values_after(policy, replay))

    def _spread_bootstrap_values(self, values: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """``[B + F]`` values of the bootstrap observations -> ``V(next)`` ``[B]`` and ``V(final)`` ``[T, B]``."""
        final_values = th.zeros_like(self.rewards)
        indices = self.final_observation_indices
        if len(indices) > 0:
            final_values[indices[:, 0], indices[:, 1]] = values[self.n_envs :]
        return values[: self.n_envs], final_values

    def _replay_whole_segment(self, policy: ActorCriticPolicy, actor: bool) -> RecurrentOutput:
        """The recurrent policy over the whole segment, keeping the states after each time-limit end ``(t, env)``."""
        assert self.lstm_states is not None and self.episode_starts is not None
        indices = self.final_observation_indices.cpu().numpy()
        return recurrent_forward(
            policy,  # type: ignore[arg-type]
            self.observations,
            self.lstm_states,
            self.episode_starts,
            actor=actor,
            keep_after=indices if len(indices) else None,
        )

    def _values_after(self, policy: ActorCriticPolicy, replay: RecurrentOutput) -> tuple[th.Tensor, th.Tensor]:
        """
        Bootstrap values from a whole-segment replay: ``V`` of the observations after the segment, from the states
        after its last step (zeroed where an episode ended there), then of each final observation of a time-limit
        end ``(t, env)``, from the states after step ``t`` (the episode goes on into it).
        """
        ended = (self.terminations[-1] | self.truncations[-1]).float().view(1, -1)
        after = recurrent_forward(
            policy,  # type: ignore[arg-type]
            index_observation(self.bootstrap_observations, slice(0, self.n_envs)),
            replay.states,
            ended,
            actor=False,
        )
        parts = [policy.value_net(after.latent_vf).flatten()]
        if replay.kept_states is not None:
            final = recurrent_forward(
                policy,  # type: ignore[arg-type]
                index_observation(self.bootstrap_observations, slice(self.n_envs, None)),
                replay.kept_states,
                th.zeros(1, len(self.final_observation_indices), device=self.rewards.device),
                actor=False,
            )
            parts.append(policy.value_net(final.latent_vf).flatten())
        return self._spread_bootstrap_values(th.cat(parts))

    def minibatch_indices(self, batch_size: int | None) -> list[slice | th.Tensor]:
        """
        One pass over the batch in shuffled minibatches of ``batch_size`` samples: indices into its time-major
        ``[T * B]`` samples (``[slice(None)]``: the whole batch in one step, also when ``batch_size`` is None). The
        permutation is drawn over env-major positions, the order of SB3's rollout buffer, so that a seeded run takes
        the same minibatches as SB3's PPO.

        A recurrent batch's minibatches are whole env columns, ``batch_size // n_steps`` of them, each minibatch's
        indices time-major over its columns (``[T, b]`` flattened; its first ``b`` entries are the columns).
        """
        if batch_size is None or batch_size >= self.size:
            return [slice(None)]
        if self.recurrent:
            columns = max(batch_size // self.n_steps, 1)
            permutation = th.as_tensor(np.random.permutation(self.n_envs), device=self.rewards.device)
            steps = th.arange(self.n_steps, device=self.rewards.device).view(-1, 1) * self.n_envs
            return [
                (steps + permutation[start : start + columns].view(1, -1)).flatten()
                for start in range(0, self.n_envs, columns)
            ]
        env_major = np.random.permutation(self.size)
        time_major = (env_major % self.n_steps) * self.n_envs + env_major // self.n_steps
        indices = th.as_tensor(time_major, device=self.rewards.device)
        return [indices[start : start + batch_size] for start in range(0, self.size, batch_size)]

    def minibatch(self, indices: slice | th.Tensor) -> Minibatch:
        """The samples ``indices`` (from :meth:`minibatch_indices`) of the batch."""
        envs: slice | th.Tensor = slice(None)
        if self.recurrent and isinstance(indices, th.Tensor):  # whole columns, time-major: the first row names them
            envs = indices[: len(indices) // self.n_steps]
        return Minibatch(
            indices,
            index_observation(self.observations, indices),
            self.actions[indices],
            self.behaviour_log_probs.flatten()[indices],
            envs,
        )
