"""Base class for the V-trace actor-critic algorithms fed by a (possibly asynchronous) collector."""

import contextlib
import math
import warnings
from abc import abstractmethod
from collections import defaultdict
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import cloudpickle
import gymnasium as gym
import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.policies import ActorCriticCnnPolicy, ActorCriticPolicy, BasePolicy, MultiInputActorCriticPolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule, TensorDict
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from sb3_impact.common.buffers import CircularBuffer, TrainingBatch
from sb3_impact.common.collector import Collector, CollectorError, SyncCollector, ThreadCollector
from sb3_impact.common.distributions import check_action_space
from sb3_impact.common.process_collector import ProcessCollector
from sb3_impact.common.ray_collector import RayCollector, import_ray
from sb3_impact.common.segments import Segment, SegmentSampler
from sb3_impact.common.vtrace import fold_truncation_bootstrap, vtrace

SelfAsyncOnPolicyAlgorithm = TypeVar("SelfAsyncOnPolicyAlgorithm", bound="AsyncOnPolicyAlgorithm")

# Asynchronous collectors by name (the ``collector`` parameter).
COLLECTORS: dict[str, type[Collector]] = {"thread": ThreadCollector, "process": ProcessCollector, "ray": RayCollector}

# exp() of a log-ratio beyond this is clamped: the PPO clip already zeroes the gradient of such samples
# on the clipped side, and the clamp keeps the unclipped side and the logged ratios finite.
MAX_LOG_RATIO = 20.0

SUPPORTED_OBSERVATION_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Dict)


def evaluate_policy_and_values(
    policy: ActorCriticPolicy, observations: th.Tensor | TensorDict
) -> tuple[Distribution, th.Tensor]:
    """Action distribution and values ``[N]`` of ``policy``, sharing one feature pass (as ``evaluate_actions``)."""
    features = policy.extract_features(observations)
    if policy.share_features_extractor:
        latent_pi, latent_vf = policy.mlp_extractor(features)
    else:
        pi_features, vf_features = features
        latent_pi = policy.mlp_extractor.forward_actor(pi_features)
        latent_vf = policy.mlp_extractor.forward_critic(vf_features)
    return policy._get_action_dist_from_latent(latent_pi), policy.value_net(latent_vf).flatten()


def is_env_factory(env: Any) -> bool:
    """Whether ``env`` is a factory (a callable returning a ``gymnasium.Env``) rather than an env, a VecEnv or an id."""
    return callable(env) and not isinstance(env, (str, gym.Env, VecEnv))


def close_env_after_failure(env: VecEnv) -> None:
    """Close a VecEnv whose worker may have crashed, terminating any subprocess that survives ``close()``."""
    with contextlib.suppress(Exception):  # a dead worker makes close() fail; the processes are ended below
        env.close()
    inner = env
    while isinstance(inner, VecEnvWrapper):
        inner = inner.venv
    for process in getattr(inner, "processes", []):
        if process.is_alive():
            process.terminate()
        process.join(timeout=5)


class AsyncOnPolicyAlgorithm(OnPolicyAlgorithm):
    """
    Actor-critic learner trained from V-trace-corrected segments, delivered by a :class:`Collector`.

    The learner walks a :class:`CircularBuffer` of ``circular_buffer_size`` batches, each reused
    ``max_batch_reuse`` times (IMPALA uses 1 and 1), trains on each batch drawn (:meth:`_train_step`: one
    gradient step, or a pass in minibatches), and publishes its weights to the collector every
    ``broadcast_interval`` draws; ``_n_updates`` counts draws. Callbacks, the logger and
    the counters run on the thread that called :meth:`learn`, with one ``on_step`` per collected vector step.

    Subclasses implement :meth:`_train_step` (the loss) and may override :meth:`_on_first_use`.

    ``env`` may also be a factory (a picklable callable returning a ``gymnasium.Env``): the learner's VecEnv
    is then one environment built from it. With ``collector="ray"``, ``num_workers`` Ray actors each build
    ``envs_per_worker`` environments from the id or factory that ``env`` was given as (see
    :class:`~sb3_impact.common.ray_collector.RayCollector`); the learner's own VecEnv only defines the spaces.
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
        async_collection: bool,
        collector_queue_size: int,
        collector: str = "thread",
        num_workers: int | None = None,
        envs_per_worker: int | None = None,
        ray_address: str | None = None,
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
            ("collector_queue_size", collector_queue_size, 1),
        ):
            if not isinstance(value, (int, np.integer)) or value < minimum:
                raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
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
        if collector not in COLLECTORS:
            raise ValueError(f"collector must be one of {sorted(COLLECTORS)}, got {collector!r}")
        # Where remote workers build their environments from: the id or factory the learner's env came from.
        worker_env = env if isinstance(env, str) or is_env_factory(env) else None
        self._check_ray_parameters(collector, async_collection, worker_env, num_workers, envs_per_worker, ray_address)
        if is_env_factory(env):
            env = env()
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
        self.async_collection = async_collection
        self.collector_queue_size = collector_queue_size
        self.collector = collector
        self.worker_env = worker_env
        self.num_workers = num_workers
        self.envs_per_worker = envs_per_worker
        self.ray_address = ray_address
        # Counters of the last learn() call (see _log_collection_counters)
        self.sampled_steps = 0
        self.trained_steps = 0
        self.dropped_steps = 0
        self.collector_stats: dict[str, float] = {}
        self._collector: Collector | None = None
        self._circular_buffer: CircularBuffer | None = None
        self._train_stats: dict[str, list[float]] = defaultdict(list)
        if _init_setup_model:
            self._setup_model()

    @staticmethod
    def _check_ray_parameters(
        collector: str,
        async_collection: bool,
        worker_env: str | Callable[[], gym.Env] | None,
        num_workers: int | None,
        envs_per_worker: int | None,
        ray_address: str | None,
    ) -> None:
        for name, value in (("num_workers", num_workers), ("envs_per_worker", envs_per_worker)):
            if value is not None and (not isinstance(value, (int, np.integer)) or value < 1):
                raise ValueError(f"{name} must be an integer >= 1 or None, got {value!r}")
        if ray_address is not None and not isinstance(ray_address, str):
            raise TypeError(f"ray_address must be a string (host:port or 'auto') or None, got {ray_address!r}")
        if collector != "ray":
            ray_parameters = {"num_workers": num_workers, "envs_per_worker": envs_per_worker, "ray_address": ray_address}
            for name, value in ray_parameters.items():
                if value is not None:
                    raise ValueError(f"{name} is only used with collector='ray' (collector={collector!r})")
            return
        import_ray()  # ImportError naming the extra to install
        if not async_collection:
            raise ValueError("collector='ray' collects asynchronously: it needs async_collection=True")
        if worker_env is None:
            raise ValueError(
                "env: collector='ray' builds the environments inside remote workers, so env must be given as an "
                "environment id or a picklable factory (a callable returning a gymnasium.Env), not an env instance"
            )

    def _setup_model(self) -> None:
        check_action_space(self.action_space)
        if not isinstance(self.observation_space, SUPPORTED_OBSERVATION_SPACES):
            names = ", ".join(space.__name__ for space in SUPPORTED_OBSERVATION_SPACES)
            raise ValueError(f"Unsupported observation space {self.observation_space}: supported are {names}")
        if not (isinstance(self.policy_class, type) and issubclass(self.policy_class, ActorCriticPolicy)):
            raise TypeError(f"policy must be an ActorCriticPolicy subclass, got {self.policy_class}")
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        self.policy = self.policy_class(  # type: ignore[assignment]
            self.observation_space, self.action_space, self.lr_schedule, **self.policy_kwargs
        )
        self.policy = self.policy.to(self.device)
        self._maybe_recommend_cpu()

    def _excluded_save_params(self) -> list[str]:
        excluded = [*super()._excluded_save_params(), "_collector", "_circular_buffer", "_train_stats"]
        if not isinstance(self.worker_env, (str, type(None))):
            try:
                cloudpickle.dumps(self.worker_env)
            except Exception as error:
                warnings.warn(
                    f"the env factory cannot be pickled ({error!r}) and is not saved: set model.worker_env after "
                    "load() to use collector='ray'",
                    UserWarning,
                    stacklevel=3,
                )
                excluded.append("worker_env")
        return excluded

    # ------------------------------------------------------------------ collection

    def _make_policy_copy(self, device: th.device | str) -> ActorCriticPolicy:
        """
        A copy of the learner policy on ``device``, in evaluation mode and without gradients.

        Building it draws no random numbers from the global generator (it is forked around the
        construction), so that with a seed, synchronous collection draws the same actions as SB3's PPO.
        """
        with th.random.fork_rng(devices=[]):
            policy_copy = self.policy.__class__(**self.policy._get_constructor_parameters())
        policy_copy.load_state_dict(self.policy.state_dict())
        policy_copy = policy_copy.to(device)
        policy_copy.set_training_mode(False)
        policy_copy.requires_grad_(False)
        return policy_copy

    def _make_collector(self) -> Collector:
        assert self.env is not None and self._last_obs is not None
        sampler = SegmentSampler(self.env, self._make_policy_copy("cpu"), self.n_steps, self._last_obs)
        sampler.policy_version = self._n_updates
        if not self.async_collection:
            return SyncCollector(sampler)
        if self.collector == "ray":
            return RayCollector(
                sampler,
                queue_size=self.collector_queue_size,
                worker_env=self.worker_env,
                num_workers=self.num_workers,
                envs_per_worker=self.envs_per_worker or 1,
                address=self.ray_address,
            )
        return COLLECTORS[self.collector](sampler, queue_size=self.collector_queue_size)

    def _replay_callbacks(self, segment: Segment, callback: BaseCallback) -> bool:
        """Run SB3's per-step bookkeeping for a collected segment, as ``collect_rollouts`` does for PPO."""
        callback.on_rollout_start()
        for step in range(segment.n_steps):
            self.num_timesteps += segment.n_envs
            infos = segment.infos[step]
            dones = segment.dones[step]
            rewards = segment.rewards[step]
            actions = segment.actions[step]
            new_obs = segment.observation_after(step)
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            self._update_info_buffer(infos, dones)
        callback.on_rollout_end()
        return True

    # ------------------------------------------------------------------ learning

    def learn(
        self: SelfAsyncOnPolicyAlgorithm,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "OnPolicyAlgorithm",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfAsyncOnPolicyAlgorithm:
        iteration = 0
        total_timesteps, callback = self._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
        )
        assert self.env is not None

        buffer = CircularBuffer(self.circular_buffer_size, self.max_batch_reuse)
        self._circular_buffer = buffer
        collector = self._make_collector()
        self._collector = collector
        self._on_learn_start()
        self.trained_steps = 0
        failed = False
        try:
            # Started before the callbacks (a progress bar's thread, say), so that a forked collector
            # process copies no thread that holds a lock.
            collector.start()
            callback.on_training_start(locals(), globals())
            while True:
                if buffer.needs_batch():
                    # Stop where new data would be needed: every batch in the buffer has had its scheduled uses.
                    if self.num_timesteps >= total_timesteps:
                        break
                    segment = collector.get_segment()
                    if not self._replay_callbacks(segment, callback):
                        break
                    iteration += 1
                    self._update_current_progress_remaining(self.num_timesteps, total_timesteps)
                    if log_interval is not None and iteration % log_interval == 0:
                        self.dump_logs(iteration)
                    batch = TrainingBatch.from_segment(segment, self.device)
                    self._on_first_use(batch)
                    buffer.put(batch)
                    self.trained_steps += batch.size
                    self.policy.set_training_mode(True)  # callbacks (evaluation) may have switched it off
                    # Asynchrony: learner updates between the weights that collected the batch and now.
                    self._record_train_stats({"policy_lag": float(self._n_updates - batch.policy_version)})
                batch = buffer.next_batch()
                self._update_learning_rate(self.policy.optimizer)
                stats = self._train_step(batch)
                self._n_updates += 1
                self._record_train_stats(stats)
                self._after_update()
                if self._n_updates % self.broadcast_interval == 0:
                    collector.broadcast(self.policy.state_dict(), self._n_updates)
        except CollectorError:
            failed = True
            raise
        finally:
            collector.close()
            self._collector = None
            self._circular_buffer = None
            self._last_obs = collector.last_observation
            self.sampled_steps = collector.sampled_steps
            self.dropped_steps = self.sampled_steps - self.trained_steps
            self._broadcast_seconds = collector.broadcast_seconds
            self.collector_stats = collector.stats()
            if failed:
                close_env_after_failure(self.env)
                self._last_obs = None
        self._log_collection_counters()
        self.logger.dump(step=self.num_timesteps)
        callback.on_training_end()
        return self

    def _update_current_progress_remaining(self, num_timesteps: int, total_timesteps: int) -> None:
        # The last segment may overshoot total_timesteps: never let a schedule see negative progress.
        super()._update_current_progress_remaining(num_timesteps, total_timesteps)
        self._current_progress_remaining = max(self._current_progress_remaining, 0.0)

    def _on_learn_start(self) -> None:
        """Called in :meth:`learn` before collection starts (IMPACT builds its target network here)."""

    def _on_first_use(self, batch: TrainingBatch) -> None:
        """Called once per batch, when it enters the circular buffer (before its first gradient step)."""

    def _after_update(self) -> None:
        """Called after every batch draw (``_n_updates`` already counts it)."""

    @abstractmethod
    def _train_step(self, batch: TrainingBatch) -> dict[str, float]:
        """Train on one draw of ``batch``; returns the statistics to log (means over the log interval)."""

    def train(self) -> None:
        raise RuntimeError(f"{type(self).__name__} trains inside learn(), one batch at a time")

    @th.no_grad()
    def _bootstrap_values(self, batch: TrainingBatch, policy: ActorCriticPolicy) -> tuple[th.Tensor, th.Tensor]:
        """``V(next observation)`` ``[B]`` and ``V(final observation)`` ``[T, B]`` (zero where not truncated)."""
        values = policy.predict_values(batch.bootstrap_observations).flatten()
        final_values = th.zeros_like(batch.rewards)
        indices = batch.final_observation_indices
        if len(indices) > 0:
            final_values[indices[:, 0], indices[:, 1]] = values[batch.n_envs :]
        return values[: batch.n_envs], final_values

    def _vtrace_targets(
        self, batch: TrainingBatch, values: th.Tensor, target_log_probs: th.Tensor, policy: ActorCriticPolicy
    ) -> tuple[th.Tensor, th.Tensor]:
        """
        V-trace ``(vs, pg_advantages)`` ``[T, B]`` of ``batch``, with ``target_log_probs`` in the role of pi and
        ``values`` (``[T * B]``) plus ``policy``'s values of the bootstrap observations as V.
        """
        bootstrap_values, final_values = self._bootstrap_values(batch, policy)
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
        return th.exp(th.clamp(log_prob.detach() - behaviour_log_prob, max=MAX_LOG_RATIO))

    # ------------------------------------------------------------------ logging

    def _record_train_stats(self, stats: dict[str, float]) -> None:
        for key, value in stats.items():
            self._train_stats[key].append(value)

    def _log_collection_counters(self) -> None:
        """Sampled = trained + in flight while learning; sampled = trained + dropped once learn() has returned."""
        if self._collector is not None:
            sampled = self._collector.sampled_steps
            self.logger.record("collector/in_flight_steps", sampled - self.trained_steps)
            collector_stats = self._collector.stats()
        else:
            sampled = self.sampled_steps
            self.logger.record("collector/dropped_steps", self.dropped_steps)
            collector_stats = getattr(self, "collector_stats", {})
        for key, value in collector_stats.items():
            self.logger.record(f"collector/{key}", value)
        self.logger.record("collector/sampled_steps", sampled)
        self.logger.record("collector/trained_steps", self.trained_steps)

    def dump_logs(self, iteration: int = 0) -> None:
        for key, values in self._train_stats.items():
            if not values:
                continue
            if key.endswith("_max"):
                self.logger.record(f"train/{key}", float(np.max(values)))
            else:
                self.logger.record(f"train/{key}", float(np.mean(values)))
            if key == "policy_lag":
                self.logger.record("train/policy_lag_max", float(np.max(values)))
        self._train_stats.clear()
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        if self._circular_buffer is not None:
            self.logger.record("train/buffer_batches", len(self._circular_buffer))
            self.logger.record("train/buffer_batches_released", self._circular_buffer.released_batches)
            if self._circular_buffer.released_batches > 0:
                reuse = self._circular_buffer.released_uses / self._circular_buffer.released_batches
                self.logger.record("train/buffer_reuse_mean", reuse)
        self._log_collection_counters()
        super().dump_logs(iteration)
