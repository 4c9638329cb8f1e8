"""A collector that runs in a background thread of the learner's process."""

import queue
import threading
import time
import warnings

import torch as th

from sb3_impact.common.collectors.base import Collector, CollectorError, check_queue_size
from sb3_impact.common.collectors.sampler import CollectionInterrupted, SegmentSampler
from sb3_impact.common.segments import Segment


class ThreadCollector(Collector):
    """
    Collects segments in a background thread that owns the VecEnv and a CPU copy of the policy.

    The learner publishes weights with :meth:`broadcast`; the thread loads the newest ones before each
    segment, and every segment carries the version it was collected with. At most ``queue_size``
    segments are ahead of the learner, counting the one being collected: the thread waits for the
    learner to take a segment before it starts the next one (backpressure, bounded memory). With
    ``queue_size=1`` the next segment is collected while the learner trains on the current one, so
    segments are one batch of updates stale and collection still overlaps learning.
    PyTorch's thread settings are process-wide. The algorithm's ``learner_threads`` (default 1) sets them for
    ``learn()``; this collector leaves them alone by default. With
    ``limit_learner_threads=True`` they are capped at the number of CPUs minus one while the collector
    runs (restored by :meth:`close`), as the process collector does: learners that take many small
    gradient steps (PPO-AMBER, PTR-PPO, V-RACER) otherwise leave the collector thread no core (measured on
    2 cores: PPO-AMBER on Pendulum-v1 took 46.6 s with 2 threads and 4.0 s with 1 for 2048 steps).
    """

    join_timeout = 30.0

    @classmethod
    def check_options(cls, queue_size: int = 1, limit_learner_threads: bool = False) -> None:
        check_queue_size(queue_size)
        if not isinstance(limit_learner_threads, bool):
            raise TypeError(f"collector_kwargs: limit_learner_threads must be a bool, got {limit_learner_threads!r}")

    def __init__(self, sampler: SegmentSampler, queue_size: int = 1, limit_learner_threads: bool = False) -> None:
        super().__init__(sampler)
        self.limit_learner_threads = limit_learner_threads
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
        if self.limit_learner_threads:
            self._cap_learner_threads(busy_cpus=1)
        self._thread = threading.Thread(target=self._run, name="sb3-impact-collector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._ahead.acquire(timeout=0.05):
                    continue
                if not self.take_budget():  # learn() needs no more segments: a normal end
                    return
                with self._weights_lock:
                    pending, self._pending_weights = self._pending_weights, None
                if pending is not None:
                    self.sampler.load_weights(*pending)
                self._queue.put(self.sampler.collect(self._stop))
        except CollectionInterrupted:  # close() asked the thread to stop: a normal end
            return
        except BaseException as error:  # handed to the learner thread, which re-raises it
            self._error = error

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise CollectorError(f"the collector thread failed: {self._error!r}") from self._error
        if self._thread is None or not self._thread.is_alive():
            if self.budget_spent:
                raise CollectorError(f"the step budget of this learn() call ({self.step_budget} steps) is spent")
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
        self._restore_learner_threads()
