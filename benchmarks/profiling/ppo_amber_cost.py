"""
PPO-AMBER's cost per iteration against the number of active batches.

    python -m benchmarks ppo_amber_cost --env HalfCheetah-v5 --replay-lengths 1 8 --iterations 3

For each L, fills the replay memory (``adaptive=False``: all L batches active), then profiles ``train()`` over
``--iterations`` iterations and prints the wall time per iteration and the cumulative time of its parts: the
forward passes (``evaluate_actions``), the backward passes, minibatch assembly and R' of the stored batches.
"""

import argparse
import cProfile
import pstats
import time

import torch as th
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

from sb3_impact import PPOAMBER

PARTS = {
    "forward": "evaluate_actions",
    "backward": "run_backward",
    "minibatch assembly": "minibatches",
    "R' of stored batches": "_replay_ratios_and_kl",
}


def profile(env_id: str, replay_length: int, iterations: int, n_steps: int, seed: int) -> dict[str, float]:
    env = VecNormalize(make_vec_env(env_id, n_envs=1, seed=seed))
    model = PPOAMBER("MlpPolicy", env, n_steps=n_steps, replay_length=replay_length, adaptive=False, seed=seed)
    model.learn(n_steps * replay_length)  # fill the memory
    train, profiler, seconds = model.train, cProfile.Profile(), []

    def profiled_train() -> None:
        start = time.perf_counter()
        profiler.enable()
        train()
        profiler.disable()
        seconds.append(time.perf_counter() - start)

    model.train = profiled_train  # type: ignore[method-assign]
    model.learn(n_steps * iterations, reset_num_timesteps=False)
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    row = {"train()": sum(seconds) / len(seconds)}
    for part, function in PARTS.items():
        row[part] = sum(entry[3] for key, entry in stats.items() if function in key[2]) / len(seconds)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--replay-lengths", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--n-steps", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    th.set_num_threads(1)
    print("| L (active) | " + " | ".join(["train()", *PARTS]) + " |")
    for replay_length in args.replay_lengths:
        row = profile(args.env, replay_length, args.iterations, args.n_steps, args.seed)
        print(f"| {replay_length} | " + " | ".join(f"{value:.3f} s" for value in row.values()) + " |", flush=True)


if __name__ == "__main__":
    main()
