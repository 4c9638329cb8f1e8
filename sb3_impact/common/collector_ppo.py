"""SB3's PPO whose rollouts come from a collector: the base of PPO-AMBER and PTR-PPO."""

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback
from stable_baselines3.common.utils import obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv

from sb3_impact.common.collection import CollectorMixin
from sb3_impact.common.distributions import check_action_space
from sb3_impact.common.observations import check_observation_space
from sb3_impact.common.policy_evaluation import segment_values
from sb3_impact.common.rollout_buffers import BehaviourRecordingMixin, BehaviourRolloutBuffer, DictBehaviourRolloutBuffer
from sb3_impact.common.segments import Segment

SelfCollectorPPO = TypeVar("SelfCollectorPPO", bound="CollectorPPO")


class CollectorPPO(CollectorMixin, PPO):
    """
    SB3's PPO with :meth:`collect_rollouts` taking the next segment from a collector.

    With ``async_collection=False`` a :class:`~sb3_impact.common.collectors.SyncCollector` collects each
    rollout when asked, with the current weights: with a seed this is SB3's PPO, sample for sample. With
    ``async_collection=True`` a thread, forked process or Ray actors collect the next rollouts while the
    learner trains, with weights broadcast after every ``train()``; each rollout's actions, log-probabilities
    and distribution parameters are the behaviour policy's, so the ratios of the loss are taken against the
    policy that acted. Either way the rollout enters a behaviour-recording rollout buffer
    (:class:`~sb3_impact.common.rollout_buffers.BehaviourRecordingMixin`) with values, GAE and value targets from the
    learner's current value function. ``policy_lag`` (learner updates, in ``_n_updates`` units, between the
    weights that collected a rollout and those that train on it) is logged as ``train/policy_lag``.
    """

    rollout_buffer: BehaviourRolloutBuffer | DictBehaviourRolloutBuffer  # type: ignore[assignment]
    thread_collector_limits_threads = True  # many small minibatch steps: see ThreadCollector

    def __init__(
        self,
        policy: Any,
        env: GymEnv | str | Callable[[], gym.Env],
        *args: Any,
        async_collection: bool = False,
        collector: str = "thread",
        collector_queue_size: int = 1,
        num_workers: int | None = None,
        envs_per_worker: int | None = None,
        ray_address: str | None = None,
        rollout_buffer_class: type[RolloutBuffer] | None = None,
        _init_setup_model: bool = True,
        **kwargs: Any,
    ) -> None:
        env = self._init_collection(
            env, async_collection, collector, collector_queue_size, num_workers, envs_per_worker, ray_address
        )
        if rollout_buffer_class is not None and not issubclass(rollout_buffer_class, BehaviourRecordingMixin):
            raise TypeError(
                f"rollout_buffer_class must record the behaviour policy (a subclass of BehaviourRolloutBuffer or "
                f"DictBehaviourRolloutBuffer), got {rollout_buffer_class.__name__}"
            )
        super().__init__(policy, env, *args, rollout_buffer_class=rollout_buffer_class, _init_setup_model=False, **kwargs)
        if self.collector == "ray" and self.env is not None and (self.envs_per_worker or 1) != self.n_envs:
            raise ValueError(
                f"envs_per_worker ({self.envs_per_worker or 1}) must equal the env's n_envs ({self.n_envs}) with "
                "collector='ray': each Ray worker's segment is one rollout of the rollout buffer"
            )
        self._last_segment: Segment | None = None
        self._collection_stack: contextlib.ExitStack | None = None
        self._policy_lags: list[float] = []
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        check_observation_space(self.observation_space)
        check_action_space(self.action_space)
        if self.rollout_buffer_class is None:
            dict_observations = isinstance(self.observation_space, spaces.Dict)
            self.rollout_buffer_class = DictBehaviourRolloutBuffer if dict_observations else BehaviourRolloutBuffer
        super()._setup_model()

    def _excluded_save_params(self) -> list[str]:
        return [
            *super()._excluded_save_params(),
            *self._collection_excluded_save_params(),
            "_last_segment",
            "_collection_stack",
        ]

    def _setup_learn(self, *args: Any, **kwargs: Any) -> tuple[int, BaseCallback]:
        result = super()._setup_learn(*args, **kwargs)
        assert self._collection_stack is not None, "learn() opens the collection"
        self._collection_stack.enter_context(self._collecting(self.n_steps))
        return result

    def learn(  # type: ignore[override]
        self: SelfCollectorPPO,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "PPO",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfCollectorPPO:
        # SB3's loop; the collector runs from the end of _setup_learn until it returns, however it returns.
        with contextlib.ExitStack() as stack:
            self._collection_stack = stack
            try:
                super().learn(total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar)
            finally:
                self._collection_stack = None
        self._record_policy_lag()
        self._log_collection_counters()
        self.logger.dump(step=self.num_timesteps)
        return self

    @th.no_grad()
    def _predict_values(self, observations: Any) -> np.ndarray:
        """V of numpy observations under the learner's current policy."""
        return self.policy.predict_values(obs_as_tensor(observations, self.device)).flatten().cpu().numpy()

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: RolloutBuffer,
        n_rollout_steps: int,
    ) -> bool:
        """Take the next segment (collected with the weights of the last broadcast) into ``rollout_buffer``."""
        collector = self._collector
        assert collector is not None, "collect_rollouts() runs inside learn()"
        assert isinstance(rollout_buffer, BehaviourRecordingMixin) and n_rollout_steps == self.n_steps
        collector.broadcast(self.policy.state_dict(), self._n_updates)
        segment = collector.get_segment()
        self.policy.set_training_mode(False)
        if not self._replay_callbacks(segment, callback):
            return False
        values, last_values, final_values = segment_values(segment, self._predict_values)
        rollout_buffer.add_segment(segment, values, final_values, np.asarray(self._last_episode_starts, dtype=np.float32))
        rollout_buffer.compute_returns_and_advantage(last_values=th.as_tensor(last_values), dones=segment.dones[-1])
        self._last_episode_starts = segment.dones[-1]
        self._last_segment = segment
        self.trained_steps += segment.size
        self._policy_lags.append(float(self._n_updates - segment.policy_version))
        return True

    def _record_policy_lag(self) -> None:
        if self._policy_lags:
            self.logger.record("train/policy_lag", float(np.mean(self._policy_lags)))
            self.logger.record("train/policy_lag_max", float(np.max(self._policy_lags)))
            self._policy_lags.clear()

    def dump_logs(self, iteration: int = 0) -> None:
        self._record_policy_lag()
        self._log_collection_counters()
        super().dump_logs(iteration)
