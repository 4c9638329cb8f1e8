"""
THE one list of the algorithm classes the cross-algorithm tests run over (as sb3-contrib's tests do), with small
settings, the lists derived from it, and the (algorithm, collector) pairs. A helper module, not a test module:
each ``tests/test_<concern>.py`` parametrizes over the list its concern applies to.
"""

import copy
from typing import Any

import pytest
import torch as th
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecEnv

from sb3_impact import IMPACT, IMPALA, PPOAMBER, PTRPPO, VRACER, SACReFER, TD3ReFER

OFF_POLICY_SMALL = dict(learning_starts=32, buffer_size=512, batch_size=16, policy_kwargs=dict(net_arch=[16]))
# Small settings per algorithm: seconds per test.
SMALL: dict[type, dict[str, Any]] = {
    IMPACT: dict(n_steps=16, policy_kwargs=dict(net_arch=[16])),
    IMPALA: dict(n_steps=16, policy_kwargs=dict(net_arch=[16])),
    PPOAMBER: dict(n_steps=16, batch_size=16, n_epochs=2, replay_length=2, policy_kwargs=dict(net_arch=[16])),
    PTRPPO: dict(n_steps=16, batch_size=16, n_epochs=1, replay_rounds=1, memory_size=8, policy_kwargs=dict(net_arch=[16])),
    VRACER: dict(learning_starts=32, buffer_size=512, batch_size=16, train_freq=4, policy_kwargs=dict(net_arch=[16])),
    SACReFER: OFF_POLICY_SMALL,
    TD3ReFER: OFF_POLICY_SMALL,
}

#: The seven classes.
ALGOS = list(SMALL)
ALGO_IDS = [algo.__name__ for algo in ALGOS]
#: The five that learn through the segment loop and take a ``collector``.
COLLECTING = [IMPACT, IMPALA, PPOAMBER, PTRPPO, VRACER]
COLLECTING_IDS = [algo.__name__ for algo in COLLECTING]
#: The four with SB3's on-policy surface (``rollout_buffer``, ``collect_rollouts``).
ON_POLICY = [IMPACT, IMPALA, PPOAMBER, PTRPPO]
ON_POLICY_IDS = [algo.__name__ for algo in ON_POLICY]
#: The two that keep SB3's own off-policy loop (no ``collector`` parameter).
SB3_LOOP_ALGOS = [SACReFER, TD3ReFER]
SB3_LOOP_IDS = [algo.__name__ for algo in SB3_LOOP_ALGOS]

COLLECTORS = ["sync", "thread", "process"]
#: The "collector" of SACReFER and TD3ReFER in the pairs: SB3's off-policy loop.
SB3_LOOP = "sb3"
#: Each collecting class with each collector, and SACReFER/TD3ReFER once with SB3's loop: ("IMPACT-thread", "SACReFER-sb3").
ALGO_COLLECTOR = [
    *(pytest.param(algo, collector, id=f"{algo.__name__}-{collector}") for algo in COLLECTING for collector in COLLECTORS),
    *(pytest.param(algo, SB3_LOOP, id=f"{algo.__name__}-{SB3_LOOP}") for algo in SB3_LOOP_ALGOS),
]

CUDA = th.cuda.is_available()


def small(algo: type, **kwargs: Any) -> dict[str, Any]:
    """The small settings of ``algo`` on the CPU, updated with ``kwargs`` (a copy: SB3's SAC writes into policy_kwargs)."""
    return {**copy.deepcopy(SMALL[algo]), "device": "cpu", **kwargs}


def pair_kwargs(algo: type, collector: str, **kwargs: Any) -> dict[str, Any]:
    """The constructor's keyword arguments for an ALGO_COLLECTOR pair: ``small(algo)`` with ``collector`` unless SB3's loop."""
    if collector != SB3_LOOP:
        kwargs = {"collector": collector, **kwargs}
    elif algo in COLLECTING:
        raise ValueError(f"{algo.__name__} learns through the segment loop: give it a collector, not {SB3_LOOP!r}")
    return small(algo, **kwargs)


def steps_per_rollout(model: Any) -> int:
    """Vector steps between two ``on_rollout_start`` calls: a segment (``n_steps``, ``train_freq``) or SB3's ``train_freq``."""
    if hasattr(model, "train_freq"):  # VRACER, SACReFER, TD3ReFER (a TrainFreq in steps)
        return model.train_freq.frequency
    return model.n_steps


def short_pendulum(n_envs: int = 2, seed: int = 0, episode_steps: int = 50) -> VecEnv:
    """Pendulum with short episodes: VRACER's memory holds whole episodes, so it trains within a few hundred steps."""
    return make_vec_env("Pendulum-v1", n_envs=n_envs, seed=seed, env_kwargs=dict(max_episode_steps=episode_steps))


def assert_counts_balance(model: Any) -> None:
    """The collecting classes' counters after learn(): nothing lost, something trained."""
    assert model.sampled_steps == model.trained_steps + model.dropped_steps
    assert model.trained_steps > 0


def assert_finite_parameters(model: Any) -> None:
    assert all(th.isfinite(parameter).all() for parameter in model.policy.parameters())
