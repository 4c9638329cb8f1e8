"""
A sum-tree over a fixed number of non-negative priorities: O(log n) update and proportional sampling.

Which slot holds what (FIFO overwrite, say) is left to the caller. The tree is a complete binary tree
stored in one float64 array: the leaves sit at ``[capacity_pow2, 2 * capacity_pow2)`` and node ``i`` holds
the sum of its children ``2i`` and ``2i + 1`` (node 1 is the root, the total).

Floating drift: an update rewrites the changed leaves and then *recomputes* every ancestor from its two
children (it never adds a delta to a stored sum), so each node is always the float64 sum of its
children and no error accumulates over any number of updates; no periodic rebuild is needed.
"""

import numpy as np


class SumTree:
    """
    Proportional sampling over ``capacity`` slots with O(log n) updates, vectorised over batches.

    :param capacity: number of slots (priorities start at 0, i.e. never sampled)
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._leaf_offset = 1 << max(0, (self.capacity - 1).bit_length())  # smallest power of 2 >= capacity
        self._depth = self._leaf_offset.bit_length() - 1
        self._nodes = np.zeros(2 * self._leaf_offset, dtype=np.float64)

    @property
    def total(self) -> float:
        """The sum of all priorities."""
        return float(self._nodes[1])

    @property
    def priorities(self) -> np.ndarray:
        """A copy of the ``capacity`` priorities."""
        return self._nodes[self._leaf_offset : self._leaf_offset + self.capacity].copy()

    def __getitem__(self, indices: int | np.ndarray) -> float | np.ndarray:
        return self._nodes[self._leaf_offset + self._check_indices(indices)]

    def _check_indices(self, indices: int | np.ndarray) -> np.ndarray:
        indices = np.asarray(indices, dtype=np.int64)
        if indices.size and (indices.min() < 0 or indices.max() >= self.capacity):
            raise IndexError(f"slot indices must be in [0, {self.capacity}), got {indices}")
        return indices

    def update(self, indices: int | np.ndarray, priorities: float | np.ndarray) -> None:
        """
        Set the priorities of ``indices`` (repeated indices: the last value wins, as sequential updates).

        :param indices: slot indices in ``[0, capacity)``
        :param priorities: finite, non-negative values, broadcast against ``indices``
        """
        indices = self._check_indices(indices).reshape(-1)
        priorities = np.broadcast_to(np.asarray(priorities, dtype=np.float64), indices.shape)
        if not np.all(np.isfinite(priorities)) or np.any(priorities < 0):
            raise ValueError(f"priorities must be finite and >= 0, got {priorities}")
        if indices.size == 0:
            return
        # Last write wins for repeated indices: keep the last occurrence of each slot.
        reversed_unique, reversed_first = np.unique(indices[::-1], return_index=True)
        last = indices.size - 1 - reversed_first
        nodes = reversed_unique + self._leaf_offset
        self._nodes[nodes] = priorities[last]
        # Recompute the ancestors level by level from their children (no accumulated drift).
        for _ in range(self._depth):
            nodes = np.unique(nodes >> 1)
            self._nodes[nodes] = self._nodes[2 * nodes] + self._nodes[2 * nodes + 1]

    def find(self, values: np.ndarray) -> np.ndarray:
        """
        The slots whose cumulative-priority intervals contain ``values`` (each in ``[0, total)``).

        A slot of priority 0 is never returned, even for values that rounding puts on an interval
        boundary or at ``total``: the descent only enters subtrees with a positive sum.
        """
        if self.total <= 0:
            raise ValueError("cannot sample from a sum-tree whose priorities are all 0")
        values = np.array(values, dtype=np.float64).reshape(-1)
        nodes = np.ones(values.shape, dtype=np.int64)
        for _ in range(self._depth):
            left = 2 * nodes
            left_sums = self._nodes[left]
            go_right = (values >= left_sums) & (self._nodes[left + 1] > 0)
            go_right |= left_sums <= 0  # only reachable by rounding: the right subtree holds the mass
            values = np.where(go_right, values - left_sums, values)
            nodes = left + go_right
        return nodes - self._leaf_offset

    def sample(self, batch_size: int, rng: np.random.Generator, stratified: bool = False) -> np.ndarray:
        """
        Draw ``batch_size`` slots with probability ``priority / total`` (with replacement).

        :param batch_size: number of draws
        :param rng: the random generator
        :param stratified: draw one value from each of ``batch_size`` equal parts of ``[0, total)`` (as in
            prioritized experience replay): same marginal probabilities, fewer duplicates in a batch
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        total = self.total
        if stratified:
            values = (np.arange(batch_size) + rng.random(batch_size)) * (total / batch_size)
        else:
            values = rng.random(batch_size) * total
        return self.find(values)
