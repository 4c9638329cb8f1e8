"""
The cost of an environment step: what ``learn()`` spends per env step, wall and CPU, algos side by side in one
invocation on one machine; outside training (V-RACER's collection against SAC's), or whole, idle and beside
CPU-bound processes (the thread policy's check: CPU per step on a busy machine against an idle one).

    python -m benchmarks step_cost --algos sac vracer --env Pendulum-v1 HalfCheetah-v5 --steps 3000 --repeats 5
    python -m benchmarks step_cost --algos impact impala --env CartPole-v1 --train --defaults --busy 2

Each algo (``algo[key=value]`` variants as in ``run``) is built with its yml hyperparameters (``--defaults``: its
constructor's, with the yml's policy and env wrappers only). Without ``--train`` it gets ``learning_starts=0``
where it has one (so that SAC acts with its policy, not uniformly at random) and its ``train()`` is replaced by
a no-op: what is left is everything ``learn()`` does per env step besides gradient steps. After a warm-up of
200 steps the algos take turns (``--repeats`` rounds of ``--steps`` steps each, on the same model), and the
medians of wall and CPU milliseconds per env step are reported (CPU: this process's threads and a process
collector's, so that spinning shows). With ``--busy N`` each round is measured idle and then with N CPU-bound
processes beside it, and the busy/idle ratios are reported. Writes ``step_cost.json``, ``.csv`` and ``.png``
into ``--out``.
"""

import argparse
import csv
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import torch as th

from benchmarks.config import (
    build_model,
    load_zoo_hyperparams,
    split_variant,
    validate_names,
)
from benchmarks.output import machine_description, write_json
from benchmarks.profiling.iteration_cost import package_commit
from benchmarks.profiling.timing import SectionTimer, busy_processes

WARM_UP_STEPS = 200
# The algorithms whose learning_starts decides when the policy acts (before it, actions are uniform: SB3's rule).
OFF_POLICY = ("sac", "td3", "ddpg", "tqc", "vracer", "sac_refer", "td3_refer")


# The yml keys that describe the task rather than the algorithm: kept with --defaults (one environment, as
# ``IMPACT("MlpPolicy", env_id)`` builds, unless the variant gives ``n_envs``).
TASK_KEYS = ("policy", "normalize", "env_wrapper", "frame_stack")


def build(algo: str, env_id: str, seed: int, train: bool, defaults: bool) -> Any:
    """
    ``algo`` on ``env_id`` with its yml hyperparameters (``defaults``: its constructor's), updated with the variant's;
    without ``train``, acting with its policy from the first step and not training.
    """
    base, overrides = split_variant(algo)
    zoo = load_zoo_hyperparams(base, env_id)
    if defaults:
        zoo = {key: value for key, value in zoo.items() if key in TASK_KEYS}
    if not train and base in OFF_POLICY:
        overrides["learning_starts"] = 0
    model = build_model(algo, env_id, seed, hyperparams=zoo, **overrides)
    if not train:
        model.train = lambda *args, **kwargs: None  # the instance's train(): no gradient step, nothing else changed
    return model


def timed_steps(model: Any, steps: int, timer: SectionTimer, name: str) -> tuple[float, float]:
    """Wall and CPU milliseconds per env step of ``model.learn(steps)`` (continuing its counters), timed as section
    ``name`` of ``timer``."""
    start_steps = model.num_timesteps
    with timer.section(name) as learning:
        model.learn(steps, reset_num_timesteps=False)  # a process collector is joined inside: its CPU is counted
    done = model.num_timesteps - start_steps
    return learning.wall / done * 1e3, learning.cpu / done * 1e3


def measure(
    algos: list[str], env_id: str, steps: int, repeats: int, seed: int, train: bool, defaults: bool, busy: int
) -> list[dict[str, Any]]:
    models = {algo: build(algo, env_id, seed, train, defaults) for algo in algos}
    for model in models.values():
        model.learn(WARM_UP_STEPS)
    conditions = ["idle", "busy"] if busy else ["idle"]
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {(algo, c): [] for algo in algos for c in conditions}
    timer = SectionTimer()
    for _ in range(repeats):  # interleaved: a change of load hits every algo alike
        for algo, model in models.items():
            samples[algo, "idle"].append(timed_steps(model, steps, timer, f"{algo} idle"))
            if busy:
                with busy_processes(busy):
                    samples[algo, "busy"].append(timed_steps(model, steps, timer, f"{algo} busy"))
    rows = []
    for algo in algos:
        row: dict[str, Any] = {"algo": algo, "env": env_id}
        for condition in conditions:
            wall, cpu = np.array(samples[algo, condition]).T
            prefix = "" if condition == "idle" else "busy_"
            row[f"{prefix}wall_ms_per_step"] = float(np.median(wall))
            row[f"{prefix}cpu_ms_per_step"] = float(np.median(cpu))
            row[f"{prefix}wall_ms_per_step_samples"] = wall.tolist()
            row[f"{prefix}cpu_ms_per_step_samples"] = cpu.tolist()
        if busy:
            row["busy_over_idle_cpu"] = row["busy_cpu_ms_per_step"] / row["cpu_ms_per_step"]
            row["busy_over_idle_wall"] = row["busy_wall_ms_per_step"] / row["wall_ms_per_step"]
        rows.append(row)
    return rows


def plot(rows: list[dict[str, Any]], path: Path, title: str, busy: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{row['algo']}\n{row['env']}" for row in rows]
    positions = np.arange(len(rows))
    figure, axis = plt.subplots(figsize=(1.6 * len(rows) + 2, 3.5))
    bars = [("wall_ms_per_step", "wall"), ("cpu_ms_per_step", "CPU")]
    if busy:
        bars += [("busy_wall_ms_per_step", "wall, busy"), ("busy_cpu_ms_per_step", "CPU, busy")]
    width = 0.8 / len(bars)
    for index, (key, label) in enumerate(bars):
        axis.bar(positions + (index - (len(bars) - 1) / 2) * width, [row[key] for row in rows], width, label=label)
    axis.set_xticks(positions, labels, fontsize=7)
    axis.set_ylabel("ms per env step")
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
    parser.add_argument("--train", action="store_true", help="keep the gradient steps: the whole learn() per env step")
    parser.add_argument("--defaults", action="store_true", help="the constructors' hyperparameters, not the yml's")
    parser.add_argument("--busy", type=int, default=0, help="also measure each round beside N CPU-bound processes")
    parser.add_argument(
        "--torch-threads", type=int, default=None, help="PyTorch's threads in this process (default: PyTorch's own)"
    )
    parser.add_argument("--out", type=Path, default=Path("results/step_cost"))
    args = parser.parse_args()
    validate_names([split_variant(algo)[0] for algo in args.algos], args.env)
    if args.steps < 1 or args.repeats < 1 or args.busy < 0:
        parser.error("--steps and --repeats must be positive, --busy non-negative")
    if args.torch_threads is not None:
        th.set_num_threads(args.torch_threads)
    options = dict(train=args.train, defaults=args.defaults, busy=args.busy)
    rows = [row for env_id in args.env for row in measure(args.algos, env_id, args.steps, args.repeats, args.seed, **options)]
    command = ["python", "-m", "benchmarks", "step_cost", "--algos", *args.algos, "--env", *args.env]
    command += [f"--steps={args.steps}", f"--repeats={args.repeats}", f"--seed={args.seed}"]
    command += [f"--torch-threads={args.torch_threads}"] if args.torch_threads is not None else []
    command += (["--train"] if args.train else []) + (["--defaults"] if args.defaults else [])
    command += [f"--busy={args.busy}"] if args.busy else []
    commit = package_commit()
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(
        {"command": shlex.join(command), "sb3_impact_commit": commit, "machine": machine_description(), "rows": rows},
        args.out / "step_cost.json",
    )
    with open(args.out / "step_cost.csv", "w", newline="") as file:
        writer = csv.writer(file)
        columns = ["wall_ms_per_step", "cpu_ms_per_step"]
        if args.busy:
            columns += ["busy_wall_ms_per_step", "busy_cpu_ms_per_step", "busy_over_idle_cpu", "busy_over_idle_wall"]
        writer.writerow(["algo", "env", *columns])
        for row in rows:
            writer.writerow([row["algo"], row["env"], *(round(row[column], 3) for column in columns)])
    what = "whole learn()" if args.train else "outside training"
    plot(rows, args.out / "step_cost.png", f"sb3_impact {commit}, {what}, medians of {args.repeats}", args.busy > 0)
    print(f"sb3_impact {commit}; ms per env step, {what}, medians of {args.repeats} interleaved rounds\n")
    busy_header = f" | wall ms/step, {args.busy} busy | CPU ms/step, {args.busy} busy | CPU busy/idle" if args.busy else ""
    print(f"| algo | env | wall ms/step | CPU ms/step{busy_header} |")
    print("| --- " * (7 if args.busy else 4) + "|")
    for row in rows:
        line = f"| {row['algo']} | {row['env']} | {row['wall_ms_per_step']:.3f} | {row['cpu_ms_per_step']:.3f}"
        if args.busy:
            line += (
                f" | {row['busy_wall_ms_per_step']:.3f} | {row['busy_cpu_ms_per_step']:.3f} | {row['busy_over_idle_cpu']:.2f}"
            )
        print(line + " |")


if __name__ == "__main__":
    main()
