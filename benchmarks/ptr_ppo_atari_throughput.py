"""
Throughput of PPO (rl-zoo3 atari yml) and PTR-PPO (our atari yml) on one Atari game, to size a benchmark.

    python -m benchmarks.ptr_ppo_atari_throughput 1024 results/ptr_ppo/atari_throughput_Breakout.json
"""

import json
import sys
import time

from benchmarks.common import ALGOS, load_zoo_hyperparams, make_training_env, split_env_params


def main() -> None:
    env_id, steps = "BreakoutNoFrameskip-v4", int(sys.argv[1])  # argv: steps, output json
    out = {}
    for algo in ["ppo", "ptr_ppo"]:
        env_params, params = split_env_params(load_zoo_hyperparams(algo, env_id))
        wrappers = {"env_wrapper": env_params.get("env_wrapper"), "frame_stack": env_params.get("frame_stack")}
        env = make_training_env(env_id, env_params["n_envs"], 0, False, **wrappers)
        model = ALGOS[algo](env_params["policy"], env, seed=0, device="cpu", **params)
        start = time.perf_counter()
        model.learn(steps)
        seconds = time.perf_counter() - start
        out[algo] = dict(
            steps=model.num_timesteps,
            seconds=round(seconds, 1),
            steps_per_second=round(model.num_timesteps / seconds, 1),
            n_envs=env_params["n_envs"],
            projected_minutes_for_160k=round(160_000 / (model.num_timesteps / seconds) / 60, 1),
        )
        print(algo, out[algo], flush=True)
        env.close()
    with open(sys.argv[2], "w") as file:
        json.dump(out, file, indent=1)


if __name__ == "__main__":
    main()
