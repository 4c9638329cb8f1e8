"""
Markdown tables from the harness' JSON files, for docs/results.md.

    python -m benchmarks.report docs/benchmarks/harness/*.json docs/benchmarks/throughput/*.json

Learning summaries (``benchmarks.run``) give one table per env: per algo, the runs that reached the
threshold, steps and wall seconds to it, ratios against the baseline and the final return, each as
median [min, max] over seeds. Throughput reports (``benchmarks.throughput``) give one table together.
Every table carries the command that reproduces it, the machine and the date.
"""

import argparse
import json
from pathlib import Path
from typing import Any


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
        f"{summary.get('eval_episodes', '?')} deterministic evaluation episodes every {every}{budget}; "
        f"medians over seeds [min, max]; IQM: interquartile mean over seeds [95% bootstrap CI]; "
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
        header = ["algo", "seeds", *at, "final steps", "final return", "final return IQM", "final-return ratio"]
        lines += ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for algo, entry in sorted(summary["algos"].items(), key=lambda item: (item[0] != baseline, item[0])):
        final = median_range(entry["final_eval"], 1)
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
            ratio = median_range(entry.get("final_return_ratio_vs_baseline"), 2)
            row = [algo, str(len(entry["seeds"])), *at, steps, final, iqm_interval(entry["final_eval"]), ratio]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def throughput_table(reports: list[dict[str, Any]]) -> str:
    lines = [
        "| algo | env | vec env | collector | batch steps | C s | L s | T_async s | T_async / max(C, L) | T_sync s "
        "| broadcast share | lag mean / max | command, machine, date |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
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
            report["collector"],
            str(report.get("batch_env_steps", "-")),
            number(report, "C_collect_seconds_per_batch"),
            number(report, "L_learn_seconds_per_batch"),
            number(report, "T_async_seconds_per_batch"),
            number(report, "T_async_over_max_C_L", "{:.2f}"),
            number(report, "T_sync_seconds_per_batch"),
            number(report, "broadcast_share_of_learner_time", "{:.1%}"),
            f"{number(report, 'policy_lag_mean', '{:.1f}')} / {number(report, 'policy_lag_max', '{:.0f}')}",
            f"`{report['command']}`, {machine_line(machine)}",
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def render(paths: list[Path]) -> str:
    documents = [json.loads(path.read_text()) for path in paths]
    learning = [doc for doc in documents if "algos" in doc]
    throughput = [doc for doc in documents if "T_async_seconds_per_batch" in doc or "C_collect_seconds_per_batch" in doc]
    parts = [learning_table(summary) for summary in learning]
    if throughput:
        parts.append(throughput_table(throughput))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="write the markdown here instead of printing it")
    args = parser.parse_args(argv)
    markdown = render(args.json)
    if args.out:
        args.out.write_text(markdown)
    else:
        print(markdown)


if __name__ == "__main__":
    main()
