"""
Demo: IMPACT with its default hyperparameters on CartPole-v1 (its time on two idle cores and beside two busy
processes is on docs/results.md, "Overlap and threads on two cores").

    python examples/cartpole.py [--steps 100000] [--algo impact|impala]

Trains with the algorithm's default collector, ``collector="auto"``: on Linux a forked process collects the next
segment while the learner trains, each on its own core (elsewhere a background thread does;
docs/algorithms/collectors.md). The learner runs one PyTorch thread (``learner_threads=1``), so a busy machine
slows it down without making it burn CPU. Then it saves the model, loads it back and reports the deterministic
evaluation return over 10 episodes (500 is the maximum). The asynchronous collector makes a seeded run
unreproducible, so the return varies from run to run: it was 500 in the project's earlier fresh-clone checks (idle,
or beside one benchmark run) and 303.5 once beside two (docs/algorithms/collectors.md, "The four collectors").
"""

import argparse
import tempfile
import time
from pathlib import Path

from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy

from sb3_impact import IMPACT, IMPALA


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=["impact", "impala"], default="impact")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    algo = {"impact": IMPACT, "impala": IMPALA}[args.algo]

    start = time.perf_counter()
    model = algo("MlpPolicy", "CartPole-v1", seed=args.seed, device="cpu", verbose=0)
    model.learn(args.steps, progress_bar=True)
    seconds = time.perf_counter() - start
    print(
        f"{args.algo}: {model.num_timesteps} steps in {seconds:.1f}s "
        f"(sampled {model.sampled_steps}, trained {model.trained_steps}, dropped {model.dropped_steps})"
    )

    with tempfile.TemporaryDirectory() as folder:
        model.save(Path(folder) / "model")
        loaded = algo.load(Path(folder) / "model", device="cpu")
    eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=args.seed + 1000)
    mean, std = evaluate_policy(loaded, eval_env, n_eval_episodes=10, deterministic=True)
    print(f"deterministic evaluation of the reloaded model: {mean:.1f} +/- {std:.1f}")


if __name__ == "__main__":
    main()
