"""
The learner on a CUDA device, the collection on the CPU, on every (algorithm, collector) pair that runs in this
process (SACReFER and TD3ReFER with SB3's loop). Skipped without a CUDA device.
"""

import numpy as np
import pytest

from .algorithms import (
    ALGO_COLLECTOR,
    COLLECTING,
    CUDA,
    assert_counts_balance,
    assert_finite_parameters,
    pair_kwargs,
    short_pendulum,
)

pytestmark = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")

IN_PROCESS_PAIRS = [param for param in ALGO_COLLECTOR if param.values[1] != "process"]


@pytest.mark.parametrize("algo, collector", IN_PROCESS_PAIRS)
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
