"""What a benchmark writes: evaluation points, the machine they ran on, CSV, JSON and learning-curve plots."""

import contextlib
import csv
import importlib.metadata
import json
import os
import platform
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch as th


def machine_id(device: str = "cpu") -> str:
    """A short name of this machine's compute: CPU model and count, plus the GPU when the learner uses one."""
    cpu = platform.processor() or platform.machine()
    # No /proc/cpuinfo, or no model name in it: keep platform's name.
    with contextlib.suppress(OSError, StopIteration), open("/proc/cpuinfo") as file:
        cpu = next(line.split(":", 1)[1].strip() for line in file if line.startswith("model name"))
    name = f"{cpu} x{os.cpu_count()}"
    if device.startswith("cuda") and th.cuda.is_available():
        name += f" + {th.cuda.get_device_name(0)}"
    return name


@dataclass
class EvalPoint:
    algo: str
    env: str
    seed: int
    steps: int
    wall_seconds: float
    eval_mean: float
    eval_std: float
    status: str = "ok"
    error: str = ""
    device: str = ""
    machine: str = ""


def machine_description(device: str = "cpu") -> dict[str, Any]:
    return {
        "name": machine_id(device),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "torch_threads": th.get_num_threads(),
        "cuda": th.cuda.get_device_name(0) if th.cuda.is_available() else None,
        "date": time.strftime("%Y-%m-%d"),
        "software": software_versions(),
    }


SOFTWARE = ("torch", "stable_baselines3", "sb3_contrib", "rl_zoo3", "gymnasium", "mujoco", "ale_py", "ray", "numpy")


def software_versions() -> dict[str, str | None]:
    """Python's and the installed versions of the packages a result depends on (None where not installed), so that
    "same machine kind and software" can be checked from the JSON."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in SOFTWARE:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def machine_differences(previous: dict[str, Any] | None, current: dict[str, Any]) -> list[str]:
    """What differs between the machines a table's kept runs came from (its JSON's ``machine``, with its
    ``earlier_sittings``) and this one: the machine's name and each software version; an older JSON without
    versions says so."""
    differences: list[str] = []
    for sitting in sittings(previous):
        found = []
        if sitting.get("name") != current["name"]:
            found.append(f"machine {sitting.get('name')!r} -> {current['name']!r}")
        before = sitting.get("software")
        if before is None:
            found.append("software versions not recorded for the kept runs")
        else:
            found += [
                f"{package} {before.get(package)} -> {version}"
                for package, version in current["software"].items()
                if before.get(package) != version
            ]
        differences += [difference for difference in found if difference not in differences]
    return differences


def sittings(machine: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each sitting's machine description in a JSON's ``machine``: the earlier ones that differ, then the last."""
    if not machine:
        return []
    last = {key: value for key, value in machine.items() if key != "earlier_sittings"}
    return [*machine.get("earlier_sittings", []), last]


def merge_sittings(previous: dict[str, Any] | None, current: dict[str, Any]) -> dict[str, Any]:
    """The ``machine`` of a table that keeps the runs described by ``previous`` and adds runs made on ``current``:
    ``current``, with the earlier sittings whose machine or software differ from it under ``earlier_sittings``."""
    earlier: list[dict[str, Any]] = []
    for sitting in sittings(previous):
        if machine_differences(sitting, current) and sitting not in earlier:
            earlier.append(sitting)
    return {**current, "earlier_sittings": earlier} if earlier else current


def write_csv(points: list[EvalPoint], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(asdict(points[0]).keys()) if points else list(EvalPoint.__annotations__))
        writer.writeheader()
        for point in points:
            writer.writerow(asdict(point))


def read_csv(path: Path) -> list[EvalPoint]:
    with open(path) as file:
        return [
            EvalPoint(
                row["algo"],
                row["env"],
                int(row["seed"]),
                int(row["steps"]),
                float(row["wall_seconds"]),
                float(row["eval_mean"]),
                float(row["eval_std"]),
                row.get("status", "ok"),
                row.get("error", ""),
                row.get("device", ""),
                row.get("machine", ""),
            )
            for row in csv.DictReader(file)
        ]


def write_json(data: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))


def plot_median_band(axis: Any, runs: Sequence[tuple[Sequence[float], Sequence[float]]], label: str, color: Any = None) -> Any:
    """
    One curve per group of runs on ``axis``: the median over runs of y against x, with a min/max band. A run spans
    its first to its last point (nan outside), so a curve is the median of the runs there (a diagnostic logged
    from the first training on starts there). Returns the curve's color.
    """
    grid = np.linspace(0, max(xs[-1] for xs, _ in runs), 100)
    curves = np.array([np.interp(grid, xs, ys, left=np.nan, right=np.nan) for xs, ys in runs])
    with warnings.catch_warnings():  # grid points that no run covers stay empty
        warnings.simplefilter("ignore", RuntimeWarning)
        median, low, high = np.nanmedian(curves, axis=0), np.nanmin(curves, axis=0), np.nanmax(curves, axis=0)
    (line,) = axis.plot(grid, median, label=label, color=color)
    axis.fill_between(grid, low, high, alpha=0.2, color=line.get_color())
    return line.get_color()


def add_legend_below(figure: Any, axis: Any) -> None:
    """One legend for the figure, below its axes, so that it hides no curve whatever the number of variants and
    the length of their names; the figure grows by the legend's rows. Then ``tight_layout``."""
    handles, labels = axis.get_legend_handles_labels()
    if not handles:
        figure.tight_layout()
        return
    width, height = figure.get_size_inches()
    characters_per_column = max(map(len, labels)) + 6  # with the line sample; about 14 characters an inch
    columns = max(1, min(len(labels), int(width * 14) // characters_per_column))
    rows = -(-len(labels) // columns)
    legend_height = 0.18 * rows + 0.15
    figure.set_size_inches(width, height + legend_height)
    figure.legend(handles, labels, loc="lower center", ncol=columns, fontsize="small", frameon=False)
    figure.tight_layout(rect=(0, legend_height / (height + legend_height), 1, 1))


def curve_colors(count: int) -> list[tuple[float, ...]]:
    """``count`` colours: tab10's up to 10 curves; past that tab20's dark shades, then its light ones (tab20 lists
    each hue's two shades side by side), repeating past 20."""
    import matplotlib

    if count <= 10:
        return [matplotlib.colormaps["tab10"].colors[index] for index in range(count)]
    shades = matplotlib.colormaps["tab20"].colors
    ordered = [*shades[::2], *shades[1::2]]
    return [ordered[index % len(ordered)] for index in range(count)]


def plot_curves(points: list[EvalPoint], path: Path, threshold: float | None = None) -> None:
    """
    Median and min/max band over seeds of the evaluation return, against env steps and against wall seconds;
    where runs ended at different points, over the runs that got that far.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    several_machines = len({point.machine for point in points}) > 1
    groups = sorted({(point.algo, point.machine) for point in points if point.status == "ok"})
    palette = curve_colors(len(groups))
    for index, (algo, machine) in enumerate(groups):
        color = palette[index]
        runs: dict[int, list[EvalPoint]] = {}
        for point in points:
            if (point.algo, point.machine) == (algo, machine) and point.status == "ok":
                runs.setdefault(point.seed, []).append(point)
        label = f"{algo} [{machine}]" if several_machines else algo
        for axis, attribute in zip(axes, ("steps", "wall_seconds"), strict=True):
            xy = [([getattr(p, attribute) for p in run], [p.eval_mean for p in run]) for run in runs.values()]
            plot_median_band(axis, xy, f"{label} ({len(runs)} seeds)", color)
    for axis, label in zip(axes, ("environment steps", "wall seconds (evaluation excluded)"), strict=True):
        axis.set_xlabel(label)
        axis.set_ylabel("evaluation return (stochastic policy on Atari, else deterministic)")
        if threshold is not None:
            axis.axhline(threshold, color="gray", linestyle="--", linewidth=1)
    figure.suptitle(points[0].env if points else "")
    add_legend_below(figure, axes[0])
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
