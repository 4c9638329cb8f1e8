"""Statistics over seeds: the first held crossing of a return (thresholds, and the time and steps to a return paired
by seed against the baseline's own), medians with spread, the interquartile mean with its stratified-bootstrap
interval (rliable), returns at wall-time checkpoints, the probability of improvement over the baseline, and why a
ratio of times would mean nothing where it would."""

import math
from typing import Any, NamedTuple

import numpy as np

from benchmarks.cells import number
from benchmarks.output import EvalPoint
from benchmarks.protocol import is_atari, random_play_score
from benchmarks.statistics import iqm_with_interval, pooled_iqm, probability_of_improvement

# Default "solved" thresholds (rl-zoo3 / gymnasium reward thresholds); --threshold overrides, other envs get none.
HOLDING_EVALUATIONS = 2  # the evaluations after a crossing that must hold it


def trained_points(run: list[EvalPoint], step_budget: int | None = None) -> list[EvalPoint]:
    """The run's evaluations after training started (step 0 excluded), up to ``step_budget`` where given."""
    return [p for p in run if p.status == "ok" and p.steps > 0 and (step_budget is None or p.steps <= step_budget)]


def held_crossing(run: list[EvalPoint], target: float, eval_episodes: int, step_budget: int | None = None) -> EvalPoint | None:
    """
    The first evaluation after training started (up to ``step_budget``) whose return is at or above ``target`` and
    held: each of the next :data:`HOLDING_EVALUATIONS` evaluations stays at or above ``target`` less its own noise,
    the standard error of its mean (``eval_std / sqrt(eval_episodes)``). Near the end of the run every evaluation
    that remains must hold; the last evaluation, with none after it, counts as it is: it is the return at the budget
    that the tables compare, so a run is credited with the target at its budget exactly when its return there
    reaches it. None where no crossing is held.

    The evaluation before any training (step 0) does not count: a lucky initialisation can balance CartPole
    deterministically (seen with seed 0), which says nothing about the algorithm.
    """
    evaluated = trained_points(run, step_budget)
    for index, point in enumerate(evaluated):
        following = evaluated[index + 1 : index + 1 + HOLDING_EVALUATIONS]
        if point.eval_mean >= target and all(
            later.eval_mean >= target - later.eval_std / math.sqrt(eval_episodes) for later in following
        ):
            return point
    return None


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


class TimeToReturn(NamedTuple):
    """Steps and training seconds to a return; ``censored``: never held, counted at the run's last evaluation;
    ``at_first_evaluation``: held from the first evaluation after step 0 (the grid's first point)."""

    steps: int
    wall_seconds: float
    censored: bool
    at_first_evaluation: bool


def time_to_return(run: list[EvalPoint], target: float, eval_episodes: int, step_budget: int | None = None) -> TimeToReturn:
    """
    Steps and training seconds of the run's held crossing of ``target`` (:func:`held_crossing`, up to
    ``step_budget``); a run that never holds it counts at its last evaluation (its budget), censored.
    """
    evaluated = trained_points(run, step_budget)
    hit = held_crossing(run, target, eval_episodes, step_budget)
    if hit is not None:
        return TimeToReturn(hit.steps, hit.wall_seconds, False, hit.steps == evaluated[0].steps)
    last = evaluated[-1] if evaluated else None
    return TimeToReturn(last.steps, last.wall_seconds, True, False) if last else TimeToReturn(0, 0.0, True, False)


def median_bounds(per_seed: list[dict[str, Any]], key: str) -> list[float | None] | None:
    """
    Where the median of the paired ratios ``key`` can lie when seeds are censored: a seed of ours that never got
    there has a ratio of at least its value, one whose baseline never got there a ratio of at most its value, and
    one where neither did, or where both got there at the first evaluation (each time is then only known to be at
    most the grid's first point), any ratio. The median lies between the median of the lowest ratios the seeds
    allow and the median of the highest: ``[low, high]``, equal where the censored seeds cannot move it, ``high``
    None where it is unbounded. None without ratios.
    """
    lows, highs = [], []
    for entry in per_seed:
        ratio = entry[key]
        if ratio is None:
            continue
        both_first = entry["both_at_first_evaluation"]
        lows.append(0.0 if entry["baseline_censored"] or both_first else ratio)
        highs.append(math.inf if entry["censored"] or both_first else ratio)
    if not lows:
        return None
    high = float(np.median(highs))
    return [float(np.median(lows)), None if math.isinf(high) else high]


def no_ratio_reason(target: float, baseline_runs: list[list[EvalPoint]], per_seed: list[dict[str, Any]]) -> str | None:
    """
    Why a ratio of times to ``target`` would mean nothing, in words, or None where it means something: on Atari,
    random play already scores ``target`` (:func:`benchmarks.protocol.random_play_score`); elsewhere, the
    baseline's untrained policy (its evaluation at step 0) already scores it in a seed; or both sides hold it from
    the first evaluation after step 0 in every seed, where each time is only known to be at most the grid's first
    point.
    """
    env_id = next((run[0].env for run in baseline_runs if run), "")
    if is_atari(env_id):
        random_score = random_play_score(env_id)
        if target <= random_score:
            return f"random play already scores it ({number(random_score)})"
    else:
        untrained = [run[0].eval_mean for run in baseline_runs if run[0].status == "ok" and run[0].steps == 0]
        if untrained and target <= max(untrained):
            return f"the baseline's untrained policy already scores it ({number(max(untrained))} at step 0)"
    if per_seed and all(entry["both_at_first_evaluation"] for entry in per_seed):
        return "both sides hold it from the first evaluation"
    return None


def paired_to_return(
    by_run: dict[tuple[str, int, str], list[EvalPoint]],
    algo: str,
    baseline: str,
    target: float,
    step_budget: int | None,
    eval_episodes: int,
) -> dict[str, Any]:
    """
    Steps and wall seconds of ``algo`` to its held crossing of ``target`` (:func:`held_crossing`) over the
    baseline's own steps and seconds to the same return, seed by seed on the same machine. A run that never holds it
    counts at its budget and is marked censored (its ratio is then a bound: at least, for ours; at most, for the
    baseline's). ``no_ratio`` says why the ratio would mean nothing (:func:`no_ratio_reason`), or is None.
    """
    per_seed = []
    for (name, seed, machine), run in sorted(by_run.items()):
        base_run = by_run.get((baseline, seed, machine))
        if name != algo or base_run is None or run[0].status == "failed" or base_run[0].status == "failed":
            continue
        ours = time_to_return(run, target, eval_episodes, step_budget)
        base = time_to_return(base_run, target, eval_episodes, step_budget)
        per_seed.append(
            {
                "seed": seed,
                "steps": ours.steps,
                "wall_seconds": round(ours.wall_seconds, 2),
                "censored": ours.censored,
                "baseline_steps": base.steps,
                "baseline_wall_seconds": round(base.wall_seconds, 2),
                "baseline_censored": base.censored,
                "both_at_first_evaluation": ours.at_first_evaluation and base.at_first_evaluation,
                "steps_ratio": ours.steps / base.steps if base.steps else None,
                "wall_ratio": ours.wall_seconds / base.wall_seconds if base.wall_seconds else None,
            }
        )
    baseline_runs = [run for (name, _, _), run in sorted(by_run.items()) if name == baseline]
    return {
        "target": target,
        "per_seed": per_seed,
        "steps_ratio": spread([entry["steps_ratio"] for entry in per_seed]),
        "wall_ratio": spread([entry["wall_ratio"] for entry in per_seed]),
        "steps_ratio_median_bounds": median_bounds(per_seed, "steps_ratio"),
        "wall_ratio_median_bounds": median_bounds(per_seed, "wall_ratio"),
        "censored": sum(entry["censored"] for entry in per_seed),
        "baseline_censored": sum(entry["baseline_censored"] for entry in per_seed),
        "both_at_first_evaluation": sum(entry["both_at_first_evaluation"] for entry in per_seed),
        "no_ratio": no_ratio_reason(target, baseline_runs, per_seed),
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


def last_points(points: list[EvalPoint]) -> list[EvalPoint]:
    """Each run's (algo and seed's) last evaluation after some training time, in the order of algo and seed."""
    last: dict[tuple[str, int], EvalPoint] = {}
    for point in points:
        key = (point.algo, point.seed)
        if point.status == "ok" and point.wall_seconds > 0 and (key not in last or point.steps >= last[key].steps):
            last[key] = point
    return [last[key] for key in sorted(last)]


def paired_ratios(values: dict[tuple[str, int, str], Any], algo: str, baseline: str) -> list[float]:
    """``algo``'s value over the baseline's, run by run (``values``' keys: algo, seed and machine) on the same seed
    and machine, where both have one and the baseline's is not 0."""
    return [
        value / values[(baseline, seed, machine)]
        for (name, seed, machine), value in sorted(values.items())
        if name == algo and value is not None and values.get((baseline, seed, machine))
    ]


def threshold_summary(
    points: list[EvalPoint],
    threshold: float | None,
    baseline: str,
    wall_checkpoints: tuple[float, ...] = (),
    step_budget: int | None = None,
    published: float | None = None,
    *,
    eval_episodes: int,
) -> dict[str, Any]:
    """
    Per algo: steps and wall seconds to the held crossing of ``threshold`` (:func:`held_crossing`, whose noise is
    the standard error of a mean of ``eval_episodes`` episodes) per seed, final returns and the returns at the
    ``wall_checkpoints`` (seconds of training), each with its median and min/max over seeds; ratios against
    ``baseline`` paired by seed *and machine* (runs from different machines are never compared). Without a
    threshold only the returns and the final-return ratio are given. With ``step_budget``, also the return of the
    last evaluation at or before it (``budget_eval_mean``) and its paired ratio: algorithms whose rollouts overshoot
    the budget are compared at the budget, not after it.

    The protocol's comparison (``to_return``): each algo's steps and seconds to the baseline's median return at the
    budget (and to the ``published`` figure of the baseline, when given), over the baseline's own steps and seconds
    to the same return, paired by seed (:func:`paired_to_return`); and the probability that a run of the algo
    ends above a run of the baseline (``improvement_vs_baseline``, rliable).
    """
    by_run: dict[tuple[str, int, str], list[EvalPoint]] = {}
    for point in points:
        by_run.setdefault((point.algo, point.seed, point.machine), []).append(point)
    hits = {
        key: held_crossing(run, threshold, eval_episodes) if threshold is not None else None for key, run in by_run.items()
    }
    at_budget = {
        key: return_at(trained_points(run), "steps", step_budget, 1.0) if step_budget else None for key, run in by_run.items()
    }
    finals = {key: run[-1].eval_mean if run[-1].status == "ok" else None for key, run in by_run.items()}
    summary: dict[str, Any] = {"threshold": threshold, "baseline": baseline, "algos": {}}
    summary["machines"] = sorted({machine for _, _, machine in by_run})
    for algo in sorted({algo for algo, _, _ in by_run}):
        runs = sorted(key for key in by_run if key[0] == algo)
        trained = [trained_points(by_run[key]) for key in runs]
        entry: dict[str, Any] = {
            "seeds": [seed for _, seed, _ in runs],
            "failed": [by_run[key][0].error for key in runs if by_run[key][0].status == "failed"],
            "final_eval_mean": [run[-1].eval_mean if run else None for run in trained],
        }
        entry["final_eval"] = spread(entry["final_eval_mean"], interval=not step_budget)
        if step_budget:
            entry["budget_eval_mean"] = [at_budget[key] for key in runs]
            entry["budget_eval"] = spread(entry["budget_eval_mean"], interval=True)
        evaluated = [[p for p in by_run[key] if p.status == "ok"] for key in runs]
        entry["return_at_seconds"] = {
            f"{seconds:g}": spread([return_at(run, "wall_seconds", seconds) for run in evaluated])
            for seconds in wall_checkpoints
        }
        if threshold is not None:
            entry["steps_to_threshold"] = [hits[key].steps if hits[key] else None for key in runs]
            entry["wall_seconds_to_threshold"] = [round(hits[key].wall_seconds, 2) if hits[key] else None for key in runs]
            entry["steps"] = spread(entry["steps_to_threshold"])
            entry["wall_seconds"] = spread(entry["wall_seconds_to_threshold"])
        if algo != baseline:
            if threshold is not None:
                steps = {key: hit and hit.steps for key, hit in hits.items()}
                entry["steps_ratio_vs_baseline"] = spread(paired_ratios(steps, algo, baseline))
                seconds = {key: hit and hit.wall_seconds for key, hit in hits.items()}
                entry["wall_ratio_vs_baseline"] = spread(paired_ratios(seconds, algo, baseline))
            entry["final_return_ratio_vs_baseline"] = spread(paired_ratios(finals, algo, baseline))
            if step_budget:
                entry["budget_return_ratio_vs_baseline"] = spread(paired_ratios(at_budget, algo, baseline))
        summary["algos"][algo] = entry
    base_entry = summary["algos"].get(baseline)
    if base_entry is None:
        return summary
    base_returns = [value for value in compared_returns(base_entry) if value is not None]
    targets = {"baseline_median": float(np.median(base_returns))} if base_returns else {}
    summary["targets"] = targets if published is None else {**targets, "published": float(published)}
    for algo, entry in summary["algos"].items():
        if algo != baseline:
            entry["to_return"] = {
                name: paired_to_return(by_run, algo, baseline, target, step_budget, eval_episodes)
                for name, target in summary["targets"].items()
            }
            ours = [value for value in compared_returns(entry) if value is not None]
            entry["improvement_vs_baseline"] = (
                probability_of_improvement(ours, base_returns) if ours and base_returns else None
            )
    return summary


def compared_returns(entry: dict[str, Any]) -> list[float | None]:
    """Each seed's compared return: at the step budget where there is one, else the final one (a wall-time budget's
    run ends at it)."""
    return entry.get("budget_eval_mean", entry["final_eval_mean"])
