"""
What every algorithm here promises, checked on all five (and each collector): save/load, spaces, bad input,
callbacks, lifecycle and faults, non-finite data from an environment, CUDA. The estimator-against-paper
tests live beside each algorithm's own tests.
"""

import threading
import time

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import IdentityEnv, IdentityEnvBox
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_impact import IMPACT, IMPALA, PPOAMBER, PTRPPO, VRACER
from sb3_impact.common.collectors import CollectorError

from .conftest import CrashingBoxEnv, NonFiniteEnv, collector_processes, collector_threads

# Small settings per algorithm: seconds per test.
SMALL = {
    IMPACT: dict(n_steps=16, policy_kwargs=dict(net_arch=[16])),
    IMPALA: dict(n_steps=16, policy_kwargs=dict(net_arch=[16])),
    PPOAMBER: dict(n_steps=16, batch_size=16, n_epochs=2, replay_length=2, policy_kwargs=dict(net_arch=[16])),
    PTRPPO: dict(n_steps=16, batch_size=16, n_epochs=1, replay_rounds=1, memory_size=8, policy_kwargs=dict(net_arch=[16])),
    VRACER: dict(learning_starts=32, buffer_size=512, batch_size=16, train_freq=4, policy_kwargs=dict(net_arch=[16])),
}
ALGOS = list(SMALL)
ALGO_IDS = [algo.__name__ for algo in ALGOS]
MODES = {name: dict(collector=name) for name in ("sync", "thread", "process")}


def small(algo, **kwargs):
    return {**SMALL[algo], "device": "cpu", **kwargs}


class CountingCallback(BaseCallback):
    def __init__(self, stop_at: int | None = None, raise_at: int | None = None) -> None:
        super().__init__()
        self.calls, self.thread_ids = 0, set()
        self.stop_at, self.raise_at = stop_at, raise_at

    def _on_step(self) -> bool:
        self.calls += 1
        self.thread_ids.add(threading.get_ident())
        if self.raise_at is not None and self.num_timesteps >= self.raise_at:
            raise KeyboardInterrupt
        return self.stop_at is None or self.num_timesteps < self.stop_at


def assert_counts_balance(model) -> None:
    assert model.sampled_steps == model.trained_steps + model.dropped_steps
    assert model.trained_steps > 0


# ----------------------------------------------------------------------------------------- learning and lifecycle


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_learns_with_every_collector_and_leaves_nothing_running(algo, mode):
    counter = CountingCallback()
    model = algo("MlpPolicy", make_vec_env("Pendulum-v1", n_envs=2, seed=0), seed=0, **small(algo, **MODES[mode]))
    model.learn(256, callback=counter)
    assert model.num_timesteps >= 256 and counter.calls == model.num_timesteps // 2
    assert counter.thread_ids == {threading.get_ident()}  # callbacks run on the learner's thread
    assert_counts_balance(model)
    assert all(th.isfinite(parameter).all() for parameter in model.policy.parameters())
    assert collector_threads() == [] and collector_processes() == []
    model.learn(64, reset_num_timesteps=False)  # learn() again continues where it stopped
    assert model.num_timesteps >= 320


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_callback_stop_and_ctrl_c_end_learn_cleanly(algo, mode):
    model = algo("MlpPolicy", "Pendulum-v1", seed=0, **small(algo, **MODES[mode]))
    model.learn(10_000, callback=CountingCallback(stop_at=96))
    assert 96 <= model.num_timesteps < 400
    assert_counts_balance(model)
    with pytest.raises(KeyboardInterrupt):
        model.learn(10_000, callback=CountingCallback(raise_at=96))
    assert collector_threads() == [] and collector_processes() == []
    model.learn(64)  # still usable after an interrupt
    assert_counts_balance(model)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_a_crashing_env_ends_learn_promptly_with_its_cause(algo, mode):
    model = algo("MlpPolicy", make_vec_env(lambda: CrashingBoxEnv(crash_after=100), n_envs=1), **small(algo, **MODES[mode]))
    start = time.monotonic()
    with pytest.raises((CollectorError, RuntimeError)) as error_info:
        model.learn(10_000)
    assert time.monotonic() - start < 15
    error = error_info.value
    assert "environment exploded" in str(error) + str(error.__cause__)


@pytest.mark.parametrize("what", ["observation", "reward"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_non_finite_data_from_an_env_stops_learn_naming_the_env(algo, mode, what):
    env = DummyVecEnv([lambda: NonFiniteEnv(bad=False), lambda: NonFiniteEnv(bad=True, what=what)])
    model = algo("MlpPolicy", env, **small(algo, **MODES[mode]))
    with pytest.raises((ValueError, CollectorError)) as error_info:
        model.learn(10_000)
    message = str(error_info.value) + str(error_info.value.__cause__)
    assert "environment index 1" in message and "NaN or infinite" in message
    assert collector_threads() == [] and collector_processes() == []


# ----------------------------------------------------------------------------------------- save / load


@pytest.mark.parametrize("mode", ["sync", "thread"])
@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_save_load_gives_identical_predictions_and_starts_nothing(algo, mode, tmp_path):
    model = algo("MlpPolicy", "Pendulum-v1", seed=0, **small(algo, **MODES[mode])).learn(128)
    observations = np.stack([model.observation_space.sample() for _ in range(10)])
    expected, _ = model.predict(observations, deterministic=True)
    model.save(tmp_path / "model")
    threads_before = threading.active_count()
    loaded = algo.load(tmp_path / "model", env=make_vec_env("Pendulum-v1"), device="cpu")
    assert threading.active_count() == threads_before and collector_processes() == []
    assert loaded.collector == model.collector and loaded.collector_kwargs == model.collector_kwargs
    actions, _ = loaded.predict(observations, deterministic=True)
    np.testing.assert_array_equal(actions, expected)
    loaded.learn(64)  # continues training after load
    assert_counts_balance(loaded)


# ----------------------------------------------------------------------------------------- spaces and bad input


class TupleObsEnv(IdentityEnv):
    def __init__(self) -> None:
        super().__init__(2)
        self.observation_space = spaces.Tuple([spaces.Discrete(2), spaces.Discrete(2)])
        self.action_space = spaces.Box(-1, 1, shape=(1,), dtype=np.float32)


@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_unsupported_spaces_raise_naming_the_space(algo):
    with pytest.raises(ValueError, match="space"):
        algo("MlpPolicy", DummyVecEnv([TupleObsEnv]), **small(algo))
    # Box actions of any shape are supported (tests/test_conventions.py); a Tuple action space is not.
    tuple_actions = IdentityEnvBox()
    tuple_actions.action_space = spaces.Tuple([spaces.Discrete(2)])
    with pytest.raises((ValueError, AssertionError), match="action space"):  # SB3's PPO asserts its spaces
        algo("MlpPolicy", DummyVecEnv([lambda: tuple_actions]), **small(algo))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(collector="carrier-pigeon"), ValueError, "collector"),
        (dict(collector=int), ValueError, "collector"),
        (dict(collector="thread", collector_kwargs=dict(queue_size=0)), ValueError, "queue_size"),
        (dict(collector="process", collector_kwargs=dict(queue_size=1.5)), ValueError, "queue_size"),
        (dict(collector="sync", collector_kwargs=dict(queue_size=2)), TypeError, "SyncCollector takes no options"),
        (dict(collector="thread", collector_kwargs=dict(num_workers=2)), TypeError, "num_workers"),
        (dict(collector="thread", collector_kwargs=[("queue_size", 1)]), TypeError, "collector_kwargs"),
    ],
)
@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_bad_collection_parameters_raise_naming_them(algo, kwargs, error, match):
    with pytest.raises(error, match=match):
        algo("MlpPolicy", "Pendulum-v1", **small(algo, **kwargs))


# ----------------------------------------------------------------------------------------- CUDA


@pytest.mark.skipif(not th.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("mode", ["sync", "thread"])
@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_cuda_learner_with_cpu_collection(algo, mode):
    model = algo("MlpPolicy", "Pendulum-v1", seed=0, **{**small(algo, **MODES[mode]), "device": "cuda"}).learn(256)
    assert model.policy.device.type == "cuda"
    assert_counts_balance(model)
