"""
Scaling of the Ray collector with its number of workers, with the parts measured apart.

    python -m benchmarks ray_scaling --workers 1 2 4 8 16 --step-sleep 0.005 --out results/ray_scaling

The environment is :class:`benchmarks.profiling.simulated_env.SimulatedEnv` (``--env`` takes another id): each step
waits ``--step-sleep`` seconds and keeps a core busy for ``--step-cpu`` seconds, with ``--obs-size`` float32
entries, so one worker's environments allow at most ``envs_per_worker / (step_sleep + step_cpu)`` steps/s.
Three measurements (``--modes``):

- ``collect``: the collector alone, for each worker count. The driver only takes segments (fixed policy, no
  learning, no broadcasts): the throughput the workers deliver, with the driver's time per segment and the
  bytes of a segment;
- ``ceiling``: the learner alone. IMPACT's ``learn()`` is fed segments recorded once and handed out again at
  no cost (:class:`ReplayedSegments`): the environment steps per second the learner can consume;
- ``learn``: IMPACT's full ``learn()`` with ``collector="ray"``, for each worker count: environment steps per
  second of training time (from the moment every worker is running).

``collect`` rows give ``efficiency`` = ``steps_per_s(n) / (n * steps_per_s(1))`` (1.0 is linear scaling);
``learn`` rows give ``of_ceiling`` = ``steps_per_s / ceiling``. CPU time per environment step is read from the
processes themselves (``/proc``, Linux): the workers' together (``collect``) and the learner's process
(``ceiling``, ``learn``); ``learn`` rows add ``cpu_limit_steps_per_s``, the most this machine's cores allow when
each step costs the workers' CPU (``collect`` at the same count) plus the learner's (``ceiling``). The ceiling
runs with the torch threads ``learn()`` leaves the learner at the largest worker count. Ray is started
locally with this machine's CPUs (``--ray-cpus`` to change); each worker asks for ``--num-cpus-per-worker``
CPUs (default: the CPUs shared by the largest worker count, at most 1), so that workers which mostly sleep can
share cores.
Repeats are interleaved over worker counts and the median is kept. Writes ray_scaling.json, .csv and .png
into ``--out``.
"""

import argparse
import csv
import dataclasses
import functools
import json
import logging
import os
import pickle
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env

from benchmarks.output import machine_description, write_json
from benchmarks.pool import sigterm_as_keyboard_interrupt
from benchmarks.profiling.simulated_env import SimulatedEnv
from benchmarks.profiling.timing import Mark, SectionTimer
from sb3_impact import IMPACT
from sb3_impact.common.collectors import SegmentSampler
from sb3_impact.common.collectors.base import Collector, CollectorError, learner_threads_beside
from sb3_impact.common.collectors.ray import RayCollector, cpus_taken
from sb3_impact.common.segments import Segment

CSV_FIELDS = [
    "mode",
    "workers",
    "steps_per_s",
    "segments_per_s",
    "efficiency",
    "of_ceiling",
    "env_limit_steps_per_s",
    "worker_steps_per_s_min",
    "driver_ms_per_segment",
    "bytes_per_segment",
    "worker_cpu_ms_per_step",
    "learner_cpu_ms_per_step",
    "cpu_limit_steps_per_s",
    "repeats",
]
REPO_ROOT = Path(__file__).resolve().parents[2]


def env_factory(args: argparse.Namespace) -> Any:
    """What the workers build their environments from: an id, or a picklable SimulatedEnv factory."""
    if args.env != "SimulatedEnv-v0":
        return args.env
    return functools.partial(
        SimulatedEnv, step_sleep=args.step_sleep, step_cpu=args.step_cpu, obs_size=args.obs_size, episode_steps=1000
    )


def build_model(args: argparse.Namespace, n_workers: int) -> IMPACT:
    collector_kwargs = dict(
        num_workers=n_workers,
        envs_per_worker=args.envs_per_worker,
        queue_size=args.queue_size,
        num_cpus_per_worker=args.num_cpus_per_worker,
    )
    return IMPACT(
        "MlpPolicy",
        env_factory(args),
        collector="ray",
        collector_kwargs=collector_kwargs,
        n_steps=args.n_steps,
        seed=0,
        device="cpu",
    )


class ReplayedSegments(Collector):
    """
    Hands out ``recorded`` segments collected once at :meth:`start`, again and again at no cost (fresh array
    copies, stamped with the newest policy version): a learner fed by it runs at its own ceiling.
    """

    continues_episodes = False

    def __init__(self, sampler: SegmentSampler, recorded: int = 4) -> None:
        super().__init__(sampler)
        self.recorded = recorded
        self.segments: list[Segment] = []
        self.version = sampler.policy_version

    def start(self) -> None:
        self.segments = [self.sampler.collect() for _ in range(self.recorded)]

    def get_segment(self) -> Segment:
        if not self.take_budget():
            raise CollectorError(f"the step budget of this learn() call ({self.step_budget} steps) is spent")
        segment = self.segments[(self.delivered_steps // self.segment_size) % self.recorded]
        copies = {
            name: np.copy(value)
            for name, value in vars(segment).items()
            if isinstance(value, np.ndarray) and name != "env_ids"
        }
        self.delivered_steps += segment.size
        return dataclasses.replace(segment, **copies, policy_version=self.version, collect_seconds=0.0)

    @property
    def sampled_steps(self) -> int:
        """A replayed step counts as sampled, so that the learner's accounting (sampled = trained + dropped) holds."""
        return self.delivered_steps

    def broadcast(self, state_dict: dict[str, th.Tensor], version: int) -> None:
        self.version = version

    def close(self) -> None:
        """Nothing runs in the background."""


class TrainingClock(BaseCallback):
    """Environment steps and seconds from the moment the workers are running to the end of training."""

    def __init__(self) -> None:
        super().__init__()
        self.timer = SectionTimer()
        self.started: Mark | None = None
        self.start_steps = self.steps = 0
        self.seconds = 0.0

    def _on_training_start(self) -> None:
        self.start_steps, self.started = self.num_timesteps, self.timer.mark()

    def _on_step(self) -> bool:
        return True

    def _on_training_end(self) -> None:
        assert self.started is not None, "on_training_end before on_training_start"
        self.steps = self.num_timesteps - self.start_steps
        self.seconds = self.timer.add_since(self.started, "training").wall


def process_cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of a process of this machine so far (``/proc/PID/stat``); NaN where unreadable or
    unknown (None)."""
    if pid is None:
        return float("nan")
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14, 15 of stat


def learner_threads(args: argparse.Namespace) -> int:
    """The torch threads learn() leaves the learner when the largest worker count runs on this machine."""
    return learner_threads_beside(cpus_taken(max(args.workers), args.num_cpus_per_worker), th.get_num_threads())


def measure_collection(args: argparse.Namespace, n_workers: int) -> dict[str, float]:
    """Steps/s the collector delivers to a driver that only takes segments, after every worker delivered some."""
    model = build_model(args, n_workers)
    collector = model.make_collector()  # no step budget: it collects until closed
    assert isinstance(collector, RayCollector)
    collector.start()
    try:
        deadline = time.monotonic() + 600
        while min(worker.delivered_steps for worker in collector.worker_stats()) < 2 * collector.segment_size:
            segment = collector.get_segment()
            if time.monotonic() > deadline:
                raise RuntimeError("the workers did not all deliver within 600s")
        bytes_per_segment = len(pickle.dumps(segment, protocol=5))
        before = collector.worker_stats()
        steps, segments, driver_seconds = collector.delivered_steps, collector.delivered_segments, collector.driver_seconds
        worker_cpu = sum(process_cpu_seconds(worker.pid) for worker in before)
        deadline = time.perf_counter() + args.seconds
        with SectionTimer().section("collect") as collecting:
            while time.perf_counter() < deadline:
                collector.get_segment()
        seconds = collecting.wall
        worker_cpu = sum(process_cpu_seconds(worker.pid) for worker in collector.worker_stats()) - worker_cpu
        per_worker = [
            (after.delivered_steps - earlier.delivered_steps) / seconds
            for after, earlier in zip(collector.worker_stats(), before, strict=True)
        ]
        new_segments = collector.delivered_segments - segments
        return {
            "steps_per_s": (collector.delivered_steps - steps) / seconds,
            "segments_per_s": new_segments / seconds,
            "worker_steps_per_s_min": min(per_worker),
            "driver_ms_per_segment": 1e3 * (collector.driver_seconds - driver_seconds) / max(new_segments, 1),
            "bytes_per_segment": bytes_per_segment,
            "worker_cpu_ms_per_step": 1e3 * worker_cpu / max(collector.delivered_steps - steps, 1),
        }
    finally:
        collector.close()


def measure_learning(args: argparse.Namespace, n_workers: int) -> dict[str, float]:
    model = build_model(args, n_workers)
    clock = TrainingClock()
    with SectionTimer().section("learn") as learning:
        model.learn(args.learn_steps, callback=clock)
    stats = model.collector_stats
    per_worker = [value for key, value in stats.items() if key.startswith("worker_")]
    steps_per_s = clock.steps / clock.seconds
    return {
        "steps_per_s": steps_per_s,
        "segments_per_s": steps_per_s / (args.n_steps * args.envs_per_worker),
        "worker_steps_per_s_min": min(per_worker),
        "driver_ms_per_segment": stats.get("driver_ms_per_segment", float("nan")),
        "learner_cpu_ms_per_step": 1e3 * learning.cpu / model.num_timesteps,
    }


def measure_ceiling(args: argparse.Namespace) -> dict[str, float]:
    """Steps/s IMPACT's learner consumes when segments cost nothing: its ceiling for any number of workers."""
    env = make_vec_env(env_factory(args), n_envs=args.envs_per_worker, seed=0)
    model = IMPACT("MlpPolicy", env, collector=ReplayedSegments, n_steps=args.n_steps, seed=0, device="cpu")
    clock = TrainingClock()
    threads = th.get_num_threads()
    th.set_num_threads(learner_threads(args))
    try:
        with SectionTimer().section("learn") as learning:
            model.learn(args.learn_steps, callback=clock)
    finally:
        th.set_num_threads(threads)
    env.close()
    steps_per_s = clock.steps / clock.seconds
    return {
        "steps_per_s": steps_per_s,
        "segments_per_s": steps_per_s / (args.n_steps * args.envs_per_worker),
        "learner_cpu_ms_per_step": 1e3 * learning.cpu / model.num_timesteps,
    }


def env_limit(args: argparse.Namespace, n_workers: int) -> float | None:
    """Steps/s the workers' environments allow (their stated step cost), for SimulatedEnv."""
    step_seconds = args.step_sleep + args.step_cpu
    if args.env != "SimulatedEnv-v0" or step_seconds <= 0:
        return None
    return n_workers * args.envs_per_worker / step_seconds


def summarize(args: argparse.Namespace, results: dict[tuple[str, int], list[dict[str, float]]]) -> list[dict[str, Any]]:
    def median(measured: list[dict[str, float]], key: str) -> float | None:
        values = [result[key] for result in measured if key in result]
        return round(float(statistics.median(values)), 3) if values else None

    ceiling = median(results.get(("ceiling", 0), []), "steps_per_s")
    learner_cpu = median(results.get(("ceiling", 0), []), "learner_cpu_ms_per_step")
    rows: list[dict[str, Any]] = []
    for mode in args.modes:
        baseline = None
        for (row_mode, n_workers), measured in sorted(results.items()):
            if row_mode != mode:
                continue
            rate = median(measured, "steps_per_s")
            if mode == "collect" and n_workers == min(args.workers):
                baseline = rate / n_workers
            limit = env_limit(args, n_workers) if mode != "ceiling" else None
            worker_cpu = median(results.get(("collect", n_workers), []), "worker_cpu_ms_per_step")
            cpu_limit = None
            if mode == "learn" and worker_cpu and learner_cpu:
                cpu_limit = round(1e3 * (os.cpu_count() or 1) / (worker_cpu + learner_cpu), 1)
            rows.append(
                {
                    "mode": mode,
                    "workers": n_workers,
                    "steps_per_s": rate,
                    "segments_per_s": median(measured, "segments_per_s"),
                    "efficiency": round(rate / (n_workers * baseline), 3) if mode == "collect" and baseline else None,
                    "of_ceiling": round(rate / ceiling, 3) if mode == "learn" and ceiling else None,
                    "env_limit_steps_per_s": round(limit, 1) if limit else None,
                    "worker_steps_per_s_min": median(measured, "worker_steps_per_s_min"),
                    "driver_ms_per_segment": median(measured, "driver_ms_per_segment"),
                    "bytes_per_segment": median(measured, "bytes_per_segment"),
                    "worker_cpu_ms_per_step": median(measured, "worker_cpu_ms_per_step"),
                    "learner_cpu_ms_per_step": median(measured, "learner_cpu_ms_per_step"),
                    "cpu_limit_steps_per_s": cpu_limit,
                    "repeats": len(measured),
                }
            )
    return rows


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (rate_axis, efficiency_axis) = plt.subplots(1, 2, figsize=(11, 4.2))
    collect = sorted((row for row in rows if row["mode"] == "collect"), key=lambda row: row["workers"])
    learn = sorted((row for row in rows if row["mode"] == "learn"), key=lambda row: row["workers"])
    ceiling = next((row["steps_per_s"] for row in rows if row["mode"] == "ceiling"), None)
    all_workers = sorted({row["workers"] for row in collect + learn})
    if collect:
        workers = [row["workers"] for row in collect]
        rate_axis.plot(workers, [row["steps_per_s"] for row in collect], "o-", label="collector alone")
        per_worker = collect[0]["steps_per_s"] / collect[0]["workers"]
        rate_axis.plot(workers, [per_worker * n for n in workers], ":", color="C0", label="linear from the fewest workers")
        efficiency_axis.plot(workers, [row["efficiency"] for row in collect], "o-", label="collector alone: of linear")
    if learn:
        workers = [row["workers"] for row in learn]
        rate_axis.plot(workers, [row["steps_per_s"] for row in learn], "s-", color="C1", label="learn()")
        if ceiling:
            efficiency_axis.plot(
                workers, [row["of_ceiling"] for row in learn], "s-", color="C1", label="learn(): of the learner's ceiling"
            )
        cpu_limited = [row for row in learn if row.get("cpu_limit_steps_per_s")]
        if cpu_limited:
            rate_axis.plot(
                [row["workers"] for row in cpu_limited],
                [row["cpu_limit_steps_per_s"] for row in cpu_limited],
                "--",
                color="C3",
                linewidth=1,
                label="the cores' limit for learn() (CPU per step measured apart)",
            )
    if ceiling:
        rate_axis.axhline(ceiling, color="C2", linestyle="--", label=f"learner's ceiling ({ceiling:.0f} steps/s)")
    limits = [row["env_limit_steps_per_s"] for row in collect if row["env_limit_steps_per_s"]]
    if limits:
        rate_axis.plot([row["workers"] for row in collect], limits, color="grey", linewidth=0.8, label="environments' limit")
    efficiency_axis.axhline(0.8, color="red", linestyle=":", linewidth=0.8, label="0.8")
    for axis in (rate_axis, efficiency_axis):
        axis.set_xscale("log", base=2)
        axis.set_xticks(all_workers, [str(n) for n in all_workers])
        axis.set_xlabel("Ray workers")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    rate_axis.set_yscale("log")
    rate_axis.set_ylabel("environment steps / s")
    efficiency_axis.set_ylim(0, 1.2)
    efficiency_axis.set_ylabel("fraction")
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_title(data: dict[str, Any]) -> str:
    settings = data["settings"]
    return (
        f"Ray collector, {settings['env']} (sleep {settings['step_sleep'] * 1e3:g} ms, CPU {settings['step_cpu'] * 1e3:g} ms "
        f"per step), {settings['envs_per_worker']} env(s) x {settings['n_steps']} steps per segment, "
        f"{settings['num_cpus_per_worker']:g} CPU per worker, {data['machine']['cpus']} CPUs"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks ray_scaling", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--modes", nargs="+", choices=["collect", "ceiling", "learn"], default=["collect", "ceiling", "learn"])
    parser.add_argument("--env", default="SimulatedEnv-v0", help="SimulatedEnv-v0 (the options below) or any env id")
    parser.add_argument("--step-sleep", type=float, default=0.005, help="SimulatedEnv: seconds each step waits")
    parser.add_argument("--step-cpu", type=float, default=0.0, help="SimulatedEnv: seconds each step computes")
    parser.add_argument("--obs-size", type=int, default=16, help="SimulatedEnv: float32 observation entries")
    parser.add_argument("--envs-per-worker", type=int, default=1)
    parser.add_argument("--n-steps", type=int, default=64, help="vector steps per segment")
    parser.add_argument("--queue-size", type=int, default=2, help="requests in flight per worker")
    parser.add_argument("--num-cpus-per-worker", type=float, default=None, help="default: min(1, Ray's CPUs / max workers)")
    parser.add_argument("--ray-cpus", type=int, default=None, help="logical CPUs of the local Ray (default: this machine's)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measuring time per point (collect)")
    parser.add_argument("--learn-steps", type=int, default=50_000, help="steps per point (learn, ceiling)")
    parser.add_argument("--repeats", type=int, default=1, help="measurements per point (the median is kept)")
    parser.add_argument("--out", type=Path, default=Path("results/ray_scaling"))
    parser.add_argument("--replot", action="store_true", help="only redraw the PNG from --out/ray_scaling.json")
    args = parser.parse_args(argv)
    if args.replot:
        data = json.loads((args.out / "ray_scaling.json").read_text())
        plot(data["rows"], args.out / "ray_scaling.png", plot_title(data))
        return

    import ray

    ray_cpus = args.ray_cpus or os.cpu_count() or 1
    if args.num_cpus_per_worker is None:
        args.num_cpus_per_worker = min(1.0, int(100 * ray_cpus / max(args.workers)) / 100)
    # The workers unpickle SimulatedEnv factories: they import this repository's benchmarks package.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    ray.init(num_cpus=ray_cpus, include_dashboard=False, logging_level=logging.WARNING)
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    measures = {"collect": measure_collection, "learn": measure_learning}
    try:
        with sigterm_as_keyboard_interrupt():  # kill/timeout stop Ray's processes too
            for repeat in range(args.repeats):  # interleaved, so that a drifting load hits every point alike
                for mode in args.modes:
                    for n_workers in [0] if mode == "ceiling" else sorted(args.workers):
                        result = measure_ceiling(args) if mode == "ceiling" else measures[mode](args, n_workers)
                        results.setdefault((mode, n_workers), []).append(result)
                        print(f"repeat {repeat}: {mode} with {n_workers} workers: {result}", flush=True)
    finally:
        ray.shutdown()

    rows = summarize(args, results)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "ray_scaling.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    settings = {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()}
    data = {"rows": rows, "settings": settings, "machine": machine_description(), "ray_version": ray.__version__}
    data["learner_threads"] = learner_threads(args)
    collect_efficiency = [row["efficiency"] for row in rows if row["mode"] == "collect" and row["efficiency"]]
    learn_of_ceiling = [row["of_ceiling"] for row in rows if row["mode"] == "learn" and row["of_ceiling"]]
    data["min_collect_efficiency"] = min(collect_efficiency) if collect_efficiency else None
    data["max_learn_of_ceiling"] = max(learn_of_ceiling) if learn_of_ceiling else None
    write_json(data, args.out / "ray_scaling.json")
    plot(rows, args.out / "ray_scaling.png", plot_title(data))
    print(f"wrote {args.out}/ray_scaling.{{json,csv,png}}")


if __name__ == "__main__":
    main()
