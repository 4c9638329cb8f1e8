"""
Collection/learning overlap of an asynchronous algorithm, with its zoo hyperparameters.

    python -m benchmarks.throughput --algo impact --env CartPole-v1 --batches 200

Measures, per batch (one collected segment of n_steps x n_envs environment steps):
- C: pure collection time (the sampler alone, no learning);
- L: pure learning time (the learner fed pre-collected segments, no collection);
- T_async: the asynchronous run's time per batch, and T_async / max(C, L) (1.0 is perfect overlap);
- T_sync: the synchronous run's time per batch (about C + L);
- the weight-broadcast time as a share of learner time, and the policy lag (mean, max).
Writes results/throughput_ALGO_ENV.json.
"""

import argparse
import csv
import tempfile
import time
from pathlib import Path

import numpy as np
from stable_baselines3.common.logger import configure
from tqdm.auto import tqdm

from benchmarks.common import ALGOS, load_zoo_hyperparams, machine_description, make_training_env, write_json
from sb3_impact.common.async_algorithm import AsyncOnPolicyAlgorithm
from sb3_impact.common.collector import SyncCollector


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


def build(algo: str, env_id: str, seed: int, device: str, subproc: bool = False, **overrides) -> AsyncOnPolicyAlgorithm:
    params = load_zoo_hyperparams(algo, env_id)
    n_envs, normalize, policy = params.pop("n_envs", 1), params.pop("normalize", False), params.pop("policy")
    params.pop("n_timesteps")
    params.update(overrides)
    model = ALGOS[algo](
        policy, make_training_env(env_id, n_envs, seed, normalize, subproc), seed=seed, device=device, **params
    )
    if not isinstance(model, AsyncOnPolicyAlgorithm):
        raise ValueError(f"{algo} has no asynchronous collector")
    return model


def timed_learn(model: AsyncOnPolicyAlgorithm, n_batches: int) -> tuple[float, dict[str, list[float]]]:
    """Seconds per batch of learn() over ``n_batches`` batches, and the logged train/ and collector/ columns."""
    batch_size = model.n_steps * model.n_envs
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", default="impact")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--vec-env", choices=["dummy", "subproc"], default="dummy")
    parser.add_argument("--collector", choices=["thread", "process"], default="thread")
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args()
    if args.algo not in ALGOS:
        parser.error(f"unknown algo {args.algo!r}; valid names: {', '.join(sorted(ALGOS))}")

    steps = tqdm(total=4, desc="measurements")
    # C: the sampler alone.
    model = build(args.algo, args.env, args.seed, args.device, args.vec_env == "subproc", async_collection=False)
    model._setup_learn(1, None, True, "throughput", False)
    collector = model._make_collector()
    start = time.perf_counter()
    segments = [collector.get_segment() for _ in range(args.batches)]
    collect_seconds = (time.perf_counter() - start) / args.batches
    steps.update()

    # L: the learner alone, fed the same segments.
    model._make_collector = lambda: PrecollectedCollector(collector.sampler, segments)  # type: ignore[method-assign]
    learn_seconds, _ = timed_learn(model, args.batches)
    steps.update()

    # T_async and T_sync: the real thing.
    async_model = build(
        args.algo, args.env, args.seed, args.device, args.vec_env == "subproc", async_collection=True, collector=args.collector
    )
    async_seconds, async_logs = timed_learn(async_model, args.batches)
    steps.update()
    sync_model = build(args.algo, args.env, args.seed, args.device, args.vec_env == "subproc", async_collection=False)
    sync_seconds, _ = timed_learn(sync_model, args.batches)
    steps.update()
    steps.close()

    broadcast_share = async_model._broadcast_seconds / (async_seconds * args.batches)
    report = {
        "algo": args.algo,
        "env": args.env,
        "batches": args.batches,
        "vec_env": args.vec_env,
        "collector": args.collector,
        "batch_env_steps": async_model.n_steps * async_model.n_envs,
        "C_collect_seconds_per_batch": collect_seconds,
        "L_learn_seconds_per_batch": learn_seconds,
        "T_async_seconds_per_batch": async_seconds,
        "T_sync_seconds_per_batch": sync_seconds,
        "C_plus_L": collect_seconds + learn_seconds,
        "T_async_over_max_C_L": async_seconds / max(collect_seconds, learn_seconds),
        "T_sync_over_T_async": sync_seconds / async_seconds,
        "broadcast_share_of_learner_time": broadcast_share,
        "policy_lag_mean": float(np.mean(async_logs.get("train/policy_lag", [np.nan]))),
        "policy_lag_max": float(np.max(async_logs.get("train/policy_lag_max", [np.nan]))),
        "env_steps_per_second_async": async_model.n_steps * async_model.n_envs / async_seconds,
        "machine": machine_description(),
        "command": "python -m benchmarks.throughput "
        f"--algo {args.algo} --env {args.env} --batches {args.batches} --vec-env {args.vec_env} --collector {args.collector}",
    }
    write_json(report, args.out / f"throughput_{args.algo}_{args.env}_{args.vec_env}_{args.collector}.json")
    for key, value in report.items():
        if key not in ("machine",):
            print(f"{key:36s} {value:.4g}" if isinstance(value, float) else f"{key:36s} {value}")


if __name__ == "__main__":
    main()
