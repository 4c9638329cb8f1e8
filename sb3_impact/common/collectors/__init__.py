"""
Collectors feed :class:`~sb3_impact.common.segments.Segment` objects to a learner.

The learner only talks to the small :class:`Collector` interface:

- :class:`SyncCollector` collects a segment when asked, in the learner's thread (reproducible with a seed);
- :class:`ThreadCollector` collects continuously in a background thread with a stale copy of the policy,
  at most ``queue_size`` segments ahead of the learner (backpressure, bounded memory);
- :class:`ProcessCollector` does the same in a forked process, for CPU-bound environments whose Python
  work would otherwise share the GIL with the learner;
- :class:`~sb3_impact.common.collectors.ray.RayCollector` collects in Ray actors, on this machine or a
  cluster (imported lazily: Ray is an optional extra).
"""

from sb3_impact.common.collectors.base import Collector, CollectorError, SyncCollector
from sb3_impact.common.collectors.process import ProcessCollector
from sb3_impact.common.collectors.sampler import CollectionInterrupted, SegmentSampler
from sb3_impact.common.collectors.thread import ThreadCollector

# The asynchronous collectors by name (the algorithms' ``collector`` parameter).
COLLECTOR_NAMES = ("thread", "process", "ray")

__all__ = [
    "COLLECTOR_NAMES",
    "CollectionInterrupted",
    "Collector",
    "CollectorError",
    "ProcessCollector",
    "SegmentSampler",
    "SyncCollector",
    "ThreadCollector",
]
