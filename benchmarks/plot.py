"""
Learning curves from the harness' CSV files: return against env steps and against wall seconds.

    python -m benchmarks.plot results/CartPole-v1.csv                 # writes results/CartPole-v1.png
    python -m benchmarks.plot a.csv b.csv --out merged.png --threshold 475

Several CSV files are merged (one env per plot); curves are the median over seeds with a min/max band,
one per algorithm (and per machine when the files come from several).
"""

import argparse
from pathlib import Path

from benchmarks.output import plot_curves, read_csv
from benchmarks.summary import THRESHOLDS


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
