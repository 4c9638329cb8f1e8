"""
PPO-AMBER's cost per iteration against the number of active batches.

    python -m benchmarks ppo_amber_cost --env HalfCheetah-v5 --replay-lengths 1 8 --iterations 3

For each L, fills the replay memory (``adaptive=False``: all L batches active), then times ``train()`` over
``--iterations`` iterations and prints the wall time per iteration and that of its parts, each timed through a
public method: the forward passes (the policy's ``evaluate_actions``), the backward passes (``Tensor.backward``),
minibatch assembly (the memory's ``minibatches``) and R' of the stored batches (``replay_ratios_and_kl``). A part's
time is its own (R' does its forward passes without ``evaluate_actions``); the rest of ``train()`` is the loss
and the optimiser.
"""

import argparse

import torch as th
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

from benchmarks.profiling.timing import SectionTimer
from sb3_impact import PPOAMBER

PARTS = ("forward", "backward", "minibatch assembly", "R' of stored batches")


def profile(env_id: str, replay_length: int, iterations: int, n_steps: int, seed: int) -> dict[str, float]:
    """Seconds per iteration of ``train()`` and of each of :data:`PARTS` (which run inside it)."""
    env = VecNormalize(make_vec_env(env_id, n_envs=1, seed=seed))
    model = PPOAMBER("MlpPolicy", env, n_steps=n_steps, replay_length=replay_length, adaptive=False, seed=seed)
    model.learn(n_steps * replay_length)  # fill the memory
    assert model.replay_memory is not None
    timer = SectionTimer()
    hooks = [
        (model, "train", "train()"),
        (model.policy, "evaluate_actions", "forward"),
        (th.Tensor, "backward", "backward"),
        (model.replay_memory, "minibatches", "minibatch assembly"),
        (model, "replay_ratios_and_kl", "R' of stored batches"),
    ]
    with timer.patched(*hooks):
        model.learn(n_steps * iterations, reset_num_timesteps=False)
    env.close()
    timer.require("train()", *PARTS)
    done = timer.calls("train()")
    row = {"train()": sum(timer.seconds(name) for name in ("train()", *PARTS)) / done}  # its own time and its parts'
    row.update({part: timer.seconds(part) / done for part in PARTS})
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
