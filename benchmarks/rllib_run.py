"""
One RLlib run (APPO or IMPALA, Ray 2.60) under the benchmarks' protocol, for ``python -m benchmarks run --algos
rllib_appo ...`` (:mod:`benchmarks.peers` starts it): it runs with the Python of RLlib's own virtual environment,

    PEER/bin/python -m benchmarks.rllib_run SPEC.json RESULT.json

where SPEC.json holds the run (``algo``, ``env_id``, ``seed``, ``steps``, ``max_seconds``, ``eval_freq``,
``eval_seconds``, ``eval_episodes``, ``deterministic``, ``torch_threads``) and RESULT.json receives its evaluation
points, in the fields of :class:`benchmarks.output.EvalPoint`, and the software it ran with.

It measures what :class:`benchmarks.pool.TimedEvalCallback` measures for our algorithms: an evaluation before
training and then every ``eval_freq`` environment steps (or ``eval_seconds`` of training wall time) on a separate
env seeded ``seed + 10000``, for ``eval_episodes`` whole episodes (whole games on Atari, with the stochastic policy),
the wall time of each point being the training time so far with evaluation excluded. Training time starts once the
algorithm is built (Ray started, its env runner and learner made) and stops at ``max_seconds`` or ``steps``.
RLlib trains asynchronously, so a point lands at the end of the first training iteration past its grid mark, as
ours lands at the first segment past it; iterations are kept short (``min_time_s_per_iteration``) for that.

Only the standard library, numpy and torch are imported at module level (this module's settings are read by
:mod:`benchmarks.peers` in the package's own environment); Ray, RLlib and gymnasium are imported when a run starts.
"""

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

# Settings per (algo, env): RLlib's tuned example for the task where it has one, adapted to the 2-core machine in
# the same way for every run (one env runner process beside the learner in the driver, no GPU, no aggregator
# actors); ``source`` names the example and each change. Keys are AlgorithmConfig method -> keyword arguments.
TWO_CORES = {"env_runners": {"num_env_runners": 1}, "learners": {"num_learners": 0, "num_gpus_per_learner": 0}}
ATARI_MODEL = {
    "vf_share_layers": True,
    "conv_filters": [[16, 4, 2], [32, 4, 2], [64, 4, 2], [128, 4, 2]],
    "conv_activation": "relu",
    "head_fcnet_hiddens": [256],
}
PEER_SETTINGS: dict[tuple[str, str], dict[str, Any]] = {
    ("rllib_appo", "HalfCheetah-v5"): {
        "source": "RLlib's tuned example rllib/tuned_examples/appo/halfcheetah_appo.py (HalfCheetah-v4 there), with "
        "1 env runner (32 envs each, as the example) and the learner on the CPU instead of 1 GPU",
        "config": {
            "env_runners": {"num_envs_per_env_runner": 32, "rollout_fragment_length": 512},
            "training": {
                "train_batch_size_per_learner": 4096,
                "circular_buffer_num_batches": 16,
                "circular_buffer_iterations_per_batch": 20,
                "target_network_update_freq": 2,
                "target_worker_clipping": 2.0,
                "clip_param": 0.4,
                "grad_clip": 0.5,
                "grad_clip_by": "value",
                "lr": 0.0005,
                "vf_loss_coeff": 0.5,
                "gamma": 0.995,
                "lambda_": 0.995,
                "entropy_coeff": 0.0,
                "use_kl_loss": True,
                "kl_coeff": 1.0,
                "kl_target": 0.04,
            },
        },
    },
    ("rllib_appo", "BreakoutNoFrameskip-v4"): {
        "source": "RLlib's tuned Atari example rllib/tuned_examples/appo/pong_appo.py on Breakout (64x64 frames, 4 "
        "stacked by its connectors, rewards clipped), with 1 env runner and no aggregator actors (2 in the example)",
        "atari": True,
        "frame_stack": "connector",
        "config": {
            "env_runners": {"num_envs_per_env_runner": 2},
            "training": {
                "train_batch_size_per_learner": 500,
                "target_network_update_freq": 2,
                "lr": 0.0005,
                "vf_loss_coeff": 1.0,
                "entropy_coeff": [[0, 0.01], [3000000, 0.0]],
                "broadcast_interval": 5,
                "circular_buffer_num_batches": 4,
                "circular_buffer_iterations_per_batch": 2,
            },
            "rl_module": {"model_config": ATARI_MODEL},
        },
    },
    ("rllib_impala", "BreakoutNoFrameskip-v4"): {
        "source": "RLlib's tuned Atari example rllib/tuned_examples/impala/pong_impala.py on Breakout (64x64 frames, "
        "4 stacked by the env wrapper, rewards clipped), with 1 env runner",
        "atari": True,
        "frame_stack": "wrapper",
        "config": {
            "env_runners": {"num_envs_per_env_runner": 5},
            "training": {
                "train_batch_size_per_learner": 500,
                "grad_clip": 40.0,
                "grad_clip_by": "global_norm",
                "lr": 0.007,
                "vf_loss_coeff": 0.5,
                "entropy_coeff": 0.008,
                "broadcast_interval": 5,
            },
            "rl_module": {"model_config": ATARI_MODEL},
        },
    },
    ("rllib_impala", "CartPole-v1"): {
        "source": "RLlib's tuned example rllib/tuned_examples/impala/cartpole_impala.py, with 1 env runner",
        "config": {
            "training": {
                "train_batch_size_per_learner": 500,
                "grad_clip": 40.0,
                "grad_clip_by": "global_norm",
                "lr": 0.0005,
                "vf_loss_coeff": 0.05,
                "entropy_coeff": 0.0,
            },
            "rl_module": {"model_config": {"vf_share_layers": True}},
        },
    },
}
PEER_ALGOS = ("rllib_appo", "rllib_impala")
EVAL_SEED_OFFSET = 10_000  # as benchmarks.pool's evaluation env
MIN_TIME_S_PER_ITERATION = 1.0  # short iterations: a point lands within about a second of its grid mark
STACKED_FRAMES = 4  # Atari: as RLlib's examples, by the env wrapper or by the connectors (``frame_stack``)


def peer_settings(algo: str, env_id: str) -> dict[str, Any]:
    """The settings of ``algo`` on ``env_id``; ``ValueError`` naming the pairs there are for any other."""
    if (algo, env_id) not in PEER_SETTINGS:
        pairs = ", ".join(f"{a} on {e}" for a, e in PEER_SETTINGS)
        raise ValueError(f"no RLlib settings for {algo} on {env_id}; there are: {pairs}")
    return PEER_SETTINGS[(algo, env_id)]


def make_env(env_id: str, settings: dict[str, Any], whole_games: bool) -> Any:
    """
    The env as the run trains (``whole_games=False``) or evaluates on it. Atari: RLlib's own preprocessing
    (``wrap_atari_for_new_api_stack``: 108k-frame cap, 64x64 grey frames, max over 4 skipped frames, up to 30
    no-op starts, fire on reset, 4 stacked frames unless the connectors stack them), with one life per episode for
    training as RLlib's examples and whole games for evaluation (the protocol's). Rewards are clipped by the
    algorithm's ``clip_rewards``, not here, so evaluation returns are game scores.
    """
    import gymnasium as gym

    if not settings.get("atari", False):
        return gym.make(env_id)
    import ale_py
    from ray.rllib.env.wrappers import atari_wrappers as wrappers

    gym.register_envs(ale_py)
    env = gym.make(env_id, render_mode="rgb_array")
    framestack = STACKED_FRAMES if settings["frame_stack"] == "wrapper" else None
    if not whole_games:
        return wrappers.wrap_atari_for_new_api_stack(env, dim=64, framestack=framestack)
    # wrap_atari_for_new_api_stack without its EpisodicLifeEnv: the same observations, whole games.
    env = gym.wrappers.TimeLimit(env, max_episode_steps=108_000)
    env = wrappers.NormalizedImageEnv(wrappers.WarpFrame(env, dim=64, grayscale=True))
    env = wrappers.NoopResetEnv(wrappers.MaxAndSkipEnv(env, skip=4), noop_max=30)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = wrappers.FireResetEnv(env)
    return wrappers.FrameStack(env, k=framestack) if framestack else env


def build_algorithm(spec: dict[str, Any]) -> Any:
    """The RLlib algorithm of ``spec`` with its settings (:data:`PEER_SETTINGS`) and the 2-core placement."""
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.algorithms.impala import IMPALAConfig
    from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
    from ray.rllib.connectors.learner.frame_stacking import FrameStackingLearner
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.registry import register_env

    settings = peer_settings(spec["algo"], spec["env_id"])
    atari = settings.get("atari", False)
    env_name = f"peer-{spec['env_id']}"
    register_env(env_name, lambda _: make_env(spec["env_id"], settings, whole_games=False))
    config = {"rllib_appo": APPOConfig, "rllib_impala": IMPALAConfig}[spec["algo"]]()
    config = config.environment(env_name, clip_rewards=True if atari else None)
    if settings.get("frame_stack") == "connector":  # as pong_appo.py: single frames travel, the connectors stack
        config = config.env_runners(env_to_module_connector=lambda *_: FrameStackingEnvToModule(num_frames=STACKED_FRAMES))
        config = config.training(learner_connector=lambda *_: FrameStackingLearner(num_frames=STACKED_FRAMES))
    config = config.debugging(seed=spec["seed"])
    config = config.reporting(min_time_s_per_iteration=MIN_TIME_S_PER_ITERATION, min_sample_timesteps_per_iteration=0)
    for method, kwargs in [*TWO_CORES.items(), *settings["config"].items()]:
        if method == "rl_module":
            kwargs = {**kwargs, "model_config": DefaultModelConfig(**kwargs["model_config"])}
        config = getattr(config, method)(**kwargs)
    return config.build_algo()


def evaluate(
    module: Any, env: Any, episodes: int, deterministic: bool, seed: int, action_space: Any, stack_frames: int = 0
) -> list[float]:
    """
    Returns of ``episodes`` whole episodes of ``module`` (RLlib's inference forward pass and its action
    distribution; ``deterministic``: the distribution's mode), actions unsquashed to the action space as RLlib's
    env runner does (``normalize_actions``, on by default). ``stack_frames``: the last so many observations are
    stacked on the last axis, zeros before the episode's start, as RLlib's frame-stacking connector does.
    """
    import gymnasium as gym
    import numpy as np
    import torch
    from ray.rllib.core import Columns
    from ray.rllib.utils.spaces.space_utils import unsquash_action

    distribution_class = module.get_inference_action_dist_cls()
    returns = []
    for episode in range(episodes):
        observation, _ = env.reset(seed=seed if episode == 0 else None)
        frames = [np.zeros_like(observation)] * (stack_frames - 1) + [observation] if stack_frames else []
        total, done = 0.0, False
        while not done:
            model_input = np.concatenate(frames[-stack_frames:], axis=-1) if stack_frames else np.asarray(observation)
            with torch.no_grad():
                batch = {Columns.OBS: torch.as_tensor(model_input[None], dtype=torch.float32)}
                inputs = module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS]
            distribution = distribution_class.from_logits(inputs)
            action = (distribution.to_deterministic() if deterministic else distribution).sample()[0].numpy()
            if isinstance(action_space, gym.spaces.Box):
                action = unsquash_action(action, action_space)
            observation, reward, terminated, truncated, _ = env.step(action)
            frames = [*frames[1 - stack_frames :], observation] if stack_frames else frames
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return returns


def run(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Train and evaluate one run; its points as :class:`benchmarks.output.EvalPoint` fields."""
    import numpy as np
    import ray
    import torch
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

    from benchmarks.output import machine_id

    torch.set_num_threads(spec["torch_threads"])
    settings = peer_settings(spec["algo"], spec["env_id"])
    eval_env = make_env(spec["env_id"], settings, whole_games=True)
    stack_frames = STACKED_FRAMES if settings.get("frame_stack") == "connector" else 0
    points: list[dict[str, Any]] = []
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        algo = build_algorithm(spec)
        module = algo.get_module()
        steps, trained = 0, 0.0

        def add_point() -> None:
            module.set_state(algo.learner_group.get_weights()[DEFAULT_MODULE_ID])
            returns = [float("nan")]
            if spec["eval_episodes"] > 0:
                seed = spec["seed"] + EVAL_SEED_OFFSET
                returns = evaluate(
                    module, eval_env, spec["eval_episodes"], spec["deterministic"], seed, eval_env.action_space, stack_frames
                )
            row = {"algo": spec["algo"], "env": spec["env_id"], "seed": spec["seed"], "steps": steps}
            row.update(wall_seconds=trained, eval_mean=float(np.mean(returns)), eval_std=float(np.std(returns)))
            points.append({**row, "status": "ok", "error": "", "device": "cpu", "machine": machine_id("cpu")})

        add_point()
        next_steps, next_seconds = spec["eval_freq"], spec["eval_seconds"] or 0.0
        max_seconds, max_steps = spec["max_seconds"] or float("inf"), spec["steps"] or float("inf")
        while trained < max_seconds and steps < max_steps:
            start = time.perf_counter()
            result = algo.train()
            trained += time.perf_counter() - start
            steps = int(result.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, steps))
            due = trained >= next_seconds if spec["eval_seconds"] else steps >= next_steps
            if due and trained < max_seconds and steps < max_steps:
                if spec["eval_seconds"]:
                    next_seconds += spec["eval_seconds"]
                else:
                    next_steps += spec["eval_freq"]
                add_point()  # outside ``trained``: evaluation time is excluded
        add_point()
        algo.stop()
    finally:
        ray.shutdown()
        eval_env.close()
    return points


def software() -> dict[str, str | None]:
    """This environment's versions, as :func:`benchmarks.output.software_versions` lists them for our runs."""
    from benchmarks.output import software_versions

    return software_versions()


def run_command_line(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--software"]:
        print(json.dumps(software()))
        return
    if len(argv) != 2:
        raise SystemExit("usage: python -m benchmarks.rllib_run SPEC.json RESULT.json | --software")
    spec = json.loads(Path(argv[0]).read_text())
    points = run(spec)
    Path(argv[1]).write_text(json.dumps({"points": points, "software": software()}))


if __name__ == "__main__":
    run_command_line()
