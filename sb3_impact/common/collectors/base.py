"""The collector interface and the synchronous collector (collect, then train, in the learner's thread)."""

import os
import time
from abc import ABC, abstractmethod

import torch as th

from sb3_impact.common.collectors.sampler import SegmentSampler
from sb3_impact.common.segments import Segment


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
        self._torch_threads: int | None = None  # the learner's torch threads before a cap, to restore

    @property
    def sampled_steps(self) -> int:
        return self.sampler.sampled_steps

    @property
    def last_observation(self):
        return self.sampler.last_observation

    def _cap_learner_threads(self, busy_cpus: int) -> None:
        """Leave the learner's torch intra-op threads the CPUs that ``busy_cpus`` collecting cores do not use."""
        self._torch_threads = th.get_num_threads()
        th.set_num_threads(max(1, min(self._torch_threads, (os.cpu_count() or 1) - busy_cpus)))

    def _restore_learner_threads(self) -> None:
        """Undo :meth:`_cap_learner_threads` (safe to call when nothing was capped)."""
        if self._torch_threads is not None:
            th.set_num_threads(self._torch_threads)
            self._torch_threads = None

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
