"""
SB3's logger after learn(), on every (algorithm, collector) pair: as SB3's PPO, learn() ends without a dump, so
``model.logger.name_to_value`` still holds the last ``train/*`` values (and, for the five collecting classes, the
``collector/`` counters of the call).
"""

import numpy as np
import pytest
import torch as th
from stable_baselines3 import PPO, SAC, TD3
from stable_baselines3.common.logger import Logger

from sb3_impact import IMPACT, IMPALA, PPOAMBER, PTRPPO, VRACER, SACReFER, TD3ReFER
from sb3_impact.common.training_statistics import TrainingStatistics

from .algorithms import ALGO_COLLECTOR, COLLECTING, SB3_LOOP_ALGOS, pair_kwargs, short_pendulum, small

# The SB3 class each one extends: it keeps every train/ key of that class's (PPO keeps 11 on a Box action space).
SB3_BASE = {PPOAMBER: PPO, PTRPPO: PPO, SACReFER: SAC, TD3ReFER: TD3}
OWN_TRAIN_KEYS = {
    IMPACT: {"loss", "policy_gradient_loss", "value_loss", "entropy_loss", "clip_fraction", "clip_range", "kl_coef"},
    IMPALA: {"loss", "policy_gradient_loss", "value_loss", "entropy_loss", "is_ratio_mean"},
    PPOAMBER: {"replay_ratio_mean", "active_batches", "batch_drop_factor"},
    PTRPPO: {"replay_loss", "replay_updates", "priority_mean", "replay_share"},
    VRACER: {"policy_gradient_loss", "value_loss", "beta", "c_max", "far_fraction", "reward_scale", "memory_steps"},
    SACReFER: {"beta", "c_max", "far_fraction", "kl_mu_pi"},
    TD3ReFER: {"beta", "c_max", "far_fraction", "kl_mu_pi"},
}
COMMON_TRAIN_KEYS = {"learning_rate", "n_updates"}


def train_keys(model) -> set[str]:
    return {key.removeprefix("train/") for key in model.logger.name_to_value if key.startswith("train/")}


@pytest.fixture(scope="module")
def sb3_train_keys() -> dict[type, set[str]]:
    """The train/ keys SB3's own PPO, SAC and TD3 leave in the logger after learn() with the same small settings."""
    keys = {}
    for sb3_class, settings in ((PPO, small(PTRPPO)), (SAC, small(SACReFER)), (TD3, small(TD3ReFER))):
        settings = {key: value for key, value in settings.items() if key not in ("replay_rounds", "memory_size")}
        keys[sb3_class] = train_keys(sb3_class("MlpPolicy", short_pendulum(), seed=0, **settings).learn(128))
    assert len(keys[PPO]) == 11, sorted(keys[PPO])
    return keys


@pytest.mark.parametrize("algo, collector", ALGO_COLLECTOR)
def test_learn_leaves_the_last_train_values_and_collector_counters_in_the_logger(algo, collector, sb3_train_keys):
    model = algo("MlpPolicy", short_pendulum(), seed=0, **pair_kwargs(algo, collector)).learn(160)
    assert model._n_updates > 0
    logged = model.logger.name_to_value
    keys = train_keys(model)
    assert COMMON_TRAIN_KEYS | OWN_TRAIN_KEYS[algo] <= keys, sorted(keys)
    if algo in SB3_BASE:
        assert sb3_train_keys[SB3_BASE[algo]] <= keys, sorted(sb3_train_keys[SB3_BASE[algo]] - keys)
    assert all(np.isfinite(logged[f"train/{key}"]) for key in keys)
    assert logged["train/n_updates"] == model._n_updates
    collector_keys = {key for key in logged if key.startswith("collector/")}
    if algo in SB3_LOOP_ALGOS:
        assert collector_keys == set()
        return
    assert algo in COLLECTING
    assert {"collector/sampled_steps", "collector/trained_steps", "collector/dropped_steps"} <= collector_keys
    assert logged["collector/sampled_steps"] == model.sampled_steps > 0
    assert logged["collector/trained_steps"] == model.trained_steps
    assert logged["collector/dropped_steps"] == model.dropped_steps == model.sampled_steps - model.trained_steps


def test_training_statistics_are_means_by_name_and_maxima_for_max_names():
    statistics = TrainingStatistics()
    first = statistics.add_minibatches(
        [{"loss": th.tensor(1.0), "ratio_max": th.tensor(2.0)}, {"loss": th.tensor(3.0), "ratio_max": th.tensor(5.0)}],
        clip_range=0.2,
    )
    assert first == {"loss": 2.0, "ratio_max": 5.0, "clip_range": 0.2}  # one pass: over its minibatches
    statistics.add({"loss": 4.0, "ratio_max": 1.0, "clip_range": 0.4})
    assert statistics.summary() == pytest.approx({"loss": 3.0, "ratio_max": 5.0, "clip_range": 0.3})  # over the passes
    logger = Logger(folder=None, output_formats=[])
    statistics.record(logger)
    assert logger.name_to_value == pytest.approx({"train/loss": 3.0, "train/ratio_max": 5.0, "train/clip_range": 0.3})
    assert len(statistics) == 0 and statistics.summary() == {}  # recorded: the next record starts over
