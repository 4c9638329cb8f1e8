import multiprocessing
import threading

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces


class CrashingEnv(gym.Env):
    """CartPole-like env that raises after ``crash_after`` steps (counted across resets)."""

    observation_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, crash_after: int = 50) -> None:
        self.crash_after = crash_after
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.steps >= self.crash_after:
            raise RuntimeError("environment exploded")
        return np.zeros(2, dtype=np.float32), 1.0, False, self.steps % 10 == 0, {}


def collector_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "sb3-impact-collector" and thread.is_alive()]


def collector_processes() -> list[multiprocessing.Process]:
    return [process for process in multiprocessing.active_children() if process.name == "sb3-impact-collector"]


@pytest.fixture(autouse=True)
def no_leftover_collectors():
    yield
    assert collector_threads() == [], "a test left a collector thread running"
    assert collector_processes() == [], "a test left a collector process running"


class CrashingBoxEnv(CrashingEnv):
    """:class:`CrashingEnv` with a one-dimensional Box action space (every algorithm here supports it)."""

    action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)


class NonFiniteEnv(gym.Env):
    """Returns a NaN observation (``what="observation"``) or an infinite reward at step ``at`` if ``bad``."""

    observation_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)

    def __init__(self, bad: bool, what: str = "observation", at: int = 30) -> None:
        self.bad, self.what, self.at = bad, what, at
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self.steps += 1
        observation, reward = np.zeros(2, dtype=np.float32), 1.0
        if self.bad and self.steps >= self.at:
            if self.what == "observation":
                observation[1] = np.nan
            else:
                reward = float("inf")
        return observation, reward, False, self.steps % 10 == 0, {}
