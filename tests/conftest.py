import atexit
import multiprocessing
import os
import shutil
import tempfile
import threading

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback

# The suite checks behaviour, not speed: one PyTorch thread here and in every command a test starts (they inherit
# OMP_NUM_THREADS), so that a shared machine slows it down in proportion, not by threads spinning against each
# other. Measured beside two benchmark processes on 2 cores: IMPACT's learn(2048) on CartPole-v1 took 118 s with
# PyTorch's default two threads, 7.4 s with one. Tests about thread counts set them explicitly.
os.environ["OMP_NUM_THREADS"] = "1"
th.set_num_threads(1)

# SB3 makes a folder for the logger of every learn() without a log folder (tempdir/SB3-<date>, empty when nothing is
# written): one for the suite, here and in the commands the tests start, instead of a thousand left in /tmp.
if "SB3_LOGDIR" not in os.environ:
    os.environ["SB3_LOGDIR"] = tempfile.mkdtemp(prefix="sb3-impact-tests-")
    atexit.register(shutil.rmtree, os.environ["SB3_LOGDIR"], ignore_errors=True)


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


class TaggedStepsEnv(gym.Env):
    """
    Continuous-action env whose observation is ``(uid, t)``: ``uid`` random per environment instance (whatever
    process builds it), ``t`` the step within the episode; episodes are truncated after ``length`` steps.
    A replay memory that keeps whole episodes can then check that each stored episode is one environment's
    consecutive steps.
    """

    observation_space = spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
    action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)

    def __init__(self, length: int = 10) -> None:
        self.length = length
        self.uid = float(np.random.default_rng().integers(1, 2**20))
        self.t = 0

    def _observation(self) -> np.ndarray:
        return np.array([self.uid, self.t], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observation(), {}

    def step(self, action):
        self.t += 1
        return self._observation(), float(-abs(action[0])), False, self.t >= self.length, {}


def collector_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "sb3-impact-collector" and thread.is_alive()]


def collector_processes() -> list[multiprocessing.Process]:
    return [process for process in multiprocessing.active_children() if process.name == "sb3-impact-collector"]


@pytest.fixture(autouse=True)
def no_leftover_collectors():
    yield
    assert collector_threads() == [], "a test left a collector thread running"
    assert collector_processes() == [], "a test left a collector process running"


def record_reset_noise(policy) -> list[int]:
    """The list that ``policy.reset_noise`` (gSDE's new noise matrix) appends its ``n_envs`` to, call by call."""
    calls: list[int] = []
    reset_noise = policy.reset_noise

    def recording_reset_noise(n_envs: int = 1) -> None:
        calls.append(n_envs)
        reset_noise(n_envs)

    policy.reset_noise = recording_reset_noise
    return calls


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


class CountingCallback(BaseCallback):
    """
    Counts ``on_step`` calls and the threads they run on; stops training (``stop_at``) or raises
    ``KeyboardInterrupt`` (``raise_at``) once ``num_timesteps`` reaches a value.
    """

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


class DictObsEnv(gym.Env):
    """Dict observations (a vector and a 36x36 image, NatureCNN's smallest), Discrete(2) actions, 5 steps an episode."""

    observation_space = spaces.Dict(
        {"vec": spaces.Box(-1, 1, shape=(3,), dtype=np.float32), "img": spaces.Box(0, 255, (36, 36, 1), np.uint8)}
    )
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:  # the observations are drawn from the space
            self.observation_space.seed(seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.t += 1
        return self.observation_space.sample(), float(action), False, self.t >= 5, {}


class ImageEnv(DictObsEnv):
    """:class:`DictObsEnv` with the image alone as the observation."""

    observation_space = spaces.Box(0, 255, (36, 36, 1), np.uint8)


class BoxActionDictObsEnv(DictObsEnv):
    """:class:`DictObsEnv` with a one-dimensional Box action space (every algorithm class here supports it)."""

    action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)

    def step(self, action):
        self.t += 1
        return self.observation_space.sample(), -float(np.sum(np.square(action))), False, self.t >= 5, {}
