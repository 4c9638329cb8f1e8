"""
Spaces, on all seven classes: Box actions of any shape, Dict observations with "MultiInputPolicy", and a clear
error naming an unsupported space.
"""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.envs import IdentityEnv, IdentityEnvBox
from stable_baselines3.common.vec_env import DummyVecEnv

from .algorithms import ALGO_IDS, ALGOS, SB3_LOOP_ALGOS, assert_finite_parameters, small
from .conftest import BoxActionDictObsEnv


class MatrixActionEnv(gym.Env):
    """Box(-1, 1, (2, 2)) actions; asserts the env is stepped with that shape. Episodes truncate after 10 steps."""

    observation_space = spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
    action_space = spaces.Box(-1.0, 1.0, shape=(2, 2), dtype=np.float32)

    def __init__(self) -> None:
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self.np_random.uniform(-1, 1, size=3).astype(np.float32), {}

    def step(self, action):
        assert np.shape(action) == (2, 2), f"stepped with an action of shape {np.shape(action)}"
        assert self.action_space.contains(np.asarray(action, dtype=np.float32))
        self.steps += 1
        observation = self.np_random.uniform(-1, 1, size=3).astype(np.float32)
        return observation, -float(np.sum(np.square(action))), False, self.steps >= 10, {}


@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_box_actions_of_any_shape_train_and_predict_in_that_shape(algo):
    env = DummyVecEnv([MatrixActionEnv, MatrixActionEnv])
    model = algo("MlpPolicy", env, seed=0, **small(algo)).learn(128)
    assert model.num_timesteps >= 128
    assert_finite_parameters(model)
    actions, _ = model.predict(np.zeros((5, 3), dtype=np.float32))
    assert actions.shape == (5, 2, 2)
    action, _ = model.predict(np.zeros(3, dtype=np.float32), deterministic=True)
    assert action.shape == (2, 2)


@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_dict_observations_with_the_multi_input_policy(algo):
    env = DummyVecEnv([BoxActionDictObsEnv, BoxActionDictObsEnv])
    if algo in SB3_LOOP_ALGOS:  # documented: ReFERReplayBuffer has no dict variant
        with pytest.raises(TypeError, match="Dict"):
            algo("MultiInputPolicy", env, seed=0, **small(algo))
        return
    model = algo("MultiInputPolicy", env, seed=0, **small(algo)).learn(48)  # (VRACER: 16 steps after learning_starts)
    assert model.num_timesteps >= 48
    assert_finite_parameters(model)
    observation = env.observation_space.sample()
    action, _ = model.predict(observation, deterministic=True)
    assert action.shape == (1,)
    actions, _ = model.predict({key: np.stack([value] * 3) for key, value in observation.items()}, deterministic=True)
    assert actions.shape == (3, 1)


class TupleObsEnv(IdentityEnv):
    def __init__(self) -> None:
        super().__init__(2)
        self.observation_space = spaces.Tuple([spaces.Discrete(2), spaces.Discrete(2)])
        self.action_space = spaces.Box(-1, 1, shape=(1,), dtype=np.float32)


@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_unsupported_spaces_raise_naming_the_space(algo):
    # SB3's SAC and TD3 raise NotImplementedError for a Tuple observation space; the segment-loop classes ValueError.
    observation_error = NotImplementedError if algo in SB3_LOOP_ALGOS else ValueError
    with pytest.raises(observation_error, match="observation space") as error_info:
        algo("MlpPolicy", DummyVecEnv([TupleObsEnv]), **small(algo))
    assert "Tuple(Discrete(2), Discrete(2))" in str(error_info.value)
    # Box actions of any shape are supported (above); a Tuple action space is not.
    tuple_actions = IdentityEnvBox()
    tuple_actions.action_space = spaces.Tuple([spaces.Discrete(2)])
    with pytest.raises((ValueError, AssertionError), match="action space") as error_info:  # SB3 asserts its spaces
        algo("MlpPolicy", DummyVecEnv([lambda: tuple_actions]), **small(algo))
    assert "Tuple(Discrete(2))" in str(error_info.value)
