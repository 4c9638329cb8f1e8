"""
Preallocated shared memory between the forked collector process and the learner: a ring of segment slots.

Each slot holds one segment's fixed-shape arrays (observations, actions, rewards, terminations, truncations,
behaviour log-probabilities and parameters, the observation after the last step, VecNormalize's original
rewards) and room for every terminal observation a segment can have (one per vector step and environment).
The collector writes a segment into a slot; only a small message crosses the pipe (the slot's index, the
infos without their terminal observations, the version, the counts); the learner copies the slot into its own
arrays and hands the slot back. No observation is pickled.

The slots are anonymous shared mappings (``mmap.mmap(-1, size)``) made before the fork: nothing is named in
``/dev/shm``, no resource tracker is involved, and the memory goes when both processes have let go of it.
"""

import contextlib
import mmap
from dataclasses import dataclass
from typing import Any

import numpy as np

from sb3_impact.common.observations import Observation
from sb3_impact.common.segments import Segment

#: The Segment fields of shape ``[n_steps, n_envs, ...]`` that a slot holds (observations are handled apart).
STEP_FIELDS = ("actions", "rewards", "terminations", "truncations", "behaviour_log_probs", "behaviour_params")
_ALIGNMENT = 64


@dataclass(frozen=True)
class ArraySpec:
    """Shape and dtype of one array of a slot, and where it starts."""

    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def _observation_parts(observation: Observation) -> dict[str, np.ndarray]:
    """An observation as named arrays: ``{"": array}`` or one entry per key of a Dict observation."""
    if isinstance(observation, dict):
        return {str(key): np.asarray(value) for key, value in observation.items()}
    return {"": np.asarray(observation)}


def _as_observation(parts: dict[str, np.ndarray], dict_keys: list[Any] | None) -> Observation:
    if dict_keys is None:
        return parts[""]
    return {key: parts[str(key)] for key in dict_keys}


class SegmentSlots:
    """
    ``n_slots`` shared segment slots for segments of ``n_steps`` vector steps of ``n_envs`` environments.

    The layout comes from one observation of the VecEnv (``[n_envs, ...]``), one step's sampled actions,
    log-probabilities and distribution parameters (what the sampler records), and whether original rewards are
    recorded (VecNormalize). :meth:`write` (collector side) refuses a segment whose arrays do not fit, naming
    the array; :meth:`read` (learner side) returns a Segment that owns copies of the slot's arrays.
    """

    def __init__(
        self,
        n_slots: int,
        n_steps: int,
        observation: Observation,
        actions: np.ndarray,
        log_probs: np.ndarray,
        params: np.ndarray,
        original_rewards: bool,
    ) -> None:
        self.n_slots = n_slots
        self.n_steps = n_steps
        self.dict_keys = list(observation.keys()) if isinstance(observation, dict) else None
        observation_parts = _observation_parts(observation)
        self.n_envs = int(next(iter(observation_parts.values())).shape[0])
        time_envs = (n_steps, self.n_envs)
        shapes: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        for key, part in observation_parts.items():
            shapes[f"observations/{key}"] = ((*time_envs, *part.shape[1:]), part.dtype)
            shapes[f"next_observations/{key}"] = (part.shape, part.dtype)
            # Every terminal observation of a segment: at most one per vector step and environment.
            shapes[f"terminal_observations/{key}"] = ((n_steps * self.n_envs, *part.shape[1:]), part.dtype)
        step_arrays = {
            "actions": np.asarray(actions),
            "rewards": np.zeros(self.n_envs, dtype=np.float32),
            "terminations": np.zeros(self.n_envs, dtype=bool),
            "truncations": np.zeros(self.n_envs, dtype=bool),
            "behaviour_log_probs": np.asarray(log_probs, dtype=np.float32),
            "behaviour_params": np.asarray(params, dtype=np.float32),
        }
        if original_rewards:
            step_arrays["original_rewards"] = np.zeros(self.n_envs, dtype=np.float32)
        for name, array in step_arrays.items():
            shapes[name] = ((n_steps, *array.shape), array.dtype)
        self.specs: dict[str, ArraySpec] = {}
        offset = 0
        for name, (shape, dtype) in shapes.items():
            self.specs[name] = ArraySpec(tuple(int(size) for size in shape), np.dtype(dtype), offset)
            offset += -(-self.specs[name].nbytes // _ALIGNMENT) * _ALIGNMENT
        self.slot_bytes = max(offset, _ALIGNMENT)
        self._buffers = [mmap.mmap(-1, self.slot_bytes) for _ in range(n_slots)]
        self._views = [{name: self._view(buffer, spec) for name, spec in self.specs.items()} for buffer in self._buffers]

    @staticmethod
    def _view(buffer: mmap.mmap, spec: ArraySpec) -> np.ndarray:
        count = int(np.prod(spec.shape, dtype=np.int64))
        return np.frombuffer(buffer, dtype=spec.dtype, count=count, offset=spec.offset).reshape(spec.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of shared memory over all slots."""
        return self.slot_bytes * self.n_slots

    def _store(self, views: dict[str, np.ndarray], name: str, array: Any, rows: int | None = None) -> None:
        target = views[name] if rows is None else views[name][:rows]
        array = np.asarray(array)
        if array.shape != target.shape:
            raise ValueError(f"shared segment slot: {name} has shape {array.shape}, the slot holds {target.shape}")
        if not np.can_cast(array.dtype, target.dtype, casting="same_kind"):
            raise ValueError(f"shared segment slot: {name} has dtype {array.dtype}, the slot holds {target.dtype}")
        target[...] = array

    def write(self, slot: int, segment: Segment) -> dict[str, Any]:
        """
        Copy ``segment``'s arrays into ``slot``; returns what the learner needs beside them (picklable, with no
        observation): the infos without ``terminal_observation``, where each terminal observation went, and
        the segment's scalars and other extras.
        """
        views = self._views[slot]
        for key, part in _observation_parts(segment.observations).items():
            self._store(views, f"observations/{key}", part)
        for key, part in _observation_parts(segment.next_observations).items():
            self._store(views, f"next_observations/{key}", part)
        for name in STEP_FIELDS:
            self._store(views, name, getattr(segment, name))
        extras = dict(segment.extras)
        if "original_rewards" in self.specs:
            self._store(views, "original_rewards", extras.pop("original_rewards"))
        # Terminal observations leave the infos for the slot; the final observations of truncations are among them.
        infos: list[list[dict[str, Any]]] = []
        terminal_positions: list[tuple[int, int]] = []
        terminals: list[dict[str, np.ndarray]] = []
        for step, step_infos in enumerate(segment.infos):
            stripped = []
            for env_index, info in enumerate(step_infos):
                if "terminal_observation" in info:
                    info = dict(info)
                    terminals.append(_observation_parts(info.pop("terminal_observation")))
                    terminal_positions.append((step, env_index))
                stripped.append(info)
            infos.append(stripped)
        for key in terminals[0] if terminals else ():
            self._store(views, f"terminal_observations/{key}", np.stack([parts[key] for parts in terminals]), len(terminals))
        row_of = {position: row for row, position in enumerate(terminal_positions)}
        final_rows = [row_of[(int(step), int(env))] for step, env in segment.final_observation_indices]
        return {
            "infos": infos,
            "terminal_positions": terminal_positions,
            "final_rows": final_rows,
            "final_observation_indices": segment.final_observation_indices,
            "policy_version": segment.policy_version,
            "collect_seconds": segment.collect_seconds,
            "extras": extras,
            "env_ids": segment.env_ids,
            "envs_reset": segment.envs_reset,
            # A recurrent policy's initial LSTM states and episode starts: small arrays, no observation.
            "episode_starts": segment.episode_starts,
            "lstm_states": segment.lstm_states,
        }

    def read(self, slot: int, message: dict[str, Any]) -> Segment:
        """The segment in ``slot``, as arrays of its own (the slot may be written again as soon as this returns)."""
        views = self._views[slot]

        def observation(prefix: str, rows: int | None = None) -> Observation:
            parts = {}
            for name, view in views.items():
                if name.startswith(prefix):
                    parts[name[len(prefix) :]] = (view if rows is None else view[:rows]).copy()
            return _as_observation(parts, self.dict_keys)

        terminal_positions = message["terminal_positions"]
        terminals = observation("terminal_observations/", len(terminal_positions))
        infos = message["infos"]
        for row, (step, env_index) in enumerate(terminal_positions):
            infos[step][env_index]["terminal_observation"] = _index(terminals, row)
        final_rows = message["final_rows"]
        extras = dict(message["extras"])
        if "original_rewards" in views:
            extras["original_rewards"] = views["original_rewards"].copy()
        return Segment(
            observations=observation("observations/"),
            next_observations=observation("next_observations/"),
            final_observations=_index(terminals, np.asarray(final_rows, dtype=np.int64)) if final_rows else None,
            final_observation_indices=message["final_observation_indices"],
            infos=infos,
            policy_version=message["policy_version"],
            collect_seconds=message["collect_seconds"],
            extras=extras,
            env_ids=message["env_ids"],
            envs_reset=message["envs_reset"],
            episode_starts=message["episode_starts"],
            lstm_states=message["lstm_states"],
            **{name: views[name].copy() for name in STEP_FIELDS},
        )

    def close(self) -> None:
        """Let go of this process's mappings (views first: a mapping with live views cannot be closed)."""
        self._views = []
        for buffer in self._buffers:
            # A view still alive elsewhere keeps its mapping open; the mapping is freed with that view.
            with contextlib.suppress(BufferError):
                buffer.close()
        self._buffers = []


def _index(observation: Observation, index: Any) -> Observation:
    if isinstance(observation, dict):
        return {key: value[index] for key, value in observation.items()}
    return observation[index]
