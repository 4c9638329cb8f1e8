"""The collector interface and the synchronous collector (collect, then train, in the learner's thread)."""

import os
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
import torch as th

from sb3_impact.common.collectors.sampler import SegmentSampler
from sb3_impact.common.segments import Segment


def check_queue_size(queue_size: Any) -> None:
    """ValueError naming ``queue_size`` unless it is an integer >= 1."""
    if isinstance(queue_size, bool) or not isinstance(queue_size, int | np.integer) or queue_size < 1:
        raise ValueError(f"collector_kwargs: queue_size must be an integer >= 1, got {queue_size!r}")


def learner_threads_beside(busy_cpus: int, threads: int) -> int:
    """The torch threads (at most ``threads``, at least 1) left to a learner beside ``busy_cpus`` collecting cores."""
    return max(1, min(threads, (os.cpu_count() or 1) - busy_cpus))


class CollectorError(RuntimeError):
    """The collector (or an environment it steps) failed; the original exception is the ``__cause__``."""


class Collector(ABC):
    """
    What a learner needs from a source of segments: the algorithms' ``collector`` component.

    A collector is built as ``Collector(sampler, **collector_kwargs)``: its options are keyword arguments
    after the sampler, and :meth:`check_options` checks them when the algorithm is constructed. A subclass
    may be passed as an algorithm's ``collector``.

    Counters: ``sampled_steps`` (environment steps taken), ``delivered_steps`` (handed to the learner).
    With a step budget (:meth:`set_step_budget`, which ``learn()`` sets to the steps it still has to take,
    rounded up to whole segments) a collector starts no segment beyond it, so that after ``learn(n)`` the
    environments have stepped what the learner counted, as with SB3's synchronous loop.
    """

    #: True when segments are collected inside :meth:`get_segment`, in the learner's thread: the sampler then
    #: steps the learner's own policy, and :meth:`broadcast` has nothing to copy (it gets an empty state dict).
    in_learner_thread: ClassVar[bool] = False
    #: False when the collector steps its own copies of the environments (a forked process, Ray actors): the
    #: learner's episodes do not go on, and its VecEnv is reset before it collects again.
    continues_episodes: ClassVar[bool] = True
    #: True when it builds environments from the id or factory the algorithm's env was given as.
    needs_env_source: ClassVar[bool] = False

    def __init__(self, sampler: SegmentSampler) -> None:
        self.sampler = sampler
        self.delivered_steps = 0
        self.broadcast_seconds = 0.0
        self.step_budget: int | None = None
        self.started_steps = 0  # steps of the segments started (or requested) so far, against the budget
        self._torch_threads: int | None = None  # the learner's torch threads before a cap, to restore

    @classmethod
    def check_options(cls, **options: Any) -> None:
        """Raise ``ValueError``/``TypeError`` naming the option if ``options`` cannot build this collector (none: any)."""
        return None

    @property
    def segment_size(self) -> int:
        """Environment steps in one segment."""
        return self.sampler.n_steps * self.sampler.env.num_envs

    @property
    def num_envs(self) -> int:
        """The environments that segments come from, over all workers (``Segment.env_ids`` range over them)."""
        return self.sampler.env.num_envs

    def set_step_budget(self, steps: int | None) -> None:
        """Start no segment once ``steps`` environment steps were started (None: no limit). Before :meth:`start`."""
        self.step_budget = None if steps is None else max(int(steps), 0)

    def take_budget(self) -> bool:
        """
        Count a segment about to start against the budget; False (and nothing counted) when it is spent. A
        collector calls it before it starts each segment.
        """
        if self.step_budget is not None and self.started_steps >= self.step_budget:
            return False
        self.started_steps += self.segment_size
        return True

    @property
    def budget_spent(self) -> bool:
        return self.step_budget is not None and self.started_steps >= self.step_budget

    @property
    def sampled_steps(self) -> int:
        return self.sampler.sampled_steps

    @property
    def last_observation(self):
        return self.sampler.last_observation

    def _cap_learner_threads(self, busy_cpus: int) -> None:
        """Leave the learner's torch intra-op threads the CPUs that ``busy_cpus`` collecting cores do not use."""
        self._torch_threads = th.get_num_threads()
        th.set_num_threads(learner_threads_beside(busy_cpus, self._torch_threads))

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
    """
    Collects in the calling thread, when the learner asks: collect, then train, as SB3's PPO does.

    The sampler steps the learner's own policy (on the learner's device), so with a seed the actions are
    SB3's; :meth:`broadcast` only records the version.
    """

    in_learner_thread = True

    def start(self) -> None:
        """Nothing runs in the background: each segment is collected inside :meth:`get_segment`."""

    def get_segment(self) -> Segment:
        if not self.take_budget():
            raise CollectorError(f"the step budget of this learn() call ({self.step_budget} steps) is spent")
        try:
            segment = self.sampler.collect()
        except Exception as error:
            raise CollectorError(f"collection failed: {error!r}") from error
        self.delivered_steps += segment.size
        return segment

    def broadcast(self, state_dict: dict[str, th.Tensor], version: int) -> None:
        # The sampler already acts with the learner's weights.
        self.sampler.policy_version = version

    def close(self) -> None:
        """No thread or process to stop; the VecEnv belongs to the algorithm."""
