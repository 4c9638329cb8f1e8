"""PTR-PPO's priority memory: fixed-length trajectory segments in FIFO slots, sampled through a sum-tree."""

import numpy as np
import torch as th
from stable_baselines3.common.utils import get_device

from sb3_impact.common.observations import Observation, index_observation, map_observation, stack_observations
from sb3_impact.common.segments import Segment, SegmentValues
from sb3_impact.common.training_batch import TrainingBatch
from sb3_impact.ptr_ppo.sum_tree import SumTree

# Added to every priority, as PER's proportional variant does (paper section 2.2): a segment whose
# |GAE| or normalised return is 0 keeps a small chance of being replayed.
PRIORITY_EPS = 1e-6
# Segment returns are sums of float32 rewards: differences below this fraction of the mean return are
# rounding, not signal.
RETURN_STD_FLOOR = 1e-4


def _allocate(template: Observation | np.ndarray, capacity: int) -> Observation | np.ndarray:
    """Zeroed slot storage ``[capacity, ...]`` for entries shaped like ``template[i]``."""
    return map_observation(template, lambda value: np.zeros((capacity, *value.shape[1:]), dtype=value.dtype))


def _assign(storage: Observation | np.ndarray, slots: np.ndarray, values: Observation | np.ndarray) -> None:
    if isinstance(storage, dict):
        for key in storage:
            storage[key][slots] = values[key]  # type: ignore[index]
    else:
        storage[slots] = values


def _env_major(array: Observation | np.ndarray) -> Observation | np.ndarray:
    """``[T, B, ...]`` to ``[B, T, ...]`` (each entry of a dict)."""
    return map_observation(array, lambda value: np.ascontiguousarray(np.swapaxes(value, 0, 1)))


# The per-step fields of a Segment that the memory stores, per slot ([T, ...] each).
STEP_FIELDS = ("actions", "rewards", "terminations", "truncations", "behaviour_log_probs", "behaviour_params")


class RunningReturnStatistics:
    """Mean and standard deviation of segment returns, Welford's update as in eq. (14)."""

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self.sum_squared_deviations = 0.0  # the paper's sigma^2 recursion accumulates this (M2)

    @property
    def std(self) -> float:
        return float(np.sqrt(self.sum_squared_deviations / self.count)) if self.count > 0 else 0.0

    def update(self, returns: np.ndarray) -> None:
        for value in np.asarray(returns, dtype=np.float64).reshape(-1):
            self.count += 1
            previous_mean = self.mean
            self.mean = previous_mean + (value - previous_mean) / self.count
            self.sum_squared_deviations += (value - previous_mean) * (value - self.mean)

    def normalised_priorities(self, returns: np.ndarray) -> np.ndarray:
        """
        ``|(R - mean) / std|`` (eq. 14); 0 while the standard deviation is below ``RETURN_STD_FLOOR`` relative to
        the mean return (e.g. CartPole, where every segment returns ``n_steps``: rounding noise must not be
        blown up into priorities).
        """
        std = self.std
        if std <= RETURN_STD_FLOOR * max(1.0, abs(self.mean)):
            return np.zeros_like(np.asarray(returns, dtype=np.float64))
        return np.abs((np.asarray(returns, dtype=np.float64) - self.mean) / std)


class TrajectoryMemory:
    """
    ``capacity`` segment slots, overwritten first-in first-out, sampled with probability
    ``p^alpha / sum_k p_k^alpha`` (eq. 2) through a :class:`SumTree`.

    A slot holds one environment's column of a :class:`~sb3_impact.common.segments.Segment`: its ``T`` steps,
    the observation after them, the final observations of its time-limit ends and the policy version
    that collected it. :meth:`add_segment` (the :class:`~sb3_impact.common.segments.SegmentMemory` interface) takes a
    segment of ``B`` environments into ``B`` slots; :meth:`get` returns slots as one segment with an environment per
    slot, and :meth:`batch` the same as a :class:`~sb3_impact.common.training_batch.TrainingBatch` on the learner's
    device. Storage is allocated at the first :meth:`add_segment`, with the shapes and dtypes of the segment given.

    :param capacity: the number of segments kept (the paper's memory size)
    :param priority_alpha: the exponent alpha (0: uniform sampling)
    :param device: the device of the learner it feeds (:meth:`batch`; the memory itself is numpy)
    """

    def __init__(self, capacity: int, priority_alpha: float, device: th.device | str = "auto") -> None:
        self.capacity = int(capacity)
        self.priority_alpha = float(priority_alpha)
        self.device = get_device(device)
        self.tree = SumTree(self.capacity)
        self.priorities = np.zeros(self.capacity, dtype=np.float64)  # raw p, before the exponent
        self.returns = np.zeros(self.capacity, dtype=np.float64)  # undiscounted segment returns
        self.insertion_number = np.full(self.capacity, -1, dtype=np.int64)  # -1: empty slot
        self.policy_versions = np.zeros(self.capacity, dtype=np.int64)
        self.return_statistics = RunningReturnStatistics()
        self.size = 0
        self.inserted = 0  # segments ever added
        self.overwritten = 0  # segments dropped by the FIFO
        self.n_steps: int | None = None
        self._next_slot = 0
        self._storage: dict[str, Observation | np.ndarray] | None = None  # [capacity, T, ...] per field
        self._final_observations: list[dict[int, Observation]] = [{} for _ in range(self.capacity)]

    def __len__(self) -> int:
        return self.size

    def add_segment(self, segment: Segment, values: SegmentValues | None = None) -> np.ndarray:
        """
        Store the ``n_envs`` columns of ``segment`` in the next FIFO slots (their priority is 0 until
        :meth:`update_priorities`), and update the running return statistics with their returns (eq. 14, on
        insertion only).

        :param values: must be None: the memory keeps no value estimates, a replay scores its segments with the
            network of that replay
        :return: the slots, in the order of the segment's environments (only the last ``capacity`` of them
            when there are more)
        """
        if values is not None:
            raise ValueError("TrajectoryMemory keeps no value estimates: a replay scores its segments itself")
        columns: dict[str, Observation | np.ndarray] = {
            "observations": _env_major(segment.observations),
            "next_observations": segment.next_observations,
            **{name: _env_major(getattr(segment, name)) for name in STEP_FIELDS},
        }
        if self._storage is None:
            self._storage = {name: _allocate(value, self.capacity) for name, value in columns.items()}
            self.n_steps = segment.n_steps
        elif segment.n_steps != self.n_steps:
            raise ValueError(f"segments have {segment.n_steps} steps, the memory holds {self.n_steps}")
        finals: list[dict[int, Observation]] = [{} for _ in range(segment.n_envs)]
        for index, (step, env) in enumerate(segment.final_observation_indices):
            assert segment.final_observations is not None
            finals[env][int(step)] = index_observation(segment.final_observations, index)
        count = segment.n_envs
        slots = (self._next_slot + np.arange(count)) % self.capacity
        kept = np.arange(max(0, count - self.capacity), count)  # sequential FIFO insertion keeps the last ones
        slots = slots[kept]
        self.overwritten += max(0, self.size + count - self.capacity)
        for name, value in columns.items():
            _assign(self._storage[name], slots, index_observation(value, kept))
        for slot, env in zip(slots, kept, strict=True):
            self._final_observations[slot] = finals[env]
        segment_returns = columns["rewards"][kept].astype(np.float64).sum(axis=1)  # type: ignore[index]
        self.returns[slots] = segment_returns
        self.return_statistics.update(segment_returns)
        self.policy_versions[slots] = segment.policy_version
        self.insertion_number[slots] = self.inserted + kept
        self.update_priorities(slots, np.zeros(len(slots)))
        self._next_slot = int((self._next_slot + count) % self.capacity)
        self.size = min(self.capacity, self.size + count)
        self.inserted += count
        return slots

    def get(self, slots: np.ndarray) -> Segment:
        """The segments in ``slots`` (copies) as one time-major segment, one environment per slot, in that order."""
        if self._storage is None:
            raise RuntimeError("the memory is empty")
        slots = np.asarray(slots, dtype=np.int64)
        if np.any(self.insertion_number[slots] < 0):
            raise IndexError(f"empty slots among {slots}")
        storage = self._storage
        positions = [(step, column) for column, slot in enumerate(slots) for step in sorted(self._final_observations[slot])]
        finals = [self._final_observations[slots[column]][step] for step, column in positions]
        n_steps = int(self.n_steps or 0)
        return Segment(
            observations=_env_major(index_observation(storage["observations"], slots)),
            next_observations=index_observation(storage["next_observations"], slots),
            **{name: _env_major(storage[name][slots]) for name in STEP_FIELDS},  # type: ignore[index]
            final_observations=stack_observations(finals) if finals else None,
            final_observation_indices=np.asarray(positions, dtype=np.int64).reshape(-1, 2),
            infos=[[{} for _ in slots] for _ in range(n_steps)],
            policy_version=int(self.policy_versions[slots].min()),
        )

    def batch(self, slots: np.ndarray) -> TrainingBatch:
        """The segments in ``slots`` (:meth:`get`) as one batch on the memory's device, one environment per slot."""
        return TrainingBatch.from_segment(self.get(slots), self.device)

    def sample(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """``batch_size`` slots drawn proportionally to ``p^alpha`` (stratified, with replacement)."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty memory")
        return self.tree.sample(batch_size, rng, stratified=True)

    def update_priorities(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        """Set the raw priorities ``p`` of ``slots``; the tree holds ``(p + PRIORITY_EPS)^alpha``."""
        priorities = np.asarray(priorities, dtype=np.float64)
        if not np.all(np.isfinite(priorities)) or np.any(priorities < 0):
            raise ValueError(f"priorities must be finite and >= 0, got {priorities}")
        self.priorities[slots] = priorities
        self.tree.update(slots, (priorities + PRIORITY_EPS) ** self.priority_alpha)

    def reward_priorities(self, slots: np.ndarray) -> np.ndarray:
        """The "reward" priority of ``slots`` under the current return statistics (eq. 14)."""
        return self.return_statistics.normalised_priorities(self.returns[slots])

    def filled_slots(self) -> np.ndarray:
        """The occupied slots, oldest segment first (the paper's heatmap order)."""
        filled = np.flatnonzero(self.insertion_number >= 0)
        return filled[np.argsort(self.insertion_number[filled], kind="stable")]
