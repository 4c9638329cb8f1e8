"""
Training and evaluation modes, on all seven classes: with a features extractor whose output depends on the mode
(BatchNorm, Dropout), every value computed without gradient on the learner's policy (targets, bootstraps) is
computed in evaluation mode, as SB3 computes its targets.
"""

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.vec_env import DummyVecEnv
from torch import nn

from sb3_impact import IMPACT, IMPALA
from sb3_impact.common.collectors.sampler import SegmentSampler
from sb3_impact.common.segment_loop import frozen_policy_copy
from sb3_impact.common.training_batch import TrainingBatch

from .algorithms import ALGO_IDS, ALGOS, SB3_LOOP_ALGOS, assert_finite_parameters, small


class BatchNormDropoutExtractor(BaseFeaturesExtractor):
    """A features extractor whose output depends on the mode: BatchNorm1d (batch statistics) and Dropout."""

    def __init__(self, observation_space: spaces.Box, features_dim: int = 8) -> None:
        super().__init__(observation_space, features_dim)
        n_input = int(np.prod(observation_space.shape))
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(n_input, features_dim), nn.BatchNorm1d(features_dim), nn.ReLU(), nn.Dropout(0.5)
        )

    def forward(self, observations: th.Tensor) -> th.Tensor:
        return self.net(observations)


def with_batch_norm(algo, **kwargs):
    settings = small(algo, **kwargs)
    settings["policy_kwargs"] = {**settings["policy_kwargs"], "features_extractor_class": BatchNormDropoutExtractor}
    return settings


@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_batch_norm_and_dropout_features_extractor_learns_with_one_env_and_targets_in_eval_mode(algo):
    """Every value computed without gradient (targets, bootstraps) on the learner's policy is in evaluation mode."""
    env = DummyVecEnv([lambda: gym.make("Pendulum-v1")])
    env.seed(0)
    model = algo("MlpPolicy", env, seed=0, **with_batch_norm(algo))
    modes_without_grad: list[bool] = []
    value_net = getattr(model.policy, "value_net", None)
    if value_net is not None:  # the actor-critics here (SAC's and TD3's targets are SB3's own)
        value_net.register_forward_hook(
            lambda module, inputs, output: modes_without_grad.append(module.training) if not th.is_grad_enabled() else None
        )
    # Pendulum truncates at 200: one time-limit bootstrap at least (SB3's SAC and TD3: a few updates suffice)
    model.learn(64 if algo in SB3_LOOP_ALGOS else 200)
    assert model._n_updates > 0
    assert_finite_parameters(model)
    if algo is IMPACT:  # its targets come from the target network, a copy kept in evaluation mode
        assert model._target_policy is not None and not model._target_policy.training
    elif value_net is not None:
        assert modes_without_grad
    assert not any(modes_without_grad)


@pytest.mark.parametrize("algo", [IMPALA, IMPACT], ids=["IMPALA", "IMPACT"])
def test_vtrace_targets_of_a_training_policy_equal_those_in_eval_mode(algo):
    env = DummyVecEnv([lambda: gym.make("Pendulum-v1")])
    env.seed(0)
    model = algo("MlpPolicy", env, seed=0, **with_batch_norm(algo)).learn(32)
    sampler = SegmentSampler(env, frozen_policy_copy(model.policy, "cpu"), 16, env.reset())
    batch = TrainingBatch.from_segment(sampler.collect(), model.device)
    with th.no_grad():
        target_log_probs = batch.behaviour_log_probs.flatten()
        model.policy.set_training_mode(True)
        train_values = model.policy.predict_values(batch.observations).flatten()  # (updates BatchNorm's statistics)
        targets, _ = model._vtrace_targets(batch, train_values, target_log_probs, model.policy)
        assert model.policy.training  # restored
        model.policy.set_training_mode(False)
        eval_values = model.policy.predict_values(batch.observations).flatten()
        assert not th.allclose(train_values, eval_values)  # dropout and batch statistics are at work
        expected, _ = model._vtrace_targets(batch, eval_values, target_log_probs, model.policy)
    th.testing.assert_close(targets, expected)


@pytest.mark.parametrize(
    "layer,expected",
    [
        (th.nn.Dropout(0.1), True),
        (th.nn.BatchNorm1d(4), True),
        (th.nn.RReLU(), True),
        (th.nn.ReLU(), False),
        (th.nn.Linear(4, 4), False),
    ],
)
def test_mode_dependent_layers_are_found(layer, expected):
    from sb3_impact.common.modes import has_mode_dependent_layers

    assert has_mode_dependent_layers(th.nn.Sequential(th.nn.Linear(4, 4), layer)) == expected
