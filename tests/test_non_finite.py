"""
A NaN or infinite observation, reward, or final observation of a truncation (bootstrapped from) stops learn()
with an error naming the environment index, on every (algorithm, collector) pair.
"""

import pytest
import torch as th
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_impact.common.collectors import CollectorError

from .algorithms import ALGO_COLLECTOR, COLLECTING, COLLECTING_IDS, pair_kwargs
from .conftest import NaNFinalObservationEnv, NonFiniteEnv, collector_processes, collector_threads


def learn_error_message(model, total_timesteps: int) -> str:
    """The message of the error learn() ends with (and of its cause: a collector wraps the sampler's error)."""
    with pytest.raises((ValueError, CollectorError)) as error_info:
        model.learn(total_timesteps)
    assert collector_threads() == [] and collector_processes() == []
    return str(error_info.value) + str(error_info.value.__cause__)


@pytest.mark.parametrize("what", ["observation", "reward"])
@pytest.mark.parametrize("algo, collector", ALGO_COLLECTOR)
def test_non_finite_data_from_an_env_stops_learn_naming_the_env(algo, collector, what):
    env = DummyVecEnv([lambda: NonFiniteEnv(bad=False), lambda: NonFiniteEnv(bad=True, what=what)])
    model = algo("MlpPolicy", env, seed=0, **pair_kwargs(algo, collector))
    message = learn_error_message(model, 10_000)
    assert "environment index 1" in message and "NaN or infinite" in message


@pytest.mark.parametrize("algo, collector", ALGO_COLLECTOR)
def test_nan_final_observation_of_a_truncation_stops_learn_naming_the_env(algo, collector):
    env = DummyVecEnv([lambda: NaNFinalObservationEnv(bad=False), lambda: NaNFinalObservationEnv(bad=True)])
    model = algo("MlpPolicy", env, seed=0, **pair_kwargs(algo, collector))
    message = learn_error_message(model, 1_000)
    assert "environment index 1" in message and "NaN or infinite" in message and "terminal_observation" in message


@pytest.mark.parametrize("algo, collector", ALGO_COLLECTOR)
def test_finite_data_from_the_same_envs_learns(algo, collector):
    """The envs above without their bad value: learn() runs through (what the errors above are not raised for)."""
    env = DummyVecEnv([lambda: NonFiniteEnv(bad=False), lambda: NaNFinalObservationEnv(bad=False)])
    model = algo("MlpPolicy", env, seed=0, **pair_kwargs(algo, collector)).learn(64)
    assert model.num_timesteps >= 64


@pytest.mark.parametrize("collector", ["sync", "process"])
@pytest.mark.parametrize("algo", COLLECTING, ids=COLLECTING_IDS)
def test_a_policy_with_nan_weights_stops_learn_naming_the_cause(algo, collector):
    """
    Diverged weights: in the learner's process torch.distributions' own argument check may say so first (SB3's
    policies); a forked collector skips that check (it costs a tenth of a sampling step), and the sampler's own
    check says so.
    """
    model = algo("MlpPolicy", "Pendulum-v1", seed=0, **pair_kwargs(algo, collector))
    with th.no_grad():
        for parameter in model.policy.parameters():
            parameter.fill_(float("nan"))
    message = learn_error_message(model, 1_000)
    ours = "NaN or infinite parameters or log-probabilities" in message
    assert ours or (collector == "sync" and "invalid values" in message), message
