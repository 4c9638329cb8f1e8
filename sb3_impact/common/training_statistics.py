"""Training statistics by name: accumulated over the updates between two records, logged under ``train/``."""

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np
import torch as th
from stable_baselines3.common.logger import Logger


def is_maximum(name: str) -> bool:
    """Whether the statistic ``name`` is summarised by its maximum (names ending in ``_max``) rather than its mean."""
    return name.endswith("_max")


class TrainingStatistics:
    """
    Named statistics of the updates since the last :meth:`record`: each name is recorded as the mean of the values
    added under it, or as their maximum for names ending in ``_max``.

    The V-trace learners add one pass (a batch draw) at a time and record at every log dump; PTR-PPO adds one replay
    round at a time and records at the end of each ``train()``. Values given as minibatch tensors
    (:meth:`add_minibatches`) are summarised on their device and synced once per call.
    """

    def __init__(self) -> None:
        self._values: dict[str, list[float]] = defaultdict(list)

    def __len__(self) -> int:
        """The number of names with values since the last record."""
        return len(self._values)

    def add(self, statistics: Mapping[str, float]) -> None:
        """One value for each name of ``statistics``."""
        for name, value in statistics.items():
            self._values[name].append(float(value))

    def add_minibatches(self, minibatch_statistics: Sequence[Mapping[str, th.Tensor]], **extra: float) -> dict[str, float]:
        """
        Add the statistics of one pass over minibatches: for each name, the mean of its minibatch values (the
        maximum for ``*_max`` names), synced once, and ``extra`` as given. Returns what was added.
        """
        names = list(minibatch_statistics[0])
        stacked = th.stack([th.stack([statistics[name] for name in names]) for statistics in minibatch_statistics])
        summary = th.where(
            th.tensor([is_maximum(name) for name in names], device=stacked.device),
            stacked.max(dim=0).values,
            stacked.mean(dim=0),
        )
        added = {**dict(zip(names, summary.tolist(), strict=True)), **extra}  # the one device sync
        self.add(added)
        return added

    def summary(self) -> dict[str, float]:
        """Each name's mean (maximum for ``*_max`` names) over the values since the last record."""
        return {name: float(np.max(values) if is_maximum(name) else np.mean(values)) for name, values in self._values.items()}

    def record(self, logger: Logger, prefix: str = "train/") -> None:
        """Record :meth:`summary` in ``logger`` under ``prefix`` + name, and start over."""
        for name, value in self.summary().items():
            logger.record(f"{prefix}{name}", value)
        self._values.clear()
