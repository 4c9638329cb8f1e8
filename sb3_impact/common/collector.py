"""
Collectors feed :class:`~sb3_impact.common.segments.Segment` objects to a learner.

The learner only talks to the small :class:`Collector` interface, so a collector that runs its
environments elsewhere (a Ray-based one, say) plugs in beside the ones provided:

- :class:`SyncCollector` collects a segment when asked, in the learner's thread (reproducible with a seed);
- :class:`ThreadCollector` collects continuously in a background thread with a stale copy of the policy,
  at most ``queue_size`` segments ahead of the learner (backpressure, bounded memory);
- :class:`~sb3_impact.common.process_collector.ProcessCollector` does the same in a forked process, for
  CPU-bound environments whose Python work would otherwise share the GIL with the learner;
- :class:`~sb3_impact.common.ray_collector.RayCollector` collects in Ray actors, on this machine or a cluster.
"""

import queue
import threading
import time
import warnings
from abc import ABC, abstractmethod

import torch as th

from sb3_impact.common.segments import CollectionInterrupted, Segment, SegmentSampler


class CollectorError(RuntimeError):
    """The collector (or an environment it steps) failed; the original exception is the ``__cause__``."""


class Collector(ABC):
    """
    What a learner needs from a source of segments.

    Counters: ``sampled_steps`` (environment steps taken), ``delivered_steps`` (handed to the learner).
    """

    def __init__(self, sampler: SegmentSampler) -> None:
        self.sampler = sampler
        self.delivered_steps = 0
        self.broadcast_seconds = 0.0

    @property
    def sampled_steps(self) -> int:
        return self.sampler.sampled_steps

    @property
    def last_observation(self):
        return self.sampler.last_observation

    @abstractmethod
    def start(self) -> None:
        """Start collecting (threads, processes)."""

    @abstractmethod
    def get_segment(self) -> Segment:
        """Block until the next segment is ready; raise :class:`CollectorError` if collection failed."""

    @abstractmethod
    def broadcast(self, state_dict: dict[str, th.Tensor], version: int) -> None:
        """Make new policy weights available to the sampling policy."""

    @abstractmethod
    def close(self) -> None:
        """Stop collecting and release threads; safe to call more than once and after a failure."""

    def stats(self) -> dict[str, float]:
        """Collector-specific figures, logged by the learner under ``collector/`` (none by default)."""
        return {}

    @staticmethod
    def cpu_state_dict(state_dict: dict[str, th.Tensor]) -> dict[str, th.Tensor]:
        """A detached CPU copy of learner weights, safe to hand to another thread."""
        return {name: tensor.detach().to("cpu", copy=True) for name, tensor in state_dict.items()}


class SyncCollector(Collector):
    """Collects in the calling thread: collect, then train, as PPO does."""

    def __init__(self, sampler: SegmentSampler) -> None:
        super().__init__(sampler)
        self._pending_weights: tuple[dict[str, th.Tensor], int] | None = None

    def start(self) -> None:
        """Nothing runs in the background: each segment is collected inside :meth:`get_segment`."""

    def get_segment(self) -> Segment:
        if self._pending_weights is not None:
            self.sampler.load_weights(*self._pending_weights)
            self._pending_weights = None
        try:
            segment = self.sampler.collect()
        except Exception as error:
            raise CollectorError(f"collection failed: {error!r}") from error
        self.delivered_steps += segment.size
        return segment

    def broadcast(self, state_dict: dict[str, th.Tensor], version: int) -> None:
        # Loaded when the next segment is collected: broadcasts in between cost only a copy.
        start = time.perf_counter()
        self._pending_weights = (self.cpu_state_dict(state_dict), version)
        self.broadcast_seconds += time.perf_counter() - start

    def close(self) -> None:
        """No thread or process to stop; the VecEnv belongs to the algorithm."""


class ThreadCollector(Collector):
    """
    Collects segments in a background thread that owns the VecEnv and a CPU copy of the policy.

    The learner publishes weights with :meth:`broadcast`; the thread loads the newest ones before each
    segment, and every segment carries the version it was collected with. At most ``queue_size``
    segments are ahead of the learner, counting the one being collected: the thread waits for the
    learner to take a segment before it starts the next one (backpressure, bounded memory). With
    ``queue_size=1`` the next segment is collected while the learner trains on the current one, so
    segments are one batch of updates stale and collection still overlaps learning.
    PyTorch's thread settings are left alone: they are process-wide, and the learner keeps its intra-op
    threads (the sampling policy's forward passes on a few observations hardly use them).
    """

    join_timeout = 30.0

    def __init__(self, sampler: SegmentSampler, queue_size: int = 2) -> None:
        super().__init__(sampler)
        if queue_size < 1:
            raise ValueError(f"queue_size must be >= 1, got {queue_size}")
        self._queue: queue.Queue[Segment] = queue.Queue()
        self._ahead = threading.Semaphore(queue_size)  # segments collected or in progress, not yet taken
        self._stop = threading.Event()
        self._weights_lock = threading.Lock()
        self._pending_weights: tuple[dict[str, th.Tensor], int] | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self.queued_steps_dropped = 0

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("ThreadCollector.start() called twice")
        self._thread = threading.Thread(target=self._run, name="sb3-impact-collector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._ahead.acquire(timeout=0.05):
                    continue
                with self._weights_lock:
                    pending, self._pending_weights = self._pending_weights, None
                if pending is not None:
                    self.sampler.load_weights(*pending)
                self._queue.put(self.sampler.collect(self._stop))
        except CollectionInterrupted:  # close() asked the thread to stop: a normal end
            pass
        except BaseException as error:  # handed to the learner thread, which re-raises it
            self._error = error

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise CollectorError(f"the collector thread failed: {self._error!r}") from self._error
        if self._thread is None or not self._thread.is_alive():
            raise CollectorError("the collector thread is not running")

    def get_segment(self) -> Segment:
        while True:
            try:
                segment = self._queue.get(timeout=0.05)
            except queue.Empty:
                self._raise_if_failed()
                continue
            self._ahead.release()
            self.delivered_steps += segment.size
            return segment

    def broadcast(self, state_dict: dict[str, th.Tensor], version: int) -> None:
        start = time.perf_counter()
        weights = self.cpu_state_dict(state_dict)
        with self._weights_lock:
            self._pending_weights = (weights, version)
        self.broadcast_seconds += time.perf_counter() - start

    def _drain(self) -> None:
        while True:
            try:
                self.queued_steps_dropped += self._queue.get_nowait().size
            except queue.Empty:
                return

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.join_timeout)
            if self._thread.is_alive():
                warnings.warn(
                    f"the collector thread did not stop within {self.join_timeout:.0f}s "
                    "(an environment step is hanging); it is a daemon thread and will not block exit",
                    RuntimeWarning,
                    stacklevel=2,
                )
        self._drain()
