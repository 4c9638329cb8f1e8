"""
Where an on-policy iteration's time goes: collection, rollout buffer, PPO epochs, and for PTR-PPO its replay
(scoring forward passes, tensor building, priority memory, replay gradient steps), for PPO-AMBER its replay
ratios and memory, per iteration.

    python -m benchmarks iteration_cost --algos ppo ptr_ppo --env BreakoutNoFrameskip-v4 --steps 6144 \\
        --out results/ptr_ppo/iteration_cost

Each algo (``algo[key=value]`` variants as in ``run``) learns ``--steps`` environment steps with its yml
hyperparameters (rl-zoo3's for PPO, ours for PTR-PPO), on one PyTorch thread by default. Each section is timed
through public hooks for that run (nothing in the package is instrumented): public methods wrapped with timers,
and SB3's callbacks. A section's time is its own, without the sections it calls, so the sections add up to the
whole ``learn()``. A wrapped method that no longer exists, or a section that never ran, stops the run.

- ``collection``: stepping the environments with the policy (SB3's ``collect_rollouts``, or the ``get_segment`` of
  the collector ``make_collector()`` builds: with an asynchronous collector, the wait for the next segment);
- ``rollout_buffer``: a segment into the rollout buffer (values and GAE): from the segment's last ``on_step`` to
  ``on_rollout_end``, between which the segment loop stores it;
- ``epochs``: SB3 PPO's ``train()``, the epochs on the fresh rollout (PTR-PPO's fresh update); PPO-AMBER's
  epochs over its active batches (its ``train()`` without the parts below);
- ``replay_steps``: PTR-PPO's ``train()`` without the parts below: the forward and backward passes of the replay
  minibatches, the importance weights, the loss;
- ``scoring``: PTR-PPO's scoring: its network evaluations (``values_and_log_probs_in_chunks`` and
  ``TrainingBatch.bootstrap_values``: insertion priorities, and each round's old-policy, bootstrap and, for rounds
  of several minibatches, current-policy evaluation) and the pure functions of ``sb3_impact/ptr_ppo/scoring.py``
  it calls (``score_segments``, ``replay_targets``, ``segment_priorities``); PPO-AMBER's replay ratios R'
  (eq. 10) and KL of every stored batch (``replay_ratios_and_kl``);
- ``tensor_building``: segments into learner tensors (``TrainingBatch.from_segment``);
- ``memory``: PTR-PPO's priority memory (``add_segment``, ``get``, ``sample``, ``update_priorities``); PPO-AMBER's
  copy of the rollout into its memory (``StoredBatch.from_rollout_buffer``, the memory's ``add``);
- ``other``: what ``learn()`` does besides (callbacks, logging).

Sample-gradients count every sample in every gradient step: ``n_epochs * n_steps * n_envs`` per iteration
plus PTR-PPO's replayed samples; for PPO-AMBER the samples of the minibatches drawn from its memory. Writes
``iteration_cost-ENV.json`` (with the package's commit, so a before/after pair can be told apart), ``.csv`` and
a ``.png`` of stacked bars into ``--out``; prints a table.
"""

import argparse
import contextlib
import csv
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.ppo.ppo import PPO

import sb3_impact
from benchmarks.config import (
    build_model,
    split_variant,
    validate_names,
)
from benchmarks.output import machine_description, write_json
from benchmarks.profiling.timing import Mark, SectionTimer
from benchmarks.protocol import git_commit
from sb3_impact import PPOAMBER, PTRPPO
from sb3_impact.common.collectors import Collector
from sb3_impact.common.segment_loop import SegmentLoopMixin
from sb3_impact.common.training_batch import TrainingBatch
from sb3_impact.ppo_amber.memory import StoredBatch
from sb3_impact.ptr_ppo import ptr_ppo as ptr_ppo_module

SECTIONS = ("collection", "rollout_buffer", "epochs", "replay_steps", "scoring", "tensor_building", "memory", "other")
# The functions PTR-PPO's module scores segments with (their forward passes and GAE): timed as scoring.
SCORING_FUNCTIONS = ("values_and_log_probs_in_chunks", "score_segments", "replay_targets", "segment_priorities")


class StorageClock(BaseCallback):
    """
    Times a segment's storage as section ``rollout_buffer``: from its last ``on_step`` to ``on_rollout_end``, between
    which the segment loop stores it.
    """

    def __init__(self, timer: SectionTimer) -> None:
        super().__init__()
        self.timer = timer
        self.last_step: Mark | None = None

    def _on_step(self) -> bool:
        self.last_step = self.timer.mark()
        return True

    def _on_rollout_end(self) -> None:
        assert self.last_step is not None, "on_rollout_end before any on_step"
        self.timer.add_since(self.last_step, "rollout_buffer")


def timed_hooks(model: Any) -> list[tuple[Any, str, str]]:
    """The public methods behind each section of ``model``'s iteration, as ``(owner, method, section)``."""
    hooks: list[tuple[Any, str, str]] = [
        (PPO, "train", "epochs"),
        (OnPolicyAlgorithm, "collect_rollouts", "collection"),
        (TrainingBatch, "from_segment", "tensor_building"),
    ]
    if isinstance(model, PTRPPO):
        hooks += [(model, "train", "replay_steps"), (TrainingBatch, "bootstrap_values", "scoring")]
        hooks += [(ptr_ppo_module, name, "scoring") for name in SCORING_FUNCTIONS]
        hooks += [(model.replay_memory, name, "memory") for name in ("add_segment", "get", "sample", "update_priorities")]
    if isinstance(model, PPOAMBER):  # its train() is its epochs (it does not call PPO.train)
        hooks += [(model, "train", "epochs"), (model, "replay_ratios_and_kl", "scoring")]
        hooks += [(StoredBatch, "from_rollout_buffer", "memory"), (model.replay_memory, "add", "memory")]
    return hooks


def required_sections(model: Any) -> list[str]:
    """The sections every iteration of ``model`` runs: a hook behind one that never ran is no longer called."""
    sections = ["collection", "epochs"]
    if isinstance(model, SegmentLoopMixin):
        sections.append("rollout_buffer")
    if isinstance(model, PTRPPO):
        sections += ["replay_steps", "memory"] + (["scoring"] if model.priority != "reward" or model.replay_rounds else [])
    if isinstance(model, PPOAMBER):
        sections += ["scoring", "memory"]
    return sections


@contextlib.contextmanager
def timed_collectors(model: SegmentLoopMixin, timer: SectionTimer) -> Iterator[None]:
    """Each collector ``model.make_collector()`` builds in the block has its ``get_segment`` timed as collection."""
    make_collector = model.make_collector

    def make_timed_collector(*args: Any, **kwargs: Any) -> Collector:
        collector = make_collector(*args, **kwargs)
        collector.get_segment = timer.wrap(collector.get_segment, "collection")  # type: ignore[method-assign]
        return collector

    with mock.patch.object(model, "make_collector", make_timed_collector):
        yield


@contextlib.contextmanager
def counted_samples(memory: Any, counts: list[int]) -> Iterator[None]:
    """The samples of every minibatch ``memory.minibatches`` yields in the block, appended to ``counts``."""
    minibatches = memory.minibatches

    def counted_minibatches(*args: Any, **kwargs: Any) -> Iterator[Any]:
        for minibatch in minibatches(*args, **kwargs):
            counts.append(len(minibatch.actions))
            yield minibatch

    with mock.patch.object(memory, "minibatches", counted_minibatches):
        yield


def package_commit() -> str:
    """The git commit of the imported sb3_impact (with ``+dirty`` for uncommitted changes in it), or ``unknown``."""
    return git_commit(Path(sb3_impact.__file__).resolve().parent, short=True, only_directory=True)


def measure(algo: str, env_id: str, steps: int, seed: int, project_steps: int) -> dict[str, Any]:
    model = build_model(algo, env_id, seed)
    if not isinstance(model, PPO):
        model.env.close()
        raise ValueError(f"{algo}: iteration_cost profiles PPO and the algorithms built on it (PTR-PPO, PPO-AMBER)")
    timer = SectionTimer()
    amber_samples: list[int] = []  # PPO-AMBER's sample-gradients: the samples of the minibatches it draws
    segment_loop = isinstance(model, SegmentLoopMixin)
    with contextlib.ExitStack() as hooks:
        hooks.enter_context(timer.patched(*timed_hooks(model)))
        if segment_loop:
            hooks.enter_context(timed_collectors(model, timer))
        if isinstance(model, PPOAMBER):
            hooks.enter_context(counted_samples(model.replay_memory, amber_samples))
        with timer.section("other"):  # learn()'s own time: what the sections inside leave
            model.learn(steps, callback=StorageClock(timer) if segment_loop else None)
    model.env.close()
    timer.require(*required_sections(model))
    iterations = timer.calls("epochs")  # one train() per iteration
    section_seconds = {section: timer.seconds(section) for section in SECTIONS}
    total = sum(section_seconds.values())
    fresh_samples = (
        sum(amber_samples) if isinstance(model, PPOAMBER) else iterations * model.n_epochs * model.n_steps * model.n_envs
    )
    replay_samples = model.replayed_segments * model.n_steps if isinstance(model, PTRPPO) else 0
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
