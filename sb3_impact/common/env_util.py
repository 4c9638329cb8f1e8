"""Environments given to an algorithm: factories, and closing a VecEnv whose worker crashed."""

import contextlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

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
