"""
An environment whose step costs what the benchmark says, for measuring collectors without a simulator.

``SimulatedEnv(step_sleep=0.005)`` waits 5 ms per step without using a CPU, as an environment does whose
simulator runs elsewhere (another process, a GPU, a robot, a web service); ``step_cpu`` keeps a core busy for
that long instead, as a simulator in the same process does. ``obs_size`` sets the bytes a step adds to a
segment (float32 observations). Rewards and observations are cheap functions of the step count and action,
so that what is measured is the step's stated cost and the collector's own.

Also registered as ``SimulatedEnv-v0`` (``gym.make("SimulatedEnv-v0", step_sleep=0.005)``) once this
module is imported.
"""

import time
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class SimulatedEnv(gym.Env):
    """
    :param step_sleep: seconds each step waits without computing
    :param step_cpu: seconds each step keeps one core busy
    :param obs_size: observation entries (float32)
    :param action_size: entries of the Box action in [-1, 1]
    :param episode_steps: steps after which an episode is truncated
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(
        self,
        step_sleep: float = 0.005,
        step_cpu: float = 0.0,
        obs_size: int = 16,
        action_size: int = 1,
        episode_steps: int = 1000,
    ) -> None:
        if step_sleep < 0 or step_cpu < 0:
            raise ValueError(f"step_sleep and step_cpu must be >= 0, got {step_sleep} and {step_cpu}")
        if obs_size < 1 or action_size < 1 or episode_steps < 1:
            raise ValueError(
                f"obs_size, action_size and episode_steps must be >= 1, got {obs_size}, {action_size}, {episode_steps}"
            )
        self.step_sleep = step_sleep
        self.step_cpu = step_cpu
        self.episode_steps = episode_steps
        self.observation_space = spaces.Box(-1.0, 1.0, (obs_size,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (action_size,), np.float32)
        self._observation = np.zeros(obs_size, np.float32)
        self._step = 0

    def _observe(self) -> np.ndarray:
        observation = self._observation.copy()
        observation[0] = self._step / self.episode_steps
        return observation

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._step = 0
        return self._observe(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.step_cpu > 0:
            busy_until = time.perf_counter() + self.step_cpu
            while time.perf_counter() < busy_until:  # spin on purpose: a core stays busy, as a simulator's would
                continue
        if self.step_sleep > 0:
            time.sleep(self.step_sleep)
        self._step += 1
        reward = -float(np.square(action).sum())
        return self._observe(), reward, False, self._step >= self.episode_steps, {}


if "SimulatedEnv-v0" not in gym.registry:
    gym.register("SimulatedEnv-v0", entry_point=SimulatedEnv)
