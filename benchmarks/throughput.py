"""
Collection/learning overlap of an asynchronous algorithm, with its zoo hyperparameters.

    python -m benchmarks.throughput --algo impact --env CartPole-v1 --batches 200

Measures, per batch (one collected segment of n_steps x n_envs environment steps):
- C: pure collection time (the sampler alone, no learning);
- L: pure learning time (the learner fed pre-collected segments, no collection);
- T_async: the asynchronous run's time per batch, and T_async / max(C, L) (1.0 is perfect overlap);
- T_sync: the synchronous run's time per batch (about C + L);
- the weight-broadcast time as a share of learner time, and the policy lag (mean, max).
Writes results/throughput_ALGO_ENV_VECENV_COLLECTOR.json (Ctrl-C writes the measurements that finished).
"""

import argparse
import csv
import tempfile
import time
from pathlib import Path

import numpy as np
from stable_baselines3.common.logger import configure
from tqdm.auto import tqdm

from benchmarks.config import ALGOS, load_zoo_hyperparams, make_training_env, split_env_params, validate_names
from benchmarks.output import machine_description, write_json
from sb3_impact.common.collectors import COLLECTOR_NAMES
from sb3_impact.common.collectors.base import SyncCollector
from sb3_impact.common.vtrace_actor_critic import VTraceActorCritic

# The collectors of the T_async run (T_sync is always the "sync" collector).
ASYNC_COLLECTORS = tuple(name for name in COLLECTOR_NAMES if name != "sync")


class PrecollectedCollector(SyncCollector):
    """Hands out segments collected beforehand, so that learn() measures learning alone."""

    def __init__(self, sampler, segments) -> None:
        super().__init__(sampler)
        self._segments = list(segments)

    def get_segment(self):
        segment = self._segments.pop(0)
        self.sampler.sampled_steps += segment.size
        self.delivered_steps += segment.size
        return segment


def build(algo: str, env_id: str, seed: int, device: str, subproc: bool = False, **overrides) -> VTraceActorCritic:
    env_params, params = split_env_params(load_zoo_hyperparams(algo, env_id))
    params.update(overrides)
    if params.get("collector") == "ray":
        # Ray workers build their own envs from the id: each worker steps the yml's n_envs environments.
        if env_params.get("env_wrapper") or env_params.get("frame_stack") or env_params.get("normalize"):
            raise ValueError(f"{algo}/{env_id}: the throughput benchmark runs collector='ray' on plain env ids only")
        params["collector_kwargs"] = {**(params.get("collector_kwargs") or {}), "envs_per_worker": env_params.get("n_envs", 1)}
        return ALGOS[algo](env_params["policy"], env_id, seed=seed, device=device, **params)
    env = make_training_env(
        env_id,
        env_params.get("n_envs", 1),
        seed,
        env_params.get("normalize", False),
        subproc,
        env_wrapper=env_params.get("env_wrapper"),
        frame_stack=env_params.get("frame_stack"),
    )
    model = ALGOS[algo](env_params["policy"], env, seed=seed, device=device, **params)
    if not isinstance(model, VTraceActorCritic):
        raise ValueError(f"{algo}: the throughput benchmark measures the V-trace learners (IMPACT, IMPALA) only")
    return model


def timed_learn(model: VTraceActorCritic, n_batches: int) -> tuple[float, dict[str, list[float]]]:
    """Seconds per batch of learn() over ``n_batches`` batches, and the logged train/ and collector/ columns."""
    envs_per_segment = model.collector_kwargs.get("envs_per_worker", 1) if model.collector == "ray" else model.n_envs
    batch_size = model.n_steps * envs_per_segment
    with tempfile.TemporaryDirectory() as folder:
        model.set_logger(configure(folder, ["csv"]))
        start = time.perf_counter()
        model.learn(n_batches * batch_size)
        seconds = time.perf_counter() - start
        with open(Path(folder) / "progress.csv") as file:
            rows = list(csv.DictReader(file))
    columns: dict[str, list[float]] = {}
    for row in rows:
        for key, value in row.items():
            if value not in ("", None):
                columns.setdefault(key, []).append(float(value))
    return seconds / n_batches, columns


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
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
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
        "machine": machine_description(args.device),
        "command": "python -m benchmarks.throughput "
        f"--algo {args.algo} --env {args.env} --batches {args.batches} --vec-env {args.vec_env} --collector {args.collector}"
        + (f" --device {args.device}" if args.device != "cpu" else "")
        + (f" --workers {args.workers}" if args.workers else ""),
    }
    out = args.out / f"throughput_{args.algo}_{args.env}_{args.vec_env}_{args.collector}.json"
    progress = tqdm(total=4, desc="throughput: C")
    try:
        # C: the sampler alone.
        model = build(args.algo, args.env, args.seed, args.device, subproc, collector="sync", collector_kwargs=None)
        model._setup_learn(1, None, True, "throughput", False)
        collector = model._make_collector()
        report["batch_env_steps"] = model.n_steps * model.n_envs
        start = time.perf_counter()
        segments = [collector.get_segment() for _ in tqdm(range(args.batches), desc="collecting", leave=False)]
        report["C_collect_seconds_per_batch"] = (time.perf_counter() - start) / args.batches
        progress.update()

        # L: the learner alone, fed the same segments.
        progress.set_description("throughput: L")
        model._make_collector = lambda *_, **__: PrecollectedCollector(collector.sampler, segments)  # type: ignore[method-assign]
        report["L_learn_seconds_per_batch"], _ = timed_learn(model, args.batches)
        model.env.close()
        progress.update()

        # T_async and T_sync: the real thing.
        progress.set_description("throughput: T_async")
        options: dict = {"collector": args.collector}
        if args.collector == "ray":
            options["collector_kwargs"] = {"num_workers": args.workers}
        async_model = build(args.algo, args.env, args.seed, args.device, subproc, **options)
        async_seconds, async_logs = timed_learn(async_model, args.batches)
        async_model.env.close()
        report["T_async_seconds_per_batch"] = async_seconds
        report["broadcast_share_of_learner_time"] = async_model._broadcast_seconds / (async_seconds * args.batches)
        report["policy_lag_mean"] = float(np.mean(async_logs.get("train/policy_lag", [np.nan])))
        report["policy_lag_max"] = float(np.max(async_logs.get("train/policy_lag_max", [np.nan])))
        report["env_steps_per_second_async"] = report["batch_env_steps"] / async_seconds
        report.update({f"collector_{key}": value for key, value in async_model.collector_stats.items()})
        progress.update()
        progress.set_description("throughput: T_sync")
        sync_model = build(args.algo, args.env, args.seed, args.device, subproc, collector="sync", collector_kwargs=None)
        report["T_sync_seconds_per_batch"], _ = timed_learn(sync_model, args.batches)
        sync_model.env.close()
        progress.update()
    except KeyboardInterrupt:
        report["interrupted"] = True
        print("\ninterrupted: writing the measurements that finished")
    finally:
        progress.close()
    derived_figures(report)
    write_json(report, out)
    for key, value in report.items():
        if key != "machine":
            print(f"{key:36s} {value:.4g}" if isinstance(value, float) else f"{key:36s} {value}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
