"""The sampler: steps a VecEnv with a CPU copy of the policy and cuts the stream into segments."""

import threading
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.vec_env import VecEnv, unwrap_vec_normalize

from sb3_impact.common.distributions import (
    BehaviourSamplingPolicy,
    behaviour_params,
    sample_diag_gaussian,
    samples_plain_diag_gaussian,
)
from sb3_impact.common.observations import (
    Observation,
    check_finite_final_observations,
    check_finite_step,
    stack_observations,
)
from sb3_impact.common.recurrent import is_recurrent, lstm_states_to_numpy, recurrent_forward, zero_lstm_states
from sb3_impact.common.segments import Segment


def skip_distribution_argument_checks() -> None:
    """
    Turn off ``torch.distributions``' argument checks in a process that only samples (a Ray actor, the forked
    collector): they cost about a tenth of a sampling step there, and the sampler checks what it records itself
    (:meth:`SegmentSampler._act`). The learner's process keeps PyTorch's default.
    """
    th.distributions.Distribution.set_default_validate_args(False)


class CollectionInterrupted(Exception):
    """Raised inside a sampler when its owner asked it to stop in the middle of a segment."""


class SegmentSampler:
    """
    Steps a VecEnv with a (CPU) policy and cuts the stream into :class:`Segment` objects.

    It keeps the last observation between segments, so consecutive segments are contiguous, and stores
    the behaviour log-probability and distribution parameters of every action. An SB3
    ``ActorCriticPolicy`` is sampled through its distribution (flat actions, as SB3's), and Box actions are
    reshaped to the action space's shape and clipped to it before the env sees them; a policy with its own
    ``sample_behaviour(obs_tensor)`` (``actions, log_probs, params``) and ``env_actions(actions)`` (V-RACER's)
    is sampled through those. A recurrent policy (sb3-contrib's ``RecurrentActorCriticPolicy``) is stepped with
    its LSTM states, carried from step to step and segment to segment and zeroed at episode starts; each segment
    records the states it started from and its episode starts (:mod:`~sb3_impact.common.recurrent`).
    A NaN or infinite observation or reward, or final observation of a truncation (bootstrapped from), raises
    ``ValueError`` naming the environment index.
    """

    def __init__(
        self,
        env: VecEnv,
        policy: BasePolicy,
        n_steps: int,
        last_observation: Observation,
        env_source: str | Callable[[], gym.Env] | None = None,
    ) -> None:
        self.env = env
        # A recurrent policy's LSTM states before the next step, and which observations start an episode.
        self.lstm_states: RNNStates | None = None
        self.episode_starts = np.ones(env.num_envs, dtype=bool)
        # The environment id or factory ``env`` was built from: remote collectors build their own from it.
        self.env_source = env_source
        self.policy = policy
        self.n_steps = n_steps
        self.last_observation = last_observation
        self.policy_version = 0
        self.sampled_steps = 0
        # Ids of the environments among all of a collector's (set by a Ray worker); None: 0 .. num_envs - 1.
        self.env_ids: np.ndarray | None = None
        # gSDE (PPO-AMBER, PTR-PPO): new exploration noise at each segment and every sde_sample_freq steps, as SB3.
        self.sde_sample_freq = -1
        self._vec_normalize = unwrap_vec_normalize(env)
        self._clip_low: np.ndarray | None = None
        self._clip_high: np.ndarray | None = None
        self._action_shape: tuple[int, ...] = ()
        if isinstance(env.action_space, spaces.Box):
            self._clip_low, self._clip_high = env.action_space.low, env.action_space.high
            self._action_shape = env.action_space.shape

    @property
    def policy(self) -> BasePolicy:
        return self._policy

    @policy.setter
    def policy(self, policy: BasePolicy) -> None:
        self._policy = policy
        # Checked once per policy: a runtime Protocol check costs ~70 us, and it ran twice per step.
        self._samples_behaviour = isinstance(policy, BehaviourSamplingPolicy)
        self._records_values = self._samples_behaviour and callable(getattr(policy, "sample_behaviour_and_values", None))
        self._samples_diag_gaussian = samples_plain_diag_gaussian(policy)
        self._recurrent = is_recurrent(policy)
        if self._recurrent and self.lstm_states is None:
            self.lstm_states = zero_lstm_states(policy, self.env.num_envs)  # type: ignore[arg-type]

    def restart(self, observation: Observation) -> None:
        """Go on from ``observation`` of freshly reset environments (every environment starts an episode)."""
        self.last_observation = observation
        self.episode_starts = np.ones(self.env.num_envs, dtype=bool)

    @th.no_grad()
    def draw_once(self, observation: Observation) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """
        One draw of the policy on ``observation`` (actions, log-probabilities, distribution parameters, as a
        segment records them) that leaves the sampler, its LSTM states and the random generators as they were:
        what a collector lays its shared memory out from.
        """
        lstm_states = self.lstm_states
        try:
            with th.random.fork_rng(devices=[]):
                if getattr(self.policy, "use_sde", False):
                    self.policy.reset_noise(self.env.num_envs)
                actions, log_probs, params, _ = self._act_and_value(observation)
        finally:
            self.lstm_states = lstm_states
        return actions, log_probs, params

    def load_weights(self, state_dict: dict[str, th.Tensor], version: int) -> None:
        """Replace the sampling policy's weights by a learner broadcast."""
        self.policy.load_state_dict(state_dict)
        self.policy_version = version

    @th.no_grad()
    def _act_and_value(self, observation: Observation) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """The step's actions, log-probabilities and distribution parameters, and ``V(s)`` where the policy gives it."""
        obs_tensor, _ = self.policy.obs_to_tensor(observation)
        values = None
        if self._recurrent:  # one step through the LSTMs; the states move on
            episode_starts = th.as_tensor(self.episode_starts, dtype=th.float32, device=self.policy.device).view(1, -1)
            output = recurrent_forward(self.policy, obs_tensor, self.lstm_states, episode_starts)  # type: ignore[arg-type]
            self.lstm_states = output.states
            distribution = self.policy._get_action_dist_from_latent(output.latent_pi)  # type: ignore[attr-defined]
            actions = distribution.get_actions(deterministic=False)
            log_probs = distribution.log_prob(actions)
            params = behaviour_params(distribution)
        elif self._records_values:
            actions, log_probs, params, values = self.policy.sample_behaviour_and_values(obs_tensor)  # type: ignore[attr-defined]
        elif self._samples_behaviour:
            actions, log_probs, params = self.policy.sample_behaviour(obs_tensor)
        elif self._samples_diag_gaussian:
            actions, log_probs, params = sample_diag_gaussian(self.policy, obs_tensor)
        else:
            distribution = self.policy.get_distribution(obs_tensor)
            actions = distribution.get_actions(deterministic=False)
            log_probs = distribution.log_prob(actions)
            params = behaviour_params(distribution)
        log_probs_array, params_array = log_probs.cpu().numpy(), params.cpu().numpy()
        if not (np.isfinite(log_probs_array).all() and np.isfinite(params_array).all()):
            raise ValueError(
                "collection: the policy's action distribution has NaN or infinite parameters or log-probabilities "
                "(diverged weights?); lower the learning rate or check the observations' scale"
            )
        values_array = None if values is None else values.cpu().numpy().astype(np.float32).reshape(-1)
        return actions.cpu().numpy(), log_probs_array, params_array, values_array

    def _env_actions(self, actions: np.ndarray) -> np.ndarray:
        """What the env is stepped with: the stored action is the sampled one (its log-prob is the behaviour's)."""
        if self._samples_behaviour:
            return self.policy.env_actions(actions)
        if self._clip_low is not None:  # SB3's policies sample flat Box actions: the env takes its own shape
            return np.clip(actions.reshape((-1, *self._action_shape)), self._clip_low, self._clip_high)
        return actions

    def collect(self, stop_event: threading.Event | None = None) -> Segment:
        """Collect one segment of ``n_steps`` vector steps; raises :class:`CollectionInterrupted` on ``stop_event``."""
        start = time.perf_counter()
        observations, actions, rewards, terminations, truncations = [], [], [], [], []
        log_probs, params, infos, original_rewards, values = [], [], [], [], []
        final_observations, final_indices = [], []
        initial_lstm_states = None if self.lstm_states is None else lstm_states_to_numpy(self.lstm_states)
        episode_starts = []
        if self.policy.training:  # a full set_training_mode walks every module: a cost at one-step segments
            self.policy.set_training_mode(False)
        use_sde = bool(getattr(self.policy, "use_sde", False))
        if use_sde:
            self.policy.reset_noise(self.env.num_envs)
        for step in range(self.n_steps):
            if stop_event is not None and stop_event.is_set():
                raise CollectionInterrupted
            if use_sde and self.sde_sample_freq > 0 and step % self.sde_sample_freq == 0:
                self.policy.reset_noise(self.env.num_envs)
            episode_starts.append(self.episode_starts)
            step_actions, step_log_probs, step_params, step_values = self._act_and_value(self.last_observation)
            new_observation, step_rewards, dones, step_infos = self.env.step(self._env_actions(step_actions))
            self.sampled_steps += self.env.num_envs
            check_finite_step(new_observation, step_rewards, "collection")

            step_truncations = np.array(
                [bool(done and info.get("TimeLimit.truncated", False)) for done, info in zip(dones, step_infos, strict=True)]
            )
            check_finite_final_observations(step_infos, np.flatnonzero(step_truncations), "collection")
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
            if step_values is not None:
                values.append(step_values)
            if self._vec_normalize is not None:
                original_rewards.append(np.asarray(self._vec_normalize.get_original_reward(), dtype=np.float32))
            self.last_observation = new_observation
            self.episode_starts = np.array(dones, dtype=bool)  # a copy: a VecEnv may reuse its array

        extras: dict[str, Any] = {}
        if original_rewards:
            extras["original_rewards"] = np.stack(original_rewards)
        if values:
            extras["behaviour_values"] = np.stack(values)
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
            extras=extras,
            env_ids=self.env_ids,
            episode_starts=np.stack(episode_starts) if self._recurrent else None,
            lstm_states=initial_lstm_states if self._recurrent else None,
        )
