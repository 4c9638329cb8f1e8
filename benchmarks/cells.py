"""
How every generated table writes its figures (``python -m benchmarks tables``, and the profilers' tables in
``benchmarks/profiling/tables.py``): one formatter per kind of cell, a figure (:func:`number`), ``center [low,
high]`` (:func:`interval`; :func:`estimate` for :mod:`benchmarks.statistics`' estimates, :func:`median_range` for
``median [min, max]`` over seeds) and a paired ratio (:func:`ratio_cell`); and a table's lines and links.
"""

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np


def number(value: float | None, form: str | None = None) -> str:
    """``value`` in the format spec ``form``, by default as a return: one decimal below 100, none above; ``-`` where
    it is missing or not finite."""
    if value is None or not math.isfinite(value):
        return "-"
    return format(value, form if form is not None else (".1f" if abs(value) < 100 else ".0f"))


def interval(center: float | str | None, low: float | None = None, high: float | None = None, form: str | None = None) -> str:
    """``center [low, high]``, each figure as :func:`number` writes it (``center`` may be written already);
    ``center`` alone without bounds; ``-`` without a center."""
    if center is None:
        return "-"
    text = center if isinstance(center, str) else number(center, form)
    return text if low is None or high is None else f"{text} [{number(low, form)}, {number(high, form)}]"


def estimate(found: dict[str, float] | None, key: str, form: str | None = None) -> str:
    """An estimate of :mod:`benchmarks.statistics` (``found[key]``: ``iqm`` or ``p``) with its 95% interval."""
    return interval(found[key], found["low"], found["high"], form) if found else "-"


def median_range(values: Iterable[float | None], form: str | None = None) -> str:
    """``median [min, max]`` of the finite ``values`` (``None``: a run without one); one value alone; ``-`` for none."""
    finite = [value for value in values if value is not None and math.isfinite(value)]
    if len(finite) < 2:
        return interval(finite[0] if finite else None, form=form)
    return interval(float(np.median(finite)), min(finite), max(finite), form)


def ratio_median(median: float, bounds: list[float | None] | None) -> str:
    """
    The median ratio, or the bound the censored seeds leave of it (``bounds``: ``[low, high]``, high None: none). A
    lower bound under 1 says nothing about who is faster: ours stopped at a budget that came before the baseline's
    time, so the cell says first that the return was not reached. Bounds are compared as printed (two decimals).
    """
    low, high = (None if bound is None else round(bound, 2) for bound in bounds or (median, median))
    if low == high:
        return f"{median:.2f}"
    if high is None:
        if low <= 0:
            return "undetermined"
        return f">= {low:.2f}" if low >= 1 else f"not reached in the budget, >= {low:.2f}"
    return f"<= {high:.2f}" if low == 0 else f"{low:.2f} to {high:.2f}"


def ratio_cell(paired: dict[str, Any], key: str) -> str:
    """
    ``median [min, max]`` of the paired ratios ``key`` (:func:`benchmarks.summary.paired_to_return`), with the seeds
    that never got there (censored) counted. Where they leave the median undetermined
    (:func:`benchmarks.summary.median_bounds`) the median is given as the bound it is (:func:`ratio_median`):
    ``>= 1.61``, ``not reached in the budget, >= 0.09``, ``<= 0.40``, ``0.09 to 0.40`` or ``undetermined``, the
    last without a spread. Where a ratio would mean nothing (:func:`benchmarks.summary.no_ratio_reason`) the cell
    says why: ``no ratio: ...``.
    """
    stats = paired[key]
    if paired.get("no_ratio"):
        return f"no ratio: {paired['no_ratio']}"
    if stats["n"] == 0:
        return "-"
    bounds = paired.get(f"{key}_median_bounds")
    undetermined = bounds is not None and bounds[0] == 0 and bounds[1] is None
    spread = (None, None) if stats["n"] == 1 or undetermined else (stats["min"], stats["max"])
    text = interval(ratio_median(stats["median"], bounds), *spread, form=".2f")
    notes = [
        f"{who} in {paired[field]}"
        for field, who in [
            ("censored", "ours censored"),
            ("baseline_censored", "baseline censored"),
            ("both_at_first_evaluation", "both at the first evaluation"),
        ]
        if paired[field]
    ]
    return text + (f" ({'; '.join(notes)})" if notes else "")


def markdown_table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    """A markdown table's lines: the header, its rule and a line per row."""
    return [f"| {' | '.join(cells)} |" for cells in [header, ["---"] * len(header), *rows]]


def link(page: str, target: str, text: str | None = None) -> str:
    """A markdown link from ``page`` to ``target`` (both relative to the repository), shown as ``text`` or the target."""
    return f"[{text or target}]({'../' * len(Path(page).parent.parts)}{target})"
