"""
One RLlib run (APPO or IMPALA, Ray 2.60) under the benchmarks' protocol, for ``python -m benchmarks run --algos
rllib_appo ...`` (:mod:`benchmarks.peers` starts it): it runs with the Python of RLlib's own virtual environment,

    PEER/bin/python -m benchmarks.rllib_run SPEC.json RESULT.json

where SPEC.json holds the run (``algo``, ``env_id``, ``seed``, ``steps``, ``max_seconds``, ``eval_freq``,
``eval_seconds``, ``eval_episodes``, ``deterministic``, ``torch_threads``) and RESULT.json receives its evaluation
points, in the fields of :class:`benchmarks.output.EvalPoint`, RLlib's own metrics at each point
(:data:`RESULT_KEYS`, the rows of the run's diagnostics CSV) and the software it ran with.

It measures what :class:`benchmarks.pool.TimedEvalCallback` measures for our algorithms: an evaluation before
training and then every ``eval_freq`` environment steps (or ``eval_seconds`` of training wall time), with SB3's
``evaluate_policy`` on the evaluation env our runs get (:func:`evaluation_env`), seeded ``seed + 10000``, for
``eval_episodes`` whole episodes (whole games on Atari, with the stochastic policy), the wall time of each point being
the training time so far with evaluation excluded. Training time starts once the algorithm is built (Ray started, its
env runner and learner made) and stops at ``max_seconds`` or ``steps``. RLlib trains asynchronously, so a point lands
at the end of the first training iteration past its grid mark, as ours lands at the first segment past it; iterations
are kept short (``min_time_s_per_iteration``) for that.

``python -m benchmarks.rllib_run --cross-check ALGO ENV SECONDS EPISODES`` trains briefly and evaluates the same
weights with this evaluation and with RLlib's own (``algo.evaluate()``), printing both (:func:`cross_check`).

Only the standard library is imported at module level (this module's settings are read by :mod:`benchmarks.peers`
in the package's own environment); Ray, RLlib, gymnasium and SB3 are imported where they are used.
"""

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.protocol import is_atari

# Settings per (algo, env). The peer specs ``rllib_appo`` and ``rllib_impala`` carry our entry's adaptations for the
# task over to RLlib (``env: sb3``: the same env as ours, built as :func:`training_env` says); ``*_example`` keep
# RLlib's tuned example for it (the tables measured up to 2026-11-28; ``env: rllib``: RLlib's own Atari
# preprocessing). Both are placed on the 2-core machine in the same way (one env runner process beside the learner
# in the driver, no GPU, no aggregator actors). ``source`` names the origin and each change. ``config``:
# AlgorithmConfig method -> keyword arguments; ``observation_filter``: RLlib's MeanStdFilter connector;
# ``normalize_reward``: rewards scaled as SB3's VecNormalize scales them; ``frame_stack`` (Atari): 4 frames stacked
# by RLlib's connectors or by RLlib's env wrapper.
TWO_CORES = {"env_runners": {"num_env_runners": 1}, "learners": {"num_learners": 0, "num_gpus_per_learner": 0}}
RLLIB_ATARI_MODEL = {
    "vf_share_layers": True,
    "conv_filters": [[16, 4, 2], [32, 4, 2], [64, 4, 2], [128, 4, 2]],
    "conv_activation": "relu",
    "head_fcnet_hiddens": [256],
}
NATURE_CNN = {  # SB3's CnnPolicy (NatureCNN, shared by policy and value); RLlib gives each head its 512-unit layer
    "vf_share_layers": True,
    "conv_filters": [[32, 8, 4, "valid"], [64, 4, 2, "valid"], [64, 3, 1, "valid"]],
    "conv_activation": "relu",
    "head_fcnet_hiddens": [512],
}
IMPACT_HALFCHEETAH = (
    "IMPACT's HalfCheetah-v5 entry (sb3_impact/hyperparams/impact.yml) carried over: observations normalised (RLlib's "
    "MeanStdFilter) and rewards scaled as VecNormalize does, gamma 0.98, 8 envs x 64 steps = 512-sample batches in "
    "128-sample minibatches (one pass per draw), N = 4 / K = 10, target refresh every 1 x 4 x 10 x 512 = 20480 trained "
    "samples (IMPACT's N * K = 40 draws), clip 0.2, lr 3e-4, grad norm 0.5, vf 0.5, no entropy, no KL term, separate "
    "256x256 ReLU policy and value networks; no counterpart: lambda 0.92 (RLlib's V-trace has no lambda), advantage "
    "normalisation, log_std_init -2"
)
IMPACT_ATARI = (
    "IMPACT's atari entry (sb3_impact/hyperparams/impact.yml) carried over: SB3's AtariWrapper and 4 stacked frames, "
    "16 envs x 32 steps = 512-sample batches (one step per draw), N = 4 / K = 2, target refresh every 1 x 4 x 2 x 512 = "
    "4096 trained samples (IMPACT's N * K = 8 draws), clip 0.3, gamma 0.99, lr 1e-4, grad norm 10, entropy 0.01, vf "
    "1.0, no KL term, SB3's NatureCNN; no counterpart: lambda 0.995, advantage normalisation"
)
IMPALA_ATARI = (
    "IMPALA's atari entry (sb3_impact/hyperparams/impala.yml) carried over: SB3's AtariWrapper and 4 stacked frames, "
    "16 envs x 20 steps = 320-sample batches, gamma 0.99, lr 6e-4 (the entry's lin_6e-4 is constant to 0.6% over the "
    "recipe's 1e8-step budget), grad norm 40, entropy 0.01, vf 0.5, SB3's NatureCNN"
)
IMPALA_CARTPOLE = (
    "IMPALA's CartPole-v1 entry (sb3_impact/hyperparams/impala.yml) carried over: 8 envs x 16 steps = 128-sample "
    "batches, gamma 0.98, lr 1e-3 (lin_0.001, constant over the recipe's budget), grad norm 0.5, vf 0.5, no entropy, "
    "SB3's MlpPolicy (separate 64x64 tanh policy and value networks); no counterpart: advantage normalisation"
)
PEER_SETTINGS: dict[tuple[str, str], dict[str, Any]] = {
    ("rllib_appo", "HalfCheetah-v5"): {
        "source": IMPACT_HALFCHEETAH,
        "env": "sb3",
        "observation_filter": True,
        "normalize_reward": True,
        "config": {
            "env_runners": {"num_envs_per_env_runner": 8, "rollout_fragment_length": 64},
            "training": {
                "train_batch_size_per_learner": 512,
                "minibatch_size": 128,
                "num_epochs": 1,
                "circular_buffer_num_batches": 4,
                "circular_buffer_iterations_per_batch": 10,
                "target_network_update_freq": 1,
                "target_worker_clipping": 2.0,
                "clip_param": 0.2,
                "grad_clip": 0.5,
                "grad_clip_by": "global_norm",
                "lr": 3e-4,
                "vf_loss_coeff": 0.5,
                "gamma": 0.98,
                "entropy_coeff": 0.0,
                "use_kl_loss": False,
                "broadcast_interval": 1,
            },
            "rl_module": {"model_config": {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu", "vf_share_layers": False}},
        },
    },
    ("rllib_appo", "BreakoutNoFrameskip-v4"): {
        "source": IMPACT_ATARI,
        "env": "sb3",
        "frame_stack": "connector",
        "config": {
            "env_runners": {"num_envs_per_env_runner": 16, "rollout_fragment_length": 32},
            "training": {
                "train_batch_size_per_learner": 512,
                "circular_buffer_num_batches": 4,
                "circular_buffer_iterations_per_batch": 2,
                "target_network_update_freq": 1,
                "target_worker_clipping": 2.0,
                "clip_param": 0.3,
                "grad_clip": 10.0,
                "grad_clip_by": "global_norm",
                "lr": 1e-4,
                "vf_loss_coeff": 1.0,
                "gamma": 0.99,
                "entropy_coeff": 0.01,
                "use_kl_loss": False,
                "broadcast_interval": 1,
            },
            "rl_module": {"model_config": NATURE_CNN},
        },
    },
    ("rllib_impala", "BreakoutNoFrameskip-v4"): {
        "source": IMPALA_ATARI,
        "env": "sb3",
        "frame_stack": "connector",
        "config": {
            "env_runners": {"num_envs_per_env_runner": 16, "rollout_fragment_length": 20},
            "training": {
                "train_batch_size_per_learner": 320,
                "grad_clip": 40.0,
                "grad_clip_by": "global_norm",
                "lr": 6e-4,
                "vf_loss_coeff": 0.5,
                "gamma": 0.99,
                "entropy_coeff": 0.01,
                "broadcast_interval": 1,
            },
            "rl_module": {"model_config": NATURE_CNN},
        },
    },
    ("rllib_impala", "CartPole-v1"): {
        "source": IMPALA_CARTPOLE,
        "env": "sb3",
        "config": {
            "env_runners": {"num_envs_per_env_runner": 8, "rollout_fragment_length": 16},
            "training": {
                "train_batch_size_per_learner": 128,
                "grad_clip": 0.5,
                "grad_clip_by": "global_norm",
                "lr": 1e-3,
                "vf_loss_coeff": 0.5,
                "gamma": 0.98,
                "entropy_coeff": 0.0,
                "broadcast_interval": 1,
            },
            "rl_module": {"model_config": {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", "vf_share_layers": False}},
        },
    },
    ("rllib_appo_example", "HalfCheetah-v5"): {
        "source": "RLlib's tuned example rllib/tuned_examples/appo/halfcheetah_appo.py (HalfCheetah-v4 there), with "
        "1 env runner (32 envs each, as the example) and the learner on the CPU instead of 1 GPU",
        "env": "rllib",
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
    ("rllib_appo_example", "BreakoutNoFrameskip-v4"): {
        "source": "RLlib's tuned Atari example rllib/tuned_examples/appo/pong_appo.py on Breakout (64x64 frames, 4 "
        "stacked by its connectors, rewards clipped), with 1 env runner and no aggregator actors (2 in the example)",
        "env": "rllib",
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
            "rl_module": {"model_config": RLLIB_ATARI_MODEL},
        },
    },
    ("rllib_impala_example", "BreakoutNoFrameskip-v4"): {
        "source": "RLlib's tuned Atari example rllib/tuned_examples/impala/pong_impala.py on Breakout (64x64 frames, "
        "4 stacked by the env wrapper, rewards clipped), with 1 env runner",
        "env": "rllib",
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
            "rl_module": {"model_config": RLLIB_ATARI_MODEL},
        },
    },
    ("rllib_impala_example", "CartPole-v1"): {
        "source": "RLlib's tuned example rllib/tuned_examples/impala/cartpole_impala.py, with 1 env runner",
        "env": "rllib",
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
PEER_ALGOS = ("rllib_appo", "rllib_impala", "rllib_appo_example", "rllib_impala_example")
EVAL_SEED_OFFSET = 10_000  # as benchmarks.pool's evaluation env
MIN_TIME_S_PER_ITERATION = 1.0  # short iterations: a point lands within about a second of its grid mark
STACKED_FRAMES = 4  # Atari: as the atari yml entries' frame_stack and RLlib's examples
MONITOR_RETURN = "monitor_episode_return_mean"  # the Monitor's episode return (the game's score on Atari)
# RLlib 2.60's result keys kept at each evaluation point (the run's diagnostics CSV, beside our runs' logger values):
# "last" keeps the latest value reported since the previous point, "mean" the mean of the iterations' values; an
# iteration without learner results reports NaN for the learner's keys, which is skipped. The learner's results
# reach the driver one aggregation at a time (learner_thread_out_queue_size: how many wait), so they lag a little.
RESULT_KEYS: dict[str, str] = {
    "env_runners/episode_return_mean": "mean",  # of the rewards RLlib trains on (Atari: clipped, one life)
    f"env_runners/{MONITOR_RETURN}": "mean",
    "env_runners/episode_len_mean": "mean",
    "num_env_steps_sampled_lifetime": "last",
    "learners/__all_modules__/num_env_steps_trained_lifetime": "last",  # counts every draw of a batch
    "learners/default_policy/num_target_updates": "last",
    "learners/default_policy/last_target_update_ts": "last",
    "learners/default_policy/curr_kl_coeff": "last",
    "learners/default_policy/mean_kl_loss": "mean",
    "learners/default_policy/entropy": "mean",
    "learners/default_policy/policy_loss": "mean",
    "learners/default_policy/vf_loss": "mean",
    "learners/default_policy/mean_IS": "mean",
    "learners/default_policy/gradients_default_optimizer_global_norm": "mean",
    "learners/default_policy/diff_num_grad_updates_vs_sampler_policy": "mean",
    "learners/__all_modules__/learner_thread_out_queue_size": "last",
    "learner_group/learner_group_ts_dropped_lifetime": "last",
    "aggregator_actors/num_env_steps_dropped_lifetime": "last",
    "time_total_s": "last",  # RLlib's training wall time (the sum of its iterations)
}


def peer_settings(algo: str, env_id: str) -> dict[str, Any]:
    """The settings of ``algo`` on ``env_id``; ``ValueError`` naming the pairs there are for any other."""
    if (algo, env_id) not in PEER_SETTINGS:
        pairs = ", ".join(f"{a} on {e}" for a, e in PEER_SETTINGS)
        raise ValueError(f"no RLlib settings for {algo} on {env_id}; there are: {pairs}")
    return PEER_SETTINGS[(algo, env_id)]


def flatten(result: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """RLlib's nested result dict with ``/``-joined keys."""
    flat: dict[str, Any] = {}
    for key, value in result.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


class ResultLog:
    """The :data:`RESULT_KEYS` of each training iteration's result, reduced to one row per evaluation point."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {key: [] for key in RESULT_KEYS}

    def add(self, result: dict[str, Any]) -> None:
        flat = flatten(result)
        for key in RESULT_KEYS:
            try:
                value = float(flat[key])
            except (KeyError, TypeError, ValueError):  # not reported, or not a number
                continue
            if math.isfinite(value):
                self.values[key].append(value)

    def row(self) -> dict[str, float]:
        """The values since the previous row (a key without any is left out); then starts afresh."""
        row = {}
        for key, how in RESULT_KEYS.items():
            values = self.values[key]
            if values:
                row[key] = values[-1] if how == "last" else sum(values) / len(values)
            self.values[key] = []
        return row


class LearnerCounters:
    """
    APPO's learner, counted where it works (in the driver: ``num_learners=0``), for what RLlib 2.60's result dict gets
    wrong or leaves out. ``counted/num_target_updates``: its target refreshes (the reported ``num_target_updates``
    falls far behind them: 2 against 18 in a 180-s HalfCheetah run). ``counted/batches``, ``counted/draws`` and
    ``counted/dropped_draws``: the batches put into its circular buffer, the draws it trained on, and the draws lost
    because a new batch pushed a batch out before its K draws (RLlib counts drops only for Prometheus, and only the
    first of the K slots a new batch evicts). Nothing for IMPALA, whose learner queue blocks instead of dropping.
    """

    def __init__(self, algo: Any) -> None:
        from ray.rllib.algorithms.appo import appo_learner
        from ray.rllib.core import DEFAULT_MODULE_ID

        self.target_updates = self.batches = self.draws = 0
        learner = algo.learner_group._learner
        self.buffer = getattr(learner, "_learner_thread_in_queue", None)
        if not isinstance(learner, appo_learner.APPOLearner) or not hasattr(self.buffer, "iterations_per_batch"):
            self.buffer = None
            return
        first_target = learner.module[DEFAULT_MODULE_ID].unwrapped().get_target_network_pairs()[0][1]
        update, put, get = appo_learner.update_target_network, self.buffer.put, self.buffer.get

        def counted_update(*, main_net: Any, target_net: Any, tau: float) -> None:
            self.target_updates += target_net is first_target  # one pair per refresh
            update(main_net=main_net, target_net=target_net, tau=tau)

        def counted_put(item: Any, block: bool = True, timeout: float | None = None) -> int:
            self.batches += 1
            return put(item, block, timeout)

        def counted_get(block: bool = True, timeout: float | None = None) -> Any:
            batch = get(block, timeout)
            self.draws += 1
            return batch

        appo_learner.update_target_network = counted_update
        self.buffer.put, self.buffer.get = counted_put, counted_get

    def row(self) -> dict[str, int]:
        if self.buffer is None:
            return {}
        dropped = self.batches * self.buffer.iterations_per_batch - self.draws - len(self.buffer)  # neither drawn nor left
        return {
            "counted/num_target_updates": self.target_updates,
            "counted/batches": self.batches,
            "counted/draws": self.draws,
            "counted/dropped_draws": dropped,
        }


def registered_env(env_id: str) -> Any:
    """``gym.make(env_id)``, with the ALE ids registered (as :func:`benchmarks.config.register_atari` does)."""
    import gymnasium as gym

    if is_atari(env_id):
        import ale_py

        gym.register_envs(ale_py)
    return gym.make(env_id)


def sb3_wrapper(env_id: str) -> Any:
    """The wrapper our runs put around each Monitor-wrapped env: rl-zoo3's AtariWrapper on Atari (the atari yml entries'
    ``env_wrapper``), none elsewhere."""
    from stable_baselines3.common.atari_wrappers import AtariWrapper

    return AtariWrapper if is_atari(env_id) else None


def unit_frames(env: Any) -> Any:
    """Atari frames as float32 in [0, 1], as SB3's CnnPolicy scales them before its network (RLlib's does not)."""
    import gymnasium as gym
    import numpy as np

    space = gym.spaces.Box(0.0, 1.0, env.observation_space.shape, np.float32)
    return gym.wrappers.TransformObservation(env, lambda frame: frame.astype(np.float32) / 255.0, space)


def training_env(env_id: str, settings: dict[str, Any]) -> Any:
    """
    One env of RLlib's env runner. ``env: sb3``: one of ours, as :func:`benchmarks.config.make_training_env` builds it
    (Monitor, then SB3's AtariWrapper on Atari: 30 no-op starts, max over 4 skipped frames, a life lost ends the
    episode, FIRE on every reset, 84x84 grey frames, rewards clipped), frames scaled to [0, 1] and stacked by RLlib's
    connectors (zeros before an episode's start, on the last axis, as VecFrameStack), and with ``normalize_reward``
    the rewards scaled by the running std of the discounted return and clipped to 10, as VecNormalize's defaults.
    ``env: rllib``: the env of RLlib's examples (Atari: :func:`rllib_atari_env`, one life per episode).
    """
    import gymnasium as gym
    from stable_baselines3.common.monitor import Monitor

    if settings["env"] == "rllib":
        return rllib_atari_env(env_id, settings, whole_games=False) if is_atari(env_id) else gym.make(env_id)
    env = Monitor(registered_env(env_id))
    wrapper = sb3_wrapper(env_id)
    if wrapper is not None:
        env = unit_frames(wrapper(env))
    if settings.get("normalize_reward"):
        env = gym.wrappers.ClipReward(gym.wrappers.NormalizeReward(env, gamma=0.99, epsilon=1e-8), -10.0, 10.0)
    return env


def evaluation_env(env_id: str, settings: dict[str, Any], seed: int) -> Any:
    """
    The env the run is evaluated on. ``env: sb3``: the one our runs are evaluated on (``make_vec_env`` with the
    wrapper of :func:`sb3_wrapper`, then VecFrameStack on Atari), seeded ``seed``; SB3's ``evaluate_policy`` counts the
    Monitor's episodes, so an Atari episode is a whole game, with FIRE after each lost life. ``env: rllib``: the
    example's env with whole games (Atari), in a Monitor, stacked by VecFrameStack where RLlib's connectors stack.
    """
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

    if settings["env"] == "sb3" or not is_atari(env_id):
        env = make_vec_env(lambda: registered_env(env_id), n_envs=1, seed=seed, wrapper_class=sb3_wrapper(env_id))
    else:
        env = DummyVecEnv([lambda: Monitor(rllib_atari_env(env_id, settings, whole_games=True))])
        env.seed(seed)
    return VecFrameStack(env, STACKED_FRAMES) if settings.get("frame_stack") == "connector" else env


def rllib_atari_env(env_id: str, settings: dict[str, Any], whole_games: bool) -> Any:
    """
    RLlib's own Atari preprocessing (``wrap_atari_for_new_api_stack``: 108k-frame cap, 64x64 grey frames, max over 4
    skipped frames, up to 30 no-op starts, fire on reset, 4 stacked frames unless the connectors stack them), one life
    per episode for training as RLlib's examples, whole games for evaluation. Rewards are clipped by the algorithm's
    ``clip_rewards``, not here, so evaluation returns are game scores.
    """
    import gymnasium as gym
    from ray.rllib.env.wrappers import atari_wrappers as wrappers

    env = registered_env(env_id)
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


def log_monitor_return(*, episode: Any, metrics_logger: Any, **kwargs: Any) -> None:
    """RLlib callback: the Monitor's return of an episode that ends the Monitor's (a whole game on Atari)."""
    info = episode.get_infos(-1)
    if isinstance(info, dict) and "episode" in info:
        metrics_logger.log_value(MONITOR_RETURN, float(info["episode"]["r"]), window=100)


def build_algorithm(spec: dict[str, Any], evaluation_episodes: int = 0) -> Any:
    """
    The RLlib algorithm of ``spec`` with its settings (:data:`PEER_SETTINGS`) and the 2-core placement; with
    ``evaluation_episodes``, RLlib's own evaluation too (one evaluation env runner with one env, the policy of
    ``spec``'s ``deterministic``), for :func:`cross_check`.
    """
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.algorithms.impala import IMPALAConfig
    from ray.rllib.connectors.env_to_module import MeanStdFilter
    from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
    from ray.rllib.connectors.learner.frame_stacking import FrameStackingLearner
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.registry import register_env

    settings = peer_settings(spec["algo"], spec["env_id"])
    env_name = f"peer-{spec['env_id']}"
    register_env(env_name, lambda _: training_env(spec["env_id"], settings))
    config = (APPOConfig if spec["algo"].startswith("rllib_appo") else IMPALAConfig)()
    rllib_atari = settings["env"] == "rllib" and is_atari(spec["env_id"])
    config = config.environment(env_name, clip_rewards=True if rllib_atari else None)
    if settings.get("frame_stack") == "connector":  # single frames travel, the connectors stack
        config = config.env_runners(env_to_module_connector=lambda *_: FrameStackingEnvToModule(num_frames=STACKED_FRAMES))
        config = config.training(learner_connector=lambda *_: FrameStackingLearner(num_frames=STACKED_FRAMES))
    elif settings.get("observation_filter"):
        config = config.env_runners(env_to_module_connector=lambda *_: MeanStdFilter())
    if settings["env"] == "sb3":
        config = config.callbacks(on_episode_end=log_monitor_return)
    config = config.debugging(seed=spec["seed"])
    config = config.reporting(min_time_s_per_iteration=MIN_TIME_S_PER_ITERATION, min_sample_timesteps_per_iteration=0)
    for method, kwargs in [*TWO_CORES.items(), *settings["config"].items()]:
        if method == "rl_module":
            kwargs = {**kwargs, "model_config": DefaultModelConfig(**kwargs["model_config"])}
        config = getattr(config, method)(**kwargs)
    if evaluation_episodes:
        config = config.evaluation(
            evaluation_num_env_runners=1,
            evaluation_duration=evaluation_episodes,
            evaluation_duration_unit="episodes",
            # One env: with several, the episodes that end first are counted first, biased to short ones.
            evaluation_config={"explore": not spec["deterministic"], "num_envs_per_env_runner": 1},
        )
    return config.build_algo()


class ModulePolicy:
    """
    An RLlib module as the model of SB3's ``evaluate_policy``: RLlib's inference forward pass and its action
    distribution (``deterministic``: the distribution's mode) on the observation as RLlib's env runner passes it on
    (Atari frames scaled to [0, 1] where :func:`unit_frames` scales them in training, the MeanStdFilter connector's
    running mean and std, frozen, where there is one), actions unsquashed to the action space as the env runner does
    (``normalize_actions``, on by default).
    """

    def __init__(self, module: Any, action_space: Any, scale: float = 1.0, observation_filter: Any = None) -> None:
        self.module, self.action_space = module, action_space
        self.scale, self.observation_filter = scale, observation_filter
        self.distribution_class = module.get_inference_action_dist_cls()

    def predict(
        self, observation: Any, state: Any = None, episode_start: Any = None, deterministic: bool = False
    ) -> tuple[Any, None]:
        import gymnasium as gym
        import numpy as np
        import torch
        from ray.rllib.core import Columns
        from ray.rllib.utils.spaces.space_utils import unsquash_action

        model_input = np.asarray(observation, dtype=np.float32) * self.scale
        if self.observation_filter is not None:
            model_input = self.observation_filter(model_input, update=False)
        with torch.no_grad():
            batch = {Columns.OBS: torch.as_tensor(model_input, dtype=torch.float32)}
            inputs = self.module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS]
        distribution = self.distribution_class.from_logits(inputs)
        actions = (distribution.to_deterministic() if deterministic else distribution).sample().numpy()
        if isinstance(self.action_space, gym.spaces.Box):
            actions = np.stack([unsquash_action(action, self.action_space) for action in actions])
        return actions, None


def observation_filter(algo: Any) -> Any:
    """The env runner's MeanStdFilter as RLlib's ``Filter`` (call it with ``update=False``); KeyError where there is none."""
    from ray.rllib.utils.filter import MeanStdFilter, RunningStat

    (state,) = algo.env_runner_group.foreach_env_runner(
        lambda runner: runner.get_state(components="env_to_module_connector"), local_env_runner=False
    )
    (agent,) = state["env_to_module_connector"]["MeanStdFilter"].values()
    filter_ = MeanStdFilter(
        agent["shape"], demean=agent["de_mean_to_zero"], destd=agent["de_std_to_one"], clip=agent["clip_by_value"]
    )
    (stats,) = agent["running_stats"]
    filter_.running_stats = RunningStat.from_state(stats)
    return filter_


def evaluate(algo: Any, settings: dict[str, Any], env_id: str, env: Any, episodes: int, deterministic: bool) -> list[float]:
    """Returns of ``episodes`` whole episodes of the learner's current weights on ``env`` (:func:`evaluation_env` of
    ``settings`` on ``env_id``), with SB3's ``evaluate_policy``."""
    from ray.rllib.core import DEFAULT_MODULE_ID
    from stable_baselines3.common.evaluation import evaluate_policy

    module = algo.get_module()
    module.set_state(algo.learner_group.get_weights()[DEFAULT_MODULE_ID])
    scale = 1 / 255 if settings["env"] == "sb3" and is_atari(env_id) else 1.0  # as unit_frames
    filter_ = observation_filter(algo) if settings.get("observation_filter") else None
    policy = ModulePolicy(module, env.action_space, scale, filter_)
    returns, _ = evaluate_policy(policy, env, episodes, deterministic=deterministic, return_episode_rewards=True)
    return [float(value) for value in returns]


def run(spec: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """
    Train and evaluate one run: its points as :class:`benchmarks.output.EvalPoint` fields, and a row of RLlib's
    metrics (:class:`ResultLog`) per point, keyed by algo, seed and steps as the diagnostics of our runs.
    """
    import numpy as np
    import ray
    import torch

    from benchmarks.output import machine_id

    torch.set_num_threads(spec["torch_threads"])
    settings = peer_settings(spec["algo"], spec["env_id"])
    eval_env = evaluation_env(spec["env_id"], settings, spec["seed"] + EVAL_SEED_OFFSET)
    points: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        algo = build_algorithm(spec)
        log, counters = ResultLog(), LearnerCounters(algo)
        steps, trained = 0, 0.0

        def add_point() -> None:
            returns = [float("nan")]
            if spec["eval_episodes"] > 0:
                returns = evaluate(algo, settings, spec["env_id"], eval_env, spec["eval_episodes"], spec["deterministic"])
            key = {"algo": spec["algo"], "seed": spec["seed"], "steps": steps}
            row = {**key, "env": spec["env_id"], "wall_seconds": trained}
            row.update(eval_mean=float(np.mean(returns)), eval_std=float(np.std(returns)))
            points.append({**row, "status": "ok", "error": "", "device": "cpu", "machine": machine_id("cpu")})
            rows.append({**key, **log.row(), **counters.row()})

        add_point()
        next_steps, next_seconds = spec["eval_freq"], spec["eval_seconds"] or 0.0
        max_seconds, max_steps = spec["max_seconds"] or float("inf"), spec["steps"] or float("inf")
        while trained < max_seconds and steps < max_steps:
            start = time.perf_counter()
            result = algo.train()
            trained += time.perf_counter() - start
            log.add(result)
            steps = int(result.get("num_env_steps_sampled_lifetime", steps))
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
    return points, rows


def settled_weights(algo: Any, timeout: float = 60.0) -> Any:
    """The learner's weights once its thread has worked through what it was given (two reads a second apart agree)."""
    import numpy as np
    from ray.rllib.core import DEFAULT_MODULE_ID

    def read() -> dict[str, Any]:
        return algo.learner_group.get_weights()[DEFAULT_MODULE_ID]

    deadline, weights = time.monotonic() + timeout, read()
    while time.monotonic() < deadline:
        time.sleep(1.0)
        again = read()
        if all(np.array_equal(np.asarray(weights[name]), np.asarray(again[name])) for name in weights):
            return again
        weights = again
    raise RuntimeError(f"the learner's weights still change {timeout:g} s after training stopped")


def cross_check(algo_name: str, env_id: str, seconds: float, episodes: int, seed: int = 0) -> dict[str, Any]:
    """
    ``algo_name`` trained for ``seconds`` on ``env_id`` (not Atari: RLlib evaluates on its training env, where a life
    is an episode), then the same weights evaluated, with the deterministic policy, on ``episodes`` episodes by this
    module's evaluation (SB3's ``evaluate_policy`` on our evaluation env) and by RLlib's: ``algo.evaluate()`` with
    ``explore=False`` (its mean, min and max), and its evaluation env runner's ``sample(num_episodes=...)`` for the
    returns of single episodes. ``agree``: the means of the two sets of single episodes differ by less than 3
    standard errors of their difference.
    """
    import numpy as np
    import ray

    if is_atari(env_id):
        raise ValueError("the cross-check runs on non-Atari envs: RLlib evaluates on its training env (one life)")
    spec = {"algo": algo_name, "env_id": env_id, "seed": seed, "deterministic": True}
    settings = peer_settings(algo_name, env_id)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        algo = build_algorithm(spec, evaluation_episodes=episodes)
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            result = algo.train()
        sampled = int(result["num_env_steps_sampled_lifetime"])
        weights = settled_weights(algo)
        env = evaluation_env(env_id, settings, seed + EVAL_SEED_OFFSET)
        ours = evaluate(algo, settings, env_id, env, episodes, deterministic=True)
        summary = flatten(algo.evaluate())  # also gives its evaluation env runner the learner's weights
        (theirs,) = algo.eval_env_runner_group.foreach_env_runner(
            lambda runner: [float(episode.get_return()) for episode in runner.sample(num_episodes=episodes, explore=False)],
            local_env_runner=False,
        )
        unchanged = settled_weights(algo)
        if any(not np.array_equal(np.asarray(weights[name]), np.asarray(unchanged[name])) for name in weights):
            raise RuntimeError("the learner's weights changed between the evaluations")
        algo.stop()
    finally:
        ray.shutdown()
    standard_error = math.sqrt((np.var(ours, ddof=1) + np.var(theirs, ddof=1)) / episodes)
    difference = float(np.mean(ours) - np.mean(theirs))
    return {
        "algo": algo_name,
        "env": env_id,
        "seconds": seconds,
        "sampled_steps": sampled,
        "harness": {"mean": float(np.mean(ours)), "std": float(np.std(ours, ddof=1)), "episodes": len(ours)},
        "rllib_sample": {"mean": float(np.mean(theirs)), "std": float(np.std(theirs, ddof=1)), "episodes": len(theirs)},
        "rllib_evaluate": {
            "mean": float(summary["env_runners/episode_return_mean"]),
            "min": float(summary["env_runners/episode_return_min"]),
            "max": float(summary["env_runners/episode_return_max"]),
            "episodes": int(summary["env_runners/num_episodes"]),
        },
        "difference": difference,
        "standard_error": standard_error,
        "agree": abs(difference) <= 3 * standard_error,
    }


def software() -> dict[str, str | None]:
    """This environment's versions, as :func:`benchmarks.output.software_versions` lists them for our runs."""
    from benchmarks.output import software_versions

    return software_versions()


USAGE = (
    "usage: python -m benchmarks.rllib_run SPEC.json RESULT.json | --software | --cross-check ALGO ENV SECONDS EPISODES [SEED]"
)


def run_command_line(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--software"]:
        print(json.dumps(software()))
        return
    if argv[:1] == ["--cross-check"] and len(argv) in (5, 6):
        seed = int(argv[5]) if len(argv) == 6 else 0
        print(json.dumps(cross_check(argv[1], argv[2], float(argv[3]), int(argv[4]), seed)))
        return
    if len(argv) != 2:
        raise SystemExit(USAGE)
    spec = json.loads(Path(argv[0]).read_text())
    points, diagnostics = run(spec)
    Path(argv[1]).write_text(json.dumps({"points": points, "diagnostics": diagnostics, "software": software()}))


if __name__ == "__main__":
    run_command_line()
