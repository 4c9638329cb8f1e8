"""
What every algorithm here shares to learn from a :class:`~sb3_impact.common.collectors.Collector`: its
parameters (checked once), the collector's construction and lifecycle, SB3's per-step bookkeeping for
each collected segment, and the step counters (``sampled = trained + dropped``).
"""

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from sb3_impact.common.collectors import (
    COLLECTOR_NAMES,
    Collector,
    CollectorError,
    ProcessCollector,
    SegmentSampler,
    SyncCollector,
    ThreadCollector,
)
from sb3_impact.common.segments import Segment

EnvFactory = Callable[[], gym.Env]


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


def check_collector_parameters(
    async_collection: bool,
    collector: str,
    collector_queue_size: int,
    worker_env: str | EnvFactory | None,
    num_workers: int | None,
    envs_per_worker: int | None,
    ray_address: str | None,
) -> None:
    """ValueError/TypeError naming the parameter, for the collection parameters every algorithm here takes."""
    if not isinstance(async_collection, (bool, np.bool_)):
        raise TypeError(f"async_collection must be a bool, got {async_collection!r}")
    if collector not in COLLECTOR_NAMES:
        raise ValueError(f"collector must be one of {sorted(COLLECTOR_NAMES)}, got {collector!r}")
    if isinstance(collector_queue_size, bool) or not isinstance(collector_queue_size, (int, np.integer)):
        raise ValueError(f"collector_queue_size must be an integer >= 1, got {collector_queue_size!r}")
    if collector_queue_size < 1:
        raise ValueError(f"collector_queue_size must be an integer >= 1, got {collector_queue_size!r}")
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
    from sb3_impact.common.collectors.ray import import_ray

    import_ray()  # ImportError naming the extra to install
    if not async_collection:
        raise ValueError("collector='ray' collects asynchronously: it needs async_collection=True")
    if worker_env is None:
        raise ValueError(
            "env: collector='ray' builds the environments inside remote workers, so env must be given as an "
            "environment id or a picklable factory (a callable returning a gymnasium.Env), not an env instance"
        )


class CollectorMixin:
    """
    Mixed into an SB3 algorithm (before it in the bases) whose data comes from a collector.

    The algorithm calls :meth:`_init_collection` in ``__init__`` (before SB3's, which it hands the env
    returned), opens :meth:`_collecting` around its training loop, calls :meth:`_replay_callbacks` for every
    segment it takes and adds the segment's size to ``trained_steps`` when it trains on it. ``env`` may be a
    factory (a picklable callable returning a ``gymnasium.Env``): the learner's VecEnv is then one environment
    built from it. With ``collector="ray"``, ``num_workers`` Ray actors each build ``envs_per_worker``
    environments from the id or factory that ``env`` was given as; the learner's own VecEnv only defines the
    spaces.
    """

    # Whether the thread collector caps the learner's torch threads (see ThreadCollector); by measurement.
    thread_collector_limits_threads: bool = False
    env: VecEnv | None
    policy: BasePolicy
    num_timesteps: int
    _last_obs: Any
    _n_updates: int

    def _init_collection(
        self,
        env: Any,
        async_collection: bool,
        collector: str,
        collector_queue_size: int,
        num_workers: int | None,
        envs_per_worker: int | None,
        ray_address: str | None,
    ) -> Any:
        """Check and store the collection parameters; returns the env to hand to SB3 (a factory is called)."""
        # Where remote workers build their environments from: the id or factory the learner's env came from.
        worker_env = env if isinstance(env, str) or is_env_factory(env) else None
        check_collector_parameters(
            async_collection, collector, collector_queue_size, worker_env, num_workers, envs_per_worker, ray_address
        )
        self.async_collection = bool(async_collection)
        self.collector = collector
        self.collector_queue_size = int(collector_queue_size)
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
        return env() if is_env_factory(env) else env

    def _collection_excluded_save_params(self) -> list[str]:
        """What SB3's save must leave out: the running collector, and a factory that cannot be pickled."""
        excluded = ["_collector"]
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

    def _make_policy_copy(self, device: th.device | str) -> BasePolicy:
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

    def _make_collector(self, segment_steps: int) -> Collector:
        """The collector of one learn() call, sampling segments of ``segment_steps`` vector steps."""
        assert self.env is not None and self._last_obs is not None
        sampler = SegmentSampler(self.env, self._make_policy_copy("cpu"), segment_steps, self._last_obs)
        sampler.policy_version = self._n_updates
        sampler.sde_sample_freq = getattr(self, "sde_sample_freq", -1)
        if not self.async_collection:
            return SyncCollector(sampler)
        if self.collector == "ray":
            from sb3_impact.common.collectors.ray import RayCollector

            return RayCollector(
                sampler,
                queue_size=self.collector_queue_size,
                worker_env=self.worker_env,
                num_workers=self.num_workers,
                envs_per_worker=self.envs_per_worker or 1,
                address=self.ray_address,
            )
        if self.collector == "thread":
            return ThreadCollector(
                sampler, queue_size=self.collector_queue_size, limit_learner_threads=self.thread_collector_limits_threads
            )
        return ProcessCollector(sampler, queue_size=self.collector_queue_size)

    @contextlib.contextmanager
    def _collecting(self, segment_steps: int) -> Iterator[Collector]:
        """
        Start a collector for the body of a learn() call and always close it: after a normal end, an
        exception, Ctrl-C or a callback stop. Leaves the counters and ``_last_obs`` as the collector left them.
        """
        assert self.env is not None
        collector = self._make_collector(segment_steps)
        self._collector = collector
        self.trained_steps = 0
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
            self.sampled_steps = collector.sampled_steps
            self.dropped_steps = self.sampled_steps - self.trained_steps
            self._broadcast_seconds = collector.broadcast_seconds
            self.collector_stats = collector.stats()
            if failed:
                close_env_after_failure(self.env)
                self._last_obs = None

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
            self._update_info_buffer(infos, dones)  # type: ignore[attr-defined]
        callback.on_rollout_end()
        return True

    def _log_collection_counters(self) -> None:
        """Sampled = trained + in flight while learning; sampled = trained + dropped once learn() has returned."""
        logger = self.logger  # type: ignore[attr-defined]
        if self._collector is not None:
            sampled = self._collector.sampled_steps
            logger.record("collector/in_flight_steps", sampled - self.trained_steps)
            collector_stats = self._collector.stats()
        else:
            sampled = self.sampled_steps
            logger.record("collector/dropped_steps", self.dropped_steps)
            collector_stats = getattr(self, "collector_stats", {})
        for key, value in collector_stats.items():
            logger.record(f"collector/{key}", value)
        logger.record("collector/sampled_steps", sampled)
        logger.record("collector/trained_steps", self.trained_steps)
