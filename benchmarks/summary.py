"""Statistics over seeds: thresholds and the first evaluation reaching them, medians with spread, the
interquartile mean with its stratified-bootstrap interval (rliable), returns at wall-time checkpoints, the time and
steps to a return paired by seed against the baseline's own, the probability of improvement over the baseline."""

import math
from typing import Any

import numpy as np

from benchmarks.output import EvalPoint
from benchmarks.statistics import iqm_with_interval, pooled_iqm, probability_of_improvement

# Default "solved" thresholds (rl-zoo3 / gymnasium reward thresholds); --threshold overrides, other envs get none.
THRESHOLDS = {
    "CartPole-v1": 475.0,
    "Pendulum-v1": -200.0,
    "LunarLander-v3": 200.0,
    "LunarLanderContinuous-v3": 200.0,
}


def first_reaching(points: list[EvalPoint], threshold: float | None) -> EvalPoint | None:
    """
    The first evaluation point after training started whose mean return is >= threshold.

    The evaluation before any training (step 0) does not count: a lucky initialisation can balance
    CartPole deterministically (seen with seed 0), which says nothing about the algorithm.
    """
    if threshold is None:
        return None
    return next((p for p in points if p.status == "ok" and p.steps > 0 and p.eval_mean >= threshold), None)


def spread(values: list[float | None], interval: bool = False) -> dict[str, Any]:
    """
    Median, min and max of the finite values (``None`` entries are runs that never got there) and their interquartile
    mean; with ``interval``, also the IQM's stratified-bootstrap 95% confidence interval (rliable) as ``iqm_ci95``.
    """
    finite = [value for value in values if value is not None and np.isfinite(value)]
    if not finite:
        return {"median": None, "min": None, "max": None, "n": 0, "iqm": None, "iqm_ci95": None}
    stats = {
        "median": float(np.median(finite)),
        "min": float(np.min(finite)),
        "max": float(np.max(finite)),
        "n": len(finite),
        "iqm": float(pooled_iqm(np.asarray(finite))),
    }
    if interval:
        estimate = iqm_with_interval(finite)
        stats["iqm_ci95"] = [estimate["low"], estimate["high"]]
    return stats


def time_to_return(run: list[EvalPoint], target: float, step_budget: int | None = None) -> tuple[int, float, bool]:
    """
    Steps and training seconds of the first evaluation after training started (up to ``step_budget``) whose return
    is >= ``target``, and False; a run that never gets there counts at its last evaluation (its budget), censored:
    True.
    """
    evaluated = [p for p in run if p.status == "ok" and p.steps > 0 and (step_budget is None or p.steps <= step_budget)]
    hit = next((p for p in evaluated if p.eval_mean >= target), None)
    if hit is not None:
        return hit.steps, hit.wall_seconds, False
    last = evaluated[-1] if evaluated else None
    return (last.steps, last.wall_seconds, True) if last else (0, 0.0, True)


def median_bounds(per_seed: list[dict[str, Any]], key: str) -> list[float | None] | None:
    """
    Where the median of the paired ratios ``key`` can lie when seeds are censored: a seed of ours that never got
    there has a ratio of at least its value, one whose baseline never got there a ratio of at most its value, and
    one where neither did any ratio. The median lies between the median of the lowest ratios the seeds allow and
    the median of the highest: ``[low, high]``, equal where the censored seeds cannot move it, ``high`` None where it
    is unbounded. None without ratios.
    """
    lows, highs = [], []
    for entry in per_seed:
        ratio = entry[key]
        if ratio is None:
            continue
        lows.append(0.0 if entry["baseline_censored"] else ratio)
        highs.append(math.inf if entry["censored"] else ratio)
    if not lows:
        return None
    high = float(np.median(highs))
    return [float(np.median(lows)), None if math.isinf(high) else high]


def paired_to_return(
    by_run: dict[tuple[str, int, str], list[EvalPoint]], algo: str, baseline: str, target: float, step_budget: int | None
) -> dict[str, Any]:
    """
    Steps and wall seconds of ``algo`` to ``target`` over the baseline's own steps and seconds to the same return,
    seed by seed on the same machine. A run that never gets there counts at its budget and is marked censored (its
    ratio is then a bound: at least, for ours; at most, for the baseline's).
    """
    per_seed = []
    for (name, seed, machine), run in sorted(by_run.items()):
        base_run = by_run.get((baseline, seed, machine))
        if name != algo or base_run is None or run[0].status == "failed" or base_run[0].status == "failed":
            continue
        steps, wall, censored = time_to_return(run, target, step_budget)
        base_steps, base_wall, base_censored = time_to_return(base_run, target, step_budget)
        per_seed.append(
            {
                "seed": seed,
                "steps": steps,
                "wall_seconds": round(wall, 2),
                "censored": censored,
                "baseline_steps": base_steps,
                "baseline_wall_seconds": round(base_wall, 2),
                "baseline_censored": base_censored,
                "steps_ratio": steps / base_steps if base_steps else None,
                "wall_ratio": wall / base_wall if base_wall else None,
            }
        )
    return {
        "target": target,
        "per_seed": per_seed,
        "steps_ratio": spread([entry["steps_ratio"] for entry in per_seed]),
        "wall_ratio": spread([entry["wall_ratio"] for entry in per_seed]),
        "steps_ratio_median_bounds": median_bounds(per_seed, "steps_ratio"),
        "wall_ratio_median_bounds": median_bounds(per_seed, "wall_ratio"),
        "censored": sum(entry["censored"] for entry in per_seed),
        "baseline_censored": sum(entry["baseline_censored"] for entry in per_seed),
    }


def return_at(run: list[EvalPoint], attribute: str, budget: float, overshoot: float = 1.02) -> float | None:
    """
    The return of the last evaluation at or before ``budget * overshoot`` (steps or wall seconds); None if the
    run stopped earlier. Wall-time checkpoints allow 2% over the budget (an evaluation lands a little late);
    a step budget allows none (``overshoot=1``), so a last rollout past it is not what is compared.
    """
    if not run or getattr(run[-1], attribute) < budget * 0.98:  # the last point may land a little short of the budget
        return None
    before = [p.eval_mean for p in run if getattr(p, attribute) <= budget * overshoot]
    return before[-1] if before else None


def threshold_summary(
    points: list[EvalPoint],
    threshold: float | None,
    baseline: str,
    wall_checkpoints: tuple[float, ...] = (),
    step_budget: int | None = None,
    published: float | None = None,
) -> dict[str, Any]:
    """
    Per algo: steps and wall seconds to ``threshold`` per seed, final and best returns, each with its median
    and min/max over seeds; ratios against ``baseline`` paired by seed *and machine* (runs from different
    machines are never compared). Without a threshold only the returns and the final-return ratio are given.
    With ``step_budget``, also the return of the last evaluation at or before it (``budget_eval_mean``) and its
    paired ratio: algorithms whose rollouts overshoot the budget are compared at the budget, not after it.

    The protocol's comparison (``to_return``): each algo's steps and seconds to the baseline's median return at the
    budget (and to the ``published`` figure of the baseline, when given), over the baseline's own steps and seconds
    to the same return, paired by seed (:func:`paired_to_return`); and the probability that a run of the algo
    ends above a run of the baseline (``improvement_vs_baseline``, rliable).
    """
    by_run: dict[tuple[str, int, str], list[EvalPoint]] = {}
    for point in points:
        by_run.setdefault((point.algo, point.seed, point.machine), []).append(point)
    reached = {key: first_reaching(run, threshold) if threshold is not None else None for key, run in by_run.items()}
    at_budget = {
        key: return_at([p for p in run if p.status == "ok" and p.steps > 0], "steps", step_budget, overshoot=1.0)
        for key, run in by_run.items()
        if step_budget
    }
    summary: dict[str, Any] = {"threshold": threshold, "baseline": baseline, "algos": {}}
    summary["machines"] = sorted({machine for _, _, machine in by_run})
    for algo in sorted({algo for algo, _, _ in by_run}):
        runs = sorted(key for key in by_run if key[0] == algo)
        evaluated = [[p for p in by_run[key] if p.status == "ok"] for key in runs]
        trained = [[p for p in run if p.steps > 0] for run in evaluated]
        entry: dict[str, Any] = {
            "seeds": [seed for _, seed, _ in runs],
            "failed": [by_run[key][0].error for key in runs if by_run[key][0].status == "failed"],
            "final_eval_mean": [run[-1].eval_mean if run else None for run in trained],
            "best_eval_mean": [max(p.eval_mean for p in run) if run else None for run in trained],
            "final_steps": [run[-1].steps if run else None for run in trained],
        }
        entry["final_eval"] = spread(entry["final_eval_mean"], interval=not step_budget)
        entry["steps_done"] = spread(entry["final_steps"])
        if step_budget:
            entry["budget_eval_mean"] = [at_budget[key] for key in runs]
            entry["budget_eval"] = spread(entry["budget_eval_mean"], interval=True)
        entry["return_at_seconds"] = {
            f"{seconds:g}": spread([return_at(run, "wall_seconds", seconds) for run in evaluated])
            for seconds in wall_checkpoints
        }
        if threshold is not None:
            hits = [reached[key] for key in runs]
            entry["steps_to_threshold"] = [hit.steps if hit else None for hit in hits]
            entry["wall_seconds_to_threshold"] = [round(hit.wall_seconds, 2) if hit else None for hit in hits]
            entry["reached"] = f"{sum(hit is not None for hit in hits)}/{len(hits)}"
            entry["steps"] = spread(entry["steps_to_threshold"])
            entry["wall_seconds"] = spread(entry["wall_seconds_to_threshold"])
            entry["median_steps"] = entry["steps"]["median"]
            entry["median_wall_seconds"] = entry["wall_seconds"]["median"]
        if algo != baseline:
            step_ratios, wall_ratios, final_ratios, budget_ratios = [], [], [], []
            for _, seed, machine in runs:
                base_run = by_run.get((baseline, seed, machine))
                if base_run is None:
                    continue
                ours, base = reached.get((algo, seed, machine)), reached.get((baseline, seed, machine))
                if ours and base and base.steps > 0 and base.wall_seconds > 0:
                    step_ratios.append(ours.steps / base.steps)
                    wall_ratios.append(ours.wall_seconds / base.wall_seconds)
                ours_final, base_final = by_run[(algo, seed, machine)][-1], base_run[-1]
                if ours_final.status == base_final.status == "ok" and base_final.eval_mean != 0:
                    final_ratios.append((seed, ours_final.eval_mean / base_final.eval_mean))
                ours_at, base_at = at_budget.get((algo, seed, machine)), at_budget.get((baseline, seed, machine))
                if ours_at is not None and base_at:
                    budget_ratios.append((seed, ours_at / base_at))
            if threshold is not None:
                entry["steps_ratio_vs_baseline"] = spread(step_ratios)
                entry["wall_ratio_vs_baseline"] = spread(wall_ratios)
            # The paired ratios per seed as [seed, ratio] (the report's per-seed column), then their spread.
            entry["final_return_ratios"] = [list(pair) for pair in final_ratios]
            entry["final_return_ratio_vs_baseline"] = spread([ratio for _, ratio in final_ratios])
            if step_budget:
                entry["budget_return_ratios"] = [list(pair) for pair in budget_ratios]
                entry["budget_return_ratio_vs_baseline"] = spread([ratio for _, ratio in budget_ratios])
        summary["algos"][algo] = entry
    compare_to_baseline(summary, by_run, step_budget, wall_checkpoints, published)
    return summary


def compared_returns(entry: dict[str, Any], step_budget: int | None, wall_checkpoints: tuple[float, ...]) -> list:
    """Each seed's compared return: at the step budget, else the final one (a wall-time budget's run ends at it)."""
    if step_budget:
        return entry["budget_eval_mean"]
    return entry["final_eval_mean"]


def compare_to_baseline(
    summary: dict[str, Any],
    by_run: dict[tuple[str, int, str], list[EvalPoint]],
    step_budget: int | None,
    wall_checkpoints: tuple[float, ...],
    published: float | None,
) -> None:
    """Add the targets, each algo's paired steps and time to them, and its probability of improvement."""
    baseline = summary["baseline"]
    base_entry = summary["algos"].get(baseline)
    if base_entry is None:
        return
    base_returns = [value for value in compared_returns(base_entry, step_budget, wall_checkpoints) if value is not None]
    targets: dict[str, float] = {}
    if base_returns:
        targets["baseline_median"] = float(np.median(base_returns))
    if published is not None:
        targets["published"] = float(published)
    summary["targets"] = targets
    for algo, entry in summary["algos"].items():
        if algo == baseline:
            continue
        entry["to_return"] = {
            name: paired_to_return(by_run, algo, baseline, target, step_budget) for name, target in targets.items()
        }
        ours = [value for value in compared_returns(entry, step_budget, wall_checkpoints) if value is not None]
        entry["improvement_vs_baseline"] = probability_of_improvement(ours, base_returns) if ours and base_returns else None
