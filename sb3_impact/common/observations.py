"""Observation helpers: every observation here is a numpy array or a dict of them (``spaces.Dict``)."""

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.type_aliases import TensorDict
from stable_baselines3.common.utils import obs_as_tensor

Observation = np.ndarray | dict[str, np.ndarray]
TensorObservation = th.Tensor | TensorDict

SUPPORTED_OBSERVATION_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Dict)


def check_observation_space(observation_space: spaces.Space) -> None:
    """Raise ``ValueError`` unless SB3's policies and the segments here can hold ``observation_space``."""
    if not isinstance(observation_space, SUPPORTED_OBSERVATION_SPACES):
        names = ", ".join(space.__name__ for space in SUPPORTED_OBSERVATION_SPACES)
        raise ValueError(f"Unsupported observation space {observation_space}: supported are {names}")


def stack_observations(observations: Sequence[Observation]) -> Observation:
    """Stack observations along a new leading axis."""
    if isinstance(observations[0], dict):
        return {key: np.stack([obs[key] for obs in observations]) for key in observations[0]}  # type: ignore[index]
    return np.stack(observations)  # type: ignore[arg-type]


def concatenate_observations(observations: Sequence[Observation]) -> Observation:
    """Concatenate batches of observations along their leading axis."""
    if len(observations) == 1:
        return observations[0]
    if isinstance(observations[0], dict):
        return {key: np.concatenate([obs[key] for obs in observations]) for key in observations[0]}  # type: ignore[index]
    return np.concatenate(observations)  # type: ignore[arg-type]


def index_observation(observation: Any, index: Any) -> Any:
    """``observation[index]`` for an array or tensor, or for each entry of a dict of them."""
    if isinstance(observation, dict):
        return {key: value[index] for key, value in observation.items()}
    return observation[index]


def map_observation(observation: Any, function: Any) -> Any:
    """``function(observation)``, applied to each entry of a dict."""
    if isinstance(observation, dict):
        return {key: function(value) for key, value in observation.items()}
    return function(observation)


def merge_time_and_envs(tensor: Any) -> Any:
    """``[T, B, ...]`` to ``[T * B, ...]`` (arrays or tensors), time-major."""
    return tensor.reshape(tensor.shape[0] * tensor.shape[1], *tensor.shape[2:])


def observations_to_tensor(observations: Observation, device: th.device | str, merge_time: bool) -> TensorObservation:
    """Numpy observations to tensors on ``device``, with ``[T, B, ...]`` merged into ``[T * B, ...]`` if asked."""
    tensor = obs_as_tensor(observations, device)  # type: ignore[arg-type]
    return map_observation(tensor, merge_time_and_envs) if merge_time else tensor


def observation_chunks(observations: Any, size: int, chunk_size: int) -> Iterator[tuple[slice, Any]]:
    """``(slice, observations[slice])`` over the first ``size`` entries, ``chunk_size`` at a time."""
    for start in range(0, size, chunk_size):
        chunk = slice(start, min(start + chunk_size, size))
        yield chunk, index_observation(observations, chunk)


def non_finite_environments(observations: Observation, rewards: np.ndarray | None = None) -> list[int]:
    """Indices of the environments (leading axis) whose observation or reward holds a NaN or an infinity."""
    arrays = list(observations.values()) if isinstance(observations, dict) else [observations]
    if rewards is not None:
        arrays.append(np.asarray(rewards))
    floating = [array for array in arrays if np.issubdtype(array.dtype, np.floating)]
    if all(np.isfinite(array).all() for array in floating):  # the common case, without per-env work
        return []
    bad = np.zeros(len(arrays[0]), dtype=bool)
    for array in floating:
        bad |= ~np.isfinite(array.reshape(len(array), -1)).all(axis=1)
    return np.flatnonzero(bad).tolist()


def check_finite_step(observations: Observation, rewards: np.ndarray | None, where: str) -> None:
    """ValueError naming the environment indices if a step returned a NaN or infinite observation or reward."""
    bad = non_finite_environments(observations, rewards)
    if bad:
        raise ValueError(
            f"{where}: environment index {bad[0] if len(bad) == 1 else bad} returned a NaN or infinite observation "
            "or reward; check the environment (SB3's VecCheckNan wrapper locates the first one)"
        )


def check_finite_final_observations(infos: Sequence[dict[str, Any]], env_indices: Any, where: str) -> None:
    """
    ValueError naming the environment index if the final observation (``info["terminal_observation"]``) of one of
    ``env_indices`` holds a NaN or an infinity: it is bootstrapped from, and the mid-episode check does not see it.
    """
    for env_index in env_indices:
        final = infos[env_index].get("terminal_observation")
        if final is not None and non_finite_environments(map_observation(final, lambda array: np.asarray(array)[None])):
            raise ValueError(
                f"{where}: environment index {env_index} returned a NaN or infinite final observation "
                "(info['terminal_observation']); check the environment"
            )
