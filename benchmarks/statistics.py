"""
Statistics over runs with rliable (Agarwal et al., 2021): the interquartile mean (IQM) with its stratified-bootstrap
95% confidence interval, the probability of improvement of one algorithm over another with its interval, and
performance profiles. Every bootstrap is seeded, so the same data give the same figures (the tables command's
drift test relies on it).

Score matrices are ``(runs, tasks)``: one row per seed, one column per environment (a single column for a table of
one environment).
"""

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from benchmarks.plot import new_figure, save_figure

BOOTSTRAP_REPS = 2000
IMPROVEMENT_REPS = 1000
CONFIDENCE = 0.95
MIN_RUNS_TRIMMED = 4  # the IQM cuts int(0.25 * n) runs off each end: none below 4, where it is the mean


def _rliable():
    with warnings.catch_warnings():  # arch warns about its own deprecations on import
        warnings.simplefilter("ignore")
        from rliable import library, metrics
    return library, metrics


@contextlib.contextmanager
def _seeded_global_numpy() -> Iterator[None]:
    """rliable's resampling draws its indices from numpy's global generator (whatever ``random_state`` it is given):
    seed it for the bootstrap, then give the caller its own state back."""
    state = np.random.get_state()
    np.random.seed(0)
    try:
        with warnings.catch_warnings():  # arch's FutureWarning about RandomState
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        np.random.set_state(state)


def _interval_estimates(score_dict: dict, function, reps: int) -> tuple[dict, dict]:
    library, _ = _rliable()
    with _seeded_global_numpy():
        return library.get_interval_estimates(
            score_dict, function, reps=reps, confidence_interval_size=CONFIDENCE, random_state=np.random.RandomState(0)
        )


def central_name(counts: list[int]) -> str:
    """
    What an "IQM" over each of ``counts`` scores (runs, or runs times tasks pooled) is: ``IQM`` where every count
    is :data:`MIN_RUNS_TRIMMED` or more, ``mean`` where none is (the quarter cut off each end is no score), and
    ``IQM (mean under 4 runs)`` where they mix.
    """
    trimmed = [count >= MIN_RUNS_TRIMMED for count in counts]
    if all(trimmed):
        return "IQM"
    return "mean" if not any(trimmed) else f"IQM (mean under {MIN_RUNS_TRIMMED} runs)"


def as_matrix(scores: np.ndarray | list) -> np.ndarray:
    """A list of per-seed scores is one task's column."""
    matrix = np.asarray(scores, dtype=float)
    return matrix[:, None] if matrix.ndim == 1 else matrix


def iqm_with_interval(scores: np.ndarray | list) -> dict[str, float] | None:
    """
    IQM over all runs and tasks, with rliable's stratified-bootstrap 95% interval (runs resampled within each task);
    ``None`` without scores. One run, or runs that all scored the same, give a zero-width interval.
    """
    matrix = as_matrix(scores)
    if matrix.size == 0:
        return None
    _, metrics = _rliable()
    point = float(metrics.aggregate_iqm(matrix))
    if matrix.shape[0] == 1 or np.all(matrix == matrix.flat[0]):
        return {"iqm": point, "low": point, "high": point}
    _, intervals = _interval_estimates({"x": matrix}, lambda x: np.array([pooled_iqm(x)]), BOOTSTRAP_REPS)
    low, high = intervals["x"][:, 0]
    return {"iqm": point, "low": float(low), "high": float(high)}


def pooled_iqm(matrix: np.ndarray) -> float:
    """
    rliable's ``metrics.aggregate_iqm`` (``scipy.stats.trim_mean(matrix, 0.25, axis=None)``: the mean of all runs
    and tasks pooled, the lowest and highest quarter cut) without scipy's argument checking, which costs a
    millisecond a call, 2 s per interval. The same partition and mean, so the same float
    (tests/test_benchmarks.py).
    """
    pooled = np.asarray(matrix, dtype=float).ravel()
    cut = int(0.25 * pooled.size)
    return float(np.partition(pooled, (cut, pooled.size - cut - 1))[cut : pooled.size - cut].mean())


def pairwise_improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """
    rliable's ``metrics.probability_of_improvement`` in one vectorised expression: per task the Mann-Whitney U of
    x over y divided by the number of pairs, i.e. the share of (x, y) run pairs with x > y, ties counting half;
    averaged over tasks. rliable computes it with one ``scipy.stats.mannwhitneyu`` call per task and resample
    (7 s for a table's 1000 resamples); this gives the same numbers (tests/test_benchmarks.py) in milliseconds.
    """
    difference = scores_x[:, None, :] - scores_y[None, :, :]  # runs of x, runs of y, tasks
    return float(np.mean((difference > 0) + 0.5 * (difference == 0), axis=(0, 1)).mean())


def probability_of_improvement(ours: np.ndarray | list, baseline: np.ndarray | list) -> dict[str, float] | None:
    """
    P(X > Y): the probability that a run of ours scores above a run of the baseline on a task drawn at random
    (ties count half), with its stratified-bootstrap 95% interval; ``None`` where either has no run.
    """
    x, y = as_matrix(ours), as_matrix(baseline)
    if x.size == 0 or y.size == 0:
        return None
    point = pairwise_improvement(x, y)
    if x.shape[0] == 1 and y.shape[0] == 1:
        return {"p": point, "low": point, "high": point}
    _, intervals = _interval_estimates({"x,y": (x, y)}, pairwise_improvement, IMPROVEMENT_REPS)
    low, high = intervals["x,y"][:, 0]
    return {"p": point, "low": float(low), "high": float(high)}


def plot_performance_profiles(score_dict: dict[str, np.ndarray], path: Path, xlabel: str) -> None:
    """rliable's performance profile (the fraction of runs scoring above tau) per algorithm, with 95% bands."""
    figure, axes = new_figure(1, 1, (7, 4.5))
    library, _ = _rliable()
    from rliable import plot_utils

    matrices = {algo: as_matrix(scores) for algo, scores in score_dict.items()}
    every = np.concatenate([matrix.ravel() for matrix in matrices.values()])
    taus = np.linspace(min(0.0, float(every.min())), float(every.max()) * 1.05 + 1e-9, 101)
    with _seeded_global_numpy():
        profiles, intervals = library.create_performance_profile(matrices, taus, reps=BOOTSTRAP_REPS)
    plot_utils.plot_performance_profiles(
        profiles, taus, performance_profile_cis=intervals, ax=axes[0][0], xlabel=xlabel, colors=None
    )
    axes[0][0].legend(list(matrices), loc="upper right", fontsize="small")
    save_figure(figure, path)
