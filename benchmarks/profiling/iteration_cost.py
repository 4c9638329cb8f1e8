"""
Where an on-policy iteration's time goes: collection, rollout buffer, PPO epochs, and for PTR-PPO its replay
(scoring forward passes, tensor building, priority memory, replay gradient steps), for PPO-AMBER its replay
ratios and memory, per iteration.

    python -m benchmarks iteration_cost --algos ppo ptr_ppo --env BreakoutNoFrameskip-v4 --steps 6144 \\
        --out results/ptr_ppo/iteration_cost

Each algo (``algo[key=value]`` variants as in ``run``) learns ``--steps`` environment steps with its yml
hyperparameters (rl-zoo3's for PPO, ours for PTR-PPO), on one PyTorch thread by default. The methods behind
each section are wrapped with timers for that run (nothing in the package is instrumented): a section's time
is its own, without the sections it calls, so the sections add up to the whole ``learn()``.

- ``collection``: stepping the environments with the policy (SB3's ``collect_rollouts``, or the collector's
  ``get_segment``: with an asynchronous collector, the wait for the next segment);
- ``rollout_buffer``: a segment into the rollout buffer (values and GAE);
- ``epochs``: SB3 PPO's ``train()``, the epochs on the fresh rollout (PTR-PPO's fresh update); PPO-AMBER's
  epochs over its active batches (its ``train()`` without the parts below);
- ``replay_steps``: PTR-PPO's replay rounds without the parts below: forward and backward passes of the replay
  minibatches, the importance weights, the loss;
- ``scoring``: PTR-PPO's scoring passes (insertion priorities, and each round's old-policy, bootstrap and,
  for rounds of several minibatches, current-policy evaluation); PPO-AMBER's replay ratios R' (eq. 10) and
  KL of every stored batch;
- ``tensor_building``: segments into learner tensors (``TrainingBatch.from_segment``);
- ``memory``: PTR-PPO's priority memory (add, get, sample, priority updates); PPO-AMBER's copy of the rollout
  into its memory;
- ``other``: what ``learn()`` does besides (callbacks, logging, ``train()`` outside its parts).

Sample-gradients count every sample in every gradient step: ``n_epochs * n_steps * n_envs`` per iteration
plus PTR-PPO's replayed samples; for PPO-AMBER the samples of the minibatches drawn from its memory. Writes
``iteration_cost-ENV.json`` (with the package's commit, so a before/after pair can be told apart), ``.csv`` and
a ``.png`` of stacked bars into ``--out``; prints a table.
"""

import argparse
import contextlib
import csv
import shlex
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch as th
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.ppo.ppo import PPO

import sb3_impact
from benchmarks.config import (
    build_model,
    split_variant,
    validate_names,
)
from benchmarks.output import machine_description, write_json
from benchmarks.protocol import git_commit
from sb3_impact.common.training_batch import TrainingBatch

SECTIONS = ("collection", "rollout_buffer", "epochs", "replay_steps", "scoring", "tensor_building", "memory", "other")


class SectionTimer:
    """Exclusive wall time per section: a section's time without the time of the sections it calls."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[list[float]] = []  # per open section: [start, time spent in sections it called]

    def wrap(self, function: Callable, section: str) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._stack.append([time.perf_counter(), 0.0])
            try:
                return function(*args, **kwargs)
            finally:
                start, inner = self._stack.pop()
                elapsed = time.perf_counter() - start
                self.seconds[section] += elapsed - inner
                self.calls[section] += 1
                if self._stack:
                    self._stack[-1][1] += elapsed

        return timed


@contextlib.contextmanager
def timed_sections(model: Any, timer: SectionTimer) -> Iterator[None]:
    """The model's sections wrapped with ``timer`` for the duration of the block."""
    patches = [
        mock.patch.object(PPO, "train", timer.wrap(PPO.train, "epochs")),
        mock.patch.object(OnPolicyAlgorithm, "collect_rollouts", timer.wrap(OnPolicyAlgorithm.collect_rollouts, "collection")),
        mock.patch.object(
            TrainingBatch, "from_segment", classmethod(timer.wrap(TrainingBatch.from_segment.__func__, "tensor_building"))
        ),
    ]
    if hasattr(model, "_make_collector"):
        make_collector = model._make_collector

        def make_timed_collector(*args: Any, **kwargs: Any) -> Any:
            collector = make_collector(*args, **kwargs)
            collector.get_segment = timer.wrap(collector.get_segment, "collection")
            return collector

        patches.append(mock.patch.object(model, "_make_collector", make_timed_collector))
        patches.append(mock.patch.object(model, "_store_segment", timer.wrap(model._store_segment, "rollout_buffer")))
    if hasattr(model, "_replay_round"):
        memory = model.replay_memory
        patches.append(mock.patch.object(model, "_replay_round", timer.wrap(model._replay_round, "replay_steps")))
        patches.append(mock.patch.object(model, "_score_segments", timer.wrap(model._score_segments, "scoring")))
        for name in ("add", "get", "sample", "update_priorities"):
            patches.append(mock.patch.object(memory, name, timer.wrap(getattr(memory, name), "memory")))
    if hasattr(model, "_replay_ratios_and_kl"):  # PPO-AMBER
        patches.append(mock.patch.object(model, "_replay_ratios_and_kl", timer.wrap(model._replay_ratios_and_kl, "scoring")))
        patches.append(mock.patch.object(model, "_store_rollout", timer.wrap(model._store_rollout, "memory")))
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        yield


def package_commit() -> str:
    """The git commit of the imported sb3_impact (with ``+dirty`` for uncommitted changes in it), or ``unknown``."""
    return git_commit(Path(sb3_impact.__file__).resolve().parent, short=True, only_directory=True)


def measure(algo: str, env_id: str, steps: int, seed: int, project_steps: int) -> dict[str, Any]:
    model = build_model(algo, env_id, seed)
    timer = SectionTimer()
    iterations = 0

    def counted_train(*args: Any, **kwargs: Any) -> Any:
        nonlocal iterations
        iterations += 1
        return type(model).train(model, *args, **kwargs)  # looked up now: PPO.train is wrapped

    amber = hasattr(model, "_replay_ratios_and_kl")
    amber_samples = 0  # PPO-AMBER's sample-gradients: the samples of the minibatches it draws from its memory

    def counted_minibatches(*args: Any, **kwargs: Any) -> Iterator[Any]:
        nonlocal amber_samples
        for minibatch in minibatches(*args, **kwargs):
            amber_samples += len(minibatch.actions)
            yield minibatch

    patches = contextlib.ExitStack()
    if amber:
        minibatches = model.replay_memory.minibatches
        patches.enter_context(mock.patch.object(model.replay_memory, "minibatches", counted_minibatches))
    # PPO-AMBER's train() is its epochs (it does not call PPO.train); the others' train() calls PPO.train.
    train_section = "epochs" if amber else "other"
    with patches, timed_sections(model, timer), mock.patch.object(model, "train", timer.wrap(counted_train, train_section)):
        start = time.perf_counter()
        model.learn(steps)
        total = time.perf_counter() - start
    model.env.close()
    accounted = sum(seconds for section, seconds in timer.seconds.items() if section in SECTIONS and section != "other")
    section_seconds = {section: timer.seconds.get(section, 0.0) for section in SECTIONS}
    section_seconds["other"] = total - accounted
    fresh_samples = amber_samples if amber else iterations * model.n_epochs * model.n_steps * model.n_envs
    replay_samples = getattr(model, "replayed_segments", 0) * model.n_steps
    gradient_seconds = section_seconds["epochs"] + section_seconds["replay_steps"]
    sample_gradients = fresh_samples + replay_samples
    return {
        "algo": algo,
        "env_steps": model.num_timesteps,
        "iterations": iterations,
        "steps_per_iteration": model.n_steps * model.n_envs,
        "seconds": total,
        "env_steps_per_second": model.num_timesteps / total,
        "projected_minutes": project_steps / (model.num_timesteps / total) / 60,
        "ms_per_iteration": {section: seconds / max(iterations, 1) * 1e3 for section, seconds in section_seconds.items()},
        "share": {section: seconds / total for section, seconds in section_seconds.items()},
        "sample_gradients_per_env_step": sample_gradients / model.num_timesteps,
        "gradient_ms_per_1000_sample_gradients": gradient_seconds / sample_gradients * 1e6 if sample_gradients else None,
        "total_ms_per_1000_sample_gradients": total / sample_gradients * 1e6 if sample_gradients else None,
    }


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(1.8 * len(rows) + 3, 4))
    positions = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for section in SECTIONS:
        heights = np.array([row["ms_per_iteration"][section] / row["steps_per_iteration"] * 1e3 for row in rows])
        axis.bar(positions, heights, bottom=bottom, label=section)
        bottom += heights
    axis.set_xticks(positions, [row["algo"] for row in rows], rotation=15)
    axis.set_ylabel("ms per 1000 env steps")
    axis.set_title(title, fontsize=9)
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=["ppo", "ptr_ppo"])
    parser.add_argument("--env", default="BreakoutNoFrameskip-v4")
    parser.add_argument("--steps", type=int, default=6144, help="environment steps per algo")
    parser.add_argument("--project-steps", type=int, default=160_000, help="steps of the projected run time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("results/iteration_cost"))
    args = parser.parse_args()
    validate_names([split_variant(algo)[0] for algo in args.algos], [args.env])
    if args.steps < 1:
        parser.error("--steps must be positive")
    th.set_num_threads(args.torch_threads)
    rows = [measure(algo, args.env, args.steps, args.seed, args.project_steps) for algo in args.algos]
    commit = package_commit()
    stem = args.out / f"iteration_cost-{args.env}"
    command = ["python", "-m", "benchmarks", "iteration_cost", "--algos", *args.algos, "--env", args.env]
    command += [f"--steps={args.steps}", f"--project-steps={args.project_steps}", f"--seed={args.seed}"]
    command += [f"--torch-threads={args.torch_threads}"]
    write_json(
        {
            "command": shlex.join(command),
            "env": args.env,
            "sb3_impact_commit": commit,
            "machine": machine_description(),
            "torch": th.__version__,
            "rows": rows,
        },
        stem.with_suffix(".json"),
    )
    with open(stem.with_suffix(".csv"), "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["algo", "env_steps_per_second", "projected_minutes", *[f"{s}_ms_per_iteration" for s in SECTIONS]])
        for row in rows:
            sections = [round(row["ms_per_iteration"][section], 2) for section in SECTIONS]
            writer.writerow(
                [row["algo"], round(row["env_steps_per_second"], 1), round(row["projected_minutes"], 1), *sections]
            )
    plot(
        rows, stem.with_suffix(".png"), f"{args.env}, {args.steps} steps, {args.torch_threads} thread(s), sb3_impact {commit}"
    )
    print(f"{args.env}, sb3_impact {commit}, {args.torch_threads} torch thread(s); ms per iteration by section\n")
    print(f"| algo | env steps/s | minutes for {args.project_steps} steps | " + " | ".join(SECTIONS) + " |")
    print("| --- " * (3 + len(SECTIONS)) + "|")
    for row in rows:
        sections = " | ".join(f"{row['ms_per_iteration'][section]:.0f}" for section in SECTIONS)
        print(f"| {row['algo']} | {row['env_steps_per_second']:.1f} | {row['projected_minutes']:.1f} | {sections} |")


if __name__ == "__main__":
    main()
