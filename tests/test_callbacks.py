"""
SB3's callbacks on every (algorithm, collector) pair: ``on_step`` once per vector step on the learner's thread,
``on_rollout_start``/``on_rollout_end`` around each rollout (segment), ``self.locals`` as SB3's loops fill it,
and an ``EvalCallback`` with an eval env.
"""

import threading

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.callbacks import BaseCallback, EvalCallback
from stable_baselines3.common.env_util import make_vec_env

from .algorithms import (
    ALGO_COLLECTOR,
    COLLECTING,
    assert_counts_balance,
    assert_finite_parameters,
    pair_kwargs,
    steps_per_rollout,
)

N_ENVS = 2


class RecordingCallback(BaseCallback):
    """Records the order of the calls, the threads of ``on_step`` and what ``self.locals`` holds at each step."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []
        self.thread_ids: set[int] = set()
        self.locals_seen: list[tuple[int, int, tuple, int, int]] = []  # per step: len(new_obs), len(rewards), ...

    def _on_rollout_start(self) -> None:
        self.events.append("start")

    def _on_rollout_end(self) -> None:
        self.events.append("end")

    def _on_step(self) -> bool:
        self.events.append("step")
        self.thread_ids.add(threading.get_ident())
        new_obs, rewards, dones, infos = (self.locals[key] for key in ("new_obs", "rewards", "dones", "infos"))
        self.locals_seen.append((len(new_obs), len(rewards), np.shape(dones), len(infos), int(np.isfinite(rewards).all())))
        return True


@pytest.mark.parametrize("algo, collector", ALGO_COLLECTOR)
def test_on_step_once_per_vector_step_on_the_learner_thread_with_sb3_locals(algo, collector):
    recorder = RecordingCallback()
    model = algo("MlpPolicy", make_vec_env("Pendulum-v1", n_envs=N_ENVS, seed=0), seed=0, **pair_kwargs(algo, collector))
    model.learn(128, callback=recorder)
    steps = model.num_timesteps // N_ENVS
    assert model.num_timesteps >= 128 and recorder.events.count("step") == steps == recorder.n_calls
    assert recorder.thread_ids == {threading.get_ident()}
    assert recorder.locals_seen == [(N_ENVS, N_ENVS, (N_ENVS,), N_ENVS, 1)] * steps
    # The rollouts: start, its steps, end; as many as the steps make (segments, or SB3's train_freq)
    rollout_steps = steps_per_rollout(model)
    rollouts = steps // rollout_steps
    assert rollouts >= 2 and steps == rollouts * rollout_steps
    assert recorder.events == (["start"] + ["step"] * rollout_steps + ["end"]) * rollouts
    if algo in COLLECTING:
        assert_counts_balance(model)


@pytest.mark.parametrize("algo, collector", ALGO_COLLECTOR)
def test_eval_callback_with_an_eval_env(algo, collector, tmp_path):
    eval_env = make_vec_env(lambda: gym.make("Pendulum-v1", max_episode_steps=20), n_envs=1, seed=1)
    evaluation = EvalCallback(eval_env, n_eval_episodes=2, eval_freq=32, log_path=str(tmp_path), warn=False)
    model = algo("MlpPolicy", make_vec_env("Pendulum-v1", n_envs=N_ENVS, seed=0), seed=0, **pair_kwargs(algo, collector))
    model.learn(128, callback=evaluation)
    # eval_freq counts on_step calls (vector steps): one evaluation every 32 of them
    assert evaluation.evaluations_timesteps == [32 * N_ENVS * (i + 1) for i in range(model.num_timesteps // N_ENVS // 32)]
    assert len(evaluation.evaluations_timesteps) >= 2
    assert all(len(returns) == 2 for returns in evaluation.evaluations_results)
    assert np.all(np.isfinite(evaluation.evaluations_results)) and np.isfinite(evaluation.last_mean_reward)
    assert all(length == 20 for lengths in evaluation.evaluations_length for length in lengths)
    assert (tmp_path / "evaluations.npz").exists()
    assert_finite_parameters(model)
    if algo in COLLECTING:
        assert_counts_balance(model)
