"""
Lifecycle, on every (algorithm, collector) pair: learn() learns and leaves nothing running, a callback stop and
Ctrl-C end it cleanly, a crashing environment ends it promptly with its cause, and the step budget (the
environments step exactly what ``num_timesteps`` counts, as with SB3's own loops).
"""

import multiprocessing
import threading
import time

import gymnasium as gym
import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnvWrapper, VecNormalize

from sb3_impact import IMPACT
from sb3_impact.common.collectors import CollectorError, SyncCollector

from .algorithms import (
    ALGO_COLLECTOR,
    COLLECTING,
    ON_POLICY,
    SB3_LOOP,
    assert_counts_balance,
    assert_finite_parameters,
    pair_kwargs,
    short_pendulum,
)
from .conftest import CountingCallback, CrashingBoxEnv, collector_processes, collector_threads


def assert_nothing_running() -> None:
    assert collector_threads() == [] and collector_processes() == []


@pytest.mark.parametrize("algo, collector", ALGO_COLLECTOR)
def test_learns_with_every_collector_and_leaves_nothing_running(algo, collector):
    counter = CountingCallback()
    model = algo("MlpPolicy", short_pendulum(n_envs=2), seed=0, **pair_kwargs(algo, collector))
    model.learn(256, callback=counter)
    assert model.num_timesteps >= 256 and counter.calls == model.num_timesteps // 2
    assert model._n_updates > 0
    assert counter.thread_ids == {threading.get_ident()}  # callbacks run on the learner's thread
    if algo in COLLECTING:
        assert_counts_balance(model)
    assert_finite_parameters(model)
    assert_nothing_running()
    model.learn(64, reset_num_timesteps=False)  # learn() again continues where it stopped
    assert model.num_timesteps >= 320
    assert_nothing_running()


@pytest.mark.parametrize("algo, collector", ALGO_COLLECTOR)
def test_callback_stop_and_ctrl_c_end_learn_cleanly(algo, collector):
    model = algo("MlpPolicy", "Pendulum-v1", seed=0, **pair_kwargs(algo, collector))
    model.learn(10_000, callback=CountingCallback(stop_at=96))
    assert 96 <= model.num_timesteps < 400
    if algo in COLLECTING:
        assert_counts_balance(model)
    assert_nothing_running()
    with pytest.raises(KeyboardInterrupt):
        model.learn(10_000, callback=CountingCallback(raise_at=96))
    assert_nothing_running()
    model.learn(64)  # still usable after an interrupt
    assert model.num_timesteps >= 64
    if algo in COLLECTING:
        assert_counts_balance(model)


@pytest.mark.parametrize("algo, collector", ALGO_COLLECTOR)
def test_a_crashing_env_ends_learn_promptly_with_its_cause(algo, collector):
    env = make_vec_env(lambda: CrashingBoxEnv(crash_after=100), n_envs=1, seed=0)
    model = algo("MlpPolicy", env, seed=0, **pair_kwargs(algo, collector))
    start = time.monotonic()
    with pytest.raises((CollectorError, RuntimeError)) as error_info:
        model.learn(10_000)
    assert time.monotonic() - start < 15
    error = error_info.value
    assert "environment exploded" in str(error) + str(error.__cause__)
    assert_nothing_running()


# ----------------------------------------------------------------------------------------- the step budget


class StepCountingVecEnv(VecEnvWrapper):
    """Counts the environment steps taken through it, in shared memory: also those a forked collector process takes."""

    def __init__(self, venv) -> None:
        super().__init__(venv)
        self._steps = multiprocessing.get_context("fork").RawValue("q", 0)

    @property
    def steps(self) -> int:
        return int(self._steps.value)

    def reset(self):
        return self.venv.reset()

    def step_wait(self):
        result = self.venv.step_wait()
        self._steps.value += self.num_envs
        return result


def budget_kwargs(algo, collector):
    """n_steps=16 for the on-policy classes (segments of 16 steps; VRACER's are train_freq=4 steps)."""
    return pair_kwargs(algo, collector, **({"n_steps": 16} if algo in ON_POLICY else {}))


def pendulum() -> gym.Env:
    return gym.make("Pendulum-v1")


@pytest.mark.parametrize("algo, collector", ALGO_COLLECTOR)
def test_the_envs_step_exactly_what_num_timesteps_counts(algo, collector):
    env = StepCountingVecEnv(DummyVecEnv([pendulum]))
    env.seed(0)
    model = algo("MlpPolicy", env, seed=0, **budget_kwargs(algo, collector))
    model.learn(100)
    # The budget: 100 steps rounded up to whole segments (16 steps: 112), all of them stepped, none more.
    assert 100 <= model.num_timesteps < 116
    assert env.steps == model.num_timesteps
    if algo in COLLECTING:
        assert model.dropped_steps == 0 and model.sampled_steps == model.trained_steps == model.num_timesteps
    else:  # SB3's loop: one step at a time
        assert model.num_timesteps == 100
    first = model.num_timesteps
    model.learn(100, reset_num_timesteps=False)  # continues: the counted total is the stepped total
    assert first + 100 <= model.num_timesteps < first + 116
    assert env.steps == model.num_timesteps
    if algo in COLLECTING:
        assert model.dropped_steps == 0 and model.sampled_steps == model.trained_steps == model.num_timesteps - first
    assert_nothing_running()


class SlowBroadcasts(SyncCollector):
    """The "sync" collector, whose every broadcast counts half a second; the class counts the last one's broadcasts."""

    broadcasts = 0

    def __init__(self, sampler) -> None:
        super().__init__(sampler)
        SlowBroadcasts.broadcasts = 0

    def broadcast(self, state_dict, version) -> None:
        super().broadcast(state_dict, version)
        self.broadcast_seconds += 0.5
        SlowBroadcasts.broadcasts += 1


def test_broadcast_seconds_are_the_last_learn_calls_time_spent_handing_weights_to_the_collector():
    model = IMPACT("MlpPolicy", "CartPole-v1", collector=SlowBroadcasts, n_steps=16, device="cpu", seed=0)
    assert model.broadcast_seconds == 0.0
    model.learn(64)
    assert SlowBroadcasts.broadcasts > 0 and model.broadcast_seconds == 0.5 * SlowBroadcasts.broadcasts
    model.learn(32, reset_num_timesteps=False)
    assert model.broadcast_seconds == 0.5 * SlowBroadcasts.broadcasts  # this call's, not the sum of both
    model = IMPACT("MlpPolicy", "CartPole-v1", collector="thread", n_steps=16, device="cpu", seed=0)
    start = time.perf_counter()
    model.learn(64)
    assert 0.0 < model.broadcast_seconds < time.perf_counter() - start  # copies of the weights for the thread


@pytest.fixture(scope="module")
def ppo_reset_observations() -> float:
    """``obs_rms.count - num_timesteps`` after SB3's PPO learns twice on a VecNormalize env: its reset observations."""
    env = VecNormalize(DummyVecEnv([pendulum]))
    env.seed(0)
    model = PPO("MlpPolicy", env, n_steps=16, batch_size=16, n_epochs=1, seed=0, device="cpu").learn(100)
    first = env.obs_rms.count - model.num_timesteps
    model.learn(100, reset_num_timesteps=False)
    assert env.obs_rms.count - model.num_timesteps == pytest.approx(first)  # no reset when it continues
    return float(first)


VEC_NORMALIZE_PAIRS = [param for param in ALGO_COLLECTOR if param.values[1] in ("sync", "thread", SB3_LOOP)]


@pytest.mark.parametrize("algo, collector", VEC_NORMALIZE_PAIRS)
def test_vec_normalize_counts_the_steps_taken_as_sb3_ppo_does(algo, collector, ppo_reset_observations):
    assert ppo_reset_observations == pytest.approx(1.0, abs=1e-3)  # one reset observation (and VecNormalize's epsilon)
    env = VecNormalize(StepCountingVecEnv(DummyVecEnv([pendulum])))
    env.seed(0)
    model = algo("MlpPolicy", env, seed=0, **budget_kwargs(algo, collector))
    model.learn(100)
    obs_rms = model.get_vec_normalize_env().obs_rms
    assert env.venv.steps == model.num_timesteps
    assert obs_rms.count - model.num_timesteps == pytest.approx(ppo_reset_observations)
    model.learn(100, reset_num_timesteps=False)
    assert env.venv.steps == model.num_timesteps
    assert model.get_vec_normalize_env().obs_rms.count - model.num_timesteps == pytest.approx(ppo_reset_observations)
