"""
Markdown tables from the harness' JSON files, for docs/results.md.

    python -m benchmarks.report docs/benchmarks/harness/*.json docs/benchmarks/throughput/*.json

Learning summaries (``benchmarks.run``) give one table per env: per algo, the runs that reached the
threshold, steps and wall seconds to it, ratios against the baseline and the final return, each as
median [min, max] over seeds. Throughput reports (``benchmarks.profiling.throughput``) give one table together.
Every table carries the command that reproduces it, the machine and the date.

With ``--across-envs`` the learning summaries give one table instead, a row per env (as a paper's table of
games): each algo's return per seed and its median [min, max], and each algo's ratio to the baseline per seed.
The return is the evaluation at the step budget (``--steps``) where the summary has it, else the final one.

With ``--evaluations`` each learning summary gives every run's evaluations instead, read from the ``ENV.csv``
beside its JSON: a row per algo and seed, a column per evaluation step (up to the step budget, when there is one)
and the run's training wall time there.
"""

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.output import EvalPoint, read_csv
from benchmarks.statistics import MIN_RUNS_TRIMMED, central_name


def median_range(stats: dict[str, Any] | None, digits: int = 0) -> str:
    """``median [min, max]`` of a spread entry, or ``-`` when no run got there."""
    if not stats or stats.get("median") is None:
        return "-"
    fmt = f"{{:.{digits}f}}"
    median, low, high = (fmt.format(stats[key]) for key in ("median", "min", "max"))
    return median if stats.get("n", 0) == 1 else f"{median} [{low}, {high}]"


def iqm_interval(stats: dict[str, Any] | None, digits: int = 0) -> str:
    """``iqm [low, high]``: interquartile mean over seeds and its 95% bootstrap confidence interval."""
    if not stats or stats.get("iqm") is None:
        return "-"
    low, high = stats["iqm_ci95"]
    return f"{stats['iqm']:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def machine_line(machine: dict[str, Any]) -> str:
    """Name, torch threads, GPU and date of the machine a result came from."""
    name = machine.get("name") or f"{machine.get('processor')} x{machine.get('cpus')}"
    return f"{name}, torch threads {machine.get('torch_threads', '?')}, GPU {machine.get('cuda') or 'none'}, {machine['date']}"


def learning_table(summary: dict[str, Any]) -> str:
    threshold, baseline = summary["threshold"], summary["baseline"]
    machine = summary["machine"]
    at_budget = all("budget_eval" in entry for entry in summary["algos"].values()) and threshold is None
    # With a step budget, the evaluation at the budget is the one compared (not one after an overshooting rollout).
    returns, ratios = (
        ("budget_eval", "budget_return_ratio_vs_baseline") if at_budget else ("final_eval", "final_return_ratio_vs_baseline")
    )
    central = central_name([entry[returns]["n"] for entry in summary["algos"].values()])
    every = (
        f"{summary['eval_seconds']:g} s of training"
        if summary.get("eval_seconds")
        else f"{summary.get('eval_freq', '?')} steps"
    )
    budget = f"; training budget {summary['max_seconds']:g} s of wall time per run" if summary.get("max_seconds") else ""
    lines = [
        f"#### {summary['env']}" + (f" (threshold {threshold:g})" if threshold is not None else ""),
        "",
        f"`{summary['command']}`  ",
        f"Machine: {machine_line(machine)}; "
        f"{summary.get('eval_episodes', '?')} {summary.get('eval_policy') or 'deterministic'} evaluation episodes every "
        f"{every}{budget}; "
        f"medians over seeds [min, max]; {central} over seeds [95% bootstrap CI] (the interquartile mean, the mean "
        f"under {MIN_RUNS_TRIMMED} seeds); "
        f"ratios vs `{baseline}` paired by seed.",
    ]
    if summary.get("hyperparams"):
        sources = ", ".join(f"{algo}: `{source}`" for algo, source in summary["hyperparams"].items())
        lines.append(f"Hyperparameters: {sources}.")
    lines.append("")
    checkpoints = list(next(iter(summary["algos"].values()), {}).get("return_at_seconds", {}))
    if threshold is not None:
        lines += [
            "| algo | reached | steps to threshold | wall s to threshold | steps ratio | wall ratio | final return |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
    else:
        at = [f"return at {seconds} s" for seconds in checkpoints]
        compared = "final return" if not at_budget else f"return at {summary['steps']} steps"
        header = ["algo", "seeds", *at, "final steps", compared, f"{compared} {central}", f"{compared}: ratio"]
        lines += ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for algo, entry in sorted(summary["algos"].items(), key=lambda item: (item[0] != baseline, item[0])):
        final = median_range(entry[returns], 1)
        if entry.get("failed"):
            final += f" ({len(entry['failed'])} failed)"
        if threshold is not None:
            row = [
                algo,
                entry["reached"],
                median_range(entry["steps"]),
                median_range(entry["wall_seconds"], 1),
                median_range(entry.get("steps_ratio_vs_baseline"), 2),
                median_range(entry.get("wall_ratio_vs_baseline"), 2),
                final,
            ]
        else:
            at = [median_range(entry["return_at_seconds"][seconds]) for seconds in checkpoints]
            steps = median_range(entry.get("steps_done"))
            ratio = median_range(entry.get(ratios), 2)
            row = [algo, str(len(entry["seeds"])), *at, steps, final, iqm_interval(entry[returns]), ratio]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def score(value: float | None) -> str:
    """A return as a table shows it: one decimal below 100, none above; ``-`` for a run that has none."""
    if value is None:
        return "-"
    return f"{value:.1f}" if abs(value) < 100 else f"{value:.0f}"


def score_range(stats: dict[str, Any]) -> str:
    """``median [min, max]`` of returns, each written as :func:`score` writes it."""
    if stats.get("median") is None:
        return "-"
    median, low, high = (score(stats[key]) for key in ("median", "min", "max"))
    return median if stats["n"] == 1 else f"{median} [{low}, {high}]"


def across_envs_table(summaries: list[dict[str, Any]]) -> str:
    """One row per env: every algo's return per seed with its median [min, max], and its ratios to the baseline."""
    baseline = summaries[0]["baseline"]
    algos = sorted({algo for summary in summaries for algo in summary["algos"]}, key=lambda a: (a != baseline, a))
    others = [algo for algo in algos if algo != baseline]
    at_budget = all("budget_eval_mean" in entry for summary in summaries for entry in summary["algos"].values())
    values, spread_key, ratios_key = (
        ("budget_eval_mean", "budget_eval", "budget_return_ratios")
        if at_budget
        else ("final_eval_mean", "final_eval", "final_return_ratios")
    )
    budgets = sorted({summary.get("steps") for summary in summaries}, key=str)
    header = ["env", *(f"{algo} (by seed)" for algo in algos), *(f"{algo} median [min, max]" for algo in algos)]
    header += [f"{algo} / {baseline} (by seed)" for algo in others] + ["seeds"]
    lines = [
        f"Return at {'the step budget ' + ', '.join(map(str, budgets)) if at_budget else 'the end of each run'}; "
        f"ratios vs `{baseline}` paired by seed and machine.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + " --- |" * len(header),
    ]
    for summary in summaries:
        entries = {algo: summary["algos"].get(algo) for algo in algos}
        by_seed = [", ".join(map(score, entry[values])) if entry else "-" for entry in entries.values()]
        medians = [score_range(entry[spread_key]) if entry else "-" for entry in entries.values()]
        ratios = [
            ", ".join(f"{ratio:.2f}" for _, ratio in (entries[algo] or {}).get(ratios_key, [])) or "-" for algo in others
        ]
        seed_lists = {algo: ", ".join(map(str, entry["seeds"])) for algo, entry in entries.items() if entry}
        seeds = (
            next(iter(seed_lists.values()))
            if len(set(seed_lists.values())) == 1
            else "; ".join(f"{algo}: {listed}" for algo, listed in seed_lists.items())
        )
        lines.append("| " + " | ".join([summary["env"], *by_seed, *medians, *ratios, seeds]) + " |")
    lines.append("")
    lines += [f"- {summary['env']}: `{summary['command']}`; {machine_line(summary['machine'])}" for summary in summaries]
    return "\n".join(lines) + "\n"


def evaluations_table(summary: dict[str, Any], points: list[EvalPoint]) -> str:
    """Every run's evaluations (mean over the evaluation episodes) at each evaluation step, a row per algo and seed,
    with the training wall time (evaluation excluded) at the last step shown. Failed runs' points are left out."""
    budget, baseline = summary.get("steps"), summary["baseline"]
    kept = [point for point in points if point.status == "ok" and point.steps > 0]
    kept = [point for point in kept if budget is None or point.steps <= budget]
    steps = sorted({point.steps for point in kept})
    runs: dict[tuple[str, int], dict[int, EvalPoint]] = {}
    for point in kept:
        runs.setdefault((point.algo, point.seed), {})[point.steps] = point
    header = ["run", *(f"{step // 1000}k" if step % 1000 == 0 else str(step) for step in steps), "training time"]
    lines = [
        f"#### {summary['env']}: every evaluation",
        "",
        f"Mean return of {summary.get('eval_episodes', '?')} {summary.get('eval_policy') or 'deterministic'} evaluation "
        "episodes at each step; "
        "training time: wall time to the last step shown, evaluation excluded.",
        f"`{summary['command']}`; {machine_line(summary['machine'])}",
        "",
        "| " + " | ".join(header) + " |",
        "|" + " --- |" * len(header),
    ]
    for (algo, seed), found in sorted(runs.items(), key=lambda item: (item[0][0] != baseline, item[0])):
        last = found[max(found)]
        cells = [score(found[step].eval_mean) if step in found else "-" for step in steps]
        lines.append("| " + " | ".join([f"{algo}, seed {seed}", *cells, f"{last.wall_seconds / 60:.1f} min"]) + " |")
    return "\n".join(lines) + "\n"


def throughput_table(reports: list[dict[str, Any]]) -> str:
    lines = [
        "| algo | env | vec env | collector | batch steps | C s | L s | T_async s | T_async / max(C, L) | T_sync s "
        "| broadcast share | lag mean / max | CPU s / 1k steps (T_async) | command, machine, date |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def number(report: dict[str, Any], key: str, fmt: str = "{:.4f}") -> str:
        value = report.get(key)
        return fmt.format(value) if isinstance(value, (int, float)) else "-"

    for report in reports:
        machine = report["machine"]
        row = [
            report["algo"],
            report["env"],
            report["vec_env"],
            report["collector"]
            + (f", {report['busy_processes']} busy processes beside it" if report.get("busy_processes") else ""),
            str(report.get("batch_env_steps", "-")),
            number(report, "C_collect_seconds_per_batch"),
            number(report, "L_learn_seconds_per_batch"),
            number(report, "T_async_seconds_per_batch"),
            number(report, "T_async_over_max_C_L", "{:.2f}"),
            number(report, "T_sync_seconds_per_batch"),
            number(report, "broadcast_share_of_learner_time", "{:.1%}"),
            f"{number(report, 'policy_lag_mean', '{:.1f}')} / {number(report, 'policy_lag_max', '{:.0f}')}",
            number(report, "T_async_cpu_seconds_per_1k_steps", "{:.2f}"),
            f"`{report['command']}`, {machine_line(machine)}",
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def render(paths: list[Path], across_envs: bool = False, evaluations: bool = False) -> str:
    documents = [json.loads(path.read_text()) for path in paths]
    learning = [doc for doc in documents if "algos" in doc]
    if (across_envs or evaluations) and not learning:
        option = "--across-envs" if across_envs else "--evaluations"
        raise ValueError(f"{option} needs learning summaries (the JSON files of benchmarks run)")
    if across_envs:
        return across_envs_table(learning)
    if evaluations:
        return "\n".join(
            evaluations_table(doc, read_csv(path.with_suffix(".csv")))
            for path, doc in zip(paths, documents, strict=True)
            if "algos" in doc
        )
    throughput = [doc for doc in documents if "T_async_seconds_per_batch" in doc or "C_collect_seconds_per_batch" in doc]
    parts = [learning_table(summary) for summary in learning]
    if throughput:
        parts.append(throughput_table(throughput))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="write the markdown here instead of printing it")
    parser.add_argument("--across-envs", action="store_true", help="one table, a row per env (a paper's table of games)")
    parser.add_argument(
        "--evaluations", action="store_true", help="every run's evaluations, from the ENV.csv beside each JSON"
    )
    args = parser.parse_args(argv)
    if args.across_envs and args.evaluations:
        parser.error("--across-envs and --evaluations give different tables: choose one")
    markdown = render(args.json, across_envs=args.across_envs, evaluations=args.evaluations)
    if args.out:
        args.out.write_text(markdown)
    else:
        print(markdown)


if __name__ == "__main__":
    main()
