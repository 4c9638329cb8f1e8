"""
PTR-PPO with each trajectory priority (paper Table 2 / Fig. 5) and the priority heatmap (paper Figs. 8 and 10).

    python -m benchmarks.ptr_ppo_priorities --env CartPole-v1 --priorities max mean reward --seeds 3 --steps 40000
    python -m benchmarks.ptr_ppo_priorities --env BreakoutNoFrameskip-v4 --seeds 1 --steps 20000 --heatmap

Every run uses ``sb3_impact/hyperparams/ptr_ppo.yml`` for ``--env`` with ``priority`` replaced (the harness
``benchmarks.run`` only knows one configuration per algorithm); ``--override key=value`` changes other
constructor arguments. Each run is labelled ``ptr_ppo_<priority>``. Writes into ``--out``:
``ENV.csv``/``ENV.json``/``ENV.png`` (as ``benchmarks.run``, plus any ``--baseline-csv`` points merged in,
e.g. the harness's PPO runs) and, with ``--heatmap``, ``ENV_heatmap.png`` and ``ENV_heatmap.npz``: after
every iteration, the priorities of the memory's segments from the oldest to the newest, first seed.
"""

import argparse
import ast
import shlex
import sys
from pathlib import Path

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.vec_env import VecNormalize

from benchmarks.config import load_zoo_hyperparams, make_training_env, split_env_params
from benchmarks.output import EvalPoint, plot_curves, read_csv, write_csv, write_json
from benchmarks.pool import TimedEvalCallback
from benchmarks.summary import THRESHOLDS, threshold_summary
from sb3_impact import PTRPPO


class PriorityRecorder(BaseCallback):
    """At the start of every rollout (after the previous train()), the memory's priorities, oldest segment first."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[np.ndarray] = []

    def _on_rollout_start(self) -> None:
        memory = self.model.replay_memory
        if len(memory) > 0:
            self.rows.append(memory.priorities[memory.filled_slots()].copy())

    def _on_step(self) -> bool:
        return True


def parse_value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def run(env_id: str, priority: str, seed: int, args: argparse.Namespace) -> tuple[list[EvalPoint], list[np.ndarray]]:
    env_params, params = split_env_params(load_zoo_hyperparams("ptr_ppo", env_id))
    params.update(priority=priority, **dict(args.override))
    wrappers = {"env_wrapper": env_params.get("env_wrapper"), "frame_stack": env_params.get("frame_stack")}
    normalize = env_params.get("normalize", False)
    env = make_training_env(env_id, env_params.get("n_envs", 1), seed, normalize, **wrappers)
    eval_env = make_training_env(env_id, 1, seed + 10_000, normalize, **wrappers)
    if isinstance(eval_env, VecNormalize):
        eval_env.training, eval_env.norm_reward = False, False
    evaluation = TimedEvalCallback(eval_env, args.eval_freq, args.eval_episodes, f"ptr_ppo_{priority}", env_id, seed)
    recorder = PriorityRecorder()
    model = PTRPPO(env_params["policy"], env, seed=seed, device=args.device, **params)
    model.learn(args.steps or int(env_params["n_timesteps"]), callback=CallbackList([evaluation, recorder]))
    env.close()
    eval_env.close()
    return evaluation.points, recorder.rows


def plot_heatmaps(heatmaps: dict[str, list[np.ndarray]], path: Path, env_id: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(heatmaps), figsize=(4.5 * len(heatmaps), 4), squeeze=False)
    for axis, (priority, rows) in zip(axes[0], heatmaps.items(), strict=True):
        width = max(len(row) for row in rows)
        image = np.full((len(rows), width), np.nan)
        for index, row in enumerate(rows):
            image[index, width - len(row) :] = row  # right-aligned: the newest segment is always the last column
        shown = axis.imshow(image, aspect="auto", origin="lower", interpolation="nearest", cmap="viridis")
        axis.set_title(f"{env_id}: {priority} priority")
        axis.set_xlabel("position in memory (left: oldest)")
        axis.set_ylabel("iteration")
        figure.colorbar(shown, ax=axis)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--priorities", nargs="+", default=["max", "mean", "reward"], choices=["max", "mean", "reward"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None, help="env steps per run (default: the yml's n_timesteps)")
    parser.add_argument("--eval-freq", type=int, default=5000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--threshold", type=float, default=None)
    parser.add_argument(
        "--override", nargs="*", default=[], type=lambda text: (text.split("=")[0], parse_value(text.split("=", 1)[1]))
    )
    parser.add_argument("--baseline-csv", type=Path, default=None, help="points of other algos to plot alongside")
    parser.add_argument("--heatmap", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=Path("results/ptr_ppo_priorities"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    threshold = args.threshold if args.threshold is not None else THRESHOLDS.get(args.env)
    baseline_points = read_csv(args.baseline_csv) if args.baseline_csv else []
    reproduce = shlex.join(["python", "-m", "benchmarks.ptr_ppo_priorities", *(sys.argv[1:] if argv is None else argv)])
    points: list[EvalPoint] = []
    heatmaps: dict[str, list[np.ndarray]] = {}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for priority in args.priorities:
            run_points, rows = run(args.env, priority, seed, args)
            points += run_points
            if seed == args.first_seed and rows:
                heatmaps[priority] = rows
            all_points = baseline_points + points
            write_csv(all_points, args.out / f"{args.env}.csv")
            baseline = "ppo" if any(p.algo == "ppo" for p in all_points) else f"ptr_ppo_{args.priorities[0]}"
            summary = threshold_summary(all_points, threshold, baseline=baseline)
            summary.update(env=args.env, steps=args.steps, overrides=dict(args.override), command=reproduce)
            write_json(summary, args.out / f"{args.env}.json")
            plot_curves(all_points, args.out / f"{args.env}.png", threshold)
            if args.heatmap and heatmaps:
                plot_heatmaps(heatmaps, args.out / f"{args.env}_heatmap.png", args.env)
                np.savez_compressed(
                    args.out / f"{args.env}_heatmap.npz",
                    **{priority: np.array([np.pad(r, (max(map(len, rows)) - len(r), 0), constant_values=np.nan) for r in rows])
                       for priority, rows in heatmaps.items()},
                )  # fmt: skip


if __name__ == "__main__":
    main()
