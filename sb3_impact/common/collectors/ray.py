"""
A collector whose environments run in Ray actors, on this machine or across a Ray cluster.

Ray is optional: this module imports it only when a :class:`RayCollector` is built or started
(``pip install "sb3-impact[ray]"``), so ``import sb3_impact`` never imports Ray.

Each actor (:class:`RolloutWorker`) builds ``envs_per_worker`` environments from an environment id or a
picklable factory, holds a CPU copy of the policy (PyTorch limited to one thread) and returns one
:class:`~sb3_impact.common.segments.Segment` of numpy arrays per request, with the behaviour log-probabilities
and distribution parameters of its actions and the policy version that chose them. The driver keeps at most
``queue_size`` requests in flight per actor and waits for whichever finishes first (``ray.wait``), so memory
stays bounded and a slow worker never blocks the others. The learner's weights are put in Ray's object store
at most once per broadcast (lazily, when a request needs them); a request carries the reference only when the
actor's copy is older, and Ray fetches the object once per node.
"""

import contextlib
import inspect
import logging
import math
import os
import random
import threading
import time
import uuid
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.policies import BasePolicy

from sb3_impact.common.collectors.base import Collector, CollectorError, check_queue_size
from sb3_impact.common.collectors.sampler import CollectionInterrupted, SegmentSampler, skip_distribution_argument_checks
from sb3_impact.common.segments import Segment

RAY_INSTALL_HINT = 'collector="ray" needs Ray, an optional dependency: pip install "sb3-impact[ray]"'

EnvDescription = str | Callable[[], gym.Env]


def import_ray() -> Any:
    """The ``ray`` module, or an ImportError that says which extra to install."""
    try:
        import ray
    except ImportError as error:
        raise ImportError(RAY_INSTALL_HINT) from error
    return ray


def _writable(value: Any) -> Any:
    """A writable copy of an array (or of each array of a dict) that Ray deserialised read-only, zero-copy."""
    if isinstance(value, np.ndarray) and not value.flags.writeable:
        return value.copy()
    if isinstance(value, dict):
        return {key: _writable(item) for key, item in value.items()}
    return value


def own_segment_arrays(segment: Segment) -> Segment:
    """Give ``segment`` its own writable arrays, as PyTorch expects of the arrays it wraps."""
    for name in (
        "observations",
        "actions",
        "rewards",
        "terminations",
        "truncations",
        "behaviour_log_probs",
        "behaviour_params",
        "next_observations",
        "final_observations",
        "final_observation_indices",
    ):
        setattr(segment, name, _writable(getattr(segment, name)))
    return segment


def cpus_taken(n_workers: int, num_cpus_per_worker: float) -> int:
    """Whole cores that ``n_workers`` workers asking ``num_cpus_per_worker`` CPUs each take on their node."""
    return math.ceil(n_workers * num_cpus_per_worker - 1e-9)


class RolloutWorker:
    """
    What runs inside one Ray actor: a VecEnv built from ``env`` (an id or a factory) and a CPU policy copy.

    ``sample`` (the default concurrency group, one at a time) collects one segment; ``stop`` runs in the
    ``control`` group, beside a ``sample`` in progress, and makes it return the number of steps it took.
    """

    def __init__(
        self,
        env: EnvDescription,
        n_envs: int,
        policy: BasePolicy,
        n_steps: int,
        policy_version: int,
        seed: int,
        first_env_id: int = 0,
        sde_sample_freq: int = -1,
    ) -> None:
        th.set_num_threads(1)
        skip_distribution_argument_checks()
        th.manual_seed(seed)
        np.random.seed(seed % 2**32)
        random.seed(seed)
        vec_env = make_vec_env(env, n_envs=n_envs, seed=seed)  # Monitor-wrapped: infos carry episode stats
        policy.set_training_mode(False)
        self.sampler = SegmentSampler(vec_env, policy, n_steps, vec_env.reset())
        self.sampler.policy_version = policy_version
        self.sampler.sde_sample_freq = sde_sample_freq  # gSDE: the driver's sampler's setting
        self.sampler.env_ids = first_env_id + np.arange(n_envs)  # segments say whose environments they come from
        self._fresh_envs = True  # the first segment starts from the reset above
        self._stop = threading.Event()

    def describe(self) -> dict[str, Any]:
        """Where the worker runs and the spaces of its environments."""
        import ray

        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "observation_space": self.sampler.env.observation_space,
            "action_space": self.sampler.env.action_space,
        }

    def sample(self, weights: dict[str, th.Tensor] | None, version: int) -> Segment | int:
        """One segment, after loading ``weights`` if given; after :meth:`stop`, the number of steps taken instead."""
        if weights is not None:
            self.sampler.load_weights(weights, version)
        steps_before = self.sampler.sampled_steps
        try:
            segment = self.sampler.collect(self._stop)
        except CollectionInterrupted:
            return self.sampler.sampled_steps - steps_before
        segment.envs_reset, self._fresh_envs = self._fresh_envs, False
        return segment

    def stop(self) -> None:
        self._stop.set()


@dataclass
class _WorkerSlot:
    """Driver-side state of one worker position; a replacement actor takes over the slot of a failed one."""

    index: int
    actor: Any
    version: int  # the weights version the actor has (or will have once its queued requests run)
    pending: list[Any] = field(default_factory=list)  # object refs of its requests, oldest first
    node_id: str | None = None
    pid: int | None = None  # of the actor started first in the slot; None once it was replaced
    delivered_steps: int = 0


@dataclass(frozen=True)
class WorkerStats:
    """One worker position of a :class:`RayCollector`, as :meth:`RayCollector.worker_stats` reads it."""

    index: int
    #: Ray node id and process id of the actor started first in this position (``pid`` is None once it was replaced).
    node_id: str | None
    pid: int | None
    #: Environment steps of the segments this position delivered to the learner (its replacements' included).
    delivered_steps: int


class RayCollector(Collector):
    """
    Collects segments in ``num_workers`` Ray actors, each stepping ``envs_per_worker`` environments.

    Ray is initialised on :meth:`start` unless it already is: locally with all of this machine's CPUs when
    neither ``address`` nor ``RAY_ADDRESS`` is given, otherwise by connecting to that cluster (``"auto"`` finds
    a local head started with ``ray start --head``). Ray is shut down on :meth:`close` only if this collector
    started it. Each worker asks Ray for ``num_cpus_per_worker`` CPUs (1 by default; a fraction such as 0.25 lets
    several workers share a core, as RLlib's env runners do, for environments that wait more than they compute).
    ``num_workers=None`` fills the cluster's CPUs minus one (the learner's) with workers of that size. A request
    the cluster cannot place (more CPUs than it has, or than are free) is refused by :meth:`start` at once, with
    the numbers.

    Faults: a request that fails (the actor died, its node was lost, or its environment raised) makes the
    driver kill that actor and start a replacement with fresh seeds; the failed request counts as a full
    segment in ``lost_steps`` (its partial steps are unknown) and the requests queued behind it are cancelled.
    After more than ``max_restarts`` replacements, :meth:`get_segment` raises :class:`CollectorError` with the
    last failure as its cause. Every actor is killed by :meth:`close`.

    The learner's VecEnv is not stepped: it only defines the spaces the workers' environments must match.
    """

    start_timeout = 300.0  # seconds for the actors to be scheduled and build their environments
    free_cpus_wait = 5.0  # seconds start() waits for enough free CPUs before it refuses the request
    stop_timeout = 10.0  # seconds close() waits for requests in progress to report their steps
    poll_seconds = 0.1  # ray.wait slices, so that a KeyboardInterrupt is seen promptly
    continues_episodes = False
    needs_env_source = True
    max_restarts = 10
    lag_window = 100

    @classmethod
    def check_options(cls, **options: Any) -> None:
        import_ray()  # ImportError naming the extra to install
        # The options, with their defaults, are __init__'s arguments (written once, there).
        bound = inspect.signature(cls.__init__).bind_partial(**options)
        bound.apply_defaults()
        values = bound.arguments
        queue_size, num_workers, envs_per_worker = values["queue_size"], values["num_workers"], values["envs_per_worker"]
        address, cpus = values["address"], values["num_cpus_per_worker"]
        check_queue_size(queue_size)
        for name, value in (("num_workers", num_workers), ("envs_per_worker", envs_per_worker)):
            if value is None and name == "num_workers":
                continue
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"collector_kwargs: {name} must be an integer >= 1, got {value!r}")
        if address is not None and not isinstance(address, str):
            raise TypeError(f"collector_kwargs: address must be a string (host:port or 'auto') or None, got {address!r}")
        if isinstance(cpus, bool) or not isinstance(cpus, int | float | np.integer | np.floating):
            raise TypeError(f"collector_kwargs: num_cpus_per_worker must be a number, got {cpus!r}")
        if not (np.isfinite(cpus) and cpus > 0 and (cpus <= 1 or float(cpus).is_integer())):
            # Ray's own rule for resource requests: a fraction of one CPU, or whole CPUs.
            raise ValueError(
                f"collector_kwargs: num_cpus_per_worker must be in (0, 1] or a whole number of CPUs, got {cpus!r}"
            )

    def __init__(
        self,
        sampler: SegmentSampler,
        queue_size: int = 1,
        num_workers: int | None = None,
        envs_per_worker: int = 1,
        address: str | None = None,
        num_cpus_per_worker: float = 1.0,
    ) -> None:
        super().__init__(sampler)
        worker_env = sampler.env_source
        if worker_env is None or not (isinstance(worker_env, str) or callable(worker_env)):
            raise ValueError(
                f"collector='ray' builds the environments in its workers from the env id or factory the algorithm was "
                f"given, got {worker_env!r} (set model.worker_env after loading a model whose env factory could not "
                "be saved)"
            )
        self.queue_size = queue_size
        self.worker_env = worker_env
        self.num_workers = num_workers
        self.envs_per_worker = envs_per_worker
        self.address = address
        self.num_cpus_per_worker = float(num_cpus_per_worker)
        self.restarts = 0
        self.lost_steps = 0  # steps of requests lost with a failed worker
        self.queued_steps_dropped = 0  # steps collected but not delivered when the collector closed
        self.weight_puts = 0
        self.delivered_segments = 0
        self.driver_seconds = 0.0  # driver time spent on delivered segments: fetch, copy, next request
        self._ray: Any = None
        self._actor_class: Any = None
        self._started_ray = False
        self._run_id = uuid.uuid4().hex[:8]
        self._slots: list[_WorkerSlot] = []
        self._pending: list[Any] = []  # every request in flight, oldest first
        self._owner: dict[Any, int] = {}  # request -> slot index
        self._sampled_steps = 0
        self._version = sampler.policy_version
        self._initial_version = sampler.policy_version
        self._weights: dict[str, th.Tensor] | None = None  # newest broadcast, not yet in the object store
        self._weights_ref: Any = None
        self._policy_ref: Any = None
        self._lags: deque[int] = deque(maxlen=self.lag_window)
        self._start_time: float | None = None
        self._closed = False

    @property
    def segment_size(self) -> int:
        return self.sampler.n_steps * self.envs_per_worker

    def _release_budget(self) -> None:
        """A request that will never deliver (lost with its worker, or cancelled) gives its steps back."""
        self.started_steps -= self.segment_size

    @property
    def num_envs(self) -> int:
        """``num_workers * envs_per_worker`` (once started, when ``num_workers`` comes from the cluster)."""
        return (self.num_workers or 0) * self.envs_per_worker

    @property
    def sampled_steps(self) -> int:
        """Steps known to the driver: delivered, waiting, lost with a failed worker, or reported at close."""
        return self._sampled_steps

    @property
    def last_observation(self):
        # The learner's VecEnv was not stepped: the algorithm resets it before collecting again.
        return None

    @property
    def actors(self) -> list[Any]:
        """Handles of the live actors (for inspection; the collector owns them)."""
        return [slot.actor for slot in self._slots]

    @property
    def worker_nodes(self) -> list[str | None]:
        """Ray node id of each worker (of the first actor in each slot)."""
        return [slot.node_id for slot in self._slots]

    def worker_stats(self) -> list[WorkerStats]:
        """
        Each worker position's node, process and delivered steps, read on the driver (no request to the workers):
        what a benchmark needs to rate the workers apart and to read their processes' CPU time.
        """
        return [WorkerStats(slot.index, slot.node_id, slot.pid, slot.delivered_steps) for slot in self._slots]

    # ------------------------------------------------------------------ lifecycle

    def _init_ray(self) -> None:
        ray = self._ray
        if ray.is_initialized():
            return
        if self.address is None and not os.environ.get("RAY_ADDRESS"):
            ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level=logging.WARNING)
        else:
            ray.init(address=self.address, logging_level=logging.WARNING)
        self._started_ray = True

    def _new_actor(self, index: int) -> Any:
        ray = self._ray
        # Drawn from (and advancing) the driver's generator: reproducible with a seed, new for every actor.
        seed = int(th.randint(0, 2**31 - 1, (1,)).item())
        if self._actor_class is None:
            self._actor_class = ray.remote(concurrency_groups={"control": 1})(RolloutWorker)
        return self._actor_class.options(
            num_cpus=self.num_cpus_per_worker,
            max_restarts=0,  # replaced by the driver, which counts the lost segment
            name=f"sb3_impact_worker_{self._run_id}_{index}_{self.restarts}",
        ).remote(
            self.worker_env,
            self.envs_per_worker,
            self._policy_ref,
            self.sampler.n_steps,
            self._initial_version,
            seed,
            first_env_id=index * self.envs_per_worker,
            sde_sample_freq=self.sampler.sde_sample_freq,
        )

    def start(self) -> None:
        if self._start_time is not None:
            raise RuntimeError("RayCollector.start() called twice")
        self._ray = import_ray()
        self._start_time = time.monotonic()
        self._init_ray()
        ray = self._ray
        if self.num_workers is None:
            cluster_cpus = ray.cluster_resources().get("CPU", 1)
            self.num_workers = max(1, int((cluster_cpus - 1) / self.num_cpus_per_worker + 1e-9))
        self._check_cluster_resources()
        self._policy_ref = ray.put(self.sampler.policy)
        for index in range(self.num_workers):  # one by one: close() kills those created before an interruption
            self._slots.append(_WorkerSlot(index, self._new_actor(index), self._initial_version))
        descriptions = self._describe_workers()
        for slot, description in zip(self._slots, descriptions, strict=True):
            slot.node_id, slot.pid = description["node_id"], description["pid"]
        self._check_spaces(descriptions[0])
        self._limit_learner_threads()
        for slot in self._slots:
            for _ in range(self.queue_size):
                self._submit(slot)

    def _resource_request(self) -> str:
        return (
            f"num_workers={self.num_workers} x num_cpus_per_worker={self.num_cpus_per_worker:g} = "
            f"{self.num_workers * self.num_cpus_per_worker:g} CPUs"
        )

    def _check_cluster_resources(self) -> None:
        """
        Refuse at once a request the cluster cannot place: more CPUs than it has in all, or than it has free
        after ``free_cpus_wait`` seconds (CPUs held by actors being killed come back within that time).
        """
        ray = self._ray
        asked = self.num_workers * self.num_cpus_per_worker
        total = ray.cluster_resources().get("CPU", 0.0)
        hint = "lower num_workers, or ask for a fraction of a CPU per worker (collector_kwargs num_cpus_per_worker=0.5)"
        if asked > total + 1e-9:
            raise CollectorError(
                f"the Ray cluster cannot place the workers: {self._resource_request()} asked, the cluster has "
                f"{total:g} CPUs in all; {hint}"
            )
        deadline = time.monotonic() + self.free_cpus_wait
        while (available := ray.available_resources().get("CPU", 0.0)) < asked - 1e-9:
            if time.monotonic() > deadline:
                raise CollectorError(
                    f"the Ray cluster cannot place the workers now: {self._resource_request()} asked, {available:g} of "
                    f"its {total:g} CPUs are free (the others are held by other actors or tasks); {hint}"
                )
            time.sleep(0.1)

    def _describe_workers(self) -> list[dict[str, Any]]:
        ray = self._ray
        try:
            return ray.get([slot.actor.describe.remote() for slot in self._slots], timeout=self.start_timeout)
        except ray.exceptions.GetTimeoutError as error:
            cpus = ray.cluster_resources().get("CPU", 0)
            raise CollectorError(
                f"the Ray workers did not start within {self.start_timeout:.0f}s: {self._resource_request()} asked "
                f"and the cluster has {cpus:g} (a worker's CPUs must all be on one node)"
            ) from error
        except ray.exceptions.RayError as error:
            raise CollectorError(f"a Ray worker failed to start: {error}") from error

    def _check_spaces(self, description: dict[str, Any]) -> None:
        learner_env = self.sampler.env
        if (
            description["observation_space"] != learner_env.observation_space
            or description["action_space"] != learner_env.action_space
        ):
            raise ValueError(
                "the Ray workers' environments do not match the learner's: workers have observation space "
                f"{description['observation_space']} and action space {description['action_space']}, the learner "
                f"{learner_env.observation_space} and {learner_env.action_space} (worker env: {self.worker_env!r})"
            )

    def _limit_learner_threads(self) -> None:
        # Workers on the learner's node each use a core: leave the learner the rest.
        driver_node = self._ray.get_runtime_context().get_node_id()
        local_workers = sum(slot.node_id == driver_node for slot in self._slots)
        self._cap_learner_threads(busy_cpus=cpus_taken(local_workers, self.num_cpus_per_worker))

    def close(self) -> None:
        if self._closed or self._ray is None:
            return
        self._closed = True
        ray = self._ray
        try:
            self._collect_leftovers()
        finally:
            for slot in self._slots:
                self._kill(slot.actor)
            self._pending.clear()
            self._owner.clear()
            for slot in self._slots:
                slot.pending.clear()
            self._weights_ref = self._policy_ref = None
            self._restore_learner_threads()
            if self._started_ray:
                ray.shutdown()
                self._started_ray = False

    def _collect_leftovers(self) -> None:
        """Stop the requests in progress and count what was collected but never delivered."""
        ray = self._ray
        for slot in self._slots:
            with contextlib.suppress(Exception):  # a dead actor: its requests fail below
                slot.actor.stop.options(concurrency_group="control").remote()
        if not self._pending:
            return
        ready, _ = ray.wait(self._pending, num_returns=len(self._pending), timeout=self.stop_timeout)
        for ref in ready:
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError:
                continue
            steps = result.size if isinstance(result, Segment) else int(result)
            self._sampled_steps += steps
            self.queued_steps_dropped += steps

    def _kill(self, actor: Any) -> None:
        with contextlib.suppress(Exception):  # already dead
            self._ray.kill(actor, no_restart=True)

    # ------------------------------------------------------------------ requests

    def _weights_for(self, slot: _WorkerSlot) -> Any:
        """The object ref of the newest weights if ``slot``'s actor lacks them (one ``ray.put`` per broadcast)."""
        if slot.version == self._version:
            return None
        if self._weights_ref is None:
            assert self._weights is not None
            self._weights_ref = self._ray.put(self._weights)
            self._weights = None
            self.weight_puts += 1
        slot.version = self._version
        return self._weights_ref

    def _submit(self, slot: _WorkerSlot) -> None:
        if not self.take_budget():  # learn() needs no more segments than those requested
            return
        weights = self._weights_for(slot)
        ref = slot.actor.sample.remote(weights, self._version)
        slot.pending.append(ref)
        self._pending.append(ref)
        self._owner[ref] = slot.index

    def _forget(self, ref: Any) -> _WorkerSlot:
        slot = self._slots[self._owner.pop(ref)]
        self._pending.remove(ref)
        slot.pending.remove(ref)
        return slot

    def _replace_worker(self, slot: _WorkerSlot, error: BaseException) -> None:
        self.restarts += 1
        self.lost_steps += self.segment_size
        self._sampled_steps += self.segment_size
        self._release_budget()
        for ref in list(slot.pending):  # queued behind the failed request, never started: cancelled
            self._forget(ref)
            self._release_budget()
        self._kill(slot.actor)
        if self.restarts > self.max_restarts:
            raise CollectorError(
                f"Ray workers failed {self.restarts} times (more than max_restarts={self.max_restarts}); "
                f"the last failure (worker {slot.index}): {error}"
            ) from error
        warnings.warn(
            f"Ray worker {slot.index} failed and is replaced ({self.restarts}/{self.max_restarts} restarts, "
            f"{self.segment_size} steps lost): {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}",
            RuntimeWarning,
            stacklevel=3,
        )
        slot.actor = self._new_actor(slot.index)
        slot.pid = None  # the replacement's process is not known to the driver
        slot.version = self._initial_version
        for _ in range(self.queue_size):
            self._submit(slot)

    def get_segment(self) -> Segment:
        ray = self._ray
        if ray is None or self._closed:
            raise CollectorError("the Ray collector is not running")
        while True:
            if not self._pending:
                raise CollectorError(f"the step budget of this learn() call ({self.step_budget} steps) is spent")
            ready, _ = ray.wait(self._pending, num_returns=1, timeout=self.poll_seconds)
            if not ready:
                continue
            handling_start = time.perf_counter()
            ref = ready[0]
            slot = self._forget(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as error:
                self._replace_worker(slot, error)
                continue
            self._submit(slot)  # the worker starts its next segment while the learner trains on this one
            if not isinstance(result, Segment):  # cannot happen before stop(); counted anyway
                self._sampled_steps += int(result)
                continue
            self._sampled_steps += result.size
            self.delivered_steps += result.size
            slot.delivered_steps += result.size
            self._lags.append(self._version - result.policy_version)
            segment = own_segment_arrays(result)
            self.delivered_segments += 1
            self.driver_seconds += time.perf_counter() - handling_start
            return segment

    def broadcast(self, state_dict: dict[str, th.Tensor], version: int) -> None:
        # Copied now, put in the object store when a request needs it: at most one ray.put per broadcast.
        start = time.perf_counter()
        self._weights = self.cpu_state_dict(state_dict)
        self._weights_ref = None
        self._version = version
        self.broadcast_seconds += time.perf_counter() - start

    # ------------------------------------------------------------------ logging

    def stats(self) -> dict[str, float]:
        elapsed = max(time.monotonic() - self._start_time, 1e-9) if self._start_time is not None else 0.0
        stats: dict[str, float] = {
            "workers": len(self._slots),
            "segments_in_flight": len(self._pending),
            "restarts": self.restarts,
            "lost_steps": self.lost_steps,
            "weight_puts": self.weight_puts,
        }
        if self.delivered_segments:
            stats["driver_ms_per_segment"] = 1e3 * self.driver_seconds / self.delivered_segments
        if self._lags:
            stats["policy_lag_mean"] = float(np.mean(self._lags))
        if elapsed > 0:
            stats["steps_per_s"] = self.delivered_steps / elapsed
            for slot in self._slots:
                stats[f"worker_{slot.index}_steps_per_s"] = slot.delivered_steps / elapsed
        return stats
