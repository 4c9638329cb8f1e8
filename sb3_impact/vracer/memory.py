"""
Replay memory of whole episodes for V-RACER / ReF-ER (Novati & Koumoutsakos, ICML 2019, section 2 and
appendix C).

Steps are kept in ring arrays of ``buffer_size`` slots, each episode in consecutive slots (in ring
order). An episode enters the memory when it ends (Algorithm 2: its Retrace estimates need its last
step); until then its steps wait, column-wise, in a per-environment staging list. When an episode does not fit,
the oldest whole episodes are evicted first (FIFO by episode). Sampling is uniform over the stored
steps. Each step keeps the behaviour ``mu_t`` (mean and log std, the layout of
:mod:`sb3_impact.common.distributions`), the last computed ``V(s_t)`` and ``log rho_t``, and
``Q_ret[t]`` (:func:`sb3_impact.common.estimators.retrace_q_ret`).

Retrace bookkeeping (the project's decision, documented in docs/algorithms/vracer.md):

- when a step is sampled, :meth:`EpisodeReplayMemory.refresh` stores its new ``V`` and ``log rho`` and
  applies eq. 6 one step back (``Q_ret[t-1]`` of the same episode);
- :meth:`EpisodeReplayMemory.recompute_q_ret` propagates all stored ``V`` and ``rho`` through every
  episode at once (eq. 8, a vectorised scan); the algorithm calls it every ``retrace_interval``
  gradient steps. Right after it, every stored ``Q_ret`` equals the Retrace estimate of the stored
  ``(V, rho)``, exactly as if each sampled step had updated all the earlier steps of its episode.
"""

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.utils import get_device

from sb3_impact.common.distributions import behaviour_params_dim
from sb3_impact.common.estimators import retrace_q_ret, v_tbc
from sb3_impact.common.observations import Observation, index_observation, map_observation, stack_observations
from sb3_impact.common.refer import is_near_policy
from sb3_impact.common.segments import Segment, SegmentValues


@dataclass
class EpisodeRecord:
    """Where a stored episode lies in the ring, and what follows its last step."""

    start: int
    length: int
    truncated: bool
    final_observation: Any  # s_T, kept for truncated episodes (its value bootstraps Q_ret)


@dataclass
class StepBlock:
    """
    Steps kept column-wise: one array per field, the steps along the leading axis (``[T, B]`` for the columns of
    a vector segment, ``[k]`` for ``k`` consecutive steps of one environment). Observations are split by key
    (``""`` for a Box space).
    """

    observations: dict[str, np.ndarray]
    actions: np.ndarray
    rewards: np.ndarray
    behaviour_params: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.rewards)

    def map(self, function: Callable[[np.ndarray], np.ndarray]) -> "StepBlock":
        """``function`` applied to every array."""
        arrays = (function(array) for array in (self.actions, self.rewards, self.behaviour_params, self.values))
        return StepBlock({key: function(value) for key, value in self.observations.items()}, *arrays)

    def rows(self, column: int, start: int, stop: int | None = None) -> "StepBlock":
        """Steps ``start:stop`` of one column of ``[T, B]`` columns (views)."""
        at = (slice(start, stop), column)
        observations = {key: value[at] for key, value in self.observations.items()}
        return StepBlock(observations, self.actions[at], self.rewards[at], self.behaviour_params[at], self.values[at])

    @staticmethod
    def concatenate(blocks: list["StepBlock"]) -> "StepBlock":
        """The blocks one after the other (the block itself when there is one)."""
        if len(blocks) == 1:
            return blocks[0]
        observations = {key: np.concatenate([block.observations[key] for block in blocks]) for key in blocks[0].observations}
        fields = ("actions", "rewards", "behaviour_params", "values")
        return StepBlock(observations, *(np.concatenate([getattr(block, name) for block in blocks]) for name in fields))

    @staticmethod
    def from_step_tuples(steps: list[tuple]) -> "StepBlock":
        """The per-step tuples ``(observation, action, reward, behaviour params, value)`` of older pickles."""
        return StepBlock(
            {key: np.stack([step[0][key] for step in steps]) for key in steps[0][0]},
            np.stack([np.asarray(step[1], dtype=np.float32).reshape(-1) for step in steps]),
            np.asarray([step[2] for step in steps]),
            np.stack([step[3] for step in steps]),
            np.asarray([step[4] for step in steps]),
        )


def _one_step(array: Any) -> np.ndarray:
    """``array`` with a leading time axis of length 1."""
    return np.asarray(array)[None]


class EpisodeReplayMemory:
    """
    FIFO-by-episode replay memory with uniform step sampling and Retrace / V-tbc estimates.

    :param buffer_size: maximum number of stored steps (N)
    :param observation_space: observation space (Box or Dict of Boxes / discrete spaces)
    :param action_space: action space (the behaviour parameters follow its layout)
    :param n_envs: number of environments feeding the memory in parallel
    :param gamma: discount factor of the Retrace estimates
    :param device: the device of the model it feeds (``.device``, as SB3's buffers have; the memory itself is numpy)
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        n_envs: int = 1,
        gamma: float = 0.99,
        device: th.device | str = "auto",
    ) -> None:
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be positive, got {buffer_size}")
        self.capacity = int(buffer_size)
        self.observation_space = observation_space
        self.action_space = action_space
        self.n_envs = n_envs
        self.gamma = gamma
        self.device = get_device(device)
        self.reward_scale = 1.0  # rewards are divided by it in the Retrace estimates (appendix B, eq. 16)
        subspaces = observation_space.spaces if isinstance(observation_space, spaces.Dict) else {"": observation_space}
        self.observations = {
            key: np.zeros((self.capacity, *space.shape), dtype=space.dtype) for key, space in subspaces.items()
        }
        action_dim = int(np.prod(action_space.shape)) if isinstance(action_space, spaces.Box) else 1
        self.actions = np.zeros((self.capacity, action_dim), dtype=np.float32)
        self.rewards = np.zeros(self.capacity, dtype=np.float32)
        self.behaviour_params = np.zeros((self.capacity, behaviour_params_dim(action_space)), dtype=np.float32)
        self.values = np.zeros(self.capacity, dtype=np.float32)
        self.log_rhos = np.zeros(self.capacity, dtype=np.float32)  # 0 in empty slots: they never count as far
        self.q_ret = np.zeros(self.capacity, dtype=np.float32)
        self.far = np.zeros(self.capacity, dtype=bool)  # far-policy (rule 1) at the last count or refresh
        self.n_far = 0
        self.is_first = np.zeros(self.capacity, dtype=bool)
        self.is_last = np.zeros(self.capacity, dtype=bool)
        self.last_values = np.zeros(self.capacity, dtype=np.float32)  # V_tbc[T] at last steps
        self.episodes: deque[EpisodeRecord] = deque()
        self.head = 0
        self.size = 0
        self.staged: list[list[StepBlock]] = [[] for _ in range(n_envs)]  # each env's running episode, in blocks
        self.staged_next_observations: list[Any] = [None] * n_envs  # s_{t+1} after each env's last staged step
        self.n_episodes_added = 0
        self.n_episodes_evicted = 0
        self.n_steps_evicted = 0
        self.n_steps_dropped = 0  # steps of episodes longer than the whole memory (their oldest part)

    def __len__(self) -> int:
        return self.size

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if "far" not in state:  # pickled before the far-policy count was kept: the algorithm recounts on load
            self.far = np.zeros(self.capacity, dtype=bool)
            self.n_far = 0
        if "staging" in state:  # pickled when running episodes were staged step by step, as tuples
            self.staged = [[StepBlock.from_step_tuples(steps)] if steps else [] for steps in self.__dict__.pop("staging")]
        if "device" not in state:  # pickled before the memory had one: the algorithm sets its own on load
            self.device = th.device("cpu")

    @property
    def n_staged_steps(self) -> int:
        """Steps of episodes still running, not yet sampleable."""
        return sum(len(block) for blocks in self.staged for block in blocks)

    def _split_observation(self, observation: Observation) -> dict[str, np.ndarray]:
        return dict(observation) if isinstance(observation, dict) else {"": np.asarray(observation)}

    def _join_observation(self, observation: dict[str, np.ndarray]) -> Observation:
        return observation[""] if set(observation) == {""} else observation

    # --- adding -------------------------------------------------------------------------------------

    def add(
        self,
        observations: Observation,
        actions: np.ndarray,
        rewards: np.ndarray,
        behaviour_params: np.ndarray,
        values: np.ndarray,
        dones: np.ndarray,
        truncateds: np.ndarray,
        final_observations: list[Observation | None],
        final_values: np.ndarray,
        next_observations: Observation,
        env_ids: np.ndarray | None = None,
    ) -> np.ndarray:
        """
        Add one vector step (one transition per environment): :meth:`add_columns` of one step. Returns the slots of
        the episodes it ended.

        :param final_observations: ``s_T`` of each environment where an episode ended, else None
        :param final_values: ``V(s_T)`` of each environment (used where an episode was truncated)

        The other arguments are those of :meth:`add_columns` without the time axis.
        """
        ends = [column for column, final in enumerate(final_observations) if final is not None]
        return self.add_columns(
            map_observation(observations, _one_step),
            _one_step(actions),
            _one_step(rewards),
            _one_step(behaviour_params),
            _one_step(values),
            _one_step(dones),
            _one_step(truncateds),
            stack_observations([final_observations[column] for column in ends]) if ends else None,
            np.array([(0, column) for column in ends], dtype=np.int64).reshape(-1, 2),
            _one_step(final_values),
            next_observations,
            env_ids,
        )

    def add_segment(self, segment: Segment, values: SegmentValues | None = None) -> np.ndarray:
        """
        Add a collected segment (the :class:`~sb3_impact.common.segments.SegmentMemory` interface): its columns cut at
        their episode ends (:meth:`add_columns`), with the original rewards where the sampler recorded them (under a
        VecNormalize) and the learner's ``values`` of its steps (required: the Retrace targets start from them).

        :return: the slots of the steps that entered the memory (the episodes that ended in the segment, with their
            staged beginnings), oldest first; the steps of running episodes are staged, in no slot yet
        """
        if values is None:
            raise ValueError("EpisodeReplayMemory needs the learner's values of the segment's steps (Retrace)")
        return self.add_columns(
            segment.observations,
            segment.actions,
            segment.extras.get("original_rewards", segment.rewards),
            segment.behaviour_params,
            values.values,
            segment.dones,
            segment.truncations,
            segment.final_observations,
            segment.final_observation_indices,
            values.final_values,
            segment.next_observations,
            segment.env_ids,
        )

    def add_columns(
        self,
        observations: Observation,
        actions: np.ndarray,
        rewards: np.ndarray,
        behaviour_params: np.ndarray,
        values: np.ndarray,
        dones: np.ndarray,
        truncateds: np.ndarray,
        final_observations: Observation | None,
        final_observation_indices: np.ndarray,
        final_values: np.ndarray,
        next_observations: Observation,
        env_ids: np.ndarray | None = None,
    ) -> np.ndarray:
        """
        Add ``T`` vector steps of ``B`` environments, given as time-major numpy columns ``[T, B, ...]`` (the layout of
        a :class:`~sb3_impact.common.segments.Segment`). Each column is cut at its episode ends: an episode that ends
        enters the memory (episodes enter in the order they end, step by step, column by column), the steps after
        a column's last end are staged until their episode ends. Returns the slots of the episodes that entered and
        are still stored (a later one of the same call may evict an earlier one), oldest first.

        :param observations: ``s_t`` (raw, unnormalised)
        :param actions: ``a_t`` as sampled from the Gaussian (before any clipping)
        :param rewards: ``r_{t+1}`` (unscaled)
        :param behaviour_params: the parameters of ``mu_t``
        :param values: ``V(s_t)`` at collection time
        :param dones: whether the episode ended after the step
        :param truncateds: whether that end was a time limit (the MDP did not end)
        :param final_observations: ``s_T`` of the ``K`` episodes that ended with a known last observation, stacked
            ``[K, ...]`` (None when ``K = 0``); the ``i``-th ended at ``final_observation_indices[i] = (t, column)``
        :param final_observation_indices: ``[K, 2]``
        :param final_values: ``V(s_T)``, ``[T, B]`` (used where an episode was truncated)
        :param next_observations: the observations after the last step, ``[B, ...]``
        :param env_ids: which of the memory's ``n_envs`` environments each column is (several Ray workers feed
            one memory); None: the columns are environments ``0 .. n_envs - 1``
        """
        n_steps, n_envs = dones.shape
        episodes_before = self.n_episodes_added
        actions = actions.reshape(n_steps, n_envs, -1)  # the memory keeps flat actions
        columns = StepBlock(self._split_observation(observations), actions, rewards, behaviour_params, values)
        envs = range(n_envs) if env_ids is None else [int(env) for env in env_ids]
        finals = {(t, column): index for index, (t, column) in enumerate(final_observation_indices.reshape(-1, 2).tolist())}
        starts = [0] * n_envs  # each column's first step not yet in the memory
        end_steps, end_columns = dones.nonzero()  # row-major: in the order the episodes end
        for t, column in zip(end_steps.tolist(), end_columns.tolist(), strict=True):
            env, index = envs[column], finals.get((t, column))
            final = None if index is None else map_observation(index_observation(final_observations, index), np.array)
            episode = [*self.staged[env], columns.rows(column, starts[column], t + 1)]
            self._insert_episode(episode, bool(truncateds[t, column]), final, float(final_values[t, column]))
            self.staged[env] = []
            starts[column] = t + 1
        if min(starts) < n_steps:  # staged as views of one copy: the caller's arrays are not the memory's
            columns = columns.map(np.array)
        next_split = self._split_observation(next_observations)
        for column, env in enumerate(envs):
            if starts[column] < n_steps:
                self.staged[env].append(columns.rows(column, starts[column]))
            self.staged_next_observations[env] = self._join_observation(
                {key: np.array(value[column]) for key, value in next_split.items()}
            )
        return self._newest_episode_slots(self.n_episodes_added - episodes_before)

    def _newest_episode_slots(self, count: int) -> np.ndarray:
        """The slots of the ``count`` newest episodes that are still stored, oldest step first."""
        stored = min(count, len(self.episodes))
        newest = [self.episodes[index] for index in range(len(self.episodes) - stored, len(self.episodes))]
        slots = [(episode.start + np.arange(episode.length)) % self.capacity for episode in newest]
        return np.concatenate(slots) if slots else np.zeros(0, dtype=np.int64)

    def close_staged_episodes(self, value_fn: Callable[[list[Observation]], np.ndarray], env_ids: Any = None) -> int:
        """
        End every running episode (of the environments ``env_ids``; None: all) as truncated: the observation
        that followed its last step is ``s_T`` and ``value_fn`` (observations -> values) gives ``V(s_T)``.

        Called before the environments are reset by a new ``learn()`` (or when a memory is loaded into a
        model with another number of environments, or a Ray worker's environments were rebuilt), so that no
        collected step is lost. Returns the number of steps moved into the memory.
        """
        candidates = range(self.n_envs) if env_ids is None else (int(env) for env in env_ids)
        envs = [env for env in candidates if self.staged[env]]
        if not envs:
            return 0
        final_observations = [self.staged_next_observations[env] for env in envs]
        final_values = np.asarray(value_fn(final_observations), dtype=np.float64).reshape(-1)
        moved = 0
        for env, final_observation, final_value in zip(envs, final_observations, final_values, strict=True):
            moved += sum(len(block) for block in self.staged[env])
            self._insert_episode(self.staged[env], True, final_observation, float(final_value))
            self.staged[env] = []
        return moved

    def set_n_envs(self, n_envs: int) -> None:
        """Resize the staging area (only when no episode is running)."""
        if self.n_staged_steps:
            raise ValueError("close the running episodes (close_staged_episodes) before changing n_envs")
        self.n_envs = n_envs
        self.staged = [[] for _ in range(n_envs)]
        self.staged_next_observations = [None] * n_envs

    def _evict_oldest(self) -> None:
        episode = self.episodes.popleft()
        slots = (episode.start + np.arange(episode.length)) % self.capacity
        self.log_rhos[slots] = 0.0
        self.n_far -= int(np.count_nonzero(self.far[slots]))
        self.far[slots] = False
        self.is_first[slots] = False
        self.is_last[slots] = False
        self.head = (self.head + episode.length) % self.capacity
        self.size -= episode.length
        self.n_episodes_evicted += 1
        self.n_steps_evicted += episode.length

    def _insert_episode(self, blocks: list[StepBlock], truncated: bool, final_observation: Any, final_value: float) -> None:
        episode = StepBlock.concatenate(blocks)
        if len(episode) > self.capacity:
            self.n_steps_dropped += len(episode) - self.capacity
            episode = episode.map(lambda array: array[-self.capacity :])
        length = len(episode)
        while self.size + length > self.capacity:
            self._evict_oldest()
        start = (self.head + self.size) % self.capacity
        slots = (start + np.arange(length)) % self.capacity
        for key in self.observations:
            self.observations[key][slots] = episode.observations[key]
        self.actions[slots] = np.asarray(episode.actions, dtype=np.float32).reshape(length, -1)
        self.rewards[slots] = episode.rewards
        self.behaviour_params[slots] = episode.behaviour_params
        self.values[slots] = episode.values
        self.log_rhos[slots] = 0.0  # pi = mu at collection time
        self.n_far -= int(np.count_nonzero(self.far[slots]))
        self.far[slots] = False
        self.is_first[slots] = False
        self.is_last[slots] = False
        self.is_first[slots[0]] = True
        self.is_last[slots[-1]] = True
        self.last_values[slots] = 0.0
        self.last_values[slots[-1]] = final_value if truncated else 0.0
        self.q_ret[slots] = self._q_ret_of(slots)
        self.episodes.append(EpisodeRecord(start, length, truncated, final_observation if truncated else None))
        self.size += length
        self.n_episodes_added += 1

    # --- Retrace --------------------------------------------------------------------------------------

    def _q_ret_of(self, slots: np.ndarray) -> np.ndarray:
        """Eq. 8 over whole episodes laid out (in ring order) at ``slots``."""
        return retrace_q_ret(
            self.rewards[slots] / self.reward_scale,
            self.values[slots],
            self.log_rhos[slots],
            self.is_last[slots],
            self.last_values[slots],
            self.gamma,
        )

    def ordered_slots(self) -> np.ndarray:
        """The occupied slots, oldest step first."""
        return (self.head + np.arange(self.size)) % self.capacity

    def _ring_parts(self) -> list[slice]:
        """The occupied slots, oldest first, as one or two slices of the ring (no gather, no copy)."""
        end = self.head + self.size
        if end <= self.capacity:
            return [slice(self.head, end)]
        return [slice(self.head, self.capacity), slice(0, end - self.capacity)]

    def _in_ring_order(self, array: np.ndarray) -> np.ndarray:
        parts = self._ring_parts()
        return array[parts[0]] if len(parts) == 1 else np.concatenate([array[part] for part in parts])

    def recompute_q_ret(self) -> None:
        """Recompute ``Q_ret`` of every stored step from the stored ``V``, ``rho`` and rewards (eq. 8)."""
        if not self.size:
            return
        ordered = self._in_ring_order
        q_ret = retrace_q_ret(
            ordered(self.rewards) / self.reward_scale,
            ordered(self.values),
            ordered(self.log_rhos),
            ordered(self.is_last),
            ordered(self.last_values),
            self.gamma,
            np.float32,  # the precision Q_ret is stored in
        )
        start = 0
        for part in self._ring_parts():
            stop = start + part.stop - part.start
            self.q_ret[part] = q_ret[start:stop]
            start = stop

    def count_far_policy(self, c_max: float) -> None:
        """Mark every stored step far or near from its stored ``log rho`` against ``c_max`` (rule 1)."""
        self.far[:] = ~is_near_policy(self.log_rhos, c_max)  # empty slots hold log rho = 0: near
        self.n_far = int(np.count_nonzero(self.far))

    def refresh(self, slots: np.ndarray, values: np.ndarray, log_rhos: np.ndarray, c_max: float) -> None:
        """
        Store the current ``V(s_t)`` and ``log rho_t`` of sampled steps, update the far-policy count with
        ``c_max`` (a step may be drawn twice: the last draw counts), and apply eq. 6 one step back:
        ``Q_ret[t-1] = r_t + gamma (V(s_t) + rho_bar_t (Q_ret[t] - V(s_t)))`` within the episode.
        """
        self.values[slots] = values
        self.log_rhos[slots] = log_rhos
        unique_slots = np.unique(slots)
        far_before = int(np.count_nonzero(self.far[unique_slots]))
        self.far[unique_slots] = ~is_near_policy(self.log_rhos[unique_slots], c_max)
        self.n_far += int(np.count_nonzero(self.far[unique_slots])) - far_before
        inner = slots[~self.is_first[slots]]
        previous = (inner - 1) % self.capacity
        v_tbc_inner = v_tbc(self.q_ret[inner], self.values[inner], self.log_rhos[inner])  # eq. 7
        self.q_ret[previous] = self.rewards[previous] / self.reward_scale + self.gamma * v_tbc_inner

    def truncated_episode_ends(self) -> tuple[np.ndarray, list[Any]]:
        """Last slots and final observations ``s_T`` of the stored truncated episodes."""
        ends = [(episode.start + episode.length - 1) % self.capacity for episode in self.episodes if episode.truncated]
        finals = [episode.final_observation for episode in self.episodes if episode.truncated]
        return np.array(ends, dtype=np.int64), finals

    def set_last_values(self, last_slots: np.ndarray, values: np.ndarray) -> None:
        """Refresh ``V(s_T)`` of truncated episodes (their ``V_tbc[T]``)."""
        self.last_values[last_slots] = values

    # --- sampling and statistics ----------------------------------------------------------------------

    def sample_slots(self, batch_size: int) -> np.ndarray:
        """``batch_size`` steps drawn uniformly (with replacement) among the stored steps."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay memory")
        return (self.head + np.random.randint(0, self.size, size=batch_size)) % self.capacity

    def observations_at(self, slots: np.ndarray) -> Observation:
        return self._join_observation({key: value[slots] for key, value in self.observations.items()})

    def far_fraction(self) -> float:
        """
        ``n_far / N`` (rule 2, eq. 12): the stored steps whose last ``rho`` was far-policy against the ``c_max`` of
        their last refresh or of the last :meth:`count_far_policy`, whichever came later.
        """
        return self.n_far / self.size if self.size else 0.0

    def observation_statistics(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Mean and standard deviation of each stored observation component (appendix B, eqs. 14-15)."""
        statistics = {}
        for key, value in self.observations.items():
            data = self._in_ring_order(value).astype(np.float64)
            statistics[key] = (data.mean(axis=0), data.std(axis=0))
        return statistics

    def root_mean_square_reward(self) -> float:
        """``sqrt(E[r^2])`` over the stored rewards (appendix B, eq. 16)."""
        if self.size == 0:
            return 0.0
        # np.square + sum, not np.dot: a BLAS call would leave numpy's BLAS threads spinning beside the learner
        squares = sum(float(np.square(self.rewards[part], dtype=np.float64).sum()) for part in self._ring_parts())
        return float(np.sqrt(squares / self.size))
