"""
Scaling of the Ray collector: environment steps per second with 1, 2, 4, ... workers, and the ratio to linear.

    python -m benchmarks.ray_scaling --workers 1 2 4 8 14 --out results/ray_scaling

Two measurements per worker count (``--modes``):
- ``collect``: the collector alone, with a fixed policy (no learning, no broadcasts); the driver only takes
  segments, so this is the throughput the workers can deliver;
- ``learn``: IMPACT's full ``learn()`` with ``collector="ray"``, counting environment steps per second of
  training time (the learner consumes one segment per ``max_batch_reuse`` gradient steps, so with a small
  learner this is bound by the learner, not by the workers).

Efficiency is ``steps_per_s(n) / (n * steps_per_s(1))`` (1.0 is linear scaling). Ray is started locally with
``max(--workers, CPUs)`` logical CPUs, so worker counts above the machine's cores are oversubscribed (marked
in the outputs). Writes ray_scaling.json, ray_scaling.csv and ray_scaling.png into ``--out``.
"""

import argparse
import csv
import json
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from benchmarks.common import machine_description, write_json
from sb3_impact import IMPACT

CSV_FIELDS = ["mode", "workers", "steps_per_s", "efficiency", "oversubscribed", "worker_steps_per_s_min", "repeats"]


def build_model(args: argparse.Namespace, n_workers: int) -> IMPACT:
    return IMPACT(
        "MlpPolicy",
        args.env,
        collector="ray",
        collector_kwargs=dict(num_workers=n_workers, envs_per_worker=args.envs_per_worker, queue_size=args.queue_size),
        n_steps=args.n_steps,
        seed=0,
        device="cpu",
    )


def measure_collection(args: argparse.Namespace, n_workers: int) -> dict[str, float]:
    """Steps/s the collector delivers to a driver that only takes segments, after every worker delivered some."""
    model = build_model(args, n_workers)
    model._last_obs = model.env.reset()
    collector = model._make_collector()  # no step budget: it collects until closed
    collector.start()
    try:
        deadline = time.monotonic() + 600
        while min(slot.delivered_steps for slot in collector._slots) < 2 * collector.segment_size:
            collector.get_segment()
            if time.monotonic() > deadline:
                raise RuntimeError("the workers did not all deliver within 600s")
        worker_steps = [slot.delivered_steps for slot in collector._slots]
        steps, start = collector.delivered_steps, time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            collector.get_segment()
        seconds = time.perf_counter() - start
        slots = collector._slots
        per_worker = [(slot.delivered_steps - before) / seconds for slot, before in zip(slots, worker_steps, strict=True)]
        return {"steps_per_s": (collector.delivered_steps - steps) / seconds, "worker_steps_per_s_min": min(per_worker)}
    finally:
        collector.close()


class TrainingClock(BaseCallback):
    """Environment steps and seconds from the moment the workers are running to the end of training."""

    def _on_training_start(self) -> None:
        self.start_steps, self.start = self.num_timesteps, time.perf_counter()

    def _on_step(self) -> bool:
        return True

    def _on_training_end(self) -> None:
        self.steps, self.seconds = self.num_timesteps - self.start_steps, time.perf_counter() - self.start


def measure_learning(args: argparse.Namespace, n_workers: int) -> dict[str, float]:
    model = build_model(args, n_workers)
    clock = TrainingClock()
    model.learn(args.learn_steps, callback=clock)
    per_worker = [value for key, value in model.collector_stats.items() if key.startswith("worker_")]
    return {"steps_per_s": clock.steps / clock.seconds, "worker_steps_per_s_min": min(per_worker)}


def plot(rows: list[dict[str, Any]], path: Path, cpus: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (rate_axis, efficiency_axis) = plt.subplots(1, 2, figsize=(10, 4))
    for mode in sorted({row["mode"] for row in rows}):
        mode_rows = sorted((row for row in rows if row["mode"] == mode), key=lambda row: row["workers"])
        workers = [row["workers"] for row in mode_rows]
        (line,) = rate_axis.plot(workers, [row["steps_per_s"] for row in mode_rows], "o-", label=mode)
        if mode_rows[0]["workers"] == 1:
            linear = [mode_rows[0]["steps_per_s"] * n for n in workers]
            rate_axis.plot(workers, linear, ":", color=line.get_color(), label=f"{mode}, linear")
        efficiency_axis.plot(workers, [row["efficiency"] for row in mode_rows], "o-", color=line.get_color(), label=mode)
    for axis in (rate_axis, efficiency_axis):
        axis.axvline(cpus - 1, color="grey", linestyle="--", linewidth=0.8, label=f"CPUs - 1 = {cpus - 1}")
        axis.set_xlabel("Ray workers")
        axis.set_xticks(sorted({row["workers"] for row in rows}))
        axis.grid(alpha=0.3)
    efficiency_axis.axhline(0.7, color="red", linestyle=":", linewidth=0.8, label="target 0.7")
    rate_axis.set_ylabel("environment steps / s")
    efficiency_axis.set_ylabel("efficiency (1 = linear scaling)")
    efficiency_axis.set_ylim(0, 1.2)
    rate_axis.legend(fontsize=8)
    efficiency_axis.legend(fontsize=8)
    figure.suptitle(f"Ray collector scaling ({cpus} CPUs)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--modes", nargs="+", choices=["collect", "learn"], default=["collect"])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--envs-per-worker", type=int, default=8)
    parser.add_argument("--n-steps", type=int, default=64)
    parser.add_argument("--queue-size", type=int, default=2, help="requests in flight per worker")
    parser.add_argument("--seconds", type=float, default=20.0, help="measuring time per point (collect)")
    parser.add_argument("--learn-steps", type=int, default=100_000, help="steps per point (learn)")
    parser.add_argument("--repeats", type=int, default=1, help="measurements per point (the median is kept)")
    parser.add_argument("--out", type=Path, default=Path("results/ray_scaling"))
    parser.add_argument("--replot", action="store_true", help="only redraw the PNG from --out/ray_scaling.json")
    args = parser.parse_args()
    if args.replot:
        data = json.loads((args.out / "ray_scaling.json").read_text())
        plot(data["rows"], args.out / "ray_scaling.png", data["machine"]["cpus"])
        return

    import ray

    cpus = os.cpu_count() or 1
    ray.init(num_cpus=max(max(args.workers), cpus), include_dashboard=False, logging_level=logging.WARNING)
    measure = {"collect": measure_collection, "learn": measure_learning}
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    try:
        # Repeats are interleaved (1, 2, 4, 1, 2, 4, ...) so that a drifting machine load hits every point alike.
        for repeat in range(args.repeats):
            for mode in args.modes:
                for n_workers in sorted(args.workers):
                    result = measure[mode](args, n_workers)
                    results.setdefault((mode, n_workers), []).append(result)
                    print(f"repeat {repeat}: {mode} with {n_workers} workers: {result}", flush=True)
    finally:
        ray.shutdown()

    rows: list[dict[str, Any]] = []
    for mode in args.modes:
        baseline = None
        for n_workers in sorted(args.workers):
            measured = results.get((mode, n_workers), [])
            if not measured:
                continue
            rate = statistics.median(result["steps_per_s"] for result in measured)
            if n_workers == 1:
                baseline = rate
            rows.append(
                {
                    "mode": mode,
                    "workers": n_workers,
                    "steps_per_s": round(rate, 1),
                    "efficiency": round(rate / (n_workers * baseline), 3) if baseline else None,
                    "oversubscribed": n_workers + 1 > cpus,  # the driver needs a core too
                    "worker_steps_per_s_min": round(statistics.median(r["worker_steps_per_s_min"] for r in measured), 1),
                    "repeats": len(measured),
                }
            )

    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "ray_scaling.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    settings = {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()}
    write_json(
        {
            "rows": rows,
            "settings": settings,
            "machine": machine_description(),
            "ray_version": ray.__version__,
            "min_efficiency": {
                mode: float(np.min([row["efficiency"] for row in rows if row["mode"] == mode and row["efficiency"]]))
                for mode in args.modes
            },
        },
        args.out / "ray_scaling.json",
    )
    plot(rows, args.out / "ray_scaling.png", cpus)
    print(f"wrote {args.out}/ray_scaling.{{json,csv,png}}")


if __name__ == "__main__":
    main()
