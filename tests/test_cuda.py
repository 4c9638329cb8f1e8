"""
The learner on a CUDA device, the collection on the CPU: every (algorithm, collector) pair of the sync, thread and
forked process collectors (Ray's is left out); what a GPU machine gives by default (``device="auto"`` is CUDA,
``collector="auto"`` the forked process); CNN and recurrent policies; and the learner's replay on CUDA against the
behaviour log-probabilities the CPU copy recorded at equal weights. Skipped without a CUDA device.
"""

import copy

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.env_util import make_vec_env

from sb3_impact import IMPACT, IMPALA
from sb3_impact.common.collectors.sampler import SegmentSampler
from sb3_impact.common.training_batch import TrainingBatch

from .algorithms import (
    ALGO_COLLECTOR,
    COLLECTING,
    COLLECTING_IDS,
    COLLECTORS,
    CUDA,
    SMALL,
    assert_counts_balance,
    assert_finite_parameters,
    pair_kwargs,
    short_pendulum,
)
from .conftest import ImageEnv
from .test_recurrent import collect, random_ends, recurrent_policy, small_recurrent_model

pytestmark = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")

#: The learner's replay on CUDA against the log-probabilities the CPU copy recorded with the same weights: float32
#: kernels of two devices (cuBLAS, cuDNN's LSTM) sum in other orders, so they agree to rounding, not bit for bit.
CROSS_DEVICE_ATOL = 1e-4


@pytest.mark.parametrize("algo, collector", ALGO_COLLECTOR)
def test_cuda_learner_with_cpu_collection(algo, collector, tmp_path):
    settings = {**pair_kwargs(algo, collector), "device": "cuda"}
    model = algo("MlpPolicy", short_pendulum(n_envs=1), seed=0, **settings).learn(256)
    assert model.device.type == "cuda" and model.policy.device.type == "cuda"
    assert model._n_updates > 0
    assert_finite_parameters(model)
    if algo in COLLECTING:
        assert_counts_balance(model)
    observations = np.stack([model.observation_space.sample() for _ in range(4)])
    actions, _ = model.predict(observations, deterministic=True)
    assert isinstance(actions, np.ndarray) and actions.shape == (4, 1)
    model.save(tmp_path / "model")  # loads onto the CPU with the same predictions
    loaded = algo.load(tmp_path / "model", device="cpu")
    np.testing.assert_allclose(loaded.predict(observations, deterministic=True)[0], actions, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("algo", COLLECTING, ids=COLLECTING_IDS)
def test_the_defaults_on_a_gpu_machine(algo):
    """No ``device``, no ``collector``: SB3's "auto" device (CUDA here) and the package's "auto" collector."""
    model = algo("MlpPolicy", short_pendulum(n_envs=2), seed=0, **copy.deepcopy(SMALL[algo])).learn(256)
    assert model.device.type == "cuda"
    assert model._n_updates > 0
    assert_counts_balance(model)
    assert_finite_parameters(model)


@pytest.mark.parametrize("algo", [IMPACT, IMPALA])
@pytest.mark.parametrize("collector", COLLECTORS)
def test_cnn_policy_with_a_cuda_learner(algo, collector):
    model = algo("CnnPolicy", make_vec_env(ImageEnv, n_envs=2, seed=0), n_steps=8, collector=collector, seed=0, device="cuda")
    model.learn(64)
    assert model.policy.device.type == "cuda" and model._n_updates > 0
    assert_counts_balance(model)
    assert_finite_parameters(model)


@pytest.mark.parametrize("algo", [IMPACT, IMPALA])
@pytest.mark.parametrize("collector", COLLECTORS)
def test_recurrent_cuda_learner_with_each_collector(algo, collector, tmp_path):
    model = small_recurrent_model(algo, collector, device="cuda")
    model.learn(160)
    assert model.num_timesteps == model.sampled_steps == model.trained_steps + model.dropped_steps == 160
    assert model.policy.device.type == "cuda" and model.gradient_steps > 0
    assert_finite_parameters(model)
    observation = model.get_env().reset()
    starts = np.ones(2, dtype=bool)
    actions, state = model.predict(observation, state=None, episode_start=starts, deterministic=True)
    model.save(tmp_path / "model")
    loaded = algo.load(tmp_path / "model", device="cpu")
    loaded_actions, loaded_state = loaded.predict(observation, state=None, episode_start=starts, deterministic=True)
    np.testing.assert_array_equal(actions, loaded_actions)
    np.testing.assert_allclose(state[0], loaded_state[0], atol=CROSS_DEVICE_ATOL)


def max_replay_difference(policy, segments) -> float:
    """The largest |log pi_learner - log mu| over ``segments``, the learner being a CUDA copy of ``policy``."""
    learner = copy.deepcopy(policy).to("cuda")
    largest = 0.0
    for segment in segments:
        batch = TrainingBatch.from_segment(segment, th.device("cuda"))
        with th.no_grad():
            distribution, _ = batch.evaluate(learner)
            log_probs = distribution.log_prob(batch.actions).reshape(segment.n_steps, segment.n_envs).cpu().numpy()
        largest = max(largest, float(np.abs(log_probs - segment.behaviour_log_probs).max()))
    return largest


def test_cuda_replay_of_an_lstm_matches_the_cpu_behaviour():
    policy = recurrent_policy(random_ends(), lstm_hidden_size=64, net_arch=[64])
    difference = max_replay_difference(policy, collect(policy))
    print(f"LSTM: max |log pi_cuda - log mu_cpu| = {difference:.3g}")
    assert difference < CROSS_DEVICE_ATOL


def test_cuda_replay_of_a_cnn_matches_the_cpu_behaviour():
    model = IMPACT("CnnPolicy", make_vec_env(ImageEnv, n_envs=2, seed=0), n_steps=8, collector="sync", seed=0, device="cpu")
    policy = model.policy
    policy.set_training_mode(False)
    env = model.get_env()
    sampler = SegmentSampler(env, policy, 8, env.reset())
    difference = max_replay_difference(policy, [sampler.collect() for _ in range(3)])
    print(f"CNN: max |log pi_cuda - log mu_cpu| = {difference:.3g}")
    assert difference < CROSS_DEVICE_ATOL
