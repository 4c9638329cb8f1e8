"""PTR-PPO's priority memory: fixed-length trajectory segments in FIFO slots, sampled through a sum-tree."""

from dataclasses import dataclass, field

import numpy as np

from sb3_impact.common.observations import Observation, index_observation
from sb3_impact.ptr_ppo.sum_tree import SumTree

# Added to every priority, as PER's proportional variant does (paper section 2.2): a segment whose
# |GAE| or normalised return is 0 keeps a small chance of being replayed.
PRIORITY_EPS = 1e-6
# Segment returns are sums of float32 rewards, and a time-limit end's reward is recovered by subtracting the
# bootstrap SB3 folded into it: differences below this fraction of the mean return are rounding, not signal.
RETURN_STD_FLOOR = 1e-4


@dataclass
class TrajectorySegments:
    """
    ``B`` trajectory segments of ``T`` steps each, segment-major (``[B, T, ...]``).

    ``rewards`` are the environment's rewards (no time-limit bootstrap folded in); ``truncations`` mark
    time-limit ends, ``terminations`` true MDP ends (never both). ``next_observations`` (``[B, ...]``) are
    the observations after each segment's last step, and ``final_observations[b]`` maps a truncated step
    ``t`` of segment ``b`` to the episode's final observation (the one ``next_observations`` would have
    been without the automatic reset).
    """

    observations: Observation
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    behaviour_log_probs: np.ndarray
    behaviour_params: np.ndarray
    next_observations: Observation
    final_observations: list[dict[int, Observation]] = field(default_factory=list)

    @property
    def n_segments(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def n_steps(self) -> int:
        return int(self.rewards.shape[1])


def _allocate(template: Observation | np.ndarray, capacity: int) -> Observation | np.ndarray:
    if isinstance(template, dict):
        return {key: np.zeros((capacity, *value.shape[1:]), dtype=value.dtype) for key, value in template.items()}
    return np.zeros((capacity, *template.shape[1:]), dtype=template.dtype)


def _assign(storage: Observation | np.ndarray, slots: np.ndarray, values: Observation | np.ndarray) -> None:
    if isinstance(storage, dict):
        for key in storage:
            storage[key][slots] = values[key]  # type: ignore[index]
    else:
        storage[slots] = values


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

    Storage is allocated at the first :meth:`add`, with the shapes and dtypes of the segments given.

    :param capacity: the number of segments kept (the paper's memory size)
    :param priority_alpha: the exponent alpha (0: uniform sampling)
    """

    def __init__(self, capacity: int, priority_alpha: float) -> None:
        self.capacity = int(capacity)
        self.priority_alpha = float(priority_alpha)
        self.tree = SumTree(self.capacity)
        self.priorities = np.zeros(self.capacity, dtype=np.float64)  # raw p, before the exponent
        self.returns = np.zeros(self.capacity, dtype=np.float64)  # undiscounted segment returns
        self.insertion_number = np.full(self.capacity, -1, dtype=np.int64)  # -1: empty slot
        self.return_statistics = RunningReturnStatistics()
        self.size = 0
        self.inserted = 0  # segments ever added
        self.overwritten = 0  # segments dropped by the FIFO
        self._next_slot = 0
        self._storage: TrajectorySegments | None = None
        self._final_observations: list[dict[int, Observation]] = [{} for _ in range(self.capacity)]

    def __len__(self) -> int:
        return self.size

    def add(self, segments: TrajectorySegments) -> np.ndarray:
        """
        Store ``segments`` in the next FIFO slots (their priority is 0 until :meth:`update_priorities`),
        and update the running return statistics with their returns (eq. 14, on insertion only).

        :return: the slots, in the order of ``segments``
        """
        if self._storage is None:
            self._storage = TrajectorySegments(
                observations=_allocate(segments.observations, self.capacity),
                actions=_allocate(segments.actions, self.capacity),
                rewards=_allocate(segments.rewards, self.capacity),
                terminations=_allocate(segments.terminations, self.capacity),
                truncations=_allocate(segments.truncations, self.capacity),
                behaviour_log_probs=_allocate(segments.behaviour_log_probs, self.capacity),
                behaviour_params=_allocate(segments.behaviour_params, self.capacity),
                next_observations=_allocate(segments.next_observations, self.capacity),
            )
        elif segments.n_steps != self._storage.n_steps:
            raise ValueError(f"segments have {segments.n_steps} steps, the memory holds {self._storage.n_steps}")
        count = segments.n_segments
        slots = (self._next_slot + np.arange(count)) % self.capacity
        if count > self.capacity:  # only the last `capacity` survive, as sequential FIFO insertion would
            segments_kept = np.arange(count - self.capacity, count)
            slots = slots[segments_kept]
            segments = self._select(segments, segments_kept)
        self.overwritten += max(0, self.size + count - self.capacity)
        storage = self._storage
        _assign(storage.observations, slots, segments.observations)
        _assign(storage.next_observations, slots, segments.next_observations)
        for name in ("actions", "rewards", "terminations", "truncations", "behaviour_log_probs", "behaviour_params"):
            getattr(storage, name)[slots] = getattr(segments, name)
        for slot, finals in zip(slots, segments.final_observations, strict=True):
            self._final_observations[slot] = finals
        segment_returns = segments.rewards.astype(np.float64).sum(axis=1)
        self.returns[slots] = segment_returns
        self.return_statistics.update(segment_returns)
        self.insertion_number[slots] = self.inserted + np.arange(len(slots)) + (count - len(slots))
        self.update_priorities(slots, np.zeros(len(slots)))
        self._next_slot = int((self._next_slot + count) % self.capacity)
        self.size = min(self.capacity, self.size + count)
        self.inserted += count
        return slots

    @staticmethod
    def _select(segments: TrajectorySegments, indices: np.ndarray) -> TrajectorySegments:
        return TrajectorySegments(
            observations=index_observation(segments.observations, indices),
            actions=segments.actions[indices],
            rewards=segments.rewards[indices],
            terminations=segments.terminations[indices],
            truncations=segments.truncations[indices],
            behaviour_log_probs=segments.behaviour_log_probs[indices],
            behaviour_params=segments.behaviour_params[indices],
            next_observations=index_observation(segments.next_observations, indices),
            final_observations=[segments.final_observations[i] for i in indices],
        )

    def get(self, slots: np.ndarray) -> TrajectorySegments:
        """The segments in ``slots`` (copies), in that order."""
        if self._storage is None:
            raise RuntimeError("the memory is empty")
        slots = np.asarray(slots, dtype=np.int64)
        if np.any(self.insertion_number[slots] < 0):
            raise IndexError(f"empty slots among {slots}")
        return self._select(
            TrajectorySegments(**{**self._storage.__dict__, "final_observations": self._final_observations}), slots
        )

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
