"""SB3's PPO trained from collected segments through the one segment loop: the base of PPO-AMBER and PTR-PPO."""

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback

from sb3_impact.common.collectors import Collector
from sb3_impact.common.distributions import check_action_space
from sb3_impact.common.observations import check_observation_space
from sb3_impact.common.recurrent import refuse_recurrent_policy
from sb3_impact.common.rollout_buffers import BehaviourRecordingMixin, BehaviourRolloutBuffer, DictBehaviourRolloutBuffer
from sb3_impact.common.segment_loop import OnPolicySegmentMixin
from sb3_impact.common.segments import Segment

SelfSegmentPPO = TypeVar("SelfSegmentPPO", bound="SegmentPPO")


class SegmentPPO(OnPolicySegmentMixin, PPO):
    """
    SB3's PPO whose rollouts come from a ``collector`` (see :class:`~sb3_impact.common.segment_loop.SegmentLoopMixin`).

    With ``collector="sync"`` each rollout is collected when asked, with the current weights: with a seed this
    is SB3's PPO, sample for sample. With ``"thread"``, ``"process"`` or ``"ray"`` the next rollouts are
    collected while the learner trains, with weights broadcast after every ``train()``; each rollout's actions,
    log-probabilities and distribution parameters are the behaviour policy's, so the ratios of the loss are
    taken against the policy that acted. Either way the rollout enters a behaviour-recording rollout buffer
    (:class:`~sb3_impact.common.rollout_buffers.BehaviourRecordingMixin`) with values, GAE and value targets from the
    learner's current value function.
    """

    rollout_buffer: BehaviourRolloutBuffer | DictBehaviourRolloutBuffer  # type: ignore[assignment]
    # Many small minibatch steps: the learner's threads would leave the collector thread no core (ThreadCollector).
    default_collector_kwargs: ClassVar[dict[str, dict[str, Any]]] = {"thread": {"limit_learner_threads": True}}

    def __init__(
        self,
        policy: Any,
        env: GymEnv | str | Callable[[], gym.Env],
        *args: Any,
        collector: str | type[Collector] = "sync",
        collector_kwargs: dict[str, Any] | None = None,
        learner_threads: int | None = 1,
        rollout_buffer_class: type[RolloutBuffer] | None = None,
        _init_setup_model: bool = True,
        **kwargs: Any,
    ) -> None:
        refuse_recurrent_policy(policy, type(self).__name__)
        env = self._init_collection(env, collector, collector_kwargs, learner_threads)
        if rollout_buffer_class is not None and not issubclass(rollout_buffer_class, BehaviourRecordingMixin):
            raise TypeError(
                f"rollout_buffer_class must record the behaviour policy (a subclass of BehaviourRolloutBuffer or "
                f"DictBehaviourRolloutBuffer), got {rollout_buffer_class.__name__}"
            )
        super().__init__(policy, env, *args, rollout_buffer_class=rollout_buffer_class, _init_setup_model=False, **kwargs)
        envs_per_worker = self.collector_kwargs.get("envs_per_worker", 1)
        if self.collector == "ray" and self.env is not None and envs_per_worker != self.n_envs:
            raise ValueError(
                f"collector_kwargs: envs_per_worker ({envs_per_worker}) must equal the env's n_envs ({self.n_envs}) "
                "with collector='ray': each Ray worker's segment is one rollout of the rollout buffer"
            )
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        self._migrate_saved_collection_parameters()
        check_observation_space(self.observation_space)
        check_action_space(self.action_space)
        if self.rollout_buffer_class is None:
            dict_observations = isinstance(self.observation_space, spaces.Dict)
            self.rollout_buffer_class = DictBehaviourRolloutBuffer if dict_observations else BehaviourRolloutBuffer
        super()._setup_model()

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), *self._collection_excluded_save_params()]

    def _segment_steps(self) -> int:
        return self.n_steps

    def _store_segment(self, segment: Segment) -> None:
        """The rollout buffer holds the segment, with GAE from the current value function (as SB3's collect_rollouts)."""
        self.policy.set_training_mode(False)
        self._fill_rollout_buffer(segment, self.rollout_buffer)

    def learn(  # type: ignore[override]
        self: SelfSegmentPPO,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "PPO",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfSegmentPPO:
        return self._learn_from_segments(
            total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar
        )
