"""Base class for the V-trace actor-critic algorithms fed by a (possibly asynchronous) collector."""

import math
import warnings
from abc import abstractmethod
from collections import defaultdict
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
from sb3_impact.common.estimators import MAX_RATIO, clipped_ratio, fold_truncation_bootstrap, vtrace
from sb3_impact.common.modes import evaluation_mode, has_mode_dependent_layers
from sb3_impact.common.observations import check_observation_space
from sb3_impact.common.rollout_buffers import BehaviourRolloutBuffer, DictBehaviourRolloutBuffer
from sb3_impact.common.segment_loop import OnPolicySegmentMixin
from sb3_impact.common.segments import Segment
from sb3_impact.common.training_batch import TrainingBatch

SelfVTraceActorCritic = TypeVar("SelfVTraceActorCritic", bound="VTraceActorCritic")


class VTraceActorCritic(OnPolicySegmentMixin, OnPolicyAlgorithm):
    """
    Actor-critic learner trained from V-trace-corrected segments, delivered by a ``collector`` through the one
    segment loop (:class:`~sb3_impact.common.segment_loop.SegmentLoopMixin`).

    Each segment enters a :class:`CircularBuffer` of ``circular_buffer_size`` batches, each reused
    ``max_batch_reuse`` times (IMPALA: 1 batch, ``n_epochs`` uses); after it the learner draws batches from the
    buffer until a slot needs a new one, trains on each draw (:meth:`_train_step`: one pass over the batch in
    shuffled minibatches of ``batch_size`` samples, one gradient step each; None: one step on the whole batch),
    and publishes its weights to the collector every ``broadcast_interval`` draws. ``_n_updates`` counts draws,
    as PPO's counts epochs; ``gradient_steps`` counts minibatch steps. ``rollout_buffer`` and
    ``collect_rollouts`` are SB3's on-policy surface (the learner itself trains from the circular buffer).

    Subclasses implement :meth:`_train_step` (the loss, through :meth:`_train_pass`) and may override
    :meth:`_on_first_use`.
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
        collector: str | type[Collector] = "thread",
        collector_kwargs: dict[str, Any] | None = None,
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
        env = self._init_collection(env, collector, collector_kwargs)
        if policy_kwargs and (policy_kwargs.get("use_sde") or policy_kwargs.get("squash_output")):
            raise ValueError("policy_kwargs: use_sde and squash_output are not supported (behaviour storage needs a Gaussian)")

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
            use_sde=False,
            sde_sample_freq=-1,
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
        self._train_stats: dict[str, list[float]] = defaultdict(list)
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
            self.observation_space, self.action_space, self.lr_schedule, **self.policy_kwargs
        )
        self.policy = self.policy.to(self.device)
        # SB3's on-policy surface (collect_rollouts); the learner trains from the circular buffer.
        rollout_buffer_class = (
            DictBehaviourRolloutBuffer if isinstance(self.observation_space, spaces.Dict) else BehaviourRolloutBuffer
        )
        self.rollout_buffer = rollout_buffer_class(
            self.n_steps,
            self.observation_space,
            self.action_space,
            device=self.device,
            gamma=self.gamma,
            gae_lambda=self.gae_lambda,
            n_envs=self.n_envs,
        )
        self._maybe_recommend_cpu()
        samples = self.n_steps * (self.collector_kwargs.get("envs_per_worker", 1) if self.collector == "ray" else self.n_envs)
        if self.batch_size is not None and self.batch_size < samples and samples % self.batch_size != 0:
            warnings.warn(
                f"batch_size={self.batch_size} does not divide the {samples} samples of a batch "
                f"(n_steps * n_envs): each pass ends with a minibatch of {samples % self.batch_size}",
                UserWarning,
                stacklevel=2,
            )

    def _excluded_save_params(self) -> list[str]:
        return [
            *super()._excluded_save_params(),
            *self._collection_excluded_save_params(),
            "_circular_buffer",
            "_train_stats",
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
        assert self._circular_buffer is not None
        batch = TrainingBatch.from_segment(segment, self.device)
        self._on_first_use(batch)
        self._circular_buffer.put(batch)

    def _train_on_segment(self, segment: Segment) -> None:
        """Batch draws until the slot under the cursor needs a new batch (IMPACT, Algorithm 1, lines 5-11)."""
        buffer = self._circular_buffer
        assert buffer is not None
        self.policy.set_training_mode(True)  # callbacks (evaluation) may have switched it off
        while not buffer.needs_batch():
            batch = buffer.next_batch()
            self._update_learning_rate(self.policy.optimizer)
            stats = self._train_step(batch)
            self._n_updates += 1
            self._record_train_stats(stats)
            self._after_update()
            if self._n_updates % self.broadcast_interval == 0:
                self._broadcast_weights()

    def _on_first_use(self, batch: TrainingBatch) -> None:
        """Called once per batch, when it enters the circular buffer (before its first gradient step)."""

    def _after_update(self) -> None:
        """Called after every batch draw (``_n_updates`` already counts it)."""

    def _minibatch_indices(self, batch: TrainingBatch, batch_size: int | None) -> list[th.Tensor | None]:
        """
        One pass over ``batch`` in shuffled minibatches of ``batch_size`` samples: indices into its time-major
        ``[T * B]`` samples (``[None]``: the whole batch, also when ``batch_size`` is None). The permutation is
        drawn over env-major positions, the order of SB3's rollout buffer, so that a seeded run takes the same
        minibatches as SB3's PPO.
        """
        if batch_size is None or batch_size >= batch.size:
            return [None]
        env_major = np.random.permutation(batch.size)
        time_major = (env_major % batch.n_steps) * batch.n_envs + env_major // batch.n_steps
        indices = th.as_tensor(time_major, device=self.device)
        return [indices[start : start + batch_size] for start in range(0, batch.size, batch_size)]

    def _train_pass(
        self, minibatches: list[th.Tensor | None], train_minibatch: Callable[[th.Tensor | None], dict[str, th.Tensor]]
    ) -> dict[str, float]:
        """
        One pass: ``train_minibatch`` (one gradient step, unsynced statistics) on each of ``minibatches`` (from
        :meth:`_minibatch_indices`). Returns the statistics of the pass: means, maxima for ``*_max`` keys.
        """
        minibatch_stats = [train_minibatch(indices) for indices in minibatches]
        self.gradient_steps += len(minibatch_stats)
        names = list(minibatch_stats[0])
        stacked = th.stack([th.stack([stats[name] for name in names]) for stats in minibatch_stats])
        summary = th.where(
            th.tensor([name.endswith("_max") for name in names], device=stacked.device),
            stacked.max(dim=0).values,
            stacked.mean(dim=0),
        )
        return dict(zip(names, summary.tolist(), strict=True))  # one device sync per pass

    @abstractmethod
    def _train_step(self, batch: TrainingBatch) -> dict[str, float]:
        """Train on one draw of ``batch`` (a pass, :meth:`_train_pass`); returns the statistics to log."""

    def train(self) -> None:
        raise RuntimeError(
            f"{type(self).__name__} trains inside learn(), one circular-buffer batch at a time, not from the rollout buffer"
        )

    def _vtrace_targets(
        self, batch: TrainingBatch, values: th.Tensor, target_log_probs: th.Tensor, policy: ActorCriticPolicy
    ) -> tuple[th.Tensor, th.Tensor]:
        """
        V-trace ``(vs, pg_advantages)`` ``[T, B]`` of ``batch``, with ``target_log_probs`` in the role of pi and
        ``values`` (``[T * B]``) plus ``policy``'s values of the bootstrap observations as V.

        The targets are computed in evaluation mode, as SB3 computes its targets: the bootstrap values always,
        and ``values`` again when ``policy`` is training and has BatchNorm or Dropout layers.
        """
        recompute_values = policy.training and has_mode_dependent_layers(policy)
        with evaluation_mode(policy):
            bootstrap_values, final_values = batch.bootstrap_values(policy)
            if recompute_values:
                with th.no_grad():
                    values = policy.predict_values(batch.observations).flatten()
        rewards, discounts = fold_truncation_bootstrap(
            batch.rewards, batch.terminations, batch.truncations, final_values, self.gamma
        )
        return vtrace(
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

    def _prepare_advantages(self, pg_advantages: th.Tensor) -> th.Tensor:
        advantages = pg_advantages.flatten()
        if self.normalize_advantage and len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        return advantages

    def _clip_gradients_and_step(self, loss: th.Tensor) -> None:
        self.policy.optimizer.zero_grad()
        loss.backward()
        th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
        self.policy.optimizer.step()

    @staticmethod
    def _behaviour_ratio(log_prob: th.Tensor, behaviour_log_prob: th.Tensor) -> th.Tensor:
        """``pi / pi_worker`` per sample, for logging (no gradient); both log-probs flat ``[N]``."""
        return clipped_ratio(log_prob.detach() - behaviour_log_prob, MAX_RATIO)

    @th.no_grad()
    def _loss_stats(
        self,
        policy_loss: th.Tensor,
        value_loss: th.Tensor,
        entropy_loss: th.Tensor,
        loss: th.Tensor,
        log_prob: th.Tensor,
        behaviour_log_prob: th.Tensor,
    ) -> dict[str, th.Tensor]:
        """The statistics every V-trace loss logs, unsynced: its terms and ``pi / pi_worker`` (mean, max)."""
        is_ratio = self._behaviour_ratio(log_prob, behaviour_log_prob)
        return {
            "policy_gradient_loss": policy_loss.detach(),
            "value_loss": value_loss.detach(),
            "entropy_loss": entropy_loss.detach(),
            "loss": loss.detach(),
            "is_ratio_mean": is_ratio.mean(),
            "is_ratio_max": is_ratio.max(),
        }

    # ------------------------------------------------------------------ logging

    def _record_train_stats(self, stats: dict[str, float]) -> None:
        for key, value in stats.items():
            self._train_stats[key].append(value)

    def _record_train_logs(self) -> None:
        """The ``train/`` statistics since the last record: means, maxima for ``*_max`` keys."""
        for key, values in self._train_stats.items():
            if values:
                self.logger.record(f"train/{key}", float(np.max(values) if key.endswith("_max") else np.mean(values)))
        self._train_stats.clear()
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
