"""
The one segment loop every algorithm here learns through: environment -> collector -> memory -> loss.

:class:`SegmentLoopMixin` builds the ``collector`` component, runs ``learn()`` over the segments it
delivers (SB3's callbacks replayed step by step, the step counters, progress, policy lag and the weight
broadcast, each written once here) and leaves two hooks to the algorithm: :meth:`~SegmentLoopMixin._store_segment`
(into its memory: a rollout buffer, a circular buffer, an episode memory) and
:meth:`~SegmentLoopMixin._train_on_segment` (its loss). :class:`OnPolicySegmentMixin` adds SB3's on-policy
surface (``rollout_buffer``, ``collect_rollouts``, ``train()`` after each segment) on top of it.
"""

import contextlib
import warnings
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import cloudpickle
import numpy as np
import torch as th
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import MaybeCallback
from stable_baselines3.common.utils import obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv

from sb3_impact.common.collectors import (
    Collector,
    CollectorError,
    SegmentSampler,
    SyncCollector,
    check_collector,
    resolved_collector_name,
)
from sb3_impact.common.env_util import close_env_after_failure, is_env_factory
from sb3_impact.common.policy_evaluation import segment_values
from sb3_impact.common.recurrent import constructor_parameters, is_recurrent, states_to_device
from sb3_impact.common.segments import Segment
from sb3_impact.common.threads import DEFAULT_LEARNER_THREADS, check_learner_threads, learner_threads

# The collection parameters before the collector component (see _migrate_saved_collection_parameters).
OLD_COLLECTION_PARAMETERS = ("async_collection", "collector_queue_size", "num_workers", "envs_per_worker", "ray_address")


def frozen_policy_copy(policy: BasePolicy, device: th.device | str) -> BasePolicy:
    """
    A copy of ``policy`` on ``device``, in evaluation mode and without gradients (a collector's policy, IMPACT's
    target network).

    Building it draws no random numbers from the global generator (it is forked around the construction), so that
    a seeded run draws the same actions whatever the collector.
    """
    with th.random.fork_rng(devices=[]):
        policy_copy = policy.__class__(**constructor_parameters(policy))
    policy_copy.load_state_dict(policy.state_dict())
    policy_copy = policy_copy.to(device)
    policy_copy.set_training_mode(False)
    policy_copy.requires_grad_(False)
    return policy_copy


class SegmentLoopMixin(ABC):
    """
    Mixed into an SB3 algorithm (before it in the bases) whose data comes from a ``collector``.

    The algorithm calls :meth:`_init_collection` in ``__init__`` (before SB3's, which it hands the env
    returned), implements :meth:`_segment_steps`, :meth:`_store_segment` and :meth:`_train_on_segment`, and
    its ``learn()`` is :meth:`_learn_from_segments`. ``env`` may be a factory (a picklable callable returning a
    ``gymnasium.Env``): the learner's VecEnv is then one environment built from it, and collectors that build
    their own environments (Ray) build them from it.

    The loop, for each segment: the callbacks' ``on_rollout_start``, one ``on_step`` per vector step (on the
    thread that called ``learn()``), :meth:`_store_segment`, ``on_rollout_end``; the progress and the logs
    (every ``log_interval`` segments); :meth:`_train_on_segment`; the broadcast of the new weights. It stops
    once ``total_timesteps`` are counted, and the collector is given that many steps (rounded up to whole
    segments) as its budget, so the environments step what was counted. Counters: ``sampled = trained +
    dropped`` once ``learn()`` has returned (dropped: collected, not trained on, e.g. after a callback stop), and
    ``broadcast_seconds``, the learner's time spent handing its weights to the collector in that call.
    """

    #: Collector options this algorithm sets unless ``collector_kwargs`` does, per collector name.
    default_collector_kwargs: ClassVar[dict[str, dict[str, Any]]] = {}
    env: VecEnv | None
    policy: BasePolicy
    num_timesteps: int
    _last_obs: Any
    _n_updates: int

    def _init_collection(
        self,
        env: Any,
        collector: str | type[Collector],
        collector_kwargs: dict[str, Any] | None,
        learner_threads: int | None = DEFAULT_LEARNER_THREADS,
    ) -> Any:
        """
        Check the collection parameters (the one check of ``collector_kwargs``) and the learner's threads, and store
        them; returns the env to hand to SB3 (a factory is called).
        """
        self.learner_threads = check_learner_threads(learner_threads)
        # Where remote workers build their environments from: the id or factory the learner's env came from.
        worker_env = env if isinstance(env, str) or is_env_factory(env) else None
        collector_type = check_collector(collector, collector_kwargs)
        if collector_type.needs_env_source and worker_env is None:
            raise ValueError(
                f"env: collector={collector!r} builds the environments inside its workers, so env must be given as an "
                "environment id or a picklable factory (a callable returning a gymnasium.Env), not an env instance"
            )
        self.collector = collector
        self.collector_kwargs = dict(collector_kwargs or {})
        self.worker_env = worker_env
        # Counters of the last learn() call (see _record_collection_logs)
        self.sampled_steps = 0
        self.trained_steps = 0
        self.dropped_steps = 0
        self.broadcast_seconds = 0.0  # learner time spent handing its weights to the collector
        self.collector_stats: dict[str, float] = {}
        self._collector: Collector | None = None
        self._policy_lags: list[float] = []
        return env() if is_env_factory(env) else env

    def _migrate_saved_collection_parameters(self) -> None:
        """
        A model saved before the collector component held ``async_collection``, ``collector_queue_size``,
        ``num_workers``, ``envs_per_worker`` and ``ray_address``: load() gives them back as attributes, which are
        turned into ``collector`` and ``collector_kwargs`` here (``async_collection=False`` is ``"sync"``).
        """
        old = {name: self.__dict__.pop(name) for name in OLD_COLLECTION_PARAMETERS if name in self.__dict__}
        if not old:
            return
        if old.get("async_collection") is False:
            self.collector = "sync"
        options = {"queue_size": old.get("collector_queue_size"), "num_workers": old.get("num_workers")}
        options.update(envs_per_worker=old.get("envs_per_worker"), address=old.get("ray_address"))
        if self.collector == "ray":
            self.collector_kwargs = {**{k: v for k, v in options.items() if v is not None}, **self.collector_kwargs}
        elif self.collector != "sync" and options["queue_size"] not in (None, 1):
            self.collector_kwargs = {"queue_size": options["queue_size"], **self.collector_kwargs}

    def _collection_excluded_save_params(self) -> list[str]:
        """What SB3's save must leave out: the running collector, and a factory that cannot be pickled."""
        excluded = ["_collector", "_policy_lags", "_last_lstm_states"]
        if not isinstance(self.worker_env, (str, type(None))):
            try:
                cloudpickle.dumps(self.worker_env)
            except Exception as error:
                warnings.warn(
                    f"the env factory cannot be pickled ({error!r}) and is not saved: set model.worker_env after "
                    "load() to use collector='ray'",
                    UserWarning,
                    stacklevel=4,
                )
                excluded.append("worker_env")
        return excluded

    # ------------------------------------------------------------------ hooks of the algorithm

    @abstractmethod
    def _segment_steps(self) -> int:
        """Vector steps of one collected segment."""

    @abstractmethod
    def _store_segment(self, segment: Segment) -> None:
        """Put a collected segment into the algorithm's memory (after its ``on_step`` callbacks, before ``on_rollout_end``)."""

    @abstractmethod
    def _train_on_segment(self, segment: Segment) -> None:
        """Train after a segment was stored (the weights are broadcast after it)."""

    def _on_learn_start(self, collector: Collector) -> None:
        """Called in :meth:`_learn_from_segments` once the collector runs, before the first segment (default: nothing)."""
        return None

    def _on_learn_end(self) -> None:
        """Called at the end of :meth:`_learn_from_segments` (however it ends, the collector closed); default: nothing."""
        return None

    # ------------------------------------------------------------------ the collector

    def make_collector(self, segment_steps: int | None = None, env: VecEnv | None = None) -> Collector:
        """
        The collector a ``learn()`` call starts, built from ``collector`` and ``collector_kwargs``, not started
        (``segment_steps`` vector steps a segment, default the algorithm's; ``env``, default the algorithm's). Built
        outside ``learn()`` it has no step budget; its caller starts and closes it.
        """
        env = self.env if env is None else env
        assert env is not None
        if self._last_obs is None:
            self._last_obs = env.reset()
        # The same check as at construction: collector_kwargs given to load() or set since are checked too.
        collector_type = check_collector(self.collector, self.collector_kwargs)
        # In the learner's thread the sampler steps the learner's own policy, as SB3's loops do.
        policy = self.policy if collector_type.in_learner_thread else frozen_policy_copy(self.policy, "cpu")
        steps = self._segment_steps() if segment_steps is None else segment_steps
        sampler = SegmentSampler(env, policy, steps, self._last_obs, env_source=self.worker_env)
        # Episodes that go on from the last learn() call (SB3 resets them unless reset_num_timesteps=False) keep
        # their episode starts and, with a recurrent policy, their LSTM states (as RecurrentPPO's learn()).
        last_episode_starts = getattr(self, "_last_episode_starts", None)
        if last_episode_starts is not None and len(last_episode_starts) == env.num_envs:
            sampler.episode_starts = np.array(last_episode_starts, dtype=bool)
            if sampler.lstm_states is not None and getattr(self, "_last_lstm_states", None) is not None:
                sampler.lstm_states = states_to_device(self._last_lstm_states, policy.device)
        sampler.policy_version = self._n_updates
        sampler.sde_sample_freq = getattr(self, "sde_sample_freq", -1)
        name = resolved_collector_name(self.collector)
        options = {**self.default_collector_kwargs.get(name, {}), **self.collector_kwargs}
        return collector_type(sampler, **options)

    @contextlib.contextmanager
    def _collecting(self, step_budget: int | None) -> Iterator[Collector]:
        """
        Start a collector for the body of a learn() call and always close it: after a normal end, an
        exception, Ctrl-C or a callback stop. Leaves the counters and ``_last_obs`` as the collector left them.
        """
        assert self.env is not None
        collector = self.make_collector()
        collector.set_step_budget(step_budget)
        self._collector = collector
        self.trained_steps = 0
        self._policy_lags = []
        failed = False
        try:
            # Started before the callbacks (a progress bar's thread, say), so that a forked collector
            # process copies no thread that holds a lock.
            collector.start()
            yield collector
        except CollectorError:
            failed = True
            raise
        finally:
            collector.close()
            self._collector = None
            self._last_obs = collector.last_observation
            # The collector stepped this process's VecEnv (sync, thread): its episodes and LSTM states go on from here.
            stepped_here = self._last_obs is not None
            self._last_lstm_states = collector.sampler.lstm_states if stepped_here else None
            if stepped_here:
                self._last_episode_starts = collector.sampler.episode_starts
            self.sampled_steps = collector.sampled_steps
            self.dropped_steps = self.sampled_steps - self.trained_steps
            self.broadcast_seconds = collector.broadcast_seconds
            self.collector_stats = collector.stats()
            if failed:
                close_env_after_failure(self.env)
                self._last_obs = None

    def _broadcast_weights(self) -> None:
        """Publish the learner's weights to the running collector (version: ``_n_updates``)."""
        if self._collector is None:
            return
        if self._collector.in_learner_thread:  # it samples with the learner's own policy: no weights to copy
            self._collector.broadcast({}, self._n_updates)
        else:
            self._collector.broadcast(self.policy.state_dict(), self._n_updates)

    # ------------------------------------------------------------------ the loop

    def _learn_from_segments(
        self,
        total_timesteps: int,
        callback: MaybeCallback,
        log_interval: int | None,
        tb_log_name: str,
        reset_num_timesteps: bool,
        progress_bar: bool,
    ) -> Any:
        """SB3's ``learn()``: collect, store, train, broadcast, one segment at a time (see the class docstring)."""
        total_timesteps, callback = self._setup_learn(  # type: ignore[attr-defined]
            total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
        )
        assert self.env is not None
        iteration = 0
        # A model saved before learner_threads existed loads without it: the default.
        threads = getattr(self, "learner_threads", DEFAULT_LEARNER_THREADS)
        try:
            with learner_threads(threads), self._collecting(max(total_timesteps - self.num_timesteps, 0)) as collector:
                callback.on_training_start(locals(), globals())
                self._on_learn_start(collector)
                while self.num_timesteps < total_timesteps:
                    segment = collector.get_segment()
                    self._policy_lags.append(float(self._n_updates - segment.policy_version))
                    if not self._replay_segment(segment, callback, self._store_segment):
                        break
                    iteration += 1
                    self._update_current_progress_remaining(self.num_timesteps, total_timesteps)
                    if log_interval is not None and iteration % log_interval == 0:
                        self.dump_logs(iteration)
                    self._train_on_segment(segment)
                    self.trained_steps += segment.size
                    self._broadcast_weights()
        finally:
            self._on_learn_end()
        # As SB3: the last values stay in the logger (name_to_value) until the next dump.
        self._record_collection_logs()
        callback.on_training_end()
        return self

    def _replay_segment(self, segment: Segment, callback: BaseCallback, store: Callable[[Segment], None]) -> bool:
        """
        SB3's per-step bookkeeping for a collected segment, as its ``collect_rollouts`` does: ``on_step`` for
        every vector step, then ``store(segment)``, then ``on_rollout_end``. False if a callback stopped training
        (the segment is then not stored).
        """
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
            self._update_info_buffer(infos, dones)  # type: ignore[attr-defined]
        store(segment)
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    def _update_current_progress_remaining(self, num_timesteps: int, total_timesteps: int) -> None:
        # The last segment may overshoot total_timesteps: never let a schedule see negative progress.
        super()._update_current_progress_remaining(num_timesteps, total_timesteps)  # type: ignore[misc]
        self._current_progress_remaining = max(self._current_progress_remaining, 0.0)

    # ------------------------------------------------------------------ logs

    def _record_collection_logs(self) -> None:
        """
        ``train/policy_lag(_max)`` (learner updates between the weights that collected a segment and the moment
        it was taken, over the segments since the last dump) and the ``collector/`` counters: sampled = trained +
        in flight while learning, sampled = trained + dropped once learn() has returned.
        """
        logger = self.logger  # type: ignore[attr-defined]
        if self._policy_lags:
            logger.record("train/policy_lag", float(np.mean(self._policy_lags)))
            logger.record("train/policy_lag_max", float(np.max(self._policy_lags)))
            self._policy_lags.clear()
        if self._collector is not None:
            sampled = self._collector.sampled_steps
            logger.record("collector/in_flight_steps", sampled - self.trained_steps)
            collector_stats = self._collector.stats()
        else:
            sampled = self.sampled_steps
            logger.record("collector/dropped_steps", self.dropped_steps)
            collector_stats = self.collector_stats
        for key, value in collector_stats.items():
            logger.record(f"collector/{key}", value)
        logger.record("collector/sampled_steps", sampled)
        logger.record("collector/trained_steps", self.trained_steps)

    def dump_logs(self, *args: Any, **kwargs: Any) -> None:
        self._record_collection_logs()
        super().dump_logs(*args, **kwargs)  # type: ignore[misc]


class OnPolicySegmentMixin(SegmentLoopMixin):
    """
    :class:`SegmentLoopMixin` with SB3's on-policy surface: ``rollout_buffer`` (a behaviour-recording rollout
    buffer) and ``collect_rollouts``, which fills it from one segment, with values, GAE and value targets
    from the learner's current value function. Inside ``learn()`` the segment comes from the running collector;
    outside, from a synchronous collection on ``env`` with the current policy.
    """

    n_steps: int
    _last_episode_starts: np.ndarray

    def _train_on_segment(self, segment: Segment) -> None:
        """SB3's on-policy cycle: ``train()`` after each stored segment."""
        self.train()  # type: ignore[attr-defined]

    @th.no_grad()
    def _predict_values(self, observations: Any) -> np.ndarray:
        """V of numpy observations under the learner's current policy."""
        return self.policy.predict_values(obs_as_tensor(observations, self.device)).flatten().cpu().numpy()  # type: ignore[attr-defined,operator]

    def _fill_rollout_buffer(self, segment: Segment, rollout_buffer: RolloutBuffer) -> None:
        """``rollout_buffer`` from ``segment``, with values and GAE from the learner's current value function."""
        values, last_values, final_values = segment_values(segment, self._predict_values)
        first_episode_starts = np.asarray(self._last_episode_starts, dtype=np.float32)
        rollout_buffer.add_segment(segment, values, final_values, first_episode_starts)  # type: ignore[attr-defined]
        rollout_buffer.compute_returns_and_advantage(last_values=th.as_tensor(last_values), dones=segment.dones[-1])
        self._last_episode_starts = segment.dones[-1]

    def collect_rollouts(
        self, env: VecEnv, callback: BaseCallback, rollout_buffer: RolloutBuffer, n_rollout_steps: int
    ) -> bool:
        """
        SB3's on-policy collection: ``n_rollout_steps`` vector steps of ``env`` into ``rollout_buffer``, with the
        callbacks called as SB3's PPO calls them. Returns False if a callback stopped training.
        """
        if is_recurrent(self.policy):
            raise ValueError(
                "collect_rollouts fills SB3's rollout buffer, which holds no LSTM state: a recurrent policy trains in "
                "learn(), from segments that carry the LSTM states they started from"
            )
        if self._collector is not None:
            if n_rollout_steps != self._collector.sampler.n_steps:
                raise ValueError(
                    f"n_rollout_steps={n_rollout_steps}, but the running collector's segments have "
                    f"{self._collector.sampler.n_steps} steps"
                )
            segment = self._collector.get_segment()
        else:
            if self.ep_info_buffer is None:  # a model that never learned: SB3 creates these in _setup_learn
                self.ep_info_buffer = deque(maxlen=self._stats_window_size)
                self.ep_success_buffer = deque(maxlen=self._stats_window_size)
            own_env = env is self.env and self._last_obs is not None
            if not own_env:
                self._last_episode_starts = np.ones((env.num_envs,), dtype=bool)
            sampler = SegmentSampler(env, self.policy, n_rollout_steps, self._last_obs if own_env else env.reset())
            sampler.sde_sample_freq = getattr(self, "sde_sample_freq", -1)
            segment = SyncCollector(sampler).get_segment()
            if env is self.env:
                self._last_obs = sampler.last_observation
        self.policy.set_training_mode(False)
        return self._replay_segment(segment, callback, lambda stored: self._fill_rollout_buffer(stored, rollout_buffer))
