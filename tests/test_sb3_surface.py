"""
SB3's algorithm surface beside learn(): the on-policy classes' ``rollout_buffer`` and ``collect_rollouts`` outside
learn(), IMPACT's and IMPALA's ``train()`` (they train inside learn()), ReF-ER's ``replay_buffer.add``/``extend``
from outside learn(), and V-RACER's refusals (Ray, SB3's off-policy ``collect_rollouts``).
"""

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback

from sb3_impact import IMPACT, IMPALA, PPOAMBER, PTRPPO, VRACER, SACReFER

from .algorithms import (
    ON_POLICY,
    ON_POLICY_IDS,
    SB3_LOOP_ALGOS,
    SB3_LOOP_IDS,
    assert_finite_parameters,
    short_pendulum,
    small,
)


class RecordingCallback(BaseCallback):
    """Counts ``on_step`` calls, keeps the last ``new_obs``; returns False from the ``stop_at``-th call on."""

    def __init__(self, stop_at: int | None = None) -> None:
        super().__init__()
        self.stop_at = stop_at
        self.calls, self.rollout_ends = 0, 0
        self.last_new_obs: np.ndarray | None = None

    def _on_rollout_end(self) -> None:
        self.rollout_ends += 1

    def _on_step(self) -> bool:
        self.calls += 1
        self.last_new_obs = np.array(self.locals["new_obs"])
        return self.stop_at is None or self.calls < self.stop_at


def initialised(callback: BaseCallback, model) -> BaseCallback:
    callback.init_callback(model)  # as SB3's _setup_learn does
    return callback


def assert_filled(buffer: RolloutBuffer) -> None:
    assert buffer.full and buffer.pos == buffer.buffer_size
    assert np.isfinite(buffer.advantages).all() and np.isfinite(buffer.returns).all()
    np.testing.assert_allclose(buffer.returns, buffer.advantages + buffer.values, rtol=1e-5, atol=1e-5)  # SB3's GAE


# ----------------------------------------------------------------------------------------- on-policy surface


@pytest.mark.parametrize("algo", ON_POLICY, ids=ON_POLICY_IDS)
def test_rollout_buffer_exists_after_construction(algo):
    model = algo("MlpPolicy", short_pendulum(n_envs=2), seed=0, **small(algo))
    buffer = model.rollout_buffer
    assert isinstance(buffer, RolloutBuffer) and not isinstance(buffer, DictRolloutBuffer)
    assert (buffer.buffer_size, buffer.n_envs) == (model.n_steps, 2)
    assert not buffer.full


@pytest.mark.parametrize("algo", ON_POLICY, ids=ON_POLICY_IDS)
def test_collect_rollouts_outside_learn_fills_the_rollout_buffer(algo):
    model = algo("MlpPolicy", short_pendulum(n_envs=2), seed=0, **small(algo)).learn(32)
    start = model.num_timesteps
    callback = initialised(RecordingCallback(), model)
    assert model.collect_rollouts(model.env, callback, model.rollout_buffer, model.n_steps) is True
    assert_filled(model.rollout_buffer)
    assert callback.calls == model.n_steps and callback.rollout_ends == 1
    assert model.num_timesteps == start + 2 * model.n_steps
    # The next call goes on from where the env stopped, with the current policy
    last_new_obs = callback.last_new_obs
    assert model.collect_rollouts(model.env, callback, model.rollout_buffer, model.n_steps) is True
    np.testing.assert_array_equal(model.rollout_buffer.observations[0], last_new_obs)
    assert_filled(model.rollout_buffer)
    # ... or on another env of the same size (reset first)
    other_env = short_pendulum(n_envs=2, seed=1)
    assert model.collect_rollouts(other_env, callback, model.rollout_buffer, model.n_steps) is True
    assert_filled(model.rollout_buffer)
    assert callback.calls == 3 * model.n_steps
    if algo in (PPOAMBER, PTRPPO):  # SB3's PPO cycle: collect_rollouts, then train()
        updates = model._n_updates
        model.train()
        assert model._n_updates > updates
        assert_finite_parameters(model)


@pytest.mark.parametrize("algo", ON_POLICY, ids=ON_POLICY_IDS)
def test_collect_rollouts_on_a_model_that_never_learned(algo):
    model = algo("MlpPolicy", short_pendulum(n_envs=2), seed=0, **small(algo))
    callback = initialised(RecordingCallback(), model)
    assert model.collect_rollouts(model.env, callback, model.rollout_buffer, model.n_steps) is True
    assert_filled(model.rollout_buffer)


@pytest.mark.parametrize("algo", ON_POLICY, ids=ON_POLICY_IDS)
def test_collect_rollouts_returns_false_when_a_callback_stops(algo):
    model = algo("MlpPolicy", short_pendulum(n_envs=2), seed=0, **small(algo)).learn(32)
    model.rollout_buffer.reset()
    callback = initialised(RecordingCallback(stop_at=3), model)
    assert model.collect_rollouts(model.env, callback, model.rollout_buffer, model.n_steps) is False
    assert callback.calls == 3 and callback.rollout_ends == 0
    assert not model.rollout_buffer.full  # the stopped rollout is not stored


@pytest.mark.parametrize("algo", [IMPACT, IMPALA], ids=["IMPACT", "IMPALA"])
def test_vtrace_classes_train_inside_learn_only(algo):
    model = algo("MlpPolicy", short_pendulum(n_envs=2), seed=0, **small(algo))
    with pytest.raises(RuntimeError, match=rf"{algo.__name__} trains inside learn\(\)"):
        model.train()


# ----------------------------------------------------------------------------------------- ReF-ER replay buffer


@pytest.mark.parametrize("how", ["add", "extend"])
@pytest.mark.parametrize("algo", SB3_LOOP_ALGOS, ids=SB3_LOOP_IDS)
def test_replay_buffer_add_and_extend_from_outside_learn_get_the_uniform_behaviour(algo, how):
    """Demonstrations added as SAC users add them: the warm-up's uniform density, no KL penalty; learn() trains on them."""
    model = algo("MlpPolicy", "Pendulum-v1", seed=0, **small(algo))
    buffer = model.replay_buffer
    rng = np.random.default_rng(0)
    n = 40
    obs = rng.uniform(-1, 1, size=(n, 1, 3)).astype(np.float32)
    next_obs = rng.uniform(-1, 1, size=(n, 1, 3)).astype(np.float32)
    actions = rng.uniform(-1, 1, size=(n, 1, 1)).astype(np.float32)  # scaled to [-1, 1], as SB3's buffers store them
    rewards, dones = rng.normal(size=(n, 1)).astype(np.float32), np.zeros((n, 1), dtype=np.float32)
    infos = [[{}] for _ in range(n)]
    if how == "add":
        for i in range(n):
            buffer.add(obs[i], next_obs[i], actions[i], rewards[i], dones[i], infos[i])
    else:
        buffer.extend(obs, next_obs, actions, rewards, dones, infos)
    assert buffer.size() == n
    np.testing.assert_allclose(buffer.actions[:n, 0], actions[:, 0])
    assert np.all(buffer.behaviour_from_policy[:n] == 0)  # left out of the KL penalty, as warm-up steps
    if algo is SACReFER:  # the uniform density of u = atanh(a)
        a = actions[:, 0, 0].astype(np.float64)
        np.testing.assert_allclose(buffer.behaviour_points[:n, 0, 0], np.arctanh(a), rtol=1e-5)
        np.testing.assert_allclose(buffer.behaviour_log_prob[:n, 0], np.log((1 - a**2) / 2), rtol=1e-4)
    else:  # uniform on [-1, 1]: density 1/2
        np.testing.assert_allclose(buffer.behaviour_points[:n, 0], actions[:, 0])
        np.testing.assert_allclose(buffer.behaviour_log_prob[:n, 0], np.log(0.5), rtol=1e-6)
    model.learn(64, reset_num_timesteps=False)  # samples the added steps with the collected ones
    assert model._n_updates > 0
    assert buffer.size() == n + 64
    assert np.all(buffer.behaviour_from_policy[n + model.learning_starts : n + 64] == 1)
    assert all(th.isfinite(parameter).all() for parameter in model.policy.parameters())


# ----------------------------------------------------------------------------------------- V-RACER


def test_vracer_refuses_sb3_off_policy_collect_rollouts():
    model = VRACER("MlpPolicy", "Pendulum-v1", seed=0, **small(VRACER))
    assert model.replay_buffer is not None  # its episode memory, from construction on
    with pytest.raises(RuntimeError, match=r"learn\(\)"):
        model.collect_rollouts(model.env, None, model.train_freq, model.replay_buffer)
