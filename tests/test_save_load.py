"""
save/load on every (algorithm, collector) pair: identical predictions, nothing started by load(), training goes
on; and load(path, **kwargs) takes what the constructor takes (rl-zoo3's ``train -i`` passes them), on all seven.
"""

import threading

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_impact import IMPACT, IMPALA, PPOAMBER, PTRPPO, VRACER, SACReFER, TD3ReFER

from .algorithms import ALGO_COLLECTOR, ALGO_IDS, ALGOS, COLLECTING, assert_counts_balance, pair_kwargs, short_pendulum, small
from .conftest import collector_processes


@pytest.mark.parametrize("algo, collector", ALGO_COLLECTOR)
def test_save_load_gives_identical_predictions_and_starts_nothing(algo, collector, tmp_path):
    model = algo("MlpPolicy", short_pendulum(n_envs=1), seed=0, **pair_kwargs(algo, collector)).learn(128)
    assert model._n_updates > 0
    observations = np.stack([model.observation_space.sample() for _ in range(10)])
    expected, _ = model.predict(observations, deterministic=True)
    model.save(tmp_path / "model")
    threads_before = threading.active_count()
    loaded = algo.load(tmp_path / "model", env=make_vec_env("Pendulum-v1", seed=1), device="cpu")
    assert threading.active_count() == threads_before and collector_processes() == []
    if algo in COLLECTING:
        assert loaded.collector == model.collector == collector and loaded.collector_kwargs == model.collector_kwargs
    actions, _ = loaded.predict(observations, deterministic=True)
    np.testing.assert_array_equal(actions, expected)
    loaded.learn(64)  # continues training after load
    assert loaded.num_timesteps >= 64
    if algo in COLLECTING:
        assert_counts_balance(loaded)


@pytest.mark.parametrize("algo", ALGOS, ids=[algo.__name__ for algo in ALGOS])
def test_a_model_that_learned_on_several_envs_loads(algo, tmp_path):
    model = algo("MlpPolicy", make_vec_env("Pendulum-v1", n_envs=2, seed=0), seed=0, **small(algo)).learn(96)
    observations = np.stack([model.observation_space.sample() for _ in range(10)])
    expected, _ = model.predict(observations, deterministic=True)
    model.save(tmp_path / "model")
    loaded = algo.load(tmp_path / "model", env=make_vec_env("Pendulum-v1", n_envs=2, seed=1), device="cpu")
    np.testing.assert_array_equal(loaded.predict(observations, deterministic=True)[0], expected)
    loaded.learn(64)
    assert loaded.num_timesteps >= 64


# Per algorithm, the arguments its constructor converts or checks (rl-zoo3's `train -i` passes them to load()).
LOAD_KWARGS = {
    IMPACT: [dict(clip_range=0.1), dict(clip_range=lambda progress: 0.1 * progress)],
    IMPALA: [dict(learning_rate=lambda progress: 1e-3 * progress), dict(gamma=0.95)],
    PPOAMBER: [dict(batch_drop_factor="lin_0.25"), dict(batch_drop_factor=0.3), dict(clip_range=0.1)],
    PTRPPO: [dict(clip_range=0.1), dict(replay_ratio="behaviour", priority="reward")],
    VRACER: [dict(refer_rules=[1]), dict(refer_c=2.0, refer_d=0.2), dict(train_freq=(2, "step"))],
    SACReFER: [dict(refer_rules=[1]), dict(refer_c=2.0, refer_a=1e-6, refer_d=0.2)],
    TD3ReFER: [dict(refer_rules=[2]), dict(refer_c=2.0)],
}
LOAD_REFUSED = {
    IMPACT: dict(clip_range=-0.1),
    PPOAMBER: dict(batch_drop_factor="half"),
    VRACER: dict(refer_d=1.5),
    SACReFER: dict(refer_rules=[3]),
    TD3ReFER: dict(refer_c=-1.0),
}


@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_load_takes_what_the_constructor_takes(algo, tmp_path):
    settings = small(algo)
    model = algo("MlpPolicy", "Pendulum-v1", seed=0, **settings)
    model.save(tmp_path / "model")
    for kwargs in LOAD_KWARGS[algo]:
        constructed = algo("MlpPolicy", "Pendulum-v1", seed=0, **{**small(algo), **kwargs})
        loaded = algo.load(tmp_path / "model", env=DummyVecEnv([lambda: gym.make("Pendulum-v1")]), device="cpu", **kwargs)
        for name in kwargs:
            expected, value = getattr(constructed, name), getattr(loaded, name)
            if callable(expected):
                assert [value(p) for p in (1.0, 0.5, 0.0)] == pytest.approx([expected(p) for p in (1.0, 0.5, 0.0)])
            else:
                assert value == expected
        loaded.learn(64)  # trains with them
        assert loaded.num_timesteps >= 64
    if algo in LOAD_REFUSED:  # and checks them as the constructor does
        with pytest.raises(ValueError, match=next(iter(LOAD_REFUSED[algo]))):
            algo("MlpPolicy", "Pendulum-v1", **{**small(algo), **LOAD_REFUSED[algo]})
        with pytest.raises(ValueError, match=next(iter(LOAD_REFUSED[algo]))):
            algo.load(tmp_path / "model", device="cpu", **LOAD_REFUSED[algo])


@pytest.mark.parametrize(
    "old, collector, collector_kwargs",
    [
        (dict(async_collection=False, collector="thread", collector_queue_size=1), "sync", {}),
        (dict(async_collection=True, collector="process", collector_queue_size=2), "process", dict(queue_size=2)),
    ],
)
@pytest.mark.parametrize("algo", COLLECTING, ids=[algo.__name__ for algo in COLLECTING])
def test_a_model_saved_with_the_old_collection_parameters_loads_as_it_was_saved(
    algo, old, collector, collector_kwargs, tmp_path
):
    # Before the collector component, these were attributes of the model, and save() wrote them.
    model = algo("MlpPolicy", short_pendulum(), seed=0, **small(algo))
    old = dict(old)  # the parameters are shared between the cases
    model.collector = old.pop("collector")
    model.__dict__.update(old)
    model.save(tmp_path / "old")
    loaded = algo.load(tmp_path / "old", env=short_pendulum(), device="cpu")
    assert (loaded.collector, loaded.collector_kwargs) == (collector, collector_kwargs)
    assert not any(hasattr(loaded, name) for name in old)
    loaded.learn(64)


def test_the_old_import_path_of_the_rollout_buffers_still_resolves():
    # Models saved before the move pickled rollout_buffer_class under sb3_impact.common.buffers.
    from sb3_impact.common import buffers, rollout_buffers

    assert buffers.BehaviourRolloutBuffer is rollout_buffers.BehaviourRolloutBuffer
    assert buffers.DictBehaviourRolloutBuffer is rollout_buffers.DictBehaviourRolloutBuffer
