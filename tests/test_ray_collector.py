"""The Ray collector: learning, worker faults, clean exits, save/load, and the optional dependency."""

import functools
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import ActorCriticPolicy

from sb3_impact import IMPACT, IMPALA, PPOAMBER, PTRPPO, VRACER
from sb3_impact.common.collectors.base import CollectorError
from sb3_impact.common.collectors.ray import RayCollector, RolloutWorker

from .conftest import CrashingEnv, TaggedStepsEnv, record_reset_noise

REPO_ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(n_steps=16, policy_kwargs=dict(net_arch=[16]), device="cpu")
WORKER_PREFIX = "sb3_impact_worker_"


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray with 2 CPUs, shared by the tests of this module (starting Ray takes seconds)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    yield ray
    ray.shutdown()


def live_worker_names(ray) -> list[str]:
    return [name for name in ray.util.list_named_actors() if name.startswith(WORKER_PREFIX)]


def wait_until_no_workers(ray, timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while live_worker_names(ray) and time.monotonic() < deadline:
        time.sleep(0.1)
    return live_worker_names(ray)


def actor_is_dead(ray, actor, timeout: float = 30.0) -> bool:
    """Whether calls to ``actor`` fail within ``timeout``: ``ray.kill`` is asynchronous, so a call sent right
    after it may still be served; a killed actor stops answering shortly after."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(actor.describe.remote(), timeout=timeout)
        except ray.exceptions.RayActorError:
            return True
        time.sleep(0.2)
    return False


class AtStep(BaseCallback):
    """Calls ``action(self)`` once, at the ``at``-th vector step; records the collector's actors then."""

    def __init__(self, at: int, action) -> None:
        super().__init__()
        self.at = at
        self.action = action
        self.actors: list = []

    def _on_step(self) -> bool:
        if self.n_calls == self.at:
            self.actors = list(self.model._collector.actors)
            self.action(self)
        return True


def mean_return(model) -> float:
    """Mean Monitor return of the last episodes (``ep_info_buffer``), -inf before 20 episodes have ended."""
    buffer = model.ep_info_buffer
    return float(np.mean([info["r"] for info in buffer])) if len(buffer) >= 20 else -np.inf


class StopWhen(BaseCallback):
    """Stops ``learn()`` once ``condition(model)`` holds, checked every ``every`` vector steps."""

    def __init__(self, condition, every: int = 10) -> None:
        super().__init__()
        self.condition, self.every = condition, every

    def _on_step(self) -> bool:
        return self.n_calls % self.every != 0 or not self.condition(self.model)


def test_importing_sb3_impact_does_not_import_ray():
    code = "import sys, sb3_impact, sb3_impact.common.collectors.ray; assert 'ray' not in sys.modules, 'ray imported'"
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True)


def test_choosing_ray_without_ray_installed_says_which_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # "import ray" now raises ImportError
    with pytest.raises(ImportError, match=r'pip install "sb3-impact\[ray\]"'):
        IMPACT("MlpPolicy", "CartPole-v1", collector="ray", **SMALL)
    # the other collectors do not need it
    IMPACT("MlpPolicy", "CartPole-v1", collector="thread", **SMALL)


@pytest.mark.parametrize(
    "collector, options, error, name",
    [
        ("thread", {"num_workers": 2}, TypeError, "num_workers"),
        ("process", {"envs_per_worker": 2}, TypeError, "envs_per_worker"),
        ("thread", {"address": "auto"}, TypeError, "address"),
        ("ray", {"num_workers": 0}, ValueError, "num_workers"),
        ("ray", {"envs_per_worker": 0}, ValueError, "envs_per_worker"),
        ("ray", {"address": 5}, TypeError, "address"),
        ("ray", {"workers": 2}, TypeError, "workers"),
        ("ray", {"num_cpus_per_worker": 0}, ValueError, "num_cpus_per_worker"),
        ("ray", {"num_cpus_per_worker": 1.5}, ValueError, "num_cpus_per_worker"),  # Ray takes fractions up to 1
        ("ray", {"num_cpus_per_worker": float("nan")}, ValueError, "num_cpus_per_worker"),
        ("ray", {"num_cpus_per_worker": "1"}, TypeError, "num_cpus_per_worker"),
        ("process", {"num_cpus_per_worker": 1}, TypeError, "num_cpus_per_worker"),
    ],
)
def test_ray_options_are_validated_at_construction(collector, options, error, name):
    if collector == "ray":
        pytest.importorskip("ray")
    with pytest.raises(error, match=name):
        IMPACT("MlpPolicy", "CartPole-v1", collector=collector, collector_kwargs=options, **SMALL)


def test_ray_needs_an_env_description():
    pytest.importorskip("ray")
    with pytest.raises(ValueError, match="env"):
        IMPACT("MlpPolicy", CrashingEnv(), collector="ray", **SMALL)  # an instance cannot be rebuilt remotely


def test_env_factories_are_saved_unless_they_cannot_be_pickled(tmp_path):
    model = IMPACT("MlpPolicy", functools.partial(gym.make, "CartPole-v1"), **SMALL)  # a factory works everywhere
    assert model.env.num_envs == 1
    model.save(tmp_path / "factory.zip")
    assert IMPACT.load(tmp_path / "factory.zip").worker_env().spec.id == "CartPole-v1"
    lock = threading.Lock()
    model = IMPACT("MlpPolicy", lambda: lock and gym.make("CartPole-v1"), **SMALL)
    with pytest.warns(UserWarning, match="cannot be pickled"):
        model.save(tmp_path / "closure.zip")
    assert IMPACT.load(tmp_path / "closure.zip").worker_env is None


def test_impact_learns_cartpole_with_ray_workers(local_ray):
    model = IMPACT(
        "MlpPolicy",
        "CartPole-v1",
        collector="ray",
        collector_kwargs=dict(num_workers=2, envs_per_worker=4),
        n_steps=32,
        gamma=0.98,
        gae_lambda=0.8,
        seed=0,
        device="cpu",
    )
    model.learn(60_000, callback=StopWhen(lambda model: mean_return(model) >= 150.0, every=1))
    assert mean_return(model) >= 150.0, f"mean return {mean_return(model):.1f} after {model.num_timesteps} steps"
    # The steps of the remote environments are counted and replayed to callbacks (Monitor episode infos)
    assert model.trained_steps <= model.num_timesteps <= model.sampled_steps
    assert model.sampled_steps == model.trained_steps + model.dropped_steps
    stats = model.collector_stats
    assert stats["workers"] == 2 and stats["restarts"] == 0 and stats["lost_steps"] == 0
    assert stats["worker_0_steps_per_s"] > 0 and stats["worker_1_steps_per_s"] > 0
    # one ray.put per broadcast at most (a broadcast per gradient step)
    assert 0 < stats["weight_puts"] <= model._n_updates
    assert wait_until_no_workers(local_ray) == []


def test_worker_stats_give_each_workers_process_and_delivered_steps(local_ray):
    model = IMPACT("MlpPolicy", "CartPole-v1", collector="ray", collector_kwargs=dict(num_workers=2), **SMALL)
    collector = model.make_collector()  # outside learn(): no step budget, started and closed here
    collector.start()
    try:
        for _ in range(6):
            collector.get_segment()
        workers = collector.worker_stats()
    finally:
        collector.close()
    assert [worker.index for worker in workers] == [0, 1]
    assert sum(worker.delivered_steps for worker in workers) == collector.delivered_steps == 6 * 16
    assert len({worker.pid for worker in workers}) == 2 and os.getpid() not in {worker.pid for worker in workers}
    assert [worker.node_id for worker in workers] == collector.worker_nodes
    assert wait_until_no_workers(local_ray) == []


def test_a_killed_worker_is_replaced_and_its_segment_counted(local_ray):
    model = IMPALA(
        "MlpPolicy", "CartPole-v1", collector="ray", collector_kwargs=dict(num_workers=2, envs_per_worker=2), seed=0, **SMALL
    )
    kill = AtStep(40, lambda callback: local_ray.kill(callback.actors[0]))
    with pytest.warns(RuntimeWarning, match="worker 0 failed and is replaced"):
        model.learn(3000, callback=kill)
    segment_size = 16 * 2
    assert model.collector_stats["restarts"] == 1
    assert model.collector_stats["lost_steps"] == segment_size
    assert model.dropped_steps >= segment_size
    assert model.sampled_steps == model.trained_steps + model.dropped_steps
    assert model.num_timesteps >= 3000
    assert wait_until_no_workers(local_ray) == []


def test_keyboard_interrupt_releases_every_actor(local_ray):
    model = IMPACT("MlpPolicy", "CartPole-v1", collector="ray", collector_kwargs=dict(num_workers=2), **SMALL)

    def interrupt(callback):
        raise KeyboardInterrupt

    callback = AtStep(30, interrupt)
    with pytest.raises(KeyboardInterrupt):
        model.learn(10_000, callback=callback)
    assert len(callback.actors) == 2
    assert all(actor_is_dead(local_ray, actor) for actor in callback.actors)
    assert wait_until_no_workers(local_ray) == []
    assert local_ray.is_initialized()  # the collector did not start Ray, so it leaves it running
    model.learn(200)  # still usable


def test_workers_that_keep_failing_end_learn_with_the_cause(local_ray, monkeypatch):
    monkeypatch.setattr(RayCollector, "max_restarts", 1)
    env = functools.partial(CrashingEnv, crash_after=40)
    model = IMPACT("MlpPolicy", env, collector="ray", collector_kwargs=dict(num_workers=1), **SMALL)
    with pytest.warns(RuntimeWarning, match="replaced"), pytest.raises(CollectorError, match="max_restarts=1") as error:
        model.learn(10_000)
    assert "environment exploded" in str(error.value.__cause__)
    assert wait_until_no_workers(local_ray) == []


def test_more_workers_than_cpus_run_with_a_fraction_of_a_cpu_each(local_ray):
    model = IMPALA(
        "MlpPolicy",
        "CartPole-v1",
        collector="ray",
        collector_kwargs=dict(num_workers=4, num_cpus_per_worker=0.5),  # 4 workers on the fixture's 2 CPUs
        seed=0,
        **SMALL,
    )
    model.learn(2000)
    stats = model.collector_stats
    assert stats["workers"] == 4
    assert all(stats[f"worker_{index}_steps_per_s"] > 0 for index in range(4))
    assert model.sampled_steps == model.trained_steps + model.dropped_steps
    assert wait_until_no_workers(local_ray) == []


def test_a_request_larger_than_the_cluster_is_refused_with_the_numbers(local_ray, monkeypatch):
    # Were the request sent to Ray, the workers would wait start_timeout for CPUs that never come.
    monkeypatch.setattr(RayCollector, "start_timeout", 3600.0)
    model = IMPACT("MlpPolicy", "CartPole-v1", collector="ray", collector_kwargs=dict(num_workers=4), **SMALL)
    with pytest.raises(
        CollectorError, match=r"num_workers=4 x num_cpus_per_worker=1 = 4 CPUs asked, the cluster has 2 CPUs in all"
    ):
        model.learn(100)
    assert wait_until_no_workers(local_ray) == []
    assert model.num_timesteps == 0


def test_a_request_the_busy_cluster_cannot_place_now_is_refused_with_the_free_cpus(local_ray, monkeypatch):
    monkeypatch.setattr(RayCollector, "start_timeout", 3600.0)
    monkeypatch.setattr(RayCollector, "free_cpus_wait", 0.5)

    @local_ray.remote(num_cpus=1.5)
    class Holder:
        def ready(self) -> bool:
            return True

    holder = Holder.remote()
    local_ray.get(holder.ready.remote())  # 0.5 of the 2 CPUs left free
    try:
        model = IMPACT("MlpPolicy", "CartPole-v1", collector="ray", collector_kwargs=dict(num_workers=1), **SMALL)
        with pytest.raises(CollectorError, match=r"= 1 CPUs asked, 0.5 of its 2 CPUs are free"):
            model.learn(100)
        model.collector_kwargs["num_cpus_per_worker"] = 0.5  # what is free is enough
        model.learn(100)
    finally:
        local_ray.kill(holder)
    assert wait_until_no_workers(local_ray) == []


def test_workers_with_other_spaces_than_the_learner_raise(local_ray):
    model = IMPACT("MlpPolicy", "CartPole-v1", collector="ray", collector_kwargs=dict(num_workers=1), **SMALL)
    model.worker_env = "MountainCar-v0"  # as if set_env() or load() had given the learner another env
    with pytest.raises(ValueError, match="do not match the learner"):
        model.learn(100)
    assert wait_until_no_workers(local_ray) == []


def test_save_and_load_do_not_need_ray(local_ray, tmp_path, monkeypatch):
    options = dict(num_workers=1, envs_per_worker=2)
    model = IMPACT("MlpPolicy", "CartPole-v1", collector="ray", collector_kwargs=options, seed=0, **SMALL)
    model.learn(256)
    model.save(tmp_path / "model.zip")
    observations = np.stack([model.observation_space.sample() for _ in range(5)])
    expected, _ = model.predict(observations, deterministic=True)

    monkeypatch.setitem(sys.modules, "ray", None)
    loaded = IMPACT.load(tmp_path / "model.zip", env=gym.make("CartPole-v1"), device="cpu")
    actions, _ = loaded.predict(observations, deterministic=True)
    np.testing.assert_array_equal(actions, expected)
    assert (loaded.collector, loaded.worker_env, loaded.collector_kwargs) == ("ray", "CartPole-v1", options)
    assert loaded._collector is None
    with pytest.raises(ImportError, match="sb3-impact"):
        loaded.learn(100)  # learn() is what needs Ray


@pytest.mark.parametrize(
    "algo, kwargs",
    [
        (PPOAMBER, dict(n_steps=16, batch_size=16, n_epochs=2, replay_length=2)),
        (PTRPPO, dict(n_steps=16, batch_size=16, n_epochs=1, replay_rounds=1, memory_size=8)),
    ],
    ids=["PPOAMBER", "PTRPPO"],
)
def test_ppo_based_algorithms_learn_from_ray_workers(local_ray, algo, kwargs):
    # Each Ray worker's segment is one rollout of envs_per_worker environments, as many as the learner's VecEnv.
    model = algo(
        "MlpPolicy",
        "Pendulum-v1",
        collector="ray",
        collector_kwargs=dict(num_workers=2, envs_per_worker=1),
        policy_kwargs=dict(net_arch=[16]),
        device="cpu",
        **kwargs,
    )
    model.learn(160)
    assert model.num_timesteps >= 160
    assert model.sampled_steps == model.trained_steps + model.dropped_steps
    assert wait_until_no_workers(local_ray) == []


def test_ppo_based_algorithms_need_one_rollout_per_ray_segment():
    pytest.importorskip("ray")
    with pytest.raises(ValueError, match="envs_per_worker"):
        PPOAMBER("MlpPolicy", "Pendulum-v1", collector="ray", collector_kwargs=dict(envs_per_worker=2), device="cpu")


def stored_episodes_are_whole(memory) -> list[int]:
    """Each stored episode is one environment's consecutive steps from t = 0; returns the episode lengths."""
    lengths = []
    for episode in memory.episodes:
        slots = (episode.start + np.arange(episode.length)) % memory.capacity
        uids, steps = memory.observations[""][slots, 0], memory.observations[""][slots, 1]
        assert np.all(uids == uids[0]), "an episode mixes the steps of several environments"
        np.testing.assert_array_equal(steps, np.arange(episode.length))
        lengths.append(episode.length)
    return lengths


def episode_tags(memory) -> set[float]:
    """The tags (TaggedStepsEnv: one per environment instance) of the episodes an episode memory holds."""
    return {float(memory.observations[""][episode.start, 0]) for episode in memory.episodes}


def test_vracer_memory_takes_episodes_from_every_ray_worker(local_ray):
    """Segments say which worker's environment each column is: the episode memory keeps whole episodes, even
    when a killed worker is replaced (its open episodes end as truncated where they stopped). Training stops once
    the replacement's episodes are in, however long it takes to start on a busy machine (the memory never evicts
    within the step budget)."""
    model = VRACER(
        "MlpPolicy",
        TaggedStepsEnv,
        collector="ray",
        collector_kwargs=dict(num_workers=2, envs_per_worker=2),
        learning_starts=40,
        buffer_size=20_000,
        batch_size=16,
        train_freq=4,
        standardize_states=False,
        policy_kwargs=dict(net_arch=[16]),
        seed=0,
        device="cpu",
    )
    kill = AtStep(30, lambda callback: local_ray.kill(callback.actors[1]))
    replaced = StopWhen(lambda model: len(episode_tags(model.replay_buffer)) >= 6)  # 4 envs + the replacement's 2
    with pytest.warns(RuntimeWarning, match="worker 1 failed and is replaced"):
        model.learn(10_000, callback=[kill, replaced])
    memory = model.replay_buffer
    assert memory.n_envs == 4 and memory.n_staged_steps == 0  # learn() closed the running episodes
    lengths = stored_episodes_are_whole(memory)
    assert sum(length == 10 for length in lengths) >= 4  # worker 0's two envs and the replacement's ended theirs
    assert len(episode_tags(memory)) >= 6 and model.num_timesteps < 10_000  # stopped once the replacement's came in
    assert sum(lengths) == len(memory) == model.trained_steps
    assert model._n_updates > 0 and model.sampled_steps == model.trained_steps + model.dropped_steps
    assert wait_until_no_workers(local_ray) == []


@pytest.mark.parametrize("algo", [IMPACT, IMPALA])
def test_recurrent_policies_learn_from_ray_workers_with_their_lstm_states(local_ray, algo):
    """Each worker's sampler carries its own LSTM states; its segments bring them to the learner."""
    model = algo(
        "MlpLstmPolicy", "CartPole-v1", collector="ray", collector_kwargs=dict(num_workers=2, envs_per_worker=2),
        n_steps=16, batch_size=16, policy_kwargs=dict(lstm_hidden_size=8, net_arch=[8]), seed=0, device="cpu",
    )  # fmt: skip
    stored = []
    original = model._store_segment
    model._store_segment = lambda segment: (stored.append(segment), original(segment))[1]
    model.learn(256)
    assert model.sampled_steps == model.trained_steps + model.dropped_steps == model.num_timesteps >= 256
    assert stored and all(segment.lstm_states is not None and segment.lstm_states[0].shape == (1, 2, 8) for segment in stored)
    assert all(segment.episode_starts.shape == (16, 2) for segment in stored)
    assert wait_until_no_workers(local_ray) == []


def test_a_ray_worker_draws_gsde_noise_at_the_learners_sde_sample_freq(monkeypatch):
    """The worker is a plain class until Ray wraps it: built here, it samples as a Ray actor would."""
    monkeypatch.setattr(th.distributions.Distribution, "_validate_args", th.distributions.Distribution._validate_args)
    env = gym.make("Pendulum-v1")
    policy = ActorCriticPolicy(env.observation_space, env.action_space, lambda _: 1e-3, net_arch=[8], use_sde=True)
    worker = RolloutWorker("Pendulum-v1", 2, policy, 12, policy_version=0, seed=0, sde_sample_freq=4)
    calls = record_reset_noise(worker.sampler.policy)
    worker.sample(None, 0)
    assert calls == [2] * 4  # the segment's start, then steps 0, 4 and 8


def test_impact_with_gsde_learns_from_ray_workers(local_ray):
    model = IMPACT(
        "MlpPolicy", "Pendulum-v1", use_sde=True, sde_sample_freq=4, collector="ray",
        collector_kwargs=dict(num_workers=2, envs_per_worker=1), seed=0, **SMALL,
    )  # fmt: skip
    model.learn(160)
    assert model.sampled_steps == model.trained_steps + model.dropped_steps == model.num_timesteps >= 160
    assert wait_until_no_workers(local_ray) == []
