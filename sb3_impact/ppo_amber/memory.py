"""
Multi-batch replay memory for PPO-style algorithms: the last ``capacity`` rollout batches, each with the
advantages, value targets and behaviour policy computed once at collection time, and uniform minibatches
drawn over any subset of them (AMBER's "active" batches; all of them for MBER).
"""

from collections import deque
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch as th
from stable_baselines3.common.type_aliases import DictRolloutBufferSamples, RolloutBufferSamples

from sb3_impact.common.observations import Observation, concatenate_observations
from sb3_impact.common.rollout_buffers import BehaviourRolloutBuffer, DictBehaviourRolloutBuffer


@dataclass
class StoredBatch:
    """
    One collected batch of ``size`` samples, flattened in SB3's rollout-buffer order (env-major, as
    ``RolloutBuffer.swap_and_flatten``), so that a permutation indexes the same samples as SB3's ``get()``.

    ``log_probs`` and ``behaviour_params`` describe the behaviour policy mu that collected the batch;
    ``advantages``, ``returns`` (value targets) and ``values`` are those computed at collection time.
    """

    observations: Observation
    actions: np.ndarray
    values: np.ndarray
    log_probs: np.ndarray
    advantages: np.ndarray
    returns: np.ndarray
    behaviour_params: np.ndarray

    @property
    def size(self) -> int:
        return len(self.actions)

    @classmethod
    def from_rollout_buffer(cls, rollout_buffer: BehaviourRolloutBuffer | DictBehaviourRolloutBuffer) -> "StoredBatch":
        """Copy a full behaviour-recording rollout buffer."""
        flatten = rollout_buffer.swap_and_flatten
        if isinstance(rollout_buffer.observations, dict):
            observations: Observation = {key: flatten(obs) for key, obs in rollout_buffer.observations.items()}
        else:
            observations = flatten(rollout_buffer.observations)
        return cls(
            observations=observations,
            # float32 as SB3's RolloutBuffer._get_samples returns them (integer actions would break MultiBinary)
            actions=flatten(rollout_buffer.actions).astype(np.float32, copy=False),
            values=flatten(rollout_buffer.values).flatten(),
            log_probs=flatten(rollout_buffer.log_probs).flatten(),
            advantages=flatten(rollout_buffer.advantages).flatten(),
            returns=flatten(rollout_buffer.returns).flatten(),
            behaviour_params=flatten(rollout_buffer.behaviour_params),
        )


class BatchReplayMemory:
    """
    The last ``capacity`` batches, newest first (index 0 is the batch collected last).

    :meth:`minibatches` draws, for one epoch, a permutation of all samples of the chosen batches and cuts
    it into minibatches of ``batch_size * len(batch_indices)`` samples, so an epoch always takes
    ``ceil(batch size / batch_size)`` gradient steps, whatever the number of batches used (AMBER,
    Algorithm 1, lines 17-23). With a single batch this is exactly SB3's ``RolloutBuffer.get(batch_size)``
    (same ``np.random.permutation`` draw, same sample order).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"replay_length must be >= 1, got {capacity}")
        self.capacity = capacity
        self._batches: deque[StoredBatch] = deque(maxlen=capacity)
        self.batches_added = 0

    def add(self, batch: StoredBatch) -> None:
        """Store ``batch`` as the newest, dropping the oldest one when full."""
        self._batches.appendleft(batch)
        self.batches_added += 1

    def clear(self) -> None:
        self._batches.clear()

    def __len__(self) -> int:
        return len(self._batches)

    def __getitem__(self, index: int) -> StoredBatch:
        return self._batches[index]

    def __iter__(self) -> Iterator[StoredBatch]:
        return iter(self._batches)

    def minibatches(
        self, batch_indices: Sequence[int], batch_size: int, device: th.device
    ) -> Generator[RolloutBufferSamples | DictRolloutBufferSamples, None, None]:
        """One epoch of uniform minibatches over the batches at ``batch_indices`` (SB3's sample tuples)."""
        if not batch_indices:
            raise ValueError("minibatches() needs at least one batch")
        batches = [self._batches[index] for index in batch_indices]

        def to_torch(arrays: list[np.ndarray]) -> th.Tensor:
            # concatenated and copied to the device once per epoch; minibatches are index_select views of it
            return th.as_tensor(np.concatenate(arrays), device=device)

        observations = concatenate_observations([batch.observations for batch in batches])
        if isinstance(observations, dict):
            observations = {key: th.as_tensor(obs, device=device) for key, obs in observations.items()}
        else:
            observations = th.as_tensor(observations, device=device)
        columns = tuple(
            to_torch([getattr(batch, name) for batch in batches])
            for name in ("actions", "values", "log_probs", "advantages", "returns")
        )
        n_samples = len(columns[0])
        minibatch_size = batch_size * len(batches)
        indices = np.random.permutation(n_samples)
        for start in range(0, n_samples, minibatch_size):
            chosen = th.as_tensor(indices[start : start + minibatch_size], device=device)
            selected = tuple(column[chosen] for column in columns)
            if isinstance(observations, dict):
                yield DictRolloutBufferSamples({key: obs[chosen] for key, obs in observations.items()}, *selected)
            else:
                yield RolloutBufferSamples(observations[chosen], *selected)
