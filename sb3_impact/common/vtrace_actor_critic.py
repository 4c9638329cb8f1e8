"""Base class for the V-trace actor-critic algorithms fed by a (possibly asynchronous) collector."""

import math
import warnings
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.policies import ActorCriticCnnPolicy, ActorCriticPolicy, BasePolicy, MultiInputActorCriticPolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule

from sb3_impact.common.circular_buffer import CircularBuffer
from sb3_impact.common.collectors import Collector
from sb3_impact.common.distributions import check_action_space
from sb3_impact.common.estimators import fold_truncation_bootstrap, vtrace
from sb3_impact.common.modes import evaluation_mode, has_mode_dependent_layers
from sb3_impact.common.observations import check_observation_space
from sb3_impact.common.recurrent import is_recurrent
from sb3_impact.common.rollout_buffers import BehaviourRolloutBuffer, DictBehaviourRolloutBuffer
from sb3_impact.common.segment_loop import OnPolicySegmentMixin
from sb3_impact.common.segments import Segment
from sb3_impact.common.training_batch import TrainingBatch
from sb3_impact.common.training_statistics import TrainingStatistics

SelfVTraceActorCritic = TypeVar("SelfVTraceActorCritic", bound="VTraceActorCritic")


class VTraceActorCritic(OnPolicySegmentMixin, OnPolicyAlgorithm):
    """
    Actor-critic learner trained from V-trace-corrected segments, delivered by a ``collector`` through the one
    segment loop (:class:`~sb3_impact.common.segment_loop.SegmentLoopMixin`).

    Each segment enters a :class:`CircularBuffer` of ``circular_buffer_size`` batches, each reused
    ``max_batch_reuse`` times (IMPALA: 1 batch, ``n_epochs`` uses); after it the segment loop calls :meth:`train`,
    which draws batches from the buffer until a slot needs a new one and trains on each draw (the subclass's loop:
    passes, minibatches, its loss, the optimizer step), publishing the weights every ``broadcast_interval`` draws.
    ``_n_updates`` counts draws, as PPO's counts epochs; ``gradient_steps`` counts minibatch steps.

    What every V-trace learner shares stays here: the parameters and their checks, the circular buffer, the V-trace
    targets (:meth:`_vtrace_targets`) and the ``train/`` statistics (``_train_statistics``, a
    :class:`~sb3_impact.common.training_statistics.TrainingStatistics` that each pass adds to). ``rollout_buffer`` and
    ``collect_rollouts`` are SB3's on-policy surface; the rollout buffer is built when first asked for.
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpPolicy": ActorCriticPolicy,
        "CnnPolicy": ActorCriticCnnPolicy,
        "MultiInputPolicy": MultiInputActorCriticPolicy,
    }
    policy: ActorCriticPolicy

    def __init__(
        self,
        policy: str | type[ActorCriticPolicy],
        env: GymEnv | str | Callable[[], gym.Env],
        learning_rate: float | Schedule,
        n_steps: int,
        gamma: float,
        gae_lambda: float,
        ent_coef: float,
        vf_coef: float,
        max_grad_norm: float,
        circular_buffer_size: int,
        max_batch_reuse: int,
        vtrace_clip_rho_threshold: float,
        vtrace_clip_c_threshold: float,
        vtrace_clip_pg_rho_threshold: float,
        normalize_advantage: bool,
        broadcast_interval: int,
        batch_size: int | None = None,
        use_sde: bool = False,
        sde_sample_freq: int = -1,
        collector: str | type[Collector] = "auto",
        collector_kwargs: dict[str, Any] | None = None,
        learner_threads: int | None = 1,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: th.device | str = "auto",
        _init_setup_model: bool = True,
    ) -> None:
        for name, value, minimum in (
            ("n_steps", n_steps, 1),
            ("circular_buffer_size", circular_buffer_size, 1),
            ("max_batch_reuse", max_batch_reuse, 1),
            ("broadcast_interval", broadcast_interval, 1),
        ):
            if not isinstance(value, (int, np.integer)) or value < minimum:
                raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
        if batch_size is not None and (not isinstance(batch_size, (int, np.integer)) or batch_size < 1):
            raise ValueError(f"batch_size must be an integer >= 1 or None, got {batch_size!r}")
        for name, value in (("gamma", gamma), ("gae_lambda", gae_lambda)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        for name, value in (
            ("vtrace_clip_rho_threshold", vtrace_clip_rho_threshold),
            ("vtrace_clip_c_threshold", vtrace_clip_c_threshold),
            ("vtrace_clip_pg_rho_threshold", vtrace_clip_pg_rho_threshold),
        ):
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")
        for name, value in (("ent_coef", ent_coef), ("vf_coef", vf_coef), ("max_grad_norm", max_grad_norm)):
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        env = self._init_collection(env, collector, collector_kwargs, learner_threads)
        if policy_kwargs and "use_sde" in policy_kwargs:
            raise ValueError("policy_kwargs: pass use_sde to the constructor (use_sde=True), as SB3's PPO takes it")
        if policy_kwargs and policy_kwargs.get("squash_output"):
            raise ValueError("policy_kwargs: squash_output is not supported (behaviour storage needs an unsquashed Gaussian)")
        if isinstance(sde_sample_freq, bool) or not isinstance(sde_sample_freq, (int, np.integer)):
            raise ValueError(f"sde_sample_freq must be an integer (-1: one noise matrix per segment), got {sde_sample_freq!r}")

        super().__init__(
            policy,
            env,
            learning_rate=learning_rate,
            n_steps=n_steps,
            gamma=gamma,
            gae_lambda=gae_lambda,
            ent_coef=ent_coef,
            vf_coef=vf_coef,
            max_grad_norm=max_grad_norm,
            use_sde=use_sde,
            sde_sample_freq=sde_sample_freq,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            policy_kwargs=policy_kwargs,
            verbose=verbose,
            seed=seed,
            device=device,
            _init_setup_model=False,
        )
        self.circular_buffer_size = circular_buffer_size
        self.max_batch_reuse = max_batch_reuse
        self.vtrace_clip_rho_threshold = vtrace_clip_rho_threshold
        self.vtrace_clip_c_threshold = vtrace_clip_c_threshold
        self.vtrace_clip_pg_rho_threshold = vtrace_clip_pg_rho_threshold
        self.normalize_advantage = normalize_advantage
        self.broadcast_interval = broadcast_interval
        self.batch_size = batch_size
        self.gradient_steps = 0
        self._circular_buffer: CircularBuffer | None = None
        self._rollout_buffer: BehaviourRolloutBuffer | DictBehaviourRolloutBuffer | None = None
        self._train_statistics = TrainingStatistics()
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        self._migrate_saved_collection_parameters()
        check_action_space(self.action_space)
        check_observation_space(self.observation_space)
        if not (isinstance(self.policy_class, type) and issubclass(self.policy_class, ActorCriticPolicy)):
            raise TypeError(f"policy must be an ActorCriticPolicy subclass, got {self.policy_class}")
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        self.policy = self.policy_class(  # type: ignore[assignment]
            self.observation_space, self.action_space, self.lr_schedule, use_sde=self.use_sde, **self.policy_kwargs
        )
        self.policy = self.policy.to(self.device)
        if is_recurrent(self.policy) and self.batch_size is not None and self.batch_size % self.n_steps != 0:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be a multiple of n_steps ({self.n_steps}) with a recurrent policy: "
                "its minibatches are whole segments of batch_size // n_steps environments, replayed through the LSTM"
            )
        self._rollout_buffer = None  # built when first asked for (rollout_buffer)
        self._maybe_recommend_cpu()
        samples = self.n_steps * (self.collector_kwargs.get("envs_per_worker", 1) if self.collector == "ray" else self.n_envs)
        if self.batch_size is not None and self.batch_size < samples and samples % self.batch_size != 0:
            warnings.warn(
                f"batch_size={self.batch_size} does not divide the {samples} samples of a batch "
                f"(n_steps * n_envs): each pass ends with a minibatch of {samples % self.batch_size}",
                UserWarning,
                stacklevel=2,
            )

    @property
    def rollout_buffer(self) -> BehaviourRolloutBuffer | DictBehaviourRolloutBuffer:
        """SB3's on-policy rollout buffer (``collect_rollouts``), built on first use (training uses the circular buffer)."""
        if self._rollout_buffer is None:
            dict_observations = isinstance(self.observation_space, spaces.Dict)
            rollout_buffer_class = DictBehaviourRolloutBuffer if dict_observations else BehaviourRolloutBuffer
            self._rollout_buffer = rollout_buffer_class(
                self.n_steps,
                self.observation_space,
                self.action_space,
                device=self.device,
                gamma=self.gamma,
                gae_lambda=self.gae_lambda,
                n_envs=self.n_envs,
            )
        return self._rollout_buffer

    @rollout_buffer.setter
    def rollout_buffer(self, rollout_buffer: BehaviourRolloutBuffer | DictBehaviourRolloutBuffer | None) -> None:
        self._rollout_buffer = rollout_buffer

    def _excluded_save_params(self) -> list[str]:
        return [
            *super()._excluded_save_params(),
            *self._collection_excluded_save_params(),
            "_circular_buffer",
            "_rollout_buffer",
            "_train_statistics",
        ]

    # ------------------------------------------------------------------ learning

    def learn(
        self: SelfVTraceActorCritic,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "OnPolicyAlgorithm",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfVTraceActorCritic:
        return self._learn_from_segments(
            total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar
        )

    def _segment_steps(self) -> int:
        return self.n_steps

    def _on_learn_start(self, collector: Collector) -> None:
        self._circular_buffer = CircularBuffer(self.circular_buffer_size, self.max_batch_reuse)

    def _on_learn_end(self) -> None:
        # As SB3's PPO: the last training statistics stay in the logger after learn() (until the next dump).
        self._record_train_logs()
        self._circular_buffer = None

    def _store_segment(self, segment: Segment) -> None:
        """The segment enters the circular buffer as a batch on the learner's device."""
        self._active_circular_buffer().put(TrainingBatch.from_segment(segment, self.device))

    def _active_circular_buffer(self) -> CircularBuffer:
        """The circular buffer of the running ``learn()`` (the only place :meth:`train` runs)."""
        if self._circular_buffer is None:
            raise RuntimeError(
                f"{type(self).__name__} trains inside learn(), one circular-buffer batch at a time, "
                "not from the rollout buffer"
            )
        return self._circular_buffer

    @abstractmethod
    def train(self) -> None:
        """
        Called by the segment loop after each stored segment: draw batches from the circular buffer until the slot
        under the cursor needs a new one, and train on each draw.
        """

    def _vtrace_targets(
        self,
        batch: TrainingBatch,
        values: th.Tensor,
        target_log_probs: th.Tensor,
        policy: ActorCriticPolicy,
        bootstrap: tuple[th.Tensor, th.Tensor] | None = None,
    ) -> tuple[th.Tensor, th.Tensor]:
        """
        V-trace ``(v_s, pg_advantages)`` of ``batch``, flat ``[T * B]`` (docs/guide/equations.md, V-trace (IMPALA) (IMPALA
        eqs. 1 and 4)), with ``target_log_probs`` (``[T * B]``) in the role of pi and ``values`` (``[T * B]``) plus
        ``policy``'s values of the bootstrap observations as V.

        The targets are computed in evaluation mode, as SB3 computes its targets: the bootstrap values always,
        and ``values`` again when ``policy`` is training and has BatchNorm or Dropout layers. ``bootstrap``: the
        bootstrap values ``(V(next) [B], V(final) [T, B])`` when the caller has them from ``policy`` in evaluation
        mode (:meth:`TrainingBatch.evaluate_with_bootstrap`).
        """
        recompute_values = policy.training and has_mode_dependent_layers(policy)
        with evaluation_mode(policy):
            bootstrap_values, final_values = batch.bootstrap_values(policy) if bootstrap is None else bootstrap
            if recompute_values:
                with th.no_grad():
                    values = batch.predict_values(policy)
        rewards, discounts = fold_truncation_bootstrap(
            batch.rewards, batch.terminations, batch.truncations, final_values, self.gamma
        )
        vs, pg_advantages = vtrace(
            batch.behaviour_log_probs,
            target_log_probs.reshape(batch.n_steps, batch.n_envs),
            rewards,
            values.detach().reshape(batch.n_steps, batch.n_envs),
            bootstrap_values,
            discounts,
            clip_rho_threshold=self.vtrace_clip_rho_threshold,
            clip_c_threshold=self.vtrace_clip_c_threshold,
            clip_pg_rho_threshold=self.vtrace_clip_pg_rho_threshold,
            lambda_=self.gae_lambda,
        )
        return vs.flatten(), pg_advantages.flatten()

    # ------------------------------------------------------------------ logging

    def _record_train_logs(self) -> None:
        """The ``train/`` statistics since the last record (means, maxima for ``*_max`` keys) and the buffer's counters."""
        self._train_statistics.record(self.logger)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        if self._circular_buffer is not None:
            self.logger.record("train/buffer_batches", len(self._circular_buffer))
            self.logger.record("train/buffer_batches_released", self._circular_buffer.released_batches)
            if self._circular_buffer.released_batches > 0:
                reuse = self._circular_buffer.released_uses / self._circular_buffer.released_batches
                self.logger.record("train/buffer_reuse_mean", reuse)

    def dump_logs(self, iteration: int = 0) -> None:
        self._record_train_logs()
        self.logger.record("train/gradient_steps", self.gradient_steps)
        super().dump_logs(iteration)
