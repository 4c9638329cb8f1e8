"""
The ReF-ER ablation of the paper (Figures 4-5 shape) for V-RACER on one task: ReF-ER (rules 1 and 2),
ReF-ER-1 (rule 1 only), ReF-ER-2 (rule 2 only, rho clipped at 1e3) and plain ER.

    python -m benchmarks.vracer_ablation --env Pendulum-v1 --seeds 1 --steps 30000 --out results/vracer

Every ``--eval-freq`` environment steps it records the deterministic evaluation return, the fraction of
far-policy steps in the replay memory (from their last rho, against the current c_max), the mean
``D_KL(mu || pi)`` between the current policy and the behaviours of 2048 steps drawn from the memory,
beta and c_max. Hyperparameters: ``sb3_impact/hyperparams/vracer.yml`` with ``refer_rules`` replaced.
Writes ``ablation-ENV.csv`` and ``ablation-ENV.png`` (return, far fraction, KL against env steps).
"""

import argparse
import csv
import time
from pathlib import Path

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.utils import obs_as_tensor

from benchmarks.config import load_zoo_hyperparams
from sb3_impact import VRACER
from sb3_impact.common.refer import diag_gaussian_kl

VARIANTS = {"ReF-ER": (1, 2), "ReF-ER-1": (1,), "ReF-ER-2": (2,), "ER": ()}
FIELDS = ["variant", "seed", "steps", "wall_seconds", "eval_mean", "far_fraction", "kl_mu_pi", "beta", "c_max"]


def memory_kl(model: VRACER, n_samples: int = 2048) -> float:
    """Mean D_KL(mu_k || pi(.|s_k)) over steps drawn uniformly from the replay memory (Figure 5)."""
    memory = model.replay_buffer
    if len(memory) == 0:
        return float("nan")
    slots = memory.sample_slots(n_samples)
    with th.no_grad():
        mean, log_std, _ = model.policy.forward_parts(obs_as_tensor(memory.observations_at(slots), model.device))
        mu_mean, mu_log_std = th.as_tensor(memory.behaviour_params[slots], device=model.device).chunk(2, dim=1)
        return diag_gaussian_kl(mu_mean, mu_log_std, mean, log_std).mean().item()


class AblationRecorder(BaseCallback):
    def __init__(self, variant: str, seed: int, env_id: str, eval_freq: int, n_eval_episodes: int) -> None:
        super().__init__()
        self.variant, self.seed, self.eval_freq, self.n_eval_episodes = variant, seed, eval_freq, n_eval_episodes
        self.eval_env = make_vec_env(env_id, n_envs=1, seed=seed + 10_000)
        self.rows: list[dict] = []
        self._start = 0.0
        self._eval_seconds = 0.0

    def _on_training_start(self) -> None:
        self._start = time.perf_counter()

    def record(self) -> None:
        eval_start = time.perf_counter()
        model: VRACER = self.model  # type: ignore[assignment]
        rng_state = np.random.get_state()  # the memory draws with numpy's global RNG: leave training's draws alone
        returns, _ = evaluate_policy(model, self.eval_env, self.n_eval_episodes, deterministic=True)
        kl = memory_kl(model)
        np.random.set_state(rng_state)
        self.rows.append(
            dict(
                variant=self.variant,
                seed=self.seed,
                steps=self.num_timesteps,
                wall_seconds=round(eval_start - self._start - self._eval_seconds, 2),
                eval_mean=float(returns),
                far_fraction=model.replay_buffer.far_fraction(),
                kl_mu_pi=kl,
                beta=model.beta,
                c_max=model.c_max,
            )
        )
        self._eval_seconds += time.perf_counter() - eval_start

    def _on_step(self) -> bool:
        if self.num_timesteps % self.eval_freq == 0:
            self.record()
        return True


def plot(rows: list[dict], path: Path, env_id: str, refer_d: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for variant in VARIANTS:
        runs = {}
        for row in rows:
            if row["variant"] == variant:
                runs.setdefault(int(row["seed"]), []).append(row)
        if not runs:
            continue
        steps = np.array([float(row["steps"]) for row in next(iter(runs.values()))])
        color = None
        for axis, key in zip(axes, ("eval_mean", "far_fraction", "kl_mu_pi"), strict=True):
            curves = np.array([[float(row[key]) for row in run][: len(steps)] for run in runs.values()])
            (line,) = axis.plot(steps, np.median(curves, axis=0), label=f"{variant} ({len(runs)} seeds)", color=color)
            color = line.get_color()
            if len(runs) > 1:
                axis.fill_between(steps, curves.min(axis=0), curves.max(axis=0), alpha=0.2, color=color)
    axes[0].set_ylabel("deterministic evaluation return")
    axes[1].set_ylabel("far-policy fraction of the memory")
    axes[1].axhline(refer_d, color="gray", linestyle="--", linewidth=1, label="D")
    axes[2].set_ylabel("mean D_KL(mu || pi) over the memory")
    axes[2].set_yscale("log")
    for axis in axes:
        axis.set_xlabel("environment steps")
        axis.legend()
    figure.suptitle(f"V-RACER ReF-ER ablation, {env_id}")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None, help="env steps per run (default: the yml's n_timesteps)")
    parser.add_argument("--eval-freq", type=int, default=2500)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--plot-only", action="store_true", help="only redraw the PNG from the CSV")
    parser.add_argument("--out", type=Path, default=Path("results/vracer"))
    args = parser.parse_args()
    csv_path, png_path = args.out / f"ablation-{args.env}.csv", args.out / f"ablation-{args.env}.png"
    params = load_zoo_hyperparams("vracer", args.env)
    refer_d = params.get("refer_d", 0.1)
    if args.plot_only:
        with open(csv_path) as file:
            plot(list(csv.DictReader(file)), png_path, args.env, refer_d)
        return
    rows: list[dict] = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for variant in args.variants:
            run_params = dict(params)
            n_envs = run_params.pop("n_envs", 1)
            steps = args.steps or int(run_params.pop("n_timesteps"))
            run_params.pop("n_timesteps", None)
            policy = run_params.pop("policy")
            run_params["refer_rules"] = VARIANTS[variant]
            env = make_vec_env(args.env, n_envs=n_envs, seed=seed)
            model = VRACER(policy, env, seed=seed, device="cpu", **run_params)
            recorder = AblationRecorder(variant, seed, args.env, args.eval_freq, args.eval_episodes)
            model.learn(steps, callback=recorder)
            rows += recorder.rows
            last = recorder.rows[-1]
            print(
                f"{variant:9s} seed {seed}: return {last['eval_mean']:.1f} far {last['far_fraction']:.3f} "
                f"KL {last['kl_mu_pi']:.3g} beta {last['beta']:.3f}",
                flush=True,
            )
            args.out.mkdir(parents=True, exist_ok=True)
            with open(csv_path, "w", newline="") as file:
                writer = csv.DictWriter(file, fieldnames=FIELDS)
                writer.writeheader()
                writer.writerows(rows)
            plot(rows, png_path, args.env, refer_d)


if __name__ == "__main__":
    main()
