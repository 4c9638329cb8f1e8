"""
A collector that runs in a forked process: the learner and the sampler each have a core and no GIL to share,
so collection and learning overlap (Sample Factory's layout: separate processes, tensors in shared memory).

The child inherits the sampler (the VecEnv and the CPU policy copy) through ``fork`` and collects segments
with PyTorch limited to one thread. Segments travel through a ring of preallocated shared-memory slots
(:class:`~sb3_impact.common.collectors.shared_slots.SegmentSlots`): the child writes a segment into a free
slot and sends its index with the small picklable rest (infos, version); the learner copies the slot out and
frees it, so no observation is pickled. Weights travel through shared memory too, copied in by
:meth:`ProcessCollector.broadcast` under a lock and read by the child before each segment. The parent's
copy of the VecEnv is not stepped while the child runs (VecNormalize statistics are mirrored back with every
segment), so after ``learn()`` the algorithm resets the environment before collecting again.
"""

import multiprocessing as mp
import pickle
import queue
import random
import time
import traceback
import warnings
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.vec_env import unwrap_vec_normalize

from sb3_impact.common.collectors.base import Collector, CollectorError, check_queue_size
from sb3_impact.common.collectors.sampler import CollectionInterrupted, SegmentSampler, skip_distribution_argument_checks
from sb3_impact.common.collectors.shared_slots import SegmentSlots
from sb3_impact.common.segments import Segment


def _picklable_error(error: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # an exception that does not survive pickling is passed on as its text
        return RuntimeError(repr(error))


def _collect_in_child(
    seed: int,
    sampler: SegmentSampler,
    segments: Any,
    slots: SegmentSlots,
    stop: Any,
    credits: Any,
    weights_lock: Any,
    shared_weights: dict[str, th.Tensor],
    shared_version: Any,
    sampled_steps: Any,
    max_segments: int | None,
) -> None:
    th.set_num_threads(1)
    skip_distribution_argument_checks()
    local_version = -1
    normalizer = unwrap_vec_normalize(sampler.env)
    try:
        # The fork copied the parent's random states and its (unstepped) env: draw fresh ones, so that
        # successive learn() calls do not replay the same actions and episode starts.
        th.manual_seed(seed)
        np.random.seed(seed % 2**32)
        random.seed(seed)
        sampler.env.seed(seed)
        sampler.restart(sampler.env.reset())
        segments_started = 0
        while not stop.is_set():
            if not credits.acquire(timeout=0.05):
                continue
            if max_segments is not None and segments_started >= max_segments:  # the step budget is spent
                return
            slot = segments_started % slots.n_slots  # freed: the learner took the segment before the credit came back
            segments_started += 1
            with weights_lock:
                if shared_version.value != local_version:
                    sampler.policy.load_state_dict(shared_weights)
                    local_version = shared_version.value
            sampler.policy_version = local_version
            segment = sampler.collect(stop)
            if normalizer is not None:
                segment.extras["vec_normalize"] = (normalizer.obs_rms, normalizer.ret_rms)
            sampled_steps.value = sampler.sampled_steps
            segments.put(("segment", slot, slots.write(slot, segment)))
    except CollectionInterrupted:  # the parent set the stop event: a normal end
        return
    except BaseException as error:
        segments.put(("error", traceback.format_exc(), _picklable_error(error)))
    finally:
        sampled_steps.value = sampler.sampled_steps


class ProcessCollector(Collector):
    """
    Collects in a forked child process (Linux and other platforms with ``fork``).

    Same contract as :class:`~sb3_impact.common.collectors.base.ThreadCollector`: at most ``queue_size``
    segments ahead of the learner, counting the one being collected; every segment carries the policy
    version it was collected with; a failure in the child (or the child dying) raises
    :class:`CollectorError` in :meth:`get_segment`. The child uses one PyTorch thread; while it runs, the
    learner's intra-op threads are capped at the number of CPUs minus one (restored by :meth:`close`),
    since oversubscribed cores slow both sides down.
    """

    continues_episodes = False
    join_timeout = 30.0

    @classmethod
    def check_options(cls, queue_size: int = 1) -> None:
        check_queue_size(queue_size)
        if "fork" not in mp.get_all_start_methods():
            raise ValueError("collector='process' needs the 'fork' start method, which this platform lacks")

    def __init__(self, sampler: SegmentSampler, queue_size: int = 1) -> None:
        super().__init__(sampler)
        self.queue_size = queue_size
        self._context = mp.get_context("fork")
        self._process: Any = None
        self._sampled_steps: Any = self._context.Value("q", 0, lock=False)
        self._normalizer = unwrap_vec_normalize(sampler.env)
        self.slots: SegmentSlots | None = None
        self.queued_steps_dropped = 0

    @property
    def sampled_steps(self) -> int:
        return int(self._sampled_steps.value)

    @property
    def last_observation(self):
        # The parent's VecEnv was not stepped: the algorithm must reset it before collecting again.
        return None

    def start(self) -> None:
        if self._process is not None:
            raise RuntimeError("ProcessCollector.start() called twice")
        context = self._context
        self.slots = self._allocate_slots()
        self._segments = context.Queue()
        self._stop = context.Event()
        self._credits = context.Semaphore(self.queue_size)
        self._weights_lock = context.Lock()
        self._shared_version = context.Value("q", self.sampler.policy_version, lock=False)
        self._shared_weights = {
            name: tensor.detach().clone().share_memory_() for name, tensor in self.sampler.policy.state_dict().items()
        }
        # Drawn from (and advancing) the parent's generator: reproducible with a seed, new at every start.
        seed = int(th.randint(0, 2**31 - 1, (1,)).item())
        self._process = context.Process(
            target=_collect_in_child,
            args=(
                seed,
                self.sampler,
                self._segments,
                self.slots,
                self._stop,
                self._credits,
                self._weights_lock,
                self._shared_weights,
                self._shared_version,
                self._sampled_steps,
                None if self.step_budget is None else -(-self.step_budget // self.segment_size),
            ),
            name="sb3-impact-collector",
            daemon=True,
        )
        self._process.start()
        self._cap_learner_threads(busy_cpus=1)

    def _allocate_slots(self) -> SegmentSlots:
        """
        The ring of ``queue_size`` shared slots, laid out from the learner's last observation and one draw of the
        sampling policy on it (:meth:`SegmentSampler.draw_once`: the learner's generators do not move).
        """
        sampler = self.sampler
        observation = sampler.last_observation
        if observation is None:
            observation = sampler.env.reset()
        actions, log_probs, params = sampler.draw_once(observation)
        return SegmentSlots(
            self.queue_size,
            sampler.n_steps,
            observation,
            actions,
            log_probs,
            params,
            original_rewards=self._normalizer is not None,
        )

    def stats(self) -> dict[str, float]:
        """The shared memory of the segment slots, in MiB (logged as ``collector/shared_memory_mib``)."""
        return {"shared_memory_mib": self.slots.nbytes / 2**20} if getattr(self, "slots", None) is not None else {}

    def get_segment(self) -> Segment:
        while True:
            try:
                message = self._segments.get(timeout=0.05)
            except queue.Empty:
                if self._process.is_alive():
                    continue
                try:  # the child's last message (its error, say) may still be in transit
                    message = self._segments.get(timeout=0.5)
                except queue.Empty:
                    raise CollectorError(f"the collector process exited with code {self._process.exitcode}") from None
            if message[0] == "error":
                _, child_traceback, error = message
                raise CollectorError(f"the collector process failed:\n{child_traceback}") from error
            _, slot, rest = message
            segment = self.slots.read(slot, rest)
            self._credits.release()  # the slot is free again
            if self._normalizer is not None and "vec_normalize" in segment.extras:
                self._normalizer.obs_rms, self._normalizer.ret_rms = segment.extras.pop("vec_normalize")
            self.delivered_steps += segment.size
            return segment

    def broadcast(self, state_dict: dict[str, th.Tensor], version: int) -> None:
        start = time.perf_counter()
        # A child that died holding the lock never releases it: wait in slices and check it is alive.
        while not self._weights_lock.acquire(timeout=0.5):
            if not self._process.is_alive():
                raise CollectorError(f"the collector process exited with code {self._process.exitcode}")
        try:
            with th.no_grad():
                for name, tensor in state_dict.items():
                    self._shared_weights[name].copy_(tensor)
            self._shared_version.value = version
        finally:
            self._weights_lock.release()
        self.broadcast_seconds += time.perf_counter() - start

    def _drain(self) -> None:
        while True:
            try:
                message = self._segments.get_nowait()
            except (queue.Empty, OSError, ValueError):
                return
            if message[0] == "segment":
                self.queued_steps_dropped += self.segment_size

    def close(self) -> None:
        if self._process is None:
            return
        self._stop.set()
        deadline = time.monotonic() + self.join_timeout
        while self._process.is_alive() and time.monotonic() < deadline:
            self._drain()  # a child with unflushed queue items cannot exit
            self._process.join(timeout=0.05)
        if self._process.is_alive():
            warnings.warn("the collector process did not stop in time and was terminated", RuntimeWarning, stacklevel=2)
            self._process.terminate()
            self._process.join(timeout=5)
        self._drain()
        self._segments.close()
        self._segments.join_thread()
        self.slots.close()
        self._process = None
        self._restore_learner_threads()
