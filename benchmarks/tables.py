"""
Every results table, the results page's summary and the README's results table, regenerated from the data files.

    python -m benchmarks tables            # rewrite the generated blocks of README.md and docs/results.md
    python -m benchmarks tables --check    # exit 1, naming each block, where a page differs from what it would write

The manifest, ``benchmarks/tables.yml``, lists each table: its page, its kind, its data folder, its environments,
its baseline and the recipe that makes its data; and the README's rows, each pointing at a table. A page holds a
table between ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->``; everything between the markers is
this command's, everything outside them is prose.

Each table is computed from the runs' evaluation rows (``ENV.csv``) and their records (``runs/ENV/*.json``), not
from the JSON summaries, under the protocol (``benchmarks/protocol.py``): a reporting table refuses seeds below
100, a table that compares algorithms refuses runs whose machine, software or settings differ, and every run must
have its record.

Kinds:

- ``comparison``: one environment, algorithms against a baseline at the same budget. Per algo: the return at the
  budget (median [min, max]; IQM [95% CI], named the mean under 4 seeds, where it cuts nothing), the probability of
  improvement over the baseline, and the steps and training time to the baseline's median return (and to the
  baseline's published figure, where there is one), each over the baseline's own, paired by seed. Both sides'
  times are to their held crossing of the return (:func:`benchmarks.summary.held_crossing`); a seed that never
  holds it counts at its budget, censored. Where the ratio would mean nothing (the target is a return the
  baseline's untrained policy or random play already scores, or both sides hold it from the first evaluation:
  :func:`benchmarks.summary.no_ratio_reason`) the cell says so in words.
- ``atari``: several games, algorithms against a baseline: per game the return and the human-normalised score;
  across games, the IQM of human-normalised scores with its interval, the probability of improvement, and a
  performance profile (``profile.png`` in the data folder).
- ``evaluations``: every run's evaluations, a row per algo and seed.

The README's table gives, per row, the result, the baseline's, the probability of improvement (P(better)) and the
paired ratio (or why there is none).

The manifest's ``labels`` give an algo whose spec is long (its settings in brackets) a short name for the pages;
each table says, below it, what its labels stand for.

The manifest's ``measurements`` are tables of cost and speed, not returns, each from JSON files that a benchmark
wrote (``data``: a list of files), with the command and machine they record:

- ``throughput`` (``python -m benchmarks throughput``): per file, C, L, T_async, T_async / max(C, L), T_sync,
  env steps per second asynchronous and T_sync / T_async, CPU-seconds per 1000 steps, idle or busy;
- ``step_cost`` (``python -m benchmarks step_cost``): per algo and env, wall and CPU ms per env step (and beside
  CPU-bound processes, with the busy/idle ratio);
- ``demo``: the README demo's training time and CPU, idle and busy, from its output under ``/usr/bin/time -v``.
- ``gpu_overlap`` and ``ray_scaling``, a lent GPU machine's (``benchmarks/recipes/gpu_machine.sh``): throughput
  reports against their overlap bound beside an SB3 run's steps per second; the Ray collector's ``learn()`` against
  the learner's ceiling. Their files may not be there yet: the table then says so.
"""

import argparse
import difflib
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from benchmarks.output import EvalPoint, read_csv
from benchmarks.protocol import (
    PUBLISHED_RETURNS,
    STACK_PACKAGES,
    ProtocolError,
    atari_game,
    check_comparison,
    check_reporting_seeds,
    human_normalized,
    read_run_records,
)
from benchmarks.report import score
from benchmarks.statistics import central_name, iqm_with_interval, plot_performance_profiles, probability_of_improvement
from benchmarks.summary import threshold_summary

REPO_ROOT = Path(__file__).resolve().parent.parent
MANIFEST = REPO_ROOT / "benchmarks" / "tables.yml"
BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- end generated: (?P=name) -->)", re.DOTALL)
NOT_YET = "not yet re-measured under the protocol"
MIN_README_SEEDS = 3  # the protocol's least number of seeds for a headline


def load_manifest(path: Path = MANIFEST) -> dict[str, Any]:
    manifest = yaml.safe_load(path.read_text())
    names = [table["name"] for table in [*manifest["tables"], *manifest.get("measurements", [])]]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise ProtocolError(f"{path}: tables named more than once: {duplicated}")
    labels = list(manifest.get("labels", {}).values())
    shared = sorted({label for label in labels if labels.count(label) > 1})
    if shared:
        raise ProtocolError(f"{path}: labels given to more than one algo: {shared}")
    return manifest


class Table:
    """One manifest entry with its runs, read and checked against the protocol."""

    def __init__(self, entry: dict[str, Any], root: Path, labels: dict[str, str] | None = None) -> None:
        self.entry = entry
        self.labels = labels or {}
        self.name: str = entry["name"]
        self.kind: str = entry.get("kind", "comparison")
        self.baseline: str = entry["baseline"]
        self.envs: list[str] = entry["envs"]
        self.folder = root / entry["data"]
        self.points: dict[str, list[EvalPoint]] = {}
        self.records: dict[str, list[dict[str, Any]]] = {}
        self._summaries: dict[str, dict[str, Any]] = {}
        for env in self.envs:
            csv_path = self.folder / f"{env}.csv"
            if not csv_path.is_file():
                continue
            points = read_csv(csv_path)
            records = read_run_records(self.folder, env)
            missing = sorted({(p.algo, p.seed) for p in points} - set(records))
            if missing:
                raise ProtocolError(f"table {self.name}: runs without their record in {self.folder}/runs/{env}: {missing}")
            self.points[env] = points
            self.records[env] = [records[key] for key in sorted({(p.algo, p.seed) for p in points})]
        every = [record for records in self.records.values() for record in records]
        check_comparison(every, f"table {self.name}")
        if entry.get("reporting", True):
            check_reporting_seeds([record["seed"] for record in every], f"table {self.name}")

    def link(self, target: str) -> str:
        """``target`` (relative to the repository) as a link from the table's page."""
        return relative(self.entry["page"], target)

    def label(self, algo: str) -> str:
        """How the pages name ``algo``: the manifest's label for it, else the algo as the runs have it."""
        return self.labels.get(algo, algo)

    def legend(self, algos: list[str]) -> str:
        """What each label of ``algos`` stands for (empty where none has a label)."""
        named = [f"`{self.labels[algo]}` is `{algo}`" for algo in sorted(set(algos)) if algo in self.labels]
        return ("Labels: " + "; ".join(named) + ".") if named else ""

    @property
    def measured(self) -> bool:
        return bool(self.points)

    @property
    def alone(self) -> bool:
        """
        Whether the runs had the machine to themselves, so that their training times compare: the manifest's
        ``alone``, by default true for a wall-clock budget and false for a step budget (step-based runs may share
        the machine, the protocol says). A table whose runs shared it reports no time ratio.
        """
        first = next(record for records in self.records.values() for record in records)
        return bool(self.entry.get("alone", bool(first.get("max_seconds"))))

    def summary(self, env: str) -> dict[str, Any]:
        """The env's statistics (``threshold_summary``) at the runs' budget, with the published target (computed once)."""
        if env not in self._summaries:
            self._summaries[env] = self._summarize(env)
        return self._summaries[env]

    def _summarize(self, env: str) -> dict[str, Any]:
        record = self.records[env][0]
        base_algo = re.sub(r"\[.*$", "", self.baseline)
        published = self.entry.get("published", PUBLISHED_RETURNS.get((base_algo, env)))
        step_budget = None if record.get("max_seconds") else record.get("steps")
        return threshold_summary(
            self.points[env],
            None,
            self.baseline,
            step_budget=step_budget,
            published=published,
            eval_episodes=record["eval_episodes"],
        )

    def atari_matrices(self) -> dict[str, np.ndarray]:
        """Per algo, the ``(runs, games)`` human-normalised scores of the games where every algo has 3 seeds or more."""
        scores = {env: run_scores(self.summary(env)) for env in self.envs if env in self.points}
        algos = {algo for by_algo in scores.values() for algo in by_algo}
        complete = [env for env in scores if all(len(scores[env].get(algo, {})) >= 3 for algo in algos)]
        return {algo: normalised_matrix(scores, complete, algo) for algo in sorted(algos)} if complete else {}

    def steps_per_second(self, env: str) -> dict[str, list[float]]:
        """Per algo, each run's environment steps per second of training: its last point's steps over its time."""
        last: dict[tuple[str, int], EvalPoint] = {}
        for point in self.points[env]:
            if point.status == "ok" and point.wall_seconds > 0:
                key = (point.algo, point.seed)
                if key not in last or point.steps >= last[key].steps:
                    last[key] = point
        speeds: dict[str, list[float]] = {}
        for (algo, _), point in sorted(last.items()):
            speeds.setdefault(algo, []).append(point.steps / point.wall_seconds)
        return speeds

    def settings_line(self) -> str:
        """Budget, evaluation grid and policy, seeds, machine, software, date and the runs' commands."""
        every = [record for records in self.records.values() for record in records]
        first = next((record for record in every if not record.get("stack")), every[0])
        budget = f"{first['max_seconds']:g} s of training" if first.get("max_seconds") else f"{first['steps']} steps"
        grid = (
            f"every {first['eval_seconds']:g} s of training"
            if first.get("eval_seconds")
            else f"every {first['eval_freq']} steps"
        )
        machine = first["machine"]
        # Step-based runs may share the machine with other invocations (the protocol); wall-clock runs do not.
        shared = " (alone)" if self.alone else " (step-based: other invocations may run beside it, so no time ratio)"
        software = machine.get("software", {})
        versions = ", ".join(
            f"{name} {software.get(name)}" for name in ("torch", "stable_baselines3", "gymnasium") if software
        )
        for stack in sorted({record["stack"] for record in every if record.get("stack")}):
            peer = next(record for record in every if record.get("stack") == stack)["machine"].get("software", {})
            pinned = ", ".join(f"{name} {peer.get(name)}" for name in STACK_PACKAGES.get(stack, ()))
            versions += f"; {stack}'s own environment: {pinned}"
        dates = sorted({record["finished"][:10] for record in every})
        seeds = sorted({record["seed"] for record in every})
        commits = sorted(
            {record["commit"][:7] + ("+dirty" if record["commit"].endswith("+dirty") else "") for record in every}
        )
        commands = sorted({re.sub(r"--first-seed \d+ ", "", record["command"]).replace(" --seeds 1", "") for record in every})
        lines = [
            f"Budget {budget}; {first['eval_episodes']} {first['eval_policy']} evaluation episodes {grid} (the same "
            f"grid for every algo); seeds {', '.join(map(str, seeds))}; {machine['name']}, torch threads "
            f"{first['torch_threads']} per run, {first['jobs']} run(s) at a time per invocation{shared}; {versions}; "
            f"commit(s) "
            f"{', '.join(commits)}; {' to '.join([dates[0], dates[-1]] if len(dates) > 1 else dates)}.",
            f"Recipe: [{self.entry['recipe']}]({relative(self.entry['page'], self.entry['recipe'])}); each run: "
            + "; ".join(f"`{command}`" for command in commands),
        ]
        return "  \n".join(lines)


def relative(page: str, target: str) -> str:
    """``target`` (relative to the repository) as a link from ``page``."""
    depth = len(Path(page).parent.parts)
    return "../" * depth + target


def median_cell(median: float, bounds: list[float | None] | None) -> str:
    """
    The median ratio, or the bound the censored seeds leave of it (``bounds``: ``[low, high]``, high None: none). A
    lower bound under 1 says nothing about who is faster: ours stopped at a budget that came before the baseline's
    time, so the cell says first that the return was not reached. Bounds are compared as printed (two decimals).
    """
    if not bounds:
        return f"{median:.2f}"
    low, high = (None if bound is None else round(bound, 2) for bound in bounds)
    if low == high:
        return f"{median:.2f}"
    if high is None:
        if low <= 0:
            return "undetermined"
        return f">= {low:.2f}" if low >= 1 else f"not reached in the budget, >= {low:.2f}"
    return f"<= {high:.2f}" if low == 0 else f"{low:.2f} to {high:.2f}"


def ratio_cell(paired: dict[str, Any], key: str) -> str:
    """
    ``median [min, max]`` of the paired ratios, with the seeds that never got there (censored) counted. Where the
    censored seeds leave the median undetermined (:func:`benchmarks.summary.median_bounds`) the median is given as
    the bound it is: ``>= 1.61`` (ours never got there in most seeds; under 1: ``not reached in the budget, >= 0.09``),
    ``<= 0.40`` (the baseline did not), ``0.09 to 0.40``, or ``undetermined`` (neither did, in most seeds). Where a
    ratio would mean nothing (:func:`benchmarks.summary.no_ratio_reason`) the cell says why: ``no ratio: ...``.
    """
    stats = paired[key]
    if paired.get("no_ratio"):
        return f"no ratio: {paired['no_ratio']}"
    if stats["n"] == 0:
        return "-"
    bounds = paired.get(f"{key}_median_bounds")
    median = median_cell(stats["median"], bounds)
    undetermined = bounds is not None and bounds[0] == 0 and bounds[1] is None  # ratios that bound nothing: no spread
    text = median if stats["n"] == 1 or undetermined else f"{median} [{stats['min']:.2f}, {stats['max']:.2f}]"
    notes = []
    if paired["censored"]:
        notes.append(f"ours censored in {paired['censored']}")
    if paired["baseline_censored"]:
        notes.append(f"baseline censored in {paired['baseline_censored']}")
    if paired["both_at_first_evaluation"]:
        notes.append(f"both at the first evaluation in {paired['both_at_first_evaluation']}")
    return text + (f" ({'; '.join(notes)})" if notes else "")


def return_cell(stats: dict[str, Any]) -> str:
    if stats.get("median") is None:
        return "-"
    median, low, high = (score(stats[key]) for key in ("median", "min", "max"))
    return median if stats["n"] == 1 else f"{median} [{low}, {high}]"


def iqm_cell(stats: dict[str, Any]) -> str:
    if stats.get("iqm") is None or stats.get("iqm_ci95") is None:
        return "-"
    low, high = stats["iqm_ci95"]
    return f"{score(stats['iqm'])} [{score(low)}, {score(high)}]"


def probability_cell(estimate: dict[str, float] | None) -> str:
    if not estimate:
        return "-"
    return f"{estimate['p']:.2f} [{estimate['low']:.2f}, {estimate['high']:.2f}]"


def compared(entry: dict[str, Any]) -> dict[str, Any]:
    return entry["budget_eval"] if "budget_eval" in entry else entry["final_eval"]


def comparison_table(table: Table) -> str:
    lines: list[str] = []
    for env in table.envs:
        if env not in table.points:
            lines += [f"**{env}**: {NOT_YET}.", ""]
            continue
        summary = table.summary(env)
        targets = summary.get("targets", {})
        speeds = table.steps_per_second(env) if table.records[env][0].get("max_seconds") else None
        baseline = table.label(table.baseline)
        central = central_name([compared(entry)["n"] for entry in summary["algos"].values()])
        header = ["algo", "seeds", "return at the budget", f"{central} [95% CI]", f"P(better than {baseline}) [95% CI]"]
        measures = ["steps", "wall"] if table.alone else ["steps"]
        for name, target in targets.items():
            label = f"{baseline}'s median {score(target)}" if name == "baseline_median" else f"published {score(target)}"
            header += [f"{'steps' if measure == 'steps' else 'time'} to {label}: ratio" for measure in measures]
        if speeds is not None:  # equal training time: how fast each collects is half of the story
            header.append("env steps per second of training")
        lines += [f"**{env}**", "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
        for algo, entry in sorted(summary["algos"].items(), key=lambda item: (item[0] != table.baseline, item[0])):
            returns = compared(entry)
            row = [f"`{table.label(algo)}`", str(len(entry["seeds"])), return_cell(returns), iqm_cell(returns)]
            row.append("-" if algo == table.baseline else probability_cell(entry.get("improvement_vs_baseline")))
            for name in targets:
                paired = entry.get("to_return", {}).get(name)
                row += ["(baseline)" if paired is None else ratio_cell(paired, f"{measure}_ratio") for measure in measures]
            if speeds is not None:
                row.append(spread_cell(speeds.get(algo, []), digits=0))
            lines.append("| " + " | ".join(row) + " |")
        lines += ["", per_seed_lines(summary, table.baseline, with_seconds=table.alone, label=table.label), ""]
    legend = table.legend([algo for env in table.points for algo in table.summary(env)["algos"]])
    lines += [legend, ""] if legend else []
    lines.append(table.settings_line())
    return "\n".join(lines).rstrip() + "\n"


def per_seed_lines(
    summary: dict[str, Any], baseline: str, with_seconds: bool = True, label: Callable[[str], str] = str
) -> str:
    """Each seed's return at the budget and its steps (and ``with_seconds``, seconds) to its held crossing of the
    baseline's median (c: censored); ``label`` names an algo."""
    cells = []
    for algo, entry in sorted(summary["algos"].items(), key=lambda item: (item[0] != baseline, item[0])):
        values = entry.get("budget_eval_mean", entry["final_eval_mean"])
        returns = ", ".join(f"{seed}: {score(value)}" for seed, value in zip(entry["seeds"], values, strict=True))
        cells.append(f"`{label(algo)}` {returns}")
        paired = entry.get("to_return", {}).get("baseline_median")
        if paired:
            steps = ", ".join(
                f"{item['seed']}: {item['steps']}{'c' if item['censored'] else ''} / {item['baseline_steps']}"
                f"{'c' if item['baseline_censored'] else ''} steps"
                + (f", {item['wall_seconds']:.0f} / {item['baseline_wall_seconds']:.0f} s" if with_seconds else "")
                for item in paired["per_seed"]
            )
            cells.append(
                f"`{label(algo)}` to its held crossing of the baseline's median, ours / baseline's (c: never held, "
                f"counted at the budget): {steps}"
            )
    return "Per seed: " + "; ".join(cells) + "."


def run_scores(summary: dict[str, Any]) -> dict[str, dict[int, float]]:
    """Per algo, each seed's compared return."""
    return {
        algo: {
            seed: value
            for seed, value in zip(entry["seeds"], entry.get("budget_eval_mean", entry["final_eval_mean"]), strict=True)
            if value is not None
        }
        for algo, entry in summary["algos"].items()
    }


def atari_table(table: Table, write_files: bool) -> str:
    games = [env for env in table.envs if env in table.points]
    scores = {env: run_scores(table.summary(env)) for env in games}
    algos = sorted({algo for by_algo in scores.values() for algo in by_algo}, key=lambda algo: (algo != table.baseline, algo))
    names = [table.label(algo) for algo in algos]
    header = ["game", *(f"`{name}` return" for name in names), *(f"`{name}` human-normalised" for name in names), "seeds"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for env in table.envs:
        if env not in scores:
            lines.append("| " + " | ".join([atari_game(env), *([NOT_YET] + ["-"] * (2 * len(algos) - 1)), "-"]) + " |")
            continue
        raw = [spread_cell(list(scores[env].get(algo, {}).values())) for algo in algos]
        normalised = [
            spread_cell([human_normalized(env, value) for value in scores[env].get(algo, {}).values()], digits=3)
            for algo in algos
        ]
        seed_lists = {
            name: ", ".join(map(str, sorted(scores[env].get(algo, {})))) for algo, name in zip(algos, names, strict=True)
        }
        if len(set(seed_lists.values())) == 1:
            seeds = next(iter(seed_lists.values()))
        else:  # a game still filling: which algo has which seeds
            seeds = "; ".join(f"`{name}` {seed_list or '-'}" for name, seed_list in seed_lists.items())
        lines.append("| " + " | ".join([atari_game(env), *raw, *normalised, seeds]) + " |")
    complete = [env for env in games if all(len(scores[env].get(algo, {})) >= 3 for algo in algos)]
    lines.append("")
    if complete:
        matrices = {algo: normalised_matrix(scores, complete, algo) for algo in algos}
        aggregate = [f"`{table.label(algo)}` {iqm_text(iqm_with_interval(matrix))}" for algo, matrix in matrices.items()]
        central = central_name([matrix.size for matrix in matrices.values()])
        lines.append(
            f"{central} of human-normalised scores over the games with 3 seeds or more "
            f"({', '.join(map(atari_game, complete))}): " + "; ".join(aggregate) + "."
        )
        for algo in algos:
            if algo != table.baseline:
                estimate = probability_of_improvement(matrices[algo], matrices[table.baseline])
                lines.append(
                    f"P(`{table.label(algo)}` better than `{table.label(table.baseline)}`) over those games: "
                    f"{probability_cell(estimate)}."
                )
        if write_files:
            labelled = {table.label(algo): matrix for algo, matrix in matrices.items()}
            plot_performance_profiles(labelled, table.folder / "profile.png", "human-normalised score (tau)")
        lines.append(f"Performance profile: [profile.png]({table.link(str(Path(table.entry['data']) / 'profile.png'))}).")
    else:
        lines.append("No game has 3 seeds of every algorithm yet: no aggregate across games.")
    legend = table.legend(algos)
    lines += ["", legend] if legend else []
    lines += ["", table.settings_line()] if games else ["", f"Recipe: {table.entry['recipe']}."]
    return "\n".join(lines).rstrip() + "\n"


def normalised_matrix(scores: dict[str, dict[str, dict[int, float]]], games: list[str], algo: str) -> np.ndarray:
    """``(runs, games)`` human-normalised scores: each game's seeds sorted, cut to the fewest any game has."""
    columns = [sorted(human_normalized(env, value) for value in scores[env][algo].values()) for env in games]
    runs = min(len(column) for column in columns)
    return np.array([column[:runs] for column in columns]).T


def iqm_text(estimate: dict[str, float] | None) -> str:
    return "-" if estimate is None else f"{estimate['iqm']:.3f} [{estimate['low']:.3f}, {estimate['high']:.3f}]"


def spread_cell(values: list[float], digits: int | None = None) -> str:
    if not values:
        return "-"
    form = (lambda value: f"{value:.{digits}f}") if digits is not None else score
    median = form(float(np.median(values)))
    return median if len(values) == 1 else f"{median} [{form(min(values))}, {form(max(values))}]"


def readme_table(manifest: dict[str, Any], tables: dict[str, "Table"]) -> str:
    """The README's rows: each from its table, or marked as not yet re-measured."""
    header = [
        "algorithm",
        "environment",
        "budget",
        "result",
        "against",
        "P(better) [95% CI]",
        "paired ratio (median [min, max] over seeds)",
        "seeds",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for row in manifest["readme"]:
        cells = [row["algorithm"], row["env"], row["budget"]]
        table = tables.get(row.get("table", ""))
        if table is not None and table.kind == "atari":
            cells += atari_row(table, row)
        elif table is not None and row["env"] in table.points:
            cells += comparison_row(table, row)
        else:
            cells += [NOT_YET, row["against"], "-", "-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def comparison_row(table: "Table", row: dict[str, Any]) -> list[str]:
    """
    Result, baseline, probability of improvement, paired ratio to the baseline's median return (or why there is
    none) and seeds of one README row.
    """
    summary = table.summary(row["env"])
    entry, base = summary["algos"].get(row["algo"]), summary["algos"].get(table.baseline)
    if entry is None or base is None:
        return [NOT_YET, row["against"], "-", "-", "-"]
    seeds = min(len(entry["seeds"]), len(base["seeds"]))
    if seeds < MIN_README_SEEDS:  # a headline needs the protocol's seeds on both sides; the results page shows the rest
        return [f"{NOT_YET}: {seeds} of {MIN_README_SEEDS} seeds so far", row["against"], "-", "-", str(seeds)]
    target_name = row.get("target", "baseline_median")
    paired = entry.get("to_return", {}).get(target_name)
    measure = row.get("measure", "steps")
    if measure == "wall" and not table.alone:
        raise ProtocolError(
            f"README row {row['algorithm']} {row['env']}: a time ratio from table {table.name}, whose "
            "runs shared the machine (step-based); measure its steps, or run it alone (alone: true)"
        )
    target = score(summary["targets"].get(target_name))
    if paired and paired["no_ratio"]:
        ratio = f"no ratio to {target}: {paired['no_ratio']}"
    else:
        measured = "steps" if measure == "steps" else "time"
        ratio = f"{ratio_cell(paired, f'{measure}_ratio') if paired else '-'} the {measured} to {target}"
    return [
        return_cell(compared(entry)),
        f"{row['against']} {return_cell(compared(base))}",
        probability_cell(entry.get("improvement_vs_baseline")),
        ratio,
        str(len(entry["seeds"])),
    ]


def atari_row(table: "Table", row: dict[str, Any]) -> list[str]:
    """IQM of human-normalised scores of ours and of the baseline (the mean under 4 scores), and the probability of
    improvement; no time ratio across games."""
    matrices = table.atari_matrices()
    if not matrices or row["algo"] not in matrices:
        return [NOT_YET, row["against"], "-", "-", "-"]
    games = next(iter(matrices.values())).shape[1]
    if games < len(table.envs):  # the row names every game: its IQM waits for all of them (the page shows the rest)
        return [f"{NOT_YET}: {games} of {len(table.envs)} games so far", row["against"], "-", "-", "-"]
    ours, base = matrices[row["algo"]], matrices[table.baseline]
    return [
        f"{central_name([ours.size, base.size])} human-normalised {iqm_text(iqm_with_interval(ours))}",
        f"{row['against']} {iqm_text(iqm_with_interval(base))}",
        probability_cell(probability_of_improvement(ours, base)),
        "-",
        str(ours.shape[0]),
    ]


def _measurement_files(entry: dict[str, Any], root: Path) -> list[dict[str, Any]]:
    reports = []
    for name in entry["data"]:
        path = root / name
        if not path.is_file():
            raise ProtocolError(f"measurement {entry['name']}: {name} does not exist")
        reports.append(json.loads(path.read_text()))
    return reports


def _measured_on(reports: list[dict[str, Any]], entry: dict[str, Any], page: str) -> str:
    machines = sorted({report["machine"]["name"] for report in reports})
    dates = sorted({report["machine"].get("date", "") for report in reports} - {""})
    recipe = entry["recipe"]
    return f"Machine: {', '.join(machines)}; {', '.join(dates)}. Recipe: [{recipe}]({relative(page, recipe)}).\n"


def throughput_table(entry: dict[str, Any], root: Path) -> str:
    """A row per ``benchmarks throughput`` report: C, L, T_async, overlap, T_sync, speed-up, CPU per 1000 steps."""
    reports = _measurement_files(entry, root)
    header = (
        "| algo | env | collector | learner threads | busy processes | repeats | C s/batch | L s/batch | T_async s/batch "
        "| T_async / max(C, L) | T_sync s/batch | env steps/s async | T_sync / T_async | CPU s per 1k steps async "
        "| CPU s per 1k steps sync |\n" + "| --- " * 15 + "|\n"
    )
    rows = []
    for report in reports:
        threads = report.get("learner_threads") or "default (1)"
        cells = [
            report["algo"],
            report["env"],
            report["collector"],
            str(threads),
            str(report.get("busy_processes", 0)),
            str(report.get("repeats", 1)),
            *(f"{report[key]:.3f}" for key in ("C_collect_seconds_per_batch", "L_learn_seconds_per_batch")),
            f"{report['T_async_seconds_per_batch']:.3f}",
            f"**{report['T_async_over_max_C_L']:.2f}**",
            f"{report['T_sync_seconds_per_batch']:.3f}",
            f"{report['env_steps_per_second_async']:.0f}",
            f"**{report['T_sync_over_T_async']:.2f}**",
            f"{report['T_async_cpu_seconds_per_1k_steps']:.2f}",
            f"{report['T_sync_cpu_seconds_per_1k_steps']:.2f}",
        ]
        rows.append("| " + " | ".join(cells) + " |\n")
    return header + "".join(rows) + "\n" + _measured_on(reports, entry, entry["page"])


def step_cost_table(entry: dict[str, Any], root: Path) -> str:
    """A row per algo and env of ``benchmarks step_cost`` reports: wall and CPU ms per env step (idle, busy)."""
    reports = _measurement_files(entry, root)
    busy = any("busy_cpu_ms_per_step" in row for report in reports for row in report["rows"])
    header = "| algo | env | wall ms/step | CPU ms/step |"
    if busy:
        header += " wall ms/step, busy | CPU ms/step, busy | CPU busy / idle | wall busy / idle |"
    header += "\n" + "| --- " * (8 if busy else 4) + "|\n"
    rows = []
    for report in reports:
        for row in report["rows"]:
            cells = [row["algo"], row["env"], f"{row['wall_ms_per_step']:.3f}", f"{row['cpu_ms_per_step']:.3f}"]
            if busy:
                cells += [f"{row['busy_wall_ms_per_step']:.3f}", f"{row['busy_cpu_ms_per_step']:.3f}"]
                cells += [f"**{row['busy_over_idle_cpu']:.2f}**", f"{row['busy_over_idle_wall']:.2f}"]
            rows.append("| " + " | ".join(cells) + " |\n")
    commands = "; ".join(f"`{report['command']}`" for report in reports)
    return header + "".join(rows) + f"\nCommand: {commands}.  \n" + _measured_on(reports, entry, entry["page"])


def demo_table(entry: dict[str, Any], root: Path) -> str:
    """
    The README demo's training time and CPU, idle and busy: ``data`` is the demo's output under ``/usr/bin/time -v``
    in two files, idle first (its "N steps in S s" line, and the user and system CPU seconds of the whole run).
    """
    rows, figures = [], []
    for label, name in zip(("idle", "two CPU-bound processes beside it"), entry["data"], strict=True):
        text = (root / name).read_text()
        steps, seconds = re.search(r"(\d+) steps in ([\d.]+)s", text).groups()  # type: ignore[union-attr]
        cpu = sum(float(value) for value in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", text))
        figures.append((float(seconds), cpu))
        rows.append(f"| {label} | {steps} | {float(seconds):.1f} | {cpu:.1f} |\n")
    (idle_seconds, idle_cpu), (busy_seconds, busy_cpu) = figures
    header = "| machine | env steps | training wall s | CPU s of the whole run |\n| --- | --- | --- | --- |\n"
    ratios = f"Busy over idle: training time **{busy_seconds / idle_seconds:.2f}x**, CPU {busy_cpu / idle_cpu:.2f}x.  \n"
    recipe = entry["recipe"]
    return header + "".join(rows) + "\n" + ratios + f"Recipe: [{recipe}]({relative(entry['page'], recipe)}).\n"


MEASUREMENT_KINDS = {"throughput": throughput_table, "step_cost": step_cost_table, "demo": demo_table}


# The kinds of a lent GPU machine's data (benchmarks/recipes/gpu_machine.sh): the files come back from a machine
# that only some sittings have, so a file not there yet is a measurement not made yet, not an error.


def _not_yet_measured(entry: dict[str, Any]) -> str:
    recipe = entry["recipe"]
    return (
        f"Not yet measured. Recipe: [{recipe}]({relative(entry['page'], recipe)}); its header gives the device command "
        "and the steps that bring the data here.\n"
    )


def _number(value: float | None, form: str) -> str:
    return "-" if value is None or not np.isfinite(value) else format(value, form)


def _machine_line(machines: list[dict[str, Any]], entry: dict[str, Any]) -> str:
    """The machines (name, CPUs, GPU where the name lacks it) and dates the data came from, and the recipe."""
    details: dict[str, list[str]] = {}
    for machine in machines:
        known, cuda = details.setdefault(machine["name"], []), machine.get("cuda")
        if machine.get("cpus") and not known:
            known.append(f"{machine['cpus']} CPUs")
        if cuda and cuda not in machine["name"] and cuda not in known:
            known.append(cuda)
    names = [name + (f" ({', '.join(known)})" if known else "") for name, known in sorted(details.items())]
    dates = sorted({machine.get("date", "") for machine in machines} - {""})
    recipe = entry["recipe"]
    return f"Machine: {', '.join(names)}; {', '.join(dates)}. Recipe: [{recipe}]({relative(entry['page'], recipe)}).\n"


def _last_points(path: Path) -> list[EvalPoint]:
    """Each run's (algo and seed's) last finished point of a ``benchmarks run`` CSV."""
    last: dict[tuple[str, int], EvalPoint] = {}
    for point in read_csv(path):
        key = (point.algo, point.seed)
        if point.status == "ok" and point.wall_seconds > 0 and (key not in last or point.steps >= last[key].steps):
            last[key] = point
    return [last[key] for key in sorted(last)]


def gpu_overlap_table(entry: dict[str, Any], root: Path) -> str:
    """
    Asynchrony where it is meant to pay, from ``data``'s files: a row per ``benchmarks throughput`` report (JSON) with
    the most asynchrony can give over collect-then-train, (C + L) / max(C, L), and the fraction of it that
    T_sync / T_async reaches; then each SB3 run's env steps per second (``benchmarks run``'s ``ENV.csv``: its last
    point's steps over its training time) and each report's asynchronous steps per second over it. The files not
    there yet are named below the table.
    """
    present = [name for name in entry["data"] if (root / name).is_file()]
    if not present:
        return _not_yet_measured(entry)
    reports = [json.loads((root / name).read_text()) for name in present if name.endswith(".json")]
    machines = [report["machine"] for report in reports]
    rows = [
        "| algo | env | vec env | collector | learner | C s/batch | L s/batch | T_async s/batch | T_sync s/batch "
        "| env steps/s async | env steps/s sync | T_sync / T_async | bound (C + L) / max(C, L) | of the bound |",
        "|" + " --- |" * 14,
    ]
    for report in reports:
        c, learn = report.get("C_collect_seconds_per_batch"), report.get("L_learn_seconds_per_batch")
        t_async, t_sync = report.get("T_async_seconds_per_batch"), report.get("T_sync_seconds_per_batch")
        bound = (c + learn) / max(c, learn) if c and learn else None
        speedup = t_sync / t_async if t_sync and t_async else None
        cells = [report["algo"], report["env"], report["vec_env"], report["collector"], report["device"]]
        cells += [_number(value, ".3f") for value in (c, learn, t_async, t_sync)]
        cells += [_number(report.get("env_steps_per_second_async"), ".0f")]
        cells += [_number(report["batch_env_steps"] / t_sync if t_sync else None, ".0f")]
        cells += [_number(speedup, ".2f"), _number(bound, ".2f")]
        cells += [f"**{speedup / bound:.2f}**" if speedup and bound else "-"]
        rows.append("| " + " | ".join(cells) + " |")
    notes = []
    for name in (name for name in present if name.endswith(".csv")):
        points = _last_points(root / name)
        summary = (root / name).with_suffix(".json")  # the run's ENV.json, with its machine; the CSV has its name only
        if summary.is_file():
            machines.append(json.loads(summary.read_text())["machine"])
        else:
            machines += [{"name": point.machine} for point in points]
        for point in points:
            speed = point.steps / point.wall_seconds
            faster = "; ".join(
                f"`{report['algo']}` asynchronous over it: **{report['env_steps_per_second_async'] / speed:.2f}**"
                for report in reports
                if report.get("env_steps_per_second_async") and report["env"] == point.env
            )
            notes.append(
                f"SB3 `{point.algo}` on {point.env}, learner on {point.device}: **{speed:.0f}** env steps/s "
                f"({point.steps} steps in {point.wall_seconds:.0f} s of training)" + (f"; {faster}." if faster else ".")
            )
    missing = [Path(name).name for name in entry["data"] if name not in present]
    if missing:
        notes.append("Not measured in this sitting: " + ", ".join(f"`{name}`" for name in missing) + ".")
    table = "\n".join(rows) + "\n\n" if len(rows) > 2 else ""
    return table + "".join(f"{note}  \n" for note in notes) + _machine_line(machines, entry)


def ray_scaling_table(entry: dict[str, Any], root: Path) -> str:
    """
    ``benchmarks ray_scaling``'s JSON (``data``'s one file): per mode and number of workers, env steps per second,
    the collector's fraction of linear (collect) or learn()'s of the learner's ceiling, and learn()'s of the most
    the environments and the learner allow together (min(ceiling, environments' limit)), the slowest worker, the
    driver's time per segment and the learner's CPU per step.
    """
    path = root / entry["data"][0]
    if not path.is_file():
        return _not_yet_measured(entry)
    data = json.loads(path.read_text())
    ceiling = next((row["steps_per_s"] for row in data["rows"] if row["mode"] == "ceiling"), None)
    rows = [
        "| mode | workers | env steps/s | of linear (collect), of the ceiling (learn) | environments' limit "
        "| of min(ceiling, environments' limit) | slowest worker, steps/s | driver ms per segment "
        "| learner's CPU ms per step |",
        "|" + " --- |" * 9,
    ]
    for row in data["rows"]:
        learn = row["mode"] == "learn"
        fraction = row["efficiency"] if row["mode"] == "collect" else row["of_ceiling"]
        limit = row["env_limit_steps_per_s"]
        cells = [
            "ceiling (learner alone)" if row["mode"] == "ceiling" else row["mode"],
            "" if row["mode"] == "ceiling" else str(row["workers"]),
            _number(row["steps_per_s"], ".0f"),
            f"**{fraction:.2f}**" if learn and fraction is not None else _number(fraction, ".2f"),
            _number(limit, ".0f"),
            _number(row["steps_per_s"] / min(ceiling, limit) if learn and ceiling and limit else None, ".2f"),
            _number(row["worker_steps_per_s_min"], ".0f"),
            _number(row["driver_ms_per_segment"], ".2f"),
            _number(row["learner_cpu_ms_per_step"], ".2f"),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    settings = data["settings"]
    note = (
        f"{settings['env']} (sleep {settings['step_sleep'] * 1e3:g} ms, CPU {settings['step_cpu'] * 1e3:g} ms per "
        f"step), {settings['envs_per_worker']} env(s) x {settings['n_steps']} steps per segment, "
        f"{settings['num_cpus_per_worker']:g} CPU per worker, {settings['learn_steps']} steps per learn() point, "
        f"{settings['repeats']} repeat(s) (medians); the learner's ceiling with {data['learner_threads']} torch "
        f"thread(s), as learn() leaves it beside {max(settings['workers'])} workers; Ray {data['ray_version']}."
    )
    return "\n".join(rows) + f"\n\n{note}  \n" + _machine_line([data["machine"]], entry)


MEASUREMENT_KINDS.update(gpu_overlap=gpu_overlap_table, ray_scaling=ray_scaling_table)


def render_blocks(manifest: dict[str, Any], root: Path, write_files: bool) -> dict[str, dict[str, str]]:
    """Per page, each block's generated text."""
    labels = manifest.get("labels", {})
    tables = {entry["name"]: Table(entry, root, labels) for entry in manifest["tables"]}
    pages: dict[str, dict[str, str]] = {}
    for name, table in tables.items():
        if table.kind == "atari":
            text = atari_table(table, write_files)
        elif not table.measured:
            text = f"{NOT_YET.capitalize()}: the recipe is [{table.entry['recipe']}]({table.link(table.entry['recipe'])}).\n"
        else:
            text = comparison_table(table)
        pages.setdefault(table.entry["page"], {})[name] = text
    for entry in manifest.get("measurements", []):
        if entry.get("kind") not in MEASUREMENT_KINDS:
            raise ProtocolError(f"measurement {entry['name']}: kind must be one of {sorted(MEASUREMENT_KINDS)}")
        pages.setdefault(entry["page"], {})[entry["name"]] = MEASUREMENT_KINDS[entry["kind"]](entry, root)
    pages.setdefault("README.md", {})["readme-results"] = readme_table(manifest, tables)
    pages.setdefault("docs/results.md", {})["results-summary"] = readme_table(manifest, tables)
    return pages


def replace_blocks(text: str, blocks: dict[str, str], page: str) -> str:
    found = {match.group("name") for match in BLOCK.finditer(text)}
    missing = sorted(set(blocks) - found)
    if missing:
        raise ProtocolError(
            f"{page} has no block for {missing}: add <!-- generated: NAME --> ... <!-- end generated: NAME -->"
        )
    unknown = sorted(found - set(blocks))
    if unknown:
        raise ProtocolError(f"{page} has blocks the manifest does not list: {unknown}")
    return BLOCK.sub(lambda match: match.group(1) + blocks[match.group("name")] + match.group(4), text)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 where a page differs")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="the repository the pages and data are in")
    args = parser.parse_args(argv)
    try:
        pages = render_blocks(load_manifest(args.manifest), args.root, write_files=not args.check)
        drift = []
        for page, blocks in pages.items():
            path = args.root / page
            old = path.read_text()
            new = replace_blocks(old, blocks, page)
            if new == old:
                continue
            if args.check:
                diff = difflib.unified_diff(
                    old.splitlines(), new.splitlines(), f"{page} (as committed)", f"{page} (generated)", lineterm=""
                )
                drift.append("\n".join(list(diff)[:60]))
            else:
                path.write_text(new)
                print(f"wrote {page}")
    except ProtocolError as error:
        raise SystemExit(f"error: {error}") from None
    if drift:
        print("\n\n".join(drift), file=sys.stderr)
        raise SystemExit("error: the pages differ from what `python -m benchmarks tables` writes: run it and commit")


if __name__ == "__main__":
    main()
