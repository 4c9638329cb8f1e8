"""
Collectors feed :class:`~sb3_impact.common.segments.Segment` objects to a learner: the algorithms'
``collector`` component, chosen by name or class, with its options in ``collector_kwargs``
(as SB3's ``replay_buffer_class`` and ``replay_buffer_kwargs``).

- ``"sync"`` (:class:`SyncCollector`) collects a segment when asked, in the learner's thread (reproducible
  with a seed; with SB3's PPO, sample for sample);
- ``"thread"`` (:class:`ThreadCollector`) collects continuously in a background thread with a stale copy of
  the policy, at most ``queue_size`` segments ahead of the learner (backpressure, bounded memory);
- ``"process"`` (:class:`ProcessCollector`) does the same in a forked process, for CPU-bound environments
  whose Python work would otherwise share the GIL with the learner;
- ``"ray"`` (:class:`~sb3_impact.common.collectors.ray.RayCollector`) collects in Ray actors, on this machine
  or a cluster (imported lazily: Ray is an optional extra);
- ``"auto"`` (IMPACT's and IMPALA's default) is ``"process"`` on Linux and ``"thread"`` elsewhere, resolved when a
  collector is built, so that a saved model loads on any platform.
"""

import inspect
import multiprocessing as mp
import sys
from typing import Any

from sb3_impact.common.collectors.base import Collector, CollectorError, SyncCollector
from sb3_impact.common.collectors.process import ProcessCollector
from sb3_impact.common.collectors.sampler import CollectionInterrupted, SegmentSampler
from sb3_impact.common.collectors.thread import ThreadCollector

# The collectors by name (the algorithms' ``collector`` parameter).
COLLECTOR_NAMES = ("auto", "sync", "thread", "process", "ray")


def resolved_collector_name(collector: str | type[Collector]) -> str:
    """
    The name a ``collector`` parameter stands for: ``"auto"`` is ``"process"`` where a forked process is safe
    (Linux; macOS's fork is unsafe with many libraries) and ``"thread"`` elsewhere; a class has no name ("").
    """
    if collector == "auto":
        return "process" if sys.platform.startswith("linux") and "fork" in mp.get_all_start_methods() else "thread"
    return collector if isinstance(collector, str) else ""


def collector_class(collector: str | type[Collector]) -> type[Collector]:
    """The class behind a ``collector`` parameter: a name of :data:`COLLECTOR_NAMES` or a Collector subclass."""
    if isinstance(collector, type) and issubclass(collector, Collector):
        return collector
    collector = resolved_collector_name(collector) if collector == "auto" else collector
    if collector == "sync":
        return SyncCollector
    if collector == "thread":
        return ThreadCollector
    if collector == "process":
        return ProcessCollector
    if collector == "ray":
        from sb3_impact.common.collectors.ray import RayCollector

        return RayCollector
    raise ValueError(f"collector must be one of {COLLECTOR_NAMES} or a Collector subclass, got {collector!r}")


def check_collector(collector: str | type[Collector], collector_kwargs: dict[str, Any] | None) -> type[Collector]:
    """
    The collector class, after checking that ``collector_kwargs`` can build it: a ``TypeError`` names an option
    it does not take, ``check_options`` a value it refuses (an ``ImportError`` names a missing extra).
    """
    cls = collector_class(collector)
    if collector_kwargs is None:
        collector_kwargs = {}
    if not isinstance(collector_kwargs, dict):
        raise TypeError(f"collector_kwargs must be a dict or None, got {collector_kwargs!r}")
    signature = inspect.signature(cls.__init__)
    accepted = [name for name in signature.parameters if name not in ("self", "sampler")]
    try:
        signature.bind(None, None, **collector_kwargs)
    except TypeError as error:
        raise TypeError(
            f"collector_kwargs: {cls.__name__} takes {', '.join(accepted) or 'no options'}, got "
            f"{sorted(collector_kwargs)} ({error})"
        ) from None
    cls.check_options(**collector_kwargs)
    return cls


__all__ = [
    "COLLECTOR_NAMES",
    "CollectionInterrupted",
    "Collector",
    "CollectorError",
    "ProcessCollector",
    "SegmentSampler",
    "SyncCollector",
    "ThreadCollector",
    "check_collector",
    "collector_class",
    "resolved_collector_name",
]
