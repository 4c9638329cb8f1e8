"""
The learner's PyTorch threads during ``learn()``: the package's thread policy.

PyTorch's intra-op threads spin while they wait for work. When another process (or this package's own
collector) holds the cores, the learner's threads burn CPU without progress: on the 2-core machine, IMPACT on
CartPole-v1 used 5-8x the CPU-seconds for the same steps with PyTorch's default threads beside two busy
processes (docs/algorithms/collectors.md, "Threads"). Every algorithm of the package therefore runs ``learn()``
with ``learner_threads`` intra-op threads (default 1) and restores the process's setting when it returns,
however it ends. SB3's own classes are left alone.
"""

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch as th

#: The default ``learner_threads`` of every algorithm, chosen by measurement (docs/algorithms/collectors.md).
DEFAULT_LEARNER_THREADS = 1


def check_learner_threads(learner_threads: Any) -> int | None:
    """``learner_threads`` if it is an integer >= 1 or None (PyTorch's setting is left alone); else ValueError."""
    if learner_threads is None:
        return None
    if isinstance(learner_threads, bool) or not isinstance(learner_threads, int | np.integer) or learner_threads < 1:
        raise ValueError(f"learner_threads must be an integer >= 1 or None, got {learner_threads!r}")
    return int(learner_threads)


@contextlib.contextmanager
def learner_threads(threads: int | None) -> Iterator[None]:
    """Run the body with ``threads`` PyTorch intra-op threads (None: unchanged), then restore the previous number."""
    if threads is None:
        yield
        return
    previous = th.get_num_threads()
    th.set_num_threads(threads)
    try:
        yield
    finally:
        th.set_num_threads(previous)
