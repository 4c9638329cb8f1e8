"""Rollout segments: what a collector hands to the learner, and how they are sampled from a VecEnv."""

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.vec_env import VecEnv

from sb3_impact.common.distributions import behaviour_params

Observation = np.ndarray | dict[str, np.ndarray]


def stack_observations(observations: list[Observation]) -> Observation:
    """Stack per-step observations (arrays or dicts of arrays) along a new leading axis."""
    if isinstance(observations[0], dict):
        return {key: np.stack([obs[key] for obs in observations]) for key in observations[0]}
    return np.stack(observations)


def index_observation(observation: Observation, index: Any) -> Observation:
    """``observation[index]`` for an array or each entry of a dict."""
    if isinstance(observation, dict):
        return {key: value[index] for key, value in observation.items()}
    return observation[index]


class CollectionInterrupted(Exception):
    """Raised inside a sampler when its owner asked it to stop in the middle of a segment."""


@dataclass
class Segment:
    """
    ``n_steps`` consecutive vector steps of ``n_envs`` environments, collected with one policy version.

    Arrays are time-major ``[n_steps, n_envs, ...]``. ``observations[t]`` is the observation the action
    ``actions[t]`` was taken in; ``next_observations`` is the observation after the last step (used for the
    bootstrap at learning time). Where an episode was truncated by a time limit at ``(t, env)``, the real
    last observation of that episode is ``final_observations[i]`` with ``final_observation_indices[i] == (t, env)``
    (the observation stored at ``t + 1`` already belongs to the next episode).
    """

    observations: Observation
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    behaviour_log_probs: np.ndarray
    behaviour_params: np.ndarray
    next_observations: Observation
    final_observations: Observation | None
    final_observation_indices: np.ndarray
    infos: list[list[dict[str, Any]]]
    policy_version: int
    collect_seconds: float = 0.0
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def n_steps(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def n_envs(self) -> int:
        return int(self.rewards.shape[1])

    @property
    def size(self) -> int:
        """Number of environment steps in the segment."""
        return self.n_steps * self.n_envs

    @property
    def dones(self) -> np.ndarray:
        return self.terminations | self.truncations

    def observation_after(self, step: int) -> Observation:
        """Observation returned by the VecEnv after vector step ``step`` (the ``new_obs`` of SB3's loop)."""
        if step + 1 < self.n_steps:
            return index_observation(self.observations, step + 1)
        return self.next_observations


class SegmentSampler:
    """
    Steps a VecEnv with a (CPU) policy and cuts the stream into :class:`Segment` objects.

    It keeps the last observation between segments, so consecutive segments are contiguous, and stores
    the behaviour log-probability and distribution parameters of every action.
    """

    def __init__(self, env: VecEnv, policy: BasePolicy, n_steps: int, last_observation: Observation) -> None:
        self.env = env
        self.policy = policy
        self.n_steps = n_steps
        self.last_observation = last_observation
        self.policy_version = 0
        self.sampled_steps = 0
        self._clip_low: np.ndarray | None = None
        self._clip_high: np.ndarray | None = None
        if isinstance(env.action_space, spaces.Box):
            self._clip_low, self._clip_high = env.action_space.low, env.action_space.high

    def load_weights(self, state_dict: dict[str, th.Tensor], version: int) -> None:
        """Replace the sampling policy's weights by a learner broadcast."""
        self.policy.load_state_dict(state_dict)
        self.policy_version = version

    @th.no_grad()
    def _act(self, observation: Observation) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        obs_tensor, _ = self.policy.obs_to_tensor(observation)
        distribution = self.policy.get_distribution(obs_tensor)
        actions = distribution.get_actions(deterministic=False)
        log_probs = distribution.log_prob(actions)
        params = behaviour_params(distribution)
        return actions.cpu().numpy(), log_probs.cpu().numpy(), params.cpu().numpy()

    def collect(self, stop_event: threading.Event | None = None) -> Segment:
        """Collect one segment of ``n_steps`` vector steps; raises :class:`CollectionInterrupted` on ``stop_event``."""
        start = time.perf_counter()
        observations, actions, rewards, terminations, truncations = [], [], [], [], []
        log_probs, params, infos = [], [], []
        final_observations, final_indices = [], []
        self.policy.set_training_mode(False)
        for step in range(self.n_steps):
            if stop_event is not None and stop_event.is_set():
                raise CollectionInterrupted
            step_actions, step_log_probs, step_params = self._act(self.last_observation)
            env_actions = step_actions
            if self._clip_low is not None:
                # Store the sampled action (its log-prob is the behaviour's), step the env with the clipped one.
                env_actions = np.clip(step_actions, self._clip_low, self._clip_high)
            new_observation, step_rewards, dones, step_infos = self.env.step(env_actions)
            self.sampled_steps += self.env.num_envs

            step_truncations = np.array(
                [bool(done and info.get("TimeLimit.truncated", False)) for done, info in zip(dones, step_infos, strict=True)]
            )
            for env_index in np.flatnonzero(step_truncations):
                terminal = step_infos[env_index].get("terminal_observation")
                if terminal is None:
                    # Without the final observation there is nothing to bootstrap from: treat as terminal.
                    step_truncations[env_index] = False
                    continue
                final_observations.append(terminal)
                final_indices.append((step, env_index))

            observations.append(self.last_observation)
            actions.append(step_actions)
            rewards.append(np.asarray(step_rewards, dtype=np.float32))
            terminations.append(np.asarray(dones, dtype=bool) & ~step_truncations)
            truncations.append(step_truncations)
            log_probs.append(step_log_probs.astype(np.float32))
            params.append(step_params.astype(np.float32))
            infos.append(step_infos)
            self.last_observation = new_observation

        return Segment(
            observations=stack_observations(observations),
            actions=np.stack(actions),
            rewards=np.stack(rewards),
            terminations=np.stack(terminations),
            truncations=np.stack(truncations),
            behaviour_log_probs=np.stack(log_probs),
            behaviour_params=np.stack(params),
            next_observations=self.last_observation,
            final_observations=stack_observations(final_observations) if final_observations else None,
            final_observation_indices=np.asarray(final_indices, dtype=np.int64).reshape(-1, 2),
            infos=infos,
            policy_version=self.policy_version,
            collect_seconds=time.perf_counter() - start,
        )
