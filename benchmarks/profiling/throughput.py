"""
Collection/learning overlap of an asynchronous algorithm, with its zoo hyperparameters.

    python -m benchmarks throughput --algo impact --env CartPole-v1 --batches 200

Measures, per batch (one collected segment of n_steps x n_envs environment steps):
- C: pure collection time (the sampler alone, no learning);
- L: pure learning time (the learner fed pre-collected segments, no collection);
- T_async: the asynchronous run's time per batch, and T_async / max(C, L) (1.0 is perfect overlap);
- T_sync: the synchronous run's time per batch (about C + L);
- the weight-broadcast time as a share of learner time, and the policy lag (mean, max);
- CPU-seconds and wall seconds per 1000 environment steps of each measurement (this process and the processes it
  started and waited for: a process collector's; not Ray's workers), so that spinning threads show.
With ``--busy N``, N CPU-bound processes run beside every measurement (started before it, stopped after it): the
busy machine users and CI have. Writes results/throughput_ALGO_ENV_VECENV_COLLECTOR[_busyN].json (Ctrl-C writes
the measurements that finished and stops the busy processes).
"""

import argparse
import csv
import tempfile
from pathlib import Path

import numpy as np
from stable_baselines3.common.logger import configure
from tqdm.auto import tqdm

from benchmarks.config import ALGOS, ZooExperiment, build_model, load_zoo_hyperparams, validate_names
from benchmarks.output import machine_description, write_json
from benchmarks.profiling.timing import SectionTimer, Timing, busy_processes
from sb3_impact.common.collectors import COLLECTOR_NAMES, CollectorError, SegmentSampler
from sb3_impact.common.collectors.base import SyncCollector
from sb3_impact.common.segments import Segment
from sb3_impact.common.threads import learner_threads
from sb3_impact.common.vtrace_actor_critic import VTraceActorCritic

SYNC = {"collector": "sync", "collector_kwargs": None}
# The collectors of the T_async run (T_sync is always the "sync" collector).
ASYNC_COLLECTORS = tuple(name for name in COLLECTOR_NAMES if name != "sync")


class PrecollectedCollector(SyncCollector):
    """
    Hands out ``segments`` collected beforehand, in order, so that learn() measures learning alone: an algorithm's
    ``collector``, with ``collector_kwargs={"segments": segments}``.
    """

    def __init__(self, sampler: SegmentSampler, segments: list[Segment]) -> None:
        super().__init__(sampler)
        self.segments = list(segments)

    def get_segment(self) -> Segment:
        if not self.take_budget():
            raise CollectorError(f"the step budget of this learn() call ({self.step_budget} steps) is spent")
        segment = self.segments.pop(0)
        self.sampler.sampled_steps += segment.size
        self.delivered_steps += segment.size
        return segment


def build(algo: str, env_id: str, seed: int, device: str, subproc: bool = False, **overrides) -> VTraceActorCritic:
    params = load_zoo_hyperparams(algo, env_id)
    params.update({key: value for key, value in overrides.items() if not (key == "learner_threads" and value is None)})
    if params.get("collector") == "ray":
        # Ray workers build their own envs from the id: each worker steps the yml's n_envs environments.
        if params.get("env_wrapper") or params.get("frame_stack") or params.get("normalize"):
            raise ValueError(f"{algo}/{env_id}: the throughput benchmark runs collector='ray' on plain env ids only")
        params["collector_kwargs"] = {**(params.get("collector_kwargs") or {}), "envs_per_worker": params.get("n_envs", 1)}
        kwargs = ZooExperiment(algo, env_id, seed, device, hyperparams=params).hyperparams
        return ALGOS[algo](env=env_id, seed=seed, device=device, **kwargs)
    model = build_model(algo, env_id, seed, device, subproc, hyperparams=params)
    if not isinstance(model, VTraceActorCritic):
        raise ValueError(f"{algo}: the throughput benchmark measures the V-trace learners (IMPACT, IMPALA) only")
    return model


def per_thousand_steps(report: dict, name: str, timing: Timing, steps: int) -> None:
    """Wall and CPU seconds per 1000 environment steps of measurement ``name``."""
    report[f"{name}_wall_seconds_per_1k_steps"] = 1000 * timing.wall / steps
    report[f"{name}_cpu_seconds_per_1k_steps"] = 1000 * timing.cpu / steps


def timed_learn(model: VTraceActorCritic, n_batches: int, timer: SectionTimer, name: str) -> dict[str, list[float]]:
    """learn() over ``n_batches`` batches, timed as section ``name`` of ``timer``; the logged train/ and collector/
    columns."""
    envs_per_segment = model.collector_kwargs.get("envs_per_worker", 1) if model.collector == "ray" else model.n_envs
    batch_size = model.n_steps * envs_per_segment
    with tempfile.TemporaryDirectory() as folder:
        model.set_logger(configure(folder, ["csv"]))
        with timer.section(name):
            model.learn(n_batches * batch_size)
        with open(Path(folder) / "progress.csv") as file:
            rows = list(csv.DictReader(file))
    columns: dict[str, list[float]] = {}
    for row in rows:
        for key, value in row.items():
            if value not in ("", None):
                columns.setdefault(key, []).append(float(value))
    return columns


def median_of_repeats(repeats: list[dict]) -> dict:
    """Each figure's median over the repeats that measured it (the ratios too: the median of each repeat's ratio)."""
    keys = [key for key in dict.fromkeys(key for repeat in repeats for key in repeat)]
    medians: dict = {}
    for key in keys:
        values = [repeat[key] for repeat in repeats if key in repeat]
        numeric = all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in values)
        medians[key] = float(np.median(values)) if numeric else values[-1]
    return medians


def derived_figures(report: dict) -> None:
    """Add the ratios to ``report`` once the measurements they need are in it."""
    c, learn = report.get("C_collect_seconds_per_batch"), report.get("L_learn_seconds_per_batch")
    t_async, t_sync = report.get("T_async_seconds_per_batch"), report.get("T_sync_seconds_per_batch")
    if c is not None and learn is not None:
        report["C_plus_L"] = c + learn
        if t_async is not None:
            report["T_async_over_max_C_L"] = t_async / max(c, learn)
    if t_async is not None and t_sync is not None:
        report["T_sync_over_T_async"] = t_sync / t_async


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", default="impact")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="learner device (collectors always run on CPU)")
    parser.add_argument("--vec-env", choices=["dummy", "subproc"], default="dummy")
    parser.add_argument("--collector", choices=sorted(ASYNC_COLLECTORS), default="thread", help="the T_async run's collector")
    parser.add_argument("--workers", type=int, default=None, help="Ray workers with --collector ray (default: CPUs - 1)")
    parser.add_argument("--busy", type=int, default=0, help="CPU-bound processes running beside each measurement")
    parser.add_argument("--repeats", type=int, default=1, help="whole measurements (C, L, T_async, T_sync); medians")
    parser.add_argument(
        "--learner-threads", type=int, default=None, help="the algorithms' learner_threads (default: theirs, 1)"
    )
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    if args.busy < 0:
        parser.error(f"--busy must be >= 0, got {args.busy}")
    if args.repeats < 1 or (args.learner_threads is not None and args.learner_threads < 1):
        parser.error("--repeats and --learner-threads must be >= 1")
    try:
        validate_names([args.algo], [args.env])
    except ValueError as error:
        parser.error(str(error))
    subproc = args.vec_env == "subproc"
    report: dict = {
        "algo": args.algo,
        "env": args.env,
        "batches": args.batches,
        "vec_env": args.vec_env,
        "collector": args.collector,
        "device": args.device,
        "busy_processes": args.busy,
        "repeats": args.repeats,
        "learner_threads": args.learner_threads,
        "machine": machine_description(args.device),
        "command": "python -m benchmarks throughput "
        f"--algo {args.algo} --env {args.env} --batches {args.batches} --vec-env {args.vec_env} --collector {args.collector}"
        + (f" --device {args.device}" if args.device != "cpu" else "")
        + (f" --workers {args.workers}" if args.workers else "")
        + (f" --busy {args.busy}" if args.busy else "")
        + (f" --repeats {args.repeats}" if args.repeats > 1 else "")
        + (f" --learner-threads {args.learner_threads}" if args.learner_threads else ""),
    }
    busy = f"_busy{args.busy}" if args.busy else ""
    threads = f"_threads{args.learner_threads}" if args.learner_threads else ""
    out = args.out / f"throughput_{args.algo}_{args.env}_{args.vec_env}_{args.collector}{busy}{threads}.json"
    progress = tqdm(total=4 * args.repeats, desc="throughput: C")
    repeats: list[dict] = []
    try:
        for _ in range(args.repeats):  # each repeat measures C, L, T_async, T_sync in turn: interleaved
            repeats.append({})
            measure(args, repeats[-1], progress, subproc)
            derived_figures(repeats[-1])
    except KeyboardInterrupt:
        report["interrupted"] = True
        print("\ninterrupted: writing the measurements that finished")
    finally:
        progress.close()
    report.update(median_of_repeats(repeats))
    if len(repeats) > 1:
        report["each_repeat"] = repeats
    write_json(report, out)
    for key, value in report.items():
        if key not in ("machine", "each_repeat"):
            print(f"{key:36s} {value:.4g}" if isinstance(value, float) else f"{key:36s} {value}")
    print(f"wrote {out}")


def measure(args: argparse.Namespace, report: dict, progress: tqdm, subproc: bool) -> None:
    """C, L, T_async and T_sync into ``report``, each with ``args.busy`` CPU-bound processes beside it."""
    timer = SectionTimer()
    # C: the sampler alone, through the collector learn() would build (no step budget outside learn()).
    threads = {"learner_threads": args.learner_threads}
    model = build(args.algo, args.env, args.seed, args.device, subproc, **SYNC, **threads)
    collector = model.make_collector()
    report["batch_env_steps"] = model.n_steps * model.n_envs
    steps = args.batches * report["batch_env_steps"]
    collector.start()
    with busy_processes(args.busy), learner_threads(model.learner_threads), timer.section("C"):  # learn()'s threads
        segments = [collector.get_segment() for _ in tqdm(range(args.batches), desc="collecting", leave=False)]
    collector.close()
    report["C_collect_seconds_per_batch"] = timer.sections["C"].wall / args.batches
    per_thousand_steps(report, "C", timer.sections["C"], steps)
    progress.update()

    # L: the learner alone, fed the same segments.
    progress.set_description("throughput: L")
    model.collector, model.collector_kwargs = PrecollectedCollector, {"segments": segments}
    with busy_processes(args.busy):
        timed_learn(model, args.batches, timer, "L")
    report["L_learn_seconds_per_batch"] = timer.sections["L"].wall / args.batches
    per_thousand_steps(report, "L", timer.sections["L"], steps)
    model.env.close()
    progress.update()

    # T_async and T_sync: the real thing.
    progress.set_description("throughput: T_async")
    options: dict = {"collector": args.collector}
    if args.collector == "ray":
        options["collector_kwargs"] = {"num_workers": args.workers}
    async_model = build(args.algo, args.env, args.seed, args.device, subproc, **options, **threads)
    with busy_processes(args.busy):
        async_logs = timed_learn(async_model, args.batches, timer, "T_async")
    per_thousand_steps(report, "T_async", timer.sections["T_async"], steps)
    async_model.env.close()
    async_seconds = timer.sections["T_async"].wall / args.batches
    report["T_async_seconds_per_batch"] = async_seconds
    report["broadcast_share_of_learner_time"] = async_model.broadcast_seconds / timer.sections["T_async"].wall
    report["policy_lag_mean"] = float(np.mean(async_logs.get("train/policy_lag", [np.nan])))
    report["policy_lag_max"] = float(np.max(async_logs.get("train/policy_lag_max", [np.nan])))
    report["env_steps_per_second_async"] = report["batch_env_steps"] / async_seconds
    report.update({f"collector_{key}": value for key, value in async_model.collector_stats.items()})
    progress.update()
    progress.set_description("throughput: T_sync")
    sync_model = build(
        args.algo, args.env, args.seed, args.device, subproc, collector="sync", collector_kwargs=None, **threads
    )
    with busy_processes(args.busy):
        timed_learn(sync_model, args.batches, timer, "T_sync")
    report["T_sync_seconds_per_batch"] = timer.sections["T_sync"].wall / args.batches
    per_thousand_steps(report, "T_sync", timer.sections["T_sync"], steps)
    sync_model.env.close()
    progress.update()


if __name__ == "__main__":
    main()
