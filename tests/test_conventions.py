"""
SB3's conventions, each checked on every algorithm it concerns: Box actions of any shape, adding to the
replay buffer from outside learn(), eval-mode targets with BatchNorm/Dropout features extractors, load()
with the constructor's arguments, and a clear error for a NaN final observation.
"""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.vec_env import DummyVecEnv
from torch import nn

from sb3_impact import IMPACT, IMPALA, PPOAMBER, PTRPPO, VRACER, SACReFER, TD3ReFER
from sb3_impact.common.collectors import CollectorError
from sb3_impact.common.collectors.sampler import SegmentSampler
from sb3_impact.common.training_batch import TrainingBatch

OFF_POLICY_SMALL = dict(learning_starts=32, buffer_size=512, batch_size=16, policy_kwargs=dict(net_arch=[16]))
SMALL = {
    IMPACT: dict(n_steps=16, policy_kwargs=dict(net_arch=[16])),
    IMPALA: dict(n_steps=16, policy_kwargs=dict(net_arch=[16])),
    PPOAMBER: dict(n_steps=16, batch_size=16, n_epochs=2, replay_length=2, policy_kwargs=dict(net_arch=[16])),
    PTRPPO: dict(n_steps=16, batch_size=16, n_epochs=1, replay_rounds=1, memory_size=8, policy_kwargs=dict(net_arch=[16])),
    VRACER: dict(learning_starts=32, buffer_size=512, batch_size=16, train_freq=4, policy_kwargs=dict(net_arch=[16])),
    SACReFER: OFF_POLICY_SMALL,
    TD3ReFER: OFF_POLICY_SMALL,
}
ALGOS = list(SMALL)
ALGO_IDS = [algo.__name__ for algo in ALGOS]
ON_POLICY = [IMPACT, IMPALA, PPOAMBER, PTRPPO]


def small(algo, **kwargs):
    return {**copy.deepcopy(SMALL[algo]), "device": "cpu", **kwargs}  # SB3's SAC writes into policy_kwargs


class MatrixActionEnv(gym.Env):
    """Box(-1, 1, (2, 2)) actions; asserts the env is stepped with that shape. Episodes truncate after 10 steps."""

    observation_space = spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
    action_space = spaces.Box(-1.0, 1.0, shape=(2, 2), dtype=np.float32)

    def __init__(self) -> None:
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        assert np.shape(action) == (2, 2), f"stepped with an action of shape {np.shape(action)}"
        assert self.action_space.contains(np.asarray(action, dtype=np.float32))
        self.steps += 1
        return self.observation_space.sample(), -float(np.sum(np.square(action))), False, self.steps >= 10, {}


# ----------------------------------------------------------------------------------------- 1. Box actions of any shape


@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_box_actions_of_any_shape_train_and_predict_in_that_shape(algo):
    env = DummyVecEnv([MatrixActionEnv, MatrixActionEnv])
    model = algo("MlpPolicy", env, seed=0, **small(algo)).learn(128)
    assert model.num_timesteps >= 128
    assert all(th.isfinite(parameter).all() for parameter in model.policy.parameters())
    actions, _ = model.predict(np.zeros((5, 3), dtype=np.float32))
    assert actions.shape == (5, 2, 2)
    action, _ = model.predict(np.zeros(3, dtype=np.float32), deterministic=True)
    assert action.shape == (2, 2)


# ----------------------------------------------------------------------------------------- 2. replay_buffer.add / extend


@pytest.mark.parametrize("how", ["add", "extend"])
@pytest.mark.parametrize("algo", [SACReFER, TD3ReFER], ids=["SACReFER", "TD3ReFER"])
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


# ----------------------------------------------------------------------------------------- 3. targets in evaluation mode


class BatchNormDropoutExtractor(BaseFeaturesExtractor):
    """A features extractor whose output depends on the mode: BatchNorm1d (batch statistics) and Dropout."""

    def __init__(self, observation_space: spaces.Box, features_dim: int = 8) -> None:
        super().__init__(observation_space, features_dim)
        n_input = int(np.prod(observation_space.shape))
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(n_input, features_dim), nn.BatchNorm1d(features_dim), nn.ReLU(), nn.Dropout(0.5)
        )

    def forward(self, observations: th.Tensor) -> th.Tensor:
        return self.net(observations)


def with_batch_norm(algo, **kwargs):
    settings = small(algo, **kwargs)
    settings["policy_kwargs"] = {**settings["policy_kwargs"], "features_extractor_class": BatchNormDropoutExtractor}
    return settings


@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_batch_norm_and_dropout_features_extractor_learns_with_one_env_and_targets_in_eval_mode(algo):
    """Every value computed without gradient (targets, bootstraps) on the learner's policy is in evaluation mode."""
    model = algo("MlpPolicy", DummyVecEnv([lambda: gym.make("Pendulum-v1")]), seed=0, **with_batch_norm(algo))
    modes_without_grad: list[bool] = []
    value_net = getattr(model.policy, "value_net", None)
    if value_net is not None:  # the actor-critics here (SAC's and TD3's targets are SB3's own)
        value_net.register_forward_hook(
            lambda module, inputs, output: modes_without_grad.append(module.training) if not th.is_grad_enabled() else None
        )
    # Pendulum truncates at 200: one time-limit bootstrap at least (SB3's SAC and TD3: a few updates suffice)
    model.learn(64 if algo in (SACReFER, TD3ReFER) else 200)
    assert all(th.isfinite(parameter).all() for parameter in model.policy.parameters())
    if algo is IMPACT:  # its targets come from the target network, a copy kept in evaluation mode
        assert model._target_policy is not None and not model._target_policy.training
    elif value_net is not None:
        assert modes_without_grad
    assert not any(modes_without_grad)


@pytest.mark.parametrize("algo", [IMPALA, IMPACT], ids=["IMPALA", "IMPACT"])
def test_vtrace_targets_of_a_training_policy_equal_those_in_eval_mode(algo):
    env = DummyVecEnv([lambda: gym.make("Pendulum-v1")])
    model = algo("MlpPolicy", env, seed=0, **with_batch_norm(algo)).learn(32)
    sampler = SegmentSampler(env, model._make_policy_copy("cpu"), 16, env.reset())
    batch = TrainingBatch.from_segment(sampler.collect(), model.device)
    with th.no_grad():
        target_log_probs = batch.behaviour_log_probs.flatten()
        model.policy.set_training_mode(True)
        train_values = model.policy.predict_values(batch.observations).flatten()  # (updates BatchNorm's statistics)
        targets, _ = model._vtrace_targets(batch, train_values, target_log_probs, model.policy)
        assert model.policy.training  # restored
        model.policy.set_training_mode(False)
        eval_values = model.policy.predict_values(batch.observations).flatten()
        assert not th.allclose(train_values, eval_values)  # dropout and batch statistics are at work
        expected, _ = model._vtrace_targets(batch, eval_values, target_log_probs, model.policy)
    th.testing.assert_close(targets, expected)


# ----------------------------------------------------------------------------------------- 4. load(path, **kwargs)

# Per algorithm, the arguments its constructor converts or checks (rl-zoo3's `train -i` passes them to load()).
LOAD_KWARGS = {
    IMPACT: [dict(clip_range=0.1), dict(clip_range=lambda progress: 0.1 * progress)],
    IMPALA: [dict(learning_rate=lambda progress: 1e-3 * progress), dict(gamma=0.95)],
    PPOAMBER: [dict(batch_drop_factor="lin_0.25"), dict(batch_drop_factor=0.3), dict(clip_range=0.1)],
    PTRPPO: [dict(clip_range=0.1), dict(replay_ratio="behaviour", priority="reward")],
    VRACER: [dict(refer_rules=[1]), dict(refer_c=2.0, refer_d=0.2), dict(train_freq=(2, "step"))],
    SACReFER: [dict(refer_rules=[1]), dict(refer_c=2.0, refer_a=1e-6, refer_d=0.2)],
    TD3ReFER: [dict(refer_rules=[2]), dict(refer_c=2.0)],
}
LOAD_REFUSED = {
    IMPACT: dict(clip_range=-0.1),
    PPOAMBER: dict(batch_drop_factor="half"),
    VRACER: dict(refer_d=1.5),
    SACReFER: dict(refer_rules=[3]),
    TD3ReFER: dict(refer_c=-1.0),
}


@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_load_takes_what_the_constructor_takes(algo, tmp_path):
    settings = small(algo)
    settings.pop("policy_kwargs")
    model = algo("MlpPolicy", "Pendulum-v1", seed=0, **settings)
    model.save(tmp_path / "model")
    for kwargs in LOAD_KWARGS[algo]:
        constructed = algo("MlpPolicy", "Pendulum-v1", seed=0, **{**settings, **kwargs})
        loaded = algo.load(tmp_path / "model", env=DummyVecEnv([lambda: gym.make("Pendulum-v1")]), device="cpu", **kwargs)
        for name in kwargs:
            expected, value = getattr(constructed, name), getattr(loaded, name)
            if callable(expected):
                assert [value(p) for p in (1.0, 0.5, 0.0)] == pytest.approx([expected(p) for p in (1.0, 0.5, 0.0)])
            else:
                assert value == expected
        loaded.learn(64)  # trains with them
    if algo in LOAD_REFUSED:  # and checks them as the constructor does
        with pytest.raises(ValueError, match=next(iter(LOAD_REFUSED[algo]))):
            algo("MlpPolicy", "Pendulum-v1", **{**settings, **LOAD_REFUSED[algo]})
        with pytest.raises(ValueError, match=next(iter(LOAD_REFUSED[algo]))):
            algo.load(tmp_path / "model", device="cpu", **LOAD_REFUSED[algo])


# ----------------------------------------------------------------------------------------- 5. NaN final observation


class NaNFinalObservationEnv(gym.Env):
    """Truncates every 10 steps; if ``bad``, the final observation of the episode ending at step 30 holds a NaN."""

    observation_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)

    def __init__(self, bad: bool) -> None:
        self.bad, self.steps = bad, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self.steps += 1
        observation = np.zeros(2, dtype=np.float32)
        if self.bad and self.steps == 30:
            observation[0] = np.nan  # only ever seen as info["terminal_observation"] (DummyVecEnv resets)
        return observation, 1.0, False, self.steps % 10 == 0, {}


@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_nan_final_observation_of_a_truncation_stops_learn_naming_the_env(algo):
    env = DummyVecEnv([lambda: NaNFinalObservationEnv(bad=False), lambda: NaNFinalObservationEnv(bad=True)])
    model = algo("MlpPolicy", env, seed=0, **small(algo))
    with pytest.raises((ValueError, CollectorError)) as error_info:  # (the collector wraps the sampler's error)
        model.learn(1_000)
    message = str(error_info.value) + str(error_info.value.__cause__)
    assert "environment index 1" in message and "NaN or infinite" in message and "terminal_observation" in message
