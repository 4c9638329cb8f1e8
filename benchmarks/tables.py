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

The README's table gives, per row, the result, the baseline's, the probability of improvement (P(better)), the
paired ratio (or why there is none) and, for a row that names its ``ablation`` (the method with its mechanism off,
all else equal, run in the same table, or in its ``ablation_table`` beside the method on fresh seeds), the
probability of ending better than the ablation.

The manifest's ``searches`` are tuning searches on seeds below 100, each read by its declared criterion
(:func:`search_table`) on its algorithm page.

The manifest's ``labels`` give an algo whose spec is long (its settings in brackets) a short name for the pages;
each table says, below it, what its labels stand for.

The manifest's ``measurements`` are tables of cost and speed, not returns, from the files the profilers wrote:
``benchmarks/profiling/tables.py`` renders them, by kind. Every cell is written by ``benchmarks/cells.py``.
"""

import argparse
import difflib
import itertools
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from benchmarks.cells import estimate, interval, link, markdown_table, median_range, number, ratio_cell
from benchmarks.output import EvalPoint, read_csv
from benchmarks.profiling.tables import MEASUREMENT_KINDS
from benchmarks.protocol import (
    FIRST_REPORTING_SEED,
    PUBLISHED_RETURNS,
    STACK_PACKAGES,
    ProtocolError,
    atari_game,
    check_comparison,
    check_one_at_a_time,
    check_reporting_seeds,
    human_normalized,
    is_atari,
    read_run_records,
)
from benchmarks.statistics import central_name, iqm_with_interval, plot_performance_profiles, probability_of_improvement
from benchmarks.summary import compared_returns, held_crossing, last_points, threshold_summary

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
            if "algos" in entry:  # a table of some of the folder's algos (an ablation against its method)
                absent = sorted(set(entry["algos"]) - {point.algo for point in points})
                if absent:
                    raise ProtocolError(f"table {self.name}: no runs of {absent} in {csv_path}")
                points = [point for point in points if point.algo in entry["algos"]]
            records = read_run_records(self.folder, env)
            missing = sorted({(p.algo, p.seed) for p in points} - set(records))
            if missing:
                raise ProtocolError(f"table {self.name}: runs without their record in {self.folder}/runs/{env}: {missing}")
            self.points[env] = points
            self.records[env] = [records[key] for key in sorted({(p.algo, p.seed) for p in points})]
        self.every = [record for records in self.records.values() for record in records]  # every run's record
        check_comparison(self.every, f"table {self.name}")
        if self.every and self.alone:
            check_one_at_a_time(self.every, f"table {self.name}")
        if entry.get("reporting", True):
            check_reporting_seeds([record["seed"] for record in self.every], f"table {self.name}")

    def link(self, target: str, text: str | None = None) -> str:
        """A link from the table's page to ``target`` (relative to the repository)."""
        return link(self.entry["page"], target, text)

    def label(self, algo: str) -> str:
        """How the pages name ``algo``: the manifest's label for it, else the algo as the runs have it."""
        return self.labels.get(algo, algo)

    def legend(self, algos: list[str]) -> str:
        """What each label of ``algos`` stands for (empty where none has a label)."""
        named = [f"`{self.labels[algo]}` is `{algo}`" for algo in sorted(set(algos)) if algo in self.labels]
        return ("Labels: " + "; ".join(named) + ".") if named else ""

    @property
    def alone(self) -> bool:
        """
        Whether the runs had the machine to themselves, so that their training times compare: the manifest's
        ``alone``, by default true for a wall-clock budget and false for a step budget (step-based runs may share
        the machine, the protocol says). A table whose runs shared it reports no time ratio; a table that had it
        alone has no run made with ``--jobs`` above 1 (:class:`Table` refuses one).
        """
        return bool(self.entry.get("alone", bool(self.every[0].get("max_seconds"))))

    def summary(self, env: str) -> dict[str, Any]:
        """The env's statistics (``threshold_summary``) at the runs' budget, with the published target (computed once)."""
        if env not in self._summaries:
            record = self.records[env][0]
            published = self.entry.get("published", PUBLISHED_RETURNS.get((re.sub(r"\[.*$", "", self.baseline), env)))
            self._summaries[env] = threshold_summary(
                self.points[env],
                None,
                self.baseline,
                step_budget=None if record.get("max_seconds") else record.get("steps"),
                published=published,
                eval_episodes=record["eval_episodes"],
            )
        return self._summaries[env]

    def atari_matrices(self) -> tuple[list[str], dict[str, np.ndarray]]:
        """
        The games where every algo has the same 3 seeds or more, and per algo its ``(runs, games)`` human-normalised
        scores there (none without such a game). Every algo's runs are the same seeds: each game's seeds that all
        algos have, in seed order, cut to the fewest any game has, so that a seed one algo has and another has not
        yet (a comparison filling over sittings) weighs on neither side.
        """
        scores = {env: run_scores(self.summary(env)) for env in self.envs if env in self.points}
        algos = sorted({algo for by_algo in scores.values() for algo in by_algo})
        if not algos:  # no finished run yet
            return [], {}
        shared = {env: sorted(set.intersection(*(set(scores[env].get(algo, {})) for algo in algos))) for env in scores}
        games = [env for env in scores if len(shared[env]) >= 3]
        if not games:
            return games, {}
        runs = min(len(shared[env]) for env in games)
        return games, {
            algo: np.array(
                [[human_normalized(env, scores[env][algo][shared[env][run]]) for env in games] for run in range(runs)]
            )
            for algo in algos
        }

    def steps_per_second(self, env: str) -> dict[str, list[float]]:
        """Per algo, each run's environment steps per second of training: its last point's steps over its time."""
        speeds: dict[str, list[float]] = {}
        for point in last_points(self.points[env]):
            speeds.setdefault(point.algo, []).append(point.steps / point.wall_seconds)
        return speeds

    def settings_line(self) -> str:
        """Budget, evaluation grid and policy, seeds, machine, software, date and the runs' commands."""
        every = self.every
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
        jobs = " or ".join(map(str, sorted({record["jobs"] for record in every})))  # a step-based table's may differ
        dates = sorted({record["finished"][:10] for record in every})
        seeds = sorted({record["seed"] for record in every})
        commits = sorted(
            {record["commit"][:7] + ("+dirty" if record["commit"].endswith("+dirty") else "") for record in every}
        )
        commands = sorted(  # each kind of run once: without its seed, and without its --jobs (said above)
            {re.sub(r" --first-seed \d+| --jobs \d+", "", record["command"]).replace(" --seeds 1", "") for record in every}
        )
        lines = [
            f"Budget {budget}; {first['eval_episodes']} {first['eval_policy']} evaluation episodes {grid} (the same "
            f"grid for every algo); seeds {', '.join(map(str, seeds))}; {machine['name']}, torch threads "
            f"{first['torch_threads']} per run, {jobs} run(s) at a time per invocation{shared}; {versions}; "
            f"commit(s) "
            f"{', '.join(commits)}; {' to '.join([dates[0], dates[-1]] if len(dates) > 1 else dates)}.",
            f"Recipe: {self.link(self.entry['recipe'])}; each run: " + "; ".join(f"`{command}`" for command in commands),
        ]
        return "  \n".join(lines)


def by_baseline_first(algos: dict[str, Any], baseline: str) -> list[tuple[str, Any]]:
    """The items of ``algos`` (keyed by algo), the baseline's first, then by name."""
    return sorted(algos.items(), key=lambda item: (item[0] != baseline, item[0]))


def comparison_table(table: Table) -> str:
    """Per env, a row per algo against the baseline (the module's ``comparison``), each seed's figures below it."""
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
            label = f"{baseline}'s median {number(target)}" if name == "baseline_median" else f"published {number(target)}"
            header += [f"{'steps' if measure == 'steps' else 'time'} to {label}: ratio" for measure in measures]
        if speeds is not None:  # equal training time: how fast each collects is half of the story
            header.append("env steps per second of training")
        rows = []
        for algo, entry in by_baseline_first(summary["algos"], table.baseline):
            iqm = compared(entry)
            row = [f"`{table.label(algo)}`", str(len(entry["seeds"])), median_range(compared_returns(entry))]
            row.append(interval(iqm["iqm"], *(iqm["iqm_ci95"] or (None, None))))
            row.append("-" if algo == table.baseline else estimate(entry.get("improvement_vs_baseline"), "p", ".2f"))
            for name in targets:
                paired = entry.get("to_return", {}).get(name)
                row += ["(baseline)" if paired is None else ratio_cell(paired, f"{measure}_ratio") for measure in measures]
            if speeds is not None:
                row.append(median_range(speeds.get(algo, []), ".0f"))
            rows.append(row)
        lines += [f"**{env}**", "", *markdown_table(header, rows)]
        lines += ["", per_seed_lines(table, summary), ""]
    legend = table.legend([algo for env in table.points for algo in table.summary(env)["algos"]])
    lines += [legend, ""] if legend else []
    lines.append(table.settings_line())
    return "\n".join(lines).rstrip() + "\n"


def compared(entry: dict[str, Any]) -> dict[str, Any]:
    """The statistics (``spread``) of each seed's compared return (:func:`benchmarks.summary.compared_returns`)."""
    return entry.get("budget_eval", entry["final_eval"])


def per_seed_lines(table: Table, summary: dict[str, Any]) -> str:
    """Each seed's return at the budget and its steps (and, where the runs had the machine to themselves, seconds) to
    its held crossing of the baseline's median (c: censored)."""
    cells, label = [], table.label
    for algo, entry in by_baseline_first(summary["algos"], table.baseline):
        returns = zip(entry["seeds"], compared_returns(entry), strict=True)
        cells.append(f"`{label(algo)}` " + ", ".join(f"{seed}: {number(value)}" for seed, value in returns))
        paired = entry.get("to_return", {}).get("baseline_median")
        if paired:
            steps = ", ".join(
                f"{item['seed']}: {item['steps']}{'c' if item['censored'] else ''} / {item['baseline_steps']}"
                f"{'c' if item['baseline_censored'] else ''} steps"
                + (f", {item['wall_seconds']:.0f} / {item['baseline_wall_seconds']:.0f} s" if table.alone else "")
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
        algo: {seed: value for seed, value in zip(entry["seeds"], compared_returns(entry), strict=True) if value is not None}
        for algo, entry in summary["algos"].items()
    }


def atari_table(table: Table, write_files: bool) -> str:
    """A row per game, then the aggregates across games (the module's ``atari``); ``write_files``: the profile's PNG."""
    games = [env for env in table.envs if env in table.points]
    scores = {env: run_scores(table.summary(env)) for env in games}
    algos = sorted({algo for by_algo in scores.values() for algo in by_algo}, key=lambda algo: (algo != table.baseline, algo))
    names = [table.label(algo) for algo in algos]
    header = ["game", *(f"`{name}` return" for name in names), *(f"`{name}` human-normalised" for name in names), "seeds"]
    rows = []
    for env in table.envs:
        if env not in scores:
            rows.append([atari_game(env), NOT_YET, *["-"] * (2 * len(algos) - 1), "-"])
            continue
        raw = [median_range(scores[env].get(algo, {}).values()) for algo in algos]
        normalised = [
            median_range([human_normalized(env, value) for value in scores[env].get(algo, {}).values()], ".3f")
            for algo in algos
        ]
        seed_lists = {
            name: ", ".join(map(str, sorted(scores[env].get(algo, {})))) for algo, name in zip(algos, names, strict=True)
        }
        if len(set(seed_lists.values())) == 1:
            seeds = next(iter(seed_lists.values()))
        else:  # a game still filling: which algo has which seeds
            seeds = "; ".join(f"`{name}` {seed_list or '-'}" for name, seed_list in seed_lists.items())
        rows.append([atari_game(env), *raw, *normalised, seeds])
    lines = [*markdown_table(header, rows), ""]
    complete, matrices = table.atari_matrices()
    if complete:
        aggregate = [f"`{table.label(algo)}` {estimate(iqm_with_interval(matrices[algo]), 'iqm', '.3f')}" for algo in algos]
        central = central_name([matrix.size for matrix in matrices.values()])
        lines.append(
            f"{central} of human-normalised scores over the games with 3 seeds or more "
            f"({', '.join(map(atari_game, complete))}), on the {len(next(iter(matrices.values())))} seeds every algo has "
            "there: " + "; ".join(aggregate) + "."
        )
        for algo in (algo for algo in algos if algo != table.baseline):
            found = probability_of_improvement(matrices[algo], matrices[table.baseline])
            lines.append(
                f"P(`{table.label(algo)}` better than `{table.label(table.baseline)}`) over those games: "
                f"{estimate(found, 'p', '.2f')}."
            )
        if write_files:
            labelled = {table.label(algo): matrices[algo] for algo in algos}
            plot_performance_profiles(labelled, table.folder / "profile.png", "human-normalised score (tau)")
        lines.append(f"Performance profile: {table.link(str(Path(table.entry['data']) / 'profile.png'), 'profile.png')}.")
    else:
        lines.append("No game has 3 seeds of every algorithm yet: no aggregate across games.")
    legend = table.legend(algos)
    lines += ["", legend] if legend else []
    lines += ["", table.settings_line()] if games else ["", f"Recipe: {table.entry['recipe']}."]
    return "\n".join(lines).rstrip() + "\n"


def readme_rows(manifest: dict[str, Any], tables: dict[str, Table]) -> list[list[str]]:
    """The README's rows: each from its table, or marked as not yet re-measured."""
    rows = []
    for row in manifest["readme"]:
        table = tables.get(row.get("table", ""))
        if table is not None and table.kind == "atari":
            cells = atari_row(table, row)
        elif table is not None and row["env"] in table.points:
            cells = comparison_row(table, row)
        else:
            cells = [NOT_YET, row["against"], "-", "-", "-"]
        if "ablation_table" in row and row["ablation_table"] not in tables:
            raise ProtocolError(f"README row {row['algorithm']} {row['env']}: no table {row['ablation_table']!r}")
        ablation_table = tables[row["ablation_table"]] if "ablation_table" in row else table
        rows.append([row["algorithm"], row["env"], row["budget"], *cells, ablation_cell(ablation_table, row)])
    return rows


def readme_table(rows: list[list[str]], algorithm: str | None = None) -> str:
    """
    The README's results table of :func:`readme_rows`; with ``algorithm``, only that algorithm's rows (``IMPACT``
    takes ``IMPACT (MlpLstmPolicy)`` too), for its page.
    """
    header = ["algorithm", "environment", "budget", "result", "against", "P(better) [95% CI]",
              "paired ratio (median [min, max] over seeds)", "seeds", "P(better than its ablation)"]  # fmt: skip
    kept = [row for row in rows if algorithm is None or row[0].split(" (")[0] == algorithm]
    return "\n".join(markdown_table(header, kept)) + "\n"


def ablation_cell(table: Table | None, row: dict[str, Any]) -> str:
    """
    The probability that the row's method ends better than its ablation (``ablation`` in the README row: the same
    algo with its mechanism off, all else equal), over the seeds both have in ``table``: the row's table, or the
    row's ``ablation_table``, where a row whose entry is unchanged keeps its seeds and the method ran again beside its
    ablation on fresh ones (the cell then names those seeds). "-" for a row that names no ablation, "not yet run"
    until its runs are in the table, the count while fewer than the protocol's 3 seeds are.
    """
    ablation = row.get("ablation")
    if ablation is None:
        return "-"
    label = table.label(ablation) if table is not None else ablation
    if table is None:
        return f"not yet run ({label})"
    if table.kind == "atari":
        _, matrices = table.atari_matrices()
        if ablation not in matrices or row["algo"] not in matrices:
            return f"not yet run ({label})"
        return f"{estimate(probability_of_improvement(matrices[row['algo']], matrices[ablation]), 'p', '.2f')} ({label})"
    if row["env"] not in table.points:
        return f"not yet run ({label})"
    algos = table.summary(row["env"])["algos"]
    if ablation not in algos or row["algo"] not in algos:
        return f"not yet run ({label})"
    seeds = sorted(set(algos[row["algo"]]["seeds"]) & set(algos[ablation]["seeds"]))
    if "ablation_table" in row and seeds:
        contiguous = seeds == list(range(seeds[0], seeds[-1] + 1))
        label += f"; seeds {seeds[0]}-{seeds[-1]}" if contiguous else f"; seeds {', '.join(map(str, seeds))}"
    if len(seeds) < MIN_README_SEEDS:
        return f"{len(seeds)} of {MIN_README_SEEDS} seeds so far ({label})"
    ours, off = (
        [value for seed, value in zip(algos[algo]["seeds"], compared_returns(algos[algo]), strict=True)
         if seed in seeds and value is not None]
        for algo in (row["algo"], ablation)
    )  # fmt: skip
    return f"{estimate(probability_of_improvement(ours, off), 'p', '.2f')} ({label})"


def comparison_row(table: Table, row: dict[str, Any]) -> list[str]:
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
    target = number(summary["targets"].get(target_name))
    if paired and paired["no_ratio"]:
        ratio = f"no ratio to {target}: {paired['no_ratio']}"
    else:
        measured = "steps" if measure == "steps" else "time"
        ratio = f"{ratio_cell(paired, f'{measure}_ratio') if paired else '-'} the {measured} to {target}"
    return [
        median_range(compared_returns(entry)),
        f"{row['against']} {median_range(compared_returns(base))}",
        estimate(entry.get("improvement_vs_baseline"), "p", ".2f"),
        ratio,
        str(len(entry["seeds"])),
    ]


def atari_row(table: Table, row: dict[str, Any]) -> list[str]:
    """IQM of human-normalised scores of ours and of the baseline (the mean under 4 scores), and the probability of
    improvement; no time ratio across games."""
    complete, matrices = table.atari_matrices()
    if row["algo"] not in matrices:
        return [NOT_YET, row["against"], "-", "-", "-"]
    if len(complete) < len(table.envs):  # the row names every game: its IQM waits for all of them
        return [f"{NOT_YET}: {len(complete)} of {len(table.envs)} games so far", row["against"], "-", "-", "-"]
    ours, base = matrices[row["algo"]], matrices[table.baseline]
    return [
        f"{central_name([ours.size, base.size])} human-normalised {estimate(iqm_with_interval(ours), 'iqm', '.3f')}",
        f"{row['against']} {estimate(iqm_with_interval(base), 'iqm', '.3f')}",
        estimate(probability_of_improvement(ours, base), "p", ".2f"),
        "-",
        str(ours.shape[0]),
    ]


def on_time_grid(point: EvalPoint, eval_seconds: float) -> EvalPoint:
    """``point`` of a wall-clock run with its ``steps`` replaced by its place on the run's evaluation grid, in seconds
    (an evaluation due at 600 s starts a little after it)."""
    return replace(point, steps=int(eval_seconds * round(point.wall_seconds / eval_seconds)))


def on_step_grid(point: EvalPoint, eval_freq: int | None) -> int:
    """The place of ``point`` of a step-based run on its evaluation grid, the mark nearest its steps (an evaluation
    due at a mark lands at the end of the iteration that passes it: a peer's RLlib iteration samples a few hundred
    steps past it); its steps where there is no grid (``eval_freq`` None)."""
    return int(eval_freq * round(point.steps / eval_freq)) if eval_freq else point.steps


def search_runs(entry: dict[str, Any], root: Path) -> tuple[dict[tuple[str, str, int], list[EvalPoint]], list[dict]]:
    """A search's evaluations up to its budget by (algo, env, seed), on its clock (steps, or with ``seconds`` the time
    grid; with ``through_budget``, the evaluation due at the budget though it lands past it, :func:`on_step_grid`),
    and the records of those runs; runs named by ``renamed`` carry the variant's name in both."""
    runs: dict[tuple[str, str, int], list[EvalPoint]] = {}
    records, budget = [], int(entry["budget"])
    closing = entry.get("through_budget", False) and "seconds" not in entry
    for folder, env in ((root / folder, env) for folder in entry["data"] for env in entry["envs"]):
        if not (folder / f"{env}.csv").is_file():
            continue
        by_run, where = read_run_records(folder, env), str(folder.relative_to(root))
        renamed = entry.get("renamed", {}).get(where, {})
        for algo, seed in [key for key in by_run if key[0] in renamed]:
            if not str(by_run[(algo, seed)]["commit"]).endswith("+dirty"):
                raise ProtocolError(f"search {entry['name']}: {algo} seed {seed} in {where} ran from a clean commit, "
                                    "whose spec it ran: it cannot be renamed")  # fmt: skip
            by_run[(renamed[algo], seed)] = {**by_run.pop((algo, seed)), "algo": renamed[algo]}
        points = [replace(point, algo=renamed.get(point.algo, point.algo)) for point in read_csv(folder / f"{env}.csv")]
        if "seconds" in entry:  # the steps' place taken by the evaluation's place on the time grid
            points = [on_time_grid(point, by_run[(point.algo, point.seed)]["eval_seconds"]) for point in points]
        grid = {key: record.get("eval_freq") if closing else None for key, record in by_run.items()}
        points = [point for point in points
                  if point.status == "ok" and on_step_grid(point, grid[(point.algo, point.seed)]) <= budget]  # fmt: skip
        for point in points:
            runs.setdefault((point.algo, env, point.seed), []).append(point)
        records += [by_run[key] for key in sorted({(point.algo, point.seed) for point in points})]
    return runs, records


def search_table(entry: dict[str, Any], root: Path) -> str:
    """
    A tuning search (the manifest's ``searches``), by its criterion fixed in advance: per candidate, env and tuning
    seed, the mean of the last ``last`` evaluations of the grid up to the ``budget`` in steps, the drops of more than
    ``drop`` between consecutive evaluations in the budget's second half, and the evaluations with std 0 after step
    0 (a policy that plays one way); per candidate, the criterion: the mean of those means over seeds (and over
    games, human-normalised, for Atari). With ``std_0_out: true`` the criterion puts out a candidate with any
    evaluation of std 0 after step 0: its cell says so and its runs still to come are not needed. Every run of the
    search is on a seed below 100, on the same grid and software as the others (the protocol's comparison check).
    Below the table, how many of the declared runs (``candidates`` x ``envs`` x ``seeds``) are in, and which are
    still needed; a run outside the declared grid (an earlier question's variant on the same
    grid) is shown too, then the data folders and the ``recipe`` that makes them. With a ``target`` return instead
    of ``last``, the criterion is the steps to it: per run its held crossing (:func:`benchmarks.summary.held_crossing`,
    the tables' rule; a run that never holds it counts at the budget), per candidate their median over seeds, lower
    better. A wall-clock search (runs with ``--max-seconds``, evaluated every ``--eval-seconds``) declares
    ``seconds: [from, to]`` instead: its criterion is the mean of the evaluations whose place on the time grid lies
    from ``from`` to ``to`` seconds of training, its ``budget`` is in seconds too. A step-based search declared with
    ``through_budget: true`` (those declared from 2026-12-07 on; the earlier ones were decided without it) counts the
    evaluation due at the budget that lands a little past it, as a peer's does. ``renamed`` (folder -> {algo:
    variant}) names runs made from a working tree whose spec differed from the commit (their record's commit ends in
    ``+dirty``) by the variant they ran.
    """
    budget, drop = int(entry["budget"]), float(entry.get("drop", 1000))
    target, window = entry.get("target"), entry.get("seconds")
    last = None if target is not None or window is not None else int(entry["last"])
    runs, records = search_runs(entry, root)
    tuning = [record["seed"] for record in records if record["seed"] >= FIRST_REPORTING_SEED]
    if tuning:
        raise ProtocolError(f"search {entry['name']}: seeds {sorted(set(tuning))} are reporting seeds, not tuning seeds")
    check_comparison(records, f"search {entry['name']}")
    episodes = {(record["algo"], record["env"], record["seed"]): int(record["eval_episodes"]) for record in records}
    measure = (f"mean of the last {last} evaluations" if last else f"steps to {number(target)}, held" if target is not None
               else f"mean of the evaluations at {window[0]}-{window[1]} s")  # fmt: skip
    header = ["candidate", "env", "seed", measure, f"drops > {drop:.0f}, second half", "evaluations with std 0",
              f"criterion ({'median' if target is not None else 'mean'} over seeds)"]  # fmt: skip
    rows, by_algo, out = [], {}, set()
    for (algo, env, seed), run in sorted(runs.items()):
        run.sort(key=lambda point: point.steps)
        if target is not None:
            crossing = held_crossing(run, float(target), episodes[(algo, env, seed)], budget)
            score = crossing.steps if crossing else budget
            cell = f"{score // 1000}k" if crossing else f"not held by {budget // 1000}k"
        else:
            tail = run[-last:] if last else [point for point in run if window[0] <= point.steps <= window[1]]
            score = float(np.mean([point.eval_mean for point in tail]))
            place = f"{tail[0].steps // 1000}k-{tail[-1].steps // 1000}k steps" if last else f"{len(tail)} evaluations"
            cell = f"{number(score)} ({place})"
            score = human_normalized(env, score) if is_atari(env) else score
        drops = sum(b.eval_mean - a.eval_mean < -drop for a, b in itertools.pairwise(run) if b.steps > budget / 2)
        one_way = sum(point.eval_std == 0 and point.steps > 0 for point in run)
        if one_way and entry.get("std_0_out", False):
            out.add(algo)
        by_algo.setdefault(algo, []).append(score)
        rows.append([f"`{algo}`", env, str(seed), cell, str(drops), str(one_way), ""])
    for row in rows:
        algo = row[0].strip("`")
        scores = by_algo.pop(algo, None)
        if scores is not None:
            runs_cell = f"({len(scores)} run{'s' * (len(scores) > 1)})"
            if target is not None:
                row[-1] = f"{float(np.median(scores)) / 1000:g}k steps {runs_cell}"
            else:
                form, normalised = (".3f", " human-normalised") if is_atari(row[1]) else (None, "")
                row[-1] = f"{number(float(np.mean(scores)), form)}{normalised} {runs_cell}"
            row[-1] = f"out: an evaluation with std 0 ({row[-1]})" if algo in out else row[-1]
    declared = [(algo, env, seed) for algo in entry["candidates"] for env in entry["envs"] for seed in entry["seeds"]]
    missing = [(algo, env, seed) for algo, env, seed in declared if (algo, env, seed) not in runs]
    needed = [f"`{algo}` {env} {seed}" for algo, env, seed in missing if algo not in out]
    status = f"{len(declared) - len(missing)} of the {len(declared)} declared runs so far" + (
        f"; still needed: {', '.join(needed)}" if needed else ""
    )
    if out & {algo for algo, _, _ in missing}:
        unneeded = len(missing) - len(needed)
        status += f"; not needed, the candidate being out: {unneeded} run{'s' * (unneeded > 1)} of " + ", ".join(
            f"`{algo}`" for algo in sorted(out)
        )
    recipe = link(entry["page"], entry["recipe"])
    return "\n".join(markdown_table(header, rows)) + f"\n\n{status}. Data: {', '.join(entry['data'])}. Recipe: {recipe}.\n"


def render_blocks(manifest: dict[str, Any], root: Path, write_files: bool) -> dict[str, dict[str, str]]:
    """Per page, each block's generated text."""
    labels = manifest.get("labels", {})
    tables = {entry["name"]: Table(entry, root, labels) for entry in manifest["tables"]}
    pages: dict[str, dict[str, str]] = {}
    for name, table in tables.items():
        if not table.points:  # no run yet, whatever the kind of table
            text = f"{NOT_YET.capitalize()}: the recipe is {table.link(table.entry['recipe'])}.\n"
        elif table.kind == "atari":
            text = atari_table(table, write_files)
        else:
            text = comparison_table(table)
        pages.setdefault(table.entry["page"], {})[name] = text
    for entry in manifest.get("measurements", []):
        if entry.get("kind") not in MEASUREMENT_KINDS:
            raise ProtocolError(f"measurement {entry['name']}: kind must be one of {sorted(MEASUREMENT_KINDS)}")
        pages.setdefault(entry["page"], {})[entry["name"]] = MEASUREMENT_KINDS[entry["kind"]](entry, root)
    for entry in manifest.get("searches", []):
        pages.setdefault(entry["page"], {})[entry["name"]] = search_table(entry, root)
    rows = readme_rows(manifest, tables)  # computed once: the README, the results page and each algorithm page
    pages.setdefault("README.md", {})["readme-results"] = readme_table(rows)
    pages.setdefault("docs/results.md", {})["results-summary"] = readme_table(rows)
    for page, algorithm in manifest.get("algorithm_pages", {}).items():
        pages.setdefault(page, {})["results-rows"] = readme_table(rows, algorithm)
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
