"""
The tables of what the profilers measure, cost and speed rather than returns: ``python -m benchmarks tables``
renders each of the manifest's ``measurements`` (``benchmarks/tables.yml``) with the function of its kind
(:data:`MEASUREMENT_KINDS`), from the files a profiler wrote (``data``: a list of files), with the command, the
machine and the recipe that made them:

- ``throughput`` (``python -m benchmarks throughput``): per report, C, L, T_async, T_async / max(C, L), T_sync,
  env steps per second asynchronous and T_sync / T_async, CPU-seconds per 1000 steps, idle or busy;
- ``step_cost`` (``python -m benchmarks step_cost``): per algo and env, wall and CPU ms per env step (and beside
  CPU-bound processes, with the busy/idle ratio);
- ``demo``: the README demo's training time and CPU, idle and busy, from its output under ``/usr/bin/time -v``;
- ``gpu_overlap`` and ``ray_scaling``, a lent GPU machine's (``benchmarks/recipes/gpu_machine.sh``): throughput
  reports against their overlap bound beside an SB3 run's steps per second; the Ray collector's ``learn()`` against
  the learner's ceiling. The files come back from a machine that only some sittings have: a file not there yet is
  a measurement not made yet, and the table says so, where the other kinds' missing file is an error.

Both kinds of throughput table are one table (:func:`throughput_rows`) with the columns of their kind.
"""

import json
import re
from pathlib import Path
from typing import Any

from benchmarks.cells import link, markdown_table, number
from benchmarks.output import EvalPoint, read_csv
from benchmarks.protocol import ProtocolError
from benchmarks.summary import last_points

# A throughput report's fields as a table shows them: header and format spec ("": as it is).
FIELDS = {
    "algo": ("algo", ""),
    "env": ("env", ""),
    "vec_env": ("vec env", ""),
    "collector": ("collector", ""),
    "device": ("learner", ""),
    "learner_threads": ("learner threads", ""),
    "busy_processes": ("busy processes", ""),
    "repeats": ("repeats", ""),
    "C_collect_seconds_per_batch": ("C s/batch", ".3f"),
    "L_learn_seconds_per_batch": ("L s/batch", ".3f"),
    "T_async_seconds_per_batch": ("T_async s/batch", ".3f"),
    "T_async_over_max_C_L": ("T_async / max(C, L)", ".2f"),
    "T_sync_seconds_per_batch": ("T_sync s/batch", ".3f"),
    "env_steps_per_second_async": ("env steps/s async", ".0f"),
    "env_steps_per_second_sync": ("env steps/s sync", ".0f"),
    "T_sync_over_T_async": ("T_sync / T_async", ".2f"),
    "T_async_cpu_seconds_per_1k_steps": ("CPU s per 1k steps async", ".2f"),
    "T_sync_cpu_seconds_per_1k_steps": ("CPU s per 1k steps sync", ".2f"),
    "overlap_bound": ("bound (C + L) / max(C, L)", ".2f"),
    "of_the_bound": ("of the bound", ".2f"),
}
# Each kind's columns, in order; "**" marks a figure shown in bold.
THROUGHPUT_COLUMNS = {
    "throughput": ["algo", "env", "collector", "learner_threads", "busy_processes", "repeats",
                   "C_collect_seconds_per_batch", "L_learn_seconds_per_batch", "T_async_seconds_per_batch",
                   "**T_async_over_max_C_L", "T_sync_seconds_per_batch", "env_steps_per_second_async",
                   "**T_sync_over_T_async", "T_async_cpu_seconds_per_1k_steps", "T_sync_cpu_seconds_per_1k_steps"],
    "gpu_overlap": ["algo", "env", "vec_env", "collector", "device", "C_collect_seconds_per_batch",
                    "L_learn_seconds_per_batch", "T_async_seconds_per_batch", "T_sync_seconds_per_batch",
                    "env_steps_per_second_async", "env_steps_per_second_sync", "T_sync_over_T_async", "overlap_bound",
                    "**of_the_bound"],
}  # fmt: skip


def data_files(entry: dict[str, Any], root: Path, optional: bool = False) -> list[Path]:
    """The entry's ``data`` files that are there; a missing one is an error unless ``optional``."""
    missing = [name for name in entry["data"] if not (root / name).is_file()]
    if missing and not optional:
        raise ProtocolError(f"measurement {entry['name']}: {missing[0]} does not exist")
    return [root / name for name in entry["data"] if name not in missing]


def read_json(paths: list[Path]) -> list[dict[str, Any]]:
    """The JSON files among ``paths``, read."""
    return [json.loads(path.read_text()) for path in paths if path.suffix == ".json"]


def machine_line(machines: list[dict[str, Any]], entry: dict[str, Any], details: bool = False) -> str:
    """The machines the data came from (with ``details``, their CPUs and GPU where the name lacks it), their dates
    and the recipe."""
    known: dict[str, list[str]] = {}
    for machine in machines:
        found, cuda = known.setdefault(machine["name"], []), machine.get("cuda")
        if details and machine.get("cpus") and not found:
            found.append(f"{machine['cpus']} CPUs")
        if details and cuda and cuda not in machine["name"] and cuda not in found:
            found.append(cuda)
    names = [name + (f" ({', '.join(found)})" if found else "") for name, found in sorted(known.items())]
    dates = sorted({machine.get("date", "") for machine in machines} - {""})
    return f"Machine: {', '.join(names)}; {', '.join(dates)}. Recipe: {link(entry['page'], entry['recipe'])}.\n"


def not_yet_measured(entry: dict[str, Any]) -> str:
    """What a lent machine's table says until its data are here."""
    return (
        f"Not yet measured. Recipe: {link(entry['page'], entry['recipe'])}; its header gives the device command and "
        "the steps that bring the data here.\n"
    )


def with_ratios(report: dict[str, Any]) -> dict[str, Any]:
    """A throughput report with the figures its table derives: defaults for the settings it leaves out, T_sync /
    T_async where the profiler stopped before it, the overlap bound (C + L) / max(C, L) and the speed-up's share of
    it, and collect-then-train's env steps per second."""
    c, learn = report.get("C_collect_seconds_per_batch"), report.get("L_learn_seconds_per_batch")
    t_async, t_sync = report.get("T_async_seconds_per_batch"), report.get("T_sync_seconds_per_batch")
    bound = (c + learn) / max(c, learn) if c and learn else None
    speedup = report.get("T_sync_over_T_async", t_sync / t_async if t_sync and t_async else None)
    return {
        **report,
        "learner_threads": report.get("learner_threads") or "default (1)",
        "busy_processes": report.get("busy_processes", 0),
        "repeats": report.get("repeats", 1),
        "T_sync_over_T_async": speedup,
        "overlap_bound": bound,
        "of_the_bound": speedup / bound if speedup and bound else None,
        "env_steps_per_second_sync": report["batch_env_steps"] / t_sync if t_sync else None,
    }


def throughput_rows(reports: list[dict[str, Any]], kind: str) -> list[str]:
    """A row per ``benchmarks throughput`` report, with the columns of ``kind`` (:data:`THROUGHPUT_COLUMNS`)."""
    fields = [column.lstrip("*") for column in THROUGHPUT_COLUMNS[kind]]
    bold = [column.startswith("**") for column in THROUGHPUT_COLUMNS[kind]]
    rows = []
    for report in map(with_ratios, reports):
        cells = []
        for field, strong in zip(fields, bold, strict=True):
            value = report.get(field)
            text = value if isinstance(value, str) else number(value, FIELDS[field][1])
            cells.append(f"**{text}**" if strong and text != "-" else text)
        rows.append(cells)
    return markdown_table([FIELDS[field][0] for field in fields], rows)


def throughput_table(entry: dict[str, Any], root: Path) -> str:
    """A row per ``benchmarks throughput`` report: C, L, T_async, overlap, T_sync, speed-up, CPU per 1000 steps."""
    reports = read_json(data_files(entry, root))
    return "\n".join(throughput_rows(reports, "throughput")) + "\n\n" + machine_line([r["machine"] for r in reports], entry)


def step_cost_table(entry: dict[str, Any], root: Path) -> str:
    """A row per algo and env of ``benchmarks step_cost`` reports: wall and CPU ms per env step (idle, busy)."""
    reports = read_json(data_files(entry, root))
    busy = any("busy_cpu_ms_per_step" in row for report in reports for row in report["rows"])
    header = ["algo", "env", "wall ms/step", "CPU ms/step"]
    header += ["wall ms/step, busy", "CPU ms/step, busy", "CPU busy / idle", "wall busy / idle"] if busy else []
    rows = []
    for row in (row for report in reports for row in report["rows"]):
        cells = [row["algo"], row["env"], f"{row['wall_ms_per_step']:.3f}", f"{row['cpu_ms_per_step']:.3f}"]
        if busy:
            cells += [f"{row['busy_wall_ms_per_step']:.3f}", f"{row['busy_cpu_ms_per_step']:.3f}"]
            cells += [f"**{row['busy_over_idle_cpu']:.2f}**", f"{row['busy_over_idle_wall']:.2f}"]
        rows.append(cells)
    commands = "; ".join(f"`{report['command']}`" for report in reports)
    machines = [report["machine"] for report in reports]
    return "\n".join(markdown_table(header, rows)) + f"\n\nCommand: {commands}.  \n" + machine_line(machines, entry)


def demo_table(entry: dict[str, Any], root: Path) -> str:
    """
    The README demo's training time and CPU, idle and busy: ``data`` is the demo's output under ``/usr/bin/time -v``
    in two files, idle first (its "N steps in S s" line, and the user and system CPU seconds of the whole run).
    """
    rows, figures = [], []
    for label, path in zip(("idle", "two CPU-bound processes beside it"), data_files(entry, root), strict=True):
        text = path.read_text()
        steps, seconds = re.search(r"(\d+) steps in ([\d.]+)s", text).groups()  # type: ignore[union-attr]
        cpu = sum(float(value) for value in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", text))
        figures.append((float(seconds), cpu))
        rows.append([label, steps, f"{float(seconds):.1f}", f"{cpu:.1f}"])
    (idle_seconds, idle_cpu), (busy_seconds, busy_cpu) = figures
    header = ["machine", "env steps", "training wall s", "CPU s of the whole run"]
    ratios = f"Busy over idle: training time **{busy_seconds / idle_seconds:.2f}x**, CPU {busy_cpu / idle_cpu:.2f}x.  \n"
    return "\n".join(markdown_table(header, rows)) + "\n\n" + ratios + f"Recipe: {link(entry['page'], entry['recipe'])}.\n"


def sb3_speed_note(point: EvalPoint, reports: list[dict[str, Any]]) -> str:
    """An SB3 run's env steps per second (its last point's steps over its training time) and each report's
    asynchronous steps per second over it."""
    speed = point.steps / point.wall_seconds
    faster = "; ".join(
        f"`{report['algo']}` asynchronous over it: **{report['env_steps_per_second_async'] / speed:.2f}**"
        for report in reports
        if report.get("env_steps_per_second_async") and report["env"] == point.env
    )
    return (
        f"SB3 `{point.algo}` on {point.env}, learner on {point.device}: **{speed:.0f}** env steps/s "
        f"({point.steps} steps in {point.wall_seconds:.0f} s of training)" + (f"; {faster}." if faster else ".")
    )


def gpu_overlap_table(entry: dict[str, Any], root: Path) -> str:
    """
    Asynchrony where it is meant to pay, from ``data``'s files: a row per ``benchmarks throughput`` report (JSON) with
    the most asynchrony can give over collect-then-train, (C + L) / max(C, L), and the fraction of it that
    T_sync / T_async reaches; then each SB3 run's env steps per second (``benchmarks run``'s ``ENV.csv``) and each
    report's asynchronous steps per second over it. The files not there yet are named below the table.
    """
    present = data_files(entry, root, optional=True)
    if not present:
        return not_yet_measured(entry)
    reports = read_json(present)
    machines = [report["machine"] for report in reports]
    notes = []
    for path in (path for path in present if path.suffix == ".csv"):
        points = last_points(read_csv(path))
        summary = path.with_suffix(".json")  # the run's ENV.json, with its machine; the CSV has its name only
        machines += (
            [json.loads(summary.read_text())["machine"]] if summary.is_file() else [{"name": p.machine} for p in points]
        )
        notes += [sb3_speed_note(point, reports) for point in points]
    missing = [Path(name).name for name in entry["data"] if root / name not in present]
    if missing:
        notes.append("Not measured in this sitting: " + ", ".join(f"`{name}`" for name in missing) + ".")
    table = "\n".join(throughput_rows(reports, "gpu_overlap")) + "\n\n" if reports else ""
    return table + "".join(f"{note}  \n" for note in notes) + machine_line(machines, entry, details=True)


def ray_scaling_table(entry: dict[str, Any], root: Path) -> str:
    """
    ``benchmarks ray_scaling``'s JSON (``data``'s one file): per mode and number of workers, env steps per second,
    the collector's fraction of linear (collect) or learn()'s of the learner's ceiling, and learn()'s of the most
    the environments and the learner allow together (min(ceiling, environments' limit)), the slowest worker, the
    driver's time per segment and the learner's CPU per step.
    """
    present = data_files(entry, root, optional=True)
    if not present:
        return not_yet_measured(entry)
    data = read_json(present)[0]
    ceiling = next((row["steps_per_s"] for row in data["rows"] if row["mode"] == "ceiling"), None)
    header = ["mode", "workers", "env steps/s", "of linear (collect), of the ceiling (learn)", "environments' limit",
              "of min(ceiling, environments' limit)", "slowest worker, steps/s", "driver ms per segment",
              "learner's CPU ms per step"]  # fmt: skip
    rows = []
    for row in data["rows"]:
        learn, limit = row["mode"] == "learn", row["env_limit_steps_per_s"]
        fraction = row["efficiency"] if row["mode"] == "collect" else row["of_ceiling"]
        rows.append(
            [
                "ceiling (learner alone)" if row["mode"] == "ceiling" else row["mode"],
                "" if row["mode"] == "ceiling" else str(row["workers"]),
                number(row["steps_per_s"], ".0f"),
                f"**{fraction:.2f}**" if learn and fraction is not None else number(fraction, ".2f"),
                number(limit, ".0f"),
                number(row["steps_per_s"] / min(ceiling, limit) if learn and ceiling and limit else None, ".2f"),
                number(row["worker_steps_per_s_min"], ".0f"),
                number(row["driver_ms_per_segment"], ".2f"),
                number(row["learner_cpu_ms_per_step"], ".2f"),
            ]
        )
    settings = data["settings"]
    note = (
        f"{settings['env']} (sleep {settings['step_sleep'] * 1e3:g} ms, CPU {settings['step_cpu'] * 1e3:g} ms per "
        f"step), {settings['envs_per_worker']} env(s) x {settings['n_steps']} steps per segment, "
        f"{settings['num_cpus_per_worker']:g} CPU per worker, {settings['learn_steps']} steps per learn() point, "
        f"{settings['repeats']} repeat(s) (medians); the learner's ceiling with {data['learner_threads']} torch "
        f"thread(s), as learn() leaves it beside {max(settings['workers'])} workers; Ray {data['ray_version']}."
    )
    table = "\n".join(markdown_table(header, rows))
    return table + f"\n\n{note}  \n" + machine_line([data["machine"]], entry, details=True)


MEASUREMENT_KINDS = {
    "throughput": throughput_table,
    "step_cost": step_cost_table,
    "demo": demo_table,
    "gpu_overlap": gpu_overlap_table,
    "ray_scaling": ray_scaling_table,
}
