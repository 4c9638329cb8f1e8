"""IMPACT's circular buffer C(N, K) of training batches (IMPALA uses it with N = K = 1)."""

from sb3_impact.common.training_batch import TrainingBatch


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
