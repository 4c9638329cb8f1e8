"""
The cost of an environment step outside training: V-RACER's (and any algorithm's) collection, storage,
callbacks and logs per env step, against SAC's, in one invocation on one machine.

    python -m benchmarks step_cost --algos sac vracer --env Pendulum-v1 HalfCheetah-v5 --steps 3000 --repeats 5

Each algo (``algo[key=value]`` variants as in ``run``) is built with its yml hyperparameters, with
``learning_starts=0`` where it has one (so that SAC acts with its policy, not uniformly at random) and its
``train()`` replaced by a no-op: what is left is everything ``learn()`` does per env step besides gradient
steps. After a warm-up of 200 steps the algos take turns (``--repeats`` rounds of ``--steps`` steps each, on
the same model), and the medians of wall and CPU milliseconds per env step are reported (CPU: this process's
threads and a process collector's, so that spinning shows). Writes ``step_cost.json``, ``.csv`` and ``.png`` into ``--out``.
"""

import argparse
import csv
import shlex
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch as th

from benchmarks.config import (
    algo_class,
    load_zoo_hyperparams,
    make_training_env,
    split_env_params,
    split_variant,
    validate_names,
)
from benchmarks.iteration_cost import package_commit
from benchmarks.output import machine_description, write_json
from benchmarks.throughput import cpu_seconds

WARM_UP_STEPS = 200


def build(algo: str, env_id: str, seed: int) -> Any:
    """``algo`` on ``env_id`` with its yml hyperparameters, acting with its policy from the first step, not training."""
    base, overrides = split_variant(algo)
    env_params, kwargs = split_env_params({**load_zoo_hyperparams(base, env_id), **overrides})
    if "learning_starts" in kwargs or hasattr(algo_class(algo), "learning_starts") or base in ("sac", "td3", "vracer"):
        kwargs["learning_starts"] = 0
    env = make_training_env(env_id, int(env_params.get("n_envs", 1)), seed, env_params.get("normalize", False))
    model = algo_class(algo)(env_params.get("policy", "MlpPolicy"), env, seed=seed, device="cpu", **kwargs)
    model.train = lambda *args, **kwargs: None  # the instance's train(): no gradient step, nothing else changed
    return model


def timed_steps(model: Any, steps: int) -> tuple[float, float]:
    """Wall and CPU milliseconds per env step of ``model.learn(steps)`` (continuing its counters)."""
    start_wall, start_cpu, start_steps = time.perf_counter(), cpu_seconds(), model.num_timesteps
    model.learn(steps, reset_num_timesteps=False)  # a process collector is joined inside: its CPU is counted
    done = model.num_timesteps - start_steps
    return (time.perf_counter() - start_wall) / done * 1e3, (cpu_seconds() - start_cpu) / done * 1e3


def measure(algos: list[str], env_id: str, steps: int, repeats: int, seed: int) -> list[dict[str, Any]]:
    models = {algo: build(algo, env_id, seed) for algo in algos}
    for model in models.values():
        model.learn(WARM_UP_STEPS)
    samples: dict[str, list[tuple[float, float]]] = {algo: [] for algo in algos}
    for _ in range(repeats):  # interleaved: a change of load hits every algo alike
        for algo, model in models.items():
            samples[algo].append(timed_steps(model, steps))
    rows = []
    for algo in algos:
        wall, cpu = np.array(samples[algo]).T
        rows.append(
            {
                "algo": algo,
                "env": env_id,
                "wall_ms_per_step": float(np.median(wall)),
                "cpu_ms_per_step": float(np.median(cpu)),
                "wall_ms_per_step_samples": wall.tolist(),
                "cpu_ms_per_step_samples": cpu.tolist(),
            }
        )
    return rows


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{row['algo']}\n{row['env']}" for row in rows]
    positions = np.arange(len(rows))
    figure, axis = plt.subplots(figsize=(1.6 * len(rows) + 2, 3.5))
    axis.bar(positions - 0.2, [row["wall_ms_per_step"] for row in rows], 0.4, label="wall")
    axis.bar(positions + 0.2, [row["cpu_ms_per_step"] for row in rows], 0.4, label="CPU")
    axis.set_xticks(positions, labels, fontsize=7)
    axis.set_ylabel("ms per env step outside training")
    axis.set_title(title, fontsize=8)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=["sac", "vracer"])
    parser.add_argument("--env", nargs="+", default=["Pendulum-v1"])
    parser.add_argument("--steps", type=int, default=3000, help="env steps per algo and round")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("results/step_cost"))
    args = parser.parse_args()
    validate_names([split_variant(algo)[0] for algo in args.algos], args.env)
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be positive")
    th.set_num_threads(args.torch_threads)
    rows = [row for env_id in args.env for row in measure(args.algos, env_id, args.steps, args.repeats, args.seed)]
    command = ["python", "-m", "benchmarks", "step_cost", "--algos", *args.algos, "--env", *args.env]
    command += [f"--steps={args.steps}", f"--repeats={args.repeats}", f"--seed={args.seed}"]
    command += [f"--torch-threads={args.torch_threads}"]
    commit = package_commit()
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(
        {"command": shlex.join(command), "sb3_impact_commit": commit, "machine": machine_description(), "rows": rows},
        args.out / "step_cost.json",
    )
    with open(args.out / "step_cost.csv", "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["algo", "env", "wall_ms_per_step", "cpu_ms_per_step"])
        for row in rows:
            writer.writerow([row["algo"], row["env"], round(row["wall_ms_per_step"], 3), round(row["cpu_ms_per_step"], 3)])
    plot(rows, args.out / "step_cost.png", f"sb3_impact {commit}, {args.torch_threads} thread(s), medians of {args.repeats}")
    print(f"sb3_impact {commit}; ms per env step outside training, medians of {args.repeats} interleaved rounds\n")
    print("| algo | env | wall ms/step | CPU ms/step |\n| --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['algo']} | {row['env']} | {row['wall_ms_per_step']:.3f} | {row['cpu_ms_per_step']:.3f} |")


if __name__ == "__main__":
    main()
