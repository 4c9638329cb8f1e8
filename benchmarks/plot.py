"""
Learning curves from the harness' CSV files: return against env steps and against wall seconds.

    python -m benchmarks.plot results/CartPole-v1.csv                 # writes results/CartPole-v1.png
    python -m benchmarks.plot a.csv b.csv --out merged.png --threshold 475

Several CSV files are merged (one env per plot); curves are the median over seeds with a min/max band,
one per algorithm (and per machine when the files come from several).

Every figure of the harness is drawn here, one function per kind on one set-up (``new_figure``, ``save_figure``:
the legend below the axes, tab10/tab20 colours, PNG at 100 dpi): return curves (``plot_curves``), curves under the
return curve (``plot_panels``: diagnostics and recorders), heatmaps (``plot_heatmaps``).
"""

import argparse
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.output import EVAL_COLUMNS, EvalPoint, read_csv
from benchmarks.protocol import THRESHOLDS


def new_figure(rows: int, columns: int, size: tuple[float, float], **kwargs: Any) -> tuple[Any, np.ndarray]:
    """A figure and its ``rows`` x ``columns`` axes (always 2-D), drawn without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(rows, columns, figsize=size, squeeze=False, **kwargs)


def save_figure(figure: Any, path: Path, legend_of: Any = None) -> None:
    """
    Write ``figure`` to ``path`` and close it. With ``legend_of`` (an axis), one legend of its curves below the
    axes, so that it hides no curve whatever the number of curves and the length of their names; the figure grows
    by the legend's rows.
    """
    import matplotlib.pyplot as plt

    handles, labels = legend_of.get_legend_handles_labels() if legend_of is not None else ([], [])
    if handles:
        width, height = figure.get_size_inches()
        characters_per_column = max(map(len, labels)) + 6  # with the line sample; about 14 characters an inch
        columns = max(1, min(len(labels), int(width * 14) // characters_per_column))
        legend_height = 0.18 * -(-len(labels) // columns) + 0.15
        figure.set_size_inches(width, height + legend_height)
        figure.legend(handles, labels, loc="lower center", ncol=columns, fontsize="small", frameon=False)
        figure.tight_layout(rect=(0, legend_height / (height + legend_height), 1, 1))
    else:
        figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def curve_colors(count: int) -> list[tuple[float, ...]]:
    """``count`` colours: tab10's up to 10 curves; past that tab20's dark shades, then its light ones (tab20 lists
    each hue's two shades side by side), repeating past 20."""
    import matplotlib

    if count <= 10:
        return list(matplotlib.colormaps["tab10"].colors[:count])
    shades = matplotlib.colormaps["tab20"].colors
    ordered = [*shades[::2], *shades[1::2]]
    return [ordered[index % len(ordered)] for index in range(count)]


def plot_median_band(axis: Any, rows: pd.DataFrame, x: str, y: str, label: str, color: Any) -> None:
    """
    One curve of ``rows`` (one group's runs, told apart by ``seed``) on ``axis``: the median over runs of ``y``
    against ``x``, with a min/max band. A run spans its first to its last row with a ``y`` (nan outside), so the
    curve is the median of the runs there (a diagnostic logged from the first training on starts there). Nothing
    where no run has a ``y``.
    """
    runs = [run for _, run in rows.dropna(subset=[y]).groupby("seed")] if y in rows else []
    if not runs:
        return
    grid = np.linspace(0, max(run[x].iloc[-1] for run in runs), 100)
    curves = np.array([np.interp(grid, run[x], run[y], left=np.nan, right=np.nan) for run in runs])
    with warnings.catch_warnings():  # grid points that no run covers stay empty
        warnings.simplefilter("ignore", RuntimeWarning)
        median, low, high = np.nanmedian(curves, axis=0), np.nanmin(curves, axis=0), np.nanmax(curves, axis=0)
    axis.plot(grid, median, label=f"{label} ({len(runs)} seeds)", color=color)
    axis.fill_between(grid, low, high, alpha=0.2, color=color)


def finished(points: list[EvalPoint]) -> pd.DataFrame:
    """The points of runs that did not fail, as a table."""
    frame = pd.DataFrame(map(asdict, points), columns=EVAL_COLUMNS)
    return frame[frame["status"] == "ok"]


def plot_curves(points: list[EvalPoint], path: Path, threshold: float | None = None) -> None:
    """
    Median and min/max band over seeds of the evaluation return, against env steps and against wall seconds;
    where runs ended at different points, over the runs that got that far.
    """
    figure, axes = new_figure(1, 2, (12, 4.5))
    several_machines = len({point.machine for point in points}) > 1
    groups = finished(points).groupby(["algo", "machine"])
    for ((algo, machine), runs), color in zip(groups, curve_colors(groups.ngroups), strict=True):
        label = f"{algo} [{machine}]" if several_machines else algo
        for axis, x in zip(axes[0], ("steps", "wall_seconds"), strict=True):
            plot_median_band(axis, runs, x, "eval_mean", label, color)
    for axis, label in zip(axes[0], ("environment steps", "wall seconds (evaluation excluded)"), strict=True):
        axis.set_xlabel(label)
        axis.set_ylabel("evaluation return (stochastic policy on Atari, else deterministic)")
        if threshold is not None:
            axis.axhline(threshold, color="gray", linestyle="--", linewidth=1)
    figure.suptitle(points[0].env if points else "")
    save_figure(figure, path, axes[0][0])


def plot_panels(points: list[EvalPoint], rows: pd.DataFrame, keys: list[str], path: Path, title: str) -> None:
    """
    The evaluation return against env steps (median and min/max band over seeds of each algo), and under it one
    panel per column ``keys`` of ``rows`` (recorded per algo, seed and steps), each algo in its return's colour.
    """
    figure, axes = new_figure(1 + len(keys), 1, (8, 2.6 * (1 + len(keys))), sharex=True)
    returns = finished(points)
    algos = sorted(returns["algo"].unique())
    for algo, color in zip(algos, curve_colors(len(algos)), strict=True):
        plot_median_band(axes[0][0], returns[returns["algo"] == algo], "steps", "eval_mean", algo, color)
        for axis, key in zip(axes[1:, 0], keys, strict=True):
            plot_median_band(axis, rows[rows["algo"] == algo], "steps", key, algo, color)
    axes[0][0].set_ylabel("evaluation return")
    for axis, key in zip(axes[1:, 0], keys, strict=True):
        axis.set_ylabel(key, fontsize=8)
    axes[-1][0].set_xlabel("environment steps")
    figure.suptitle(title)
    save_figure(figure, path, axes[0][0])


def plot_heatmaps(rows: pd.DataFrame, value: str, path: Path, title: str) -> None:
    """
    One heatmap per algo of its first seed's ``rows`` (``steps``, ``position``, ``value``): a row per recorded
    step, its values right-aligned (position 0, the oldest, leftmost; the newest last).
    """
    algos = list(dict.fromkeys(rows["algo"]))
    figure, axes = new_figure(1, len(algos), (4.5 * len(algos), 4))
    for axis, algo in zip(axes[0], algos, strict=True):
        seed = rows.loc[rows["algo"] == algo, "seed"].min()
        run = rows[(rows["algo"] == algo) & (rows["seed"] == seed)]
        filled = run.groupby("steps")["position"].transform("size")
        image = run.assign(column=run["position"] + filled.max() - filled).pivot(index="steps", columns="column", values=value)
        shown = axis.imshow(image.to_numpy(), aspect="auto", origin="lower", interpolation="nearest", cmap="viridis")
        axis.set_title(f"{algo}, seed {seed}", fontsize=9)
        axis.set_xlabel("position in memory (left: oldest)")
        axis.set_ylabel("iteration")
        figure.colorbar(shown, ax=axis)
    figure.suptitle(title)
    save_figure(figure, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="PNG path (default: the first CSV with .png)")
    parser.add_argument("--threshold", type=float, default=None, help="dashed line (default: known per env)")
    args = parser.parse_args(argv)
    missing = [str(path) for path in args.csv if not path.is_file()]
    if missing:
        parser.error(f"no such file: {', '.join(missing)}")
    points = [point for path in args.csv for point in read_csv(path)]
    envs = sorted({point.env for point in points})
    if len(envs) != 1:
        parser.error(f"one env per plot, the files hold {envs}")
    threshold = args.threshold if args.threshold is not None else THRESHOLDS.get(envs[0])
    out = args.out or args.csv[0].with_suffix(".png")
    plot_curves(points, out, threshold)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
