"""
PPO-AMBER's number of active batches over training (the shape of the paper's Figure 5).

    python -m benchmarks.ppo_amber_active_batches --env Pendulum-v1 --seeds 3 --out results/amber

Trains PPO-AMBER with ``sb3_impact/hyperparams/ppo_amber.yml`` (``--batch-drop-factors`` replaces the
yml's initial batch drop factor, still annealed linearly to 0; several values give one curve each) and
records, after every iteration, the number of active batches, the mean R' of the stored past batches and
the batch drop factor, read from the model (``model.active_batches``, ``model.replay_ratios``).

Writes into ``--out``: ``ppo_amber_active_batches_ENV.csv`` (one row per iteration and run) and
``ppo_amber_active_batches_ENV.png`` (active batches against env steps: median over seeds with a
min/max band, one curve per batch drop factor).
"""

import argparse
import csv
from pathlib import Path

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from benchmarks.config import load_zoo_hyperparams, make_training_env, split_env_params
from sb3_impact import PPOAMBER

FIELDS = ["env", "batch_drop_factor_init", "seed", "iteration", "steps", "active_batches", "stored_batches"]
FIELDS += ["replay_ratio_mean", "replay_ratio_max", "batch_drop_factor"]


class ActiveBatchRecorder(BaseCallback):
    """After each training phase (read at the start of the next rollout and at the end), log the selection."""

    def __init__(self, env_id: str, label: str, seed: int) -> None:
        super().__init__()
        self.env_id, self.label, self.seed = env_id, label, seed
        self.rows: list[dict] = []
        self._iteration = 0

    def _record(self) -> None:
        model: PPOAMBER = self.model  # type: ignore[assignment]
        if model.active_batches == 0:  # no training phase yet
            return
        self._iteration += 1
        past = model.replay_ratios[1:] or [1.0]
        self.rows.append(
            dict(
                env=self.env_id,
                batch_drop_factor_init=self.label,
                seed=self.seed,
                iteration=self._iteration,
                steps=model.num_timesteps,
                active_batches=model.active_batches,
                stored_batches=len(model.replay_memory or []),
                replay_ratio_mean=float(np.mean(past)),
                replay_ratio_max=float(np.max(past)),
                batch_drop_factor=model.batch_drop_factor(model._current_progress_remaining),  # type: ignore[operator]
            )
        )

    def _on_rollout_start(self) -> None:
        self._record()

    def _on_training_end(self) -> None:
        self._record()

    def _on_step(self) -> bool:
        return True


def run(env_id: str, seed: int, steps: int | None, batch_drop_factor: float | None) -> list[dict]:
    env_params, params = split_env_params(load_zoo_hyperparams("ppo_amber", env_id))
    label = "yml"
    if batch_drop_factor is not None:
        params["batch_drop_factor"] = f"lin_{batch_drop_factor}"
        label = str(batch_drop_factor)
    env = make_training_env(env_id, env_params.get("n_envs", 1), seed, env_params.get("normalize", False))
    recorder = ActiveBatchRecorder(env_id, label, seed)
    model = PPOAMBER(env_params["policy"], env, seed=seed, device="cpu", **params)
    model.learn(steps or int(env_params["n_timesteps"]), callback=recorder)
    env.close()
    return recorder.rows


def plot(rows: list[dict], env_id: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    for label in sorted({row["batch_drop_factor_init"] for row in rows}):
        runs: dict[int, list[dict]] = {}
        for row in rows:
            if row["batch_drop_factor_init"] == label:
                runs.setdefault(int(row["seed"]), []).append(row)
        length = min(len(run_rows) for run_rows in runs.values())
        steps = np.array([float(row["steps"]) for row in next(iter(runs.values()))[:length]])
        counts = np.array([[float(row["active_batches"]) for row in run_rows[:length]] for run_rows in runs.values()])
        name = "eps_b from yml" if label == "yml" else f"eps_b = {label}"
        line = axis.plot(steps, np.median(counts, axis=0), label=f"{name} (median of {len(runs)} seeds)")
        axis.fill_between(steps, counts.min(axis=0), counts.max(axis=0), alpha=0.2, color=line[0].get_color())
    axis.set_xlabel("environment steps")
    axis.set_ylabel("active batches")
    axis.set_title(f"PPO-AMBER on {env_id}: active batches (min/max band over seeds)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None, help="env steps per run (default: the yml's n_timesteps)")
    parser.add_argument("--batch-drop-factors", type=float, nargs="*", default=None, help="initial eps_b values")
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    csv_path = args.out / f"ppo_amber_active_batches_{args.env}.csv"
    rows: list[dict] = []
    for batch_drop_factor in args.batch_drop_factors or [None]:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            rows += run(args.env, seed, args.steps, batch_drop_factor)
            with open(csv_path, "w", newline="") as file:
                writer = csv.DictWriter(file, fieldnames=FIELDS)
                writer.writeheader()
                writer.writerows(rows)
            print(f"{args.env} eps_b={batch_drop_factor or 'yml'} seed {seed}: {len(rows)} rows -> {csv_path}")
    plot(rows, args.env, args.out / f"ppo_amber_active_batches_{args.env}.png")


if __name__ == "__main__":
    main()
