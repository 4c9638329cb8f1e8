"""Segments, the sampler and the collectors, without a learner."""

import time

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.policies import ActorCriticPolicy

from sb3_impact.common.circular_buffer import CircularBuffer
from sb3_impact.common.collectors import CollectorError, SegmentSampler, SyncCollector, ThreadCollector
from sb3_impact.common.distributions import (
    behaviour_params,
    distribution_from_params,
    sample_diag_gaussian,
    samples_plain_diag_gaussian,
)
from sb3_impact.common.training_batch import TrainingBatch

from .conftest import CrashingEnv, collector_threads, record_reset_noise


def make_sampler(env_id="CartPole-v1", n_envs=2, n_steps=20, max_episode_steps=7, **env_kwargs):
    env = make_vec_env(lambda: gym.make(env_id, max_episode_steps=max_episode_steps, **env_kwargs), n_envs=n_envs, seed=0)
    policy = ActorCriticPolicy(env.observation_space, env.action_space, lambda _: 1e-3, net_arch=[8])
    policy.set_training_mode(False)
    return SegmentSampler(env, policy, n_steps, env.reset())


def test_segment_records_truncations_with_their_final_observation():
    sampler = make_sampler(max_episode_steps=7)
    first = sampler.collect()
    assert first.rewards.shape == (20, 2) and first.behaviour_params.shape == (20, 2, 2)
    # CartPole with a random policy rarely lasts 7 steps; whatever ends is classified from the infos.
    for t in range(first.n_steps):
        for env_index, info in enumerate(first.infos[t]):
            truncated = info.get("TimeLimit.truncated", False)
            assert first.truncations[t, env_index] == truncated
            assert first.terminations[t, env_index] == (("terminal_observation" in info) and not truncated)
    assert first.truncations.any()
    for (t, env_index), final in zip(first.final_observation_indices, first.final_observations, strict=True):
        np.testing.assert_array_equal(final, first.infos[t][env_index]["terminal_observation"])
    second = sampler.collect()
    np.testing.assert_array_equal(second.observations[0], first.next_observations)
    assert sampler.sampled_steps == 80


def test_behaviour_log_probs_match_stored_distribution():
    sampler = make_sampler(env_id="Pendulum-v1", max_episode_steps=50)
    segment = sampler.collect()
    obs = th.as_tensor(segment.observations[3])
    distribution = sampler.policy.get_distribution(obs)
    expected = distribution.log_prob(th.as_tensor(segment.actions[3])).detach().numpy()
    np.testing.assert_allclose(segment.behaviour_log_probs[3], expected, rtol=1e-5)


def gsde_sampler(n_envs=2, n_steps=12, sde_sample_freq=4) -> tuple[SegmentSampler, list[int]]:
    """A sampler of a gSDE policy on Pendulum-v1, and the list its policy's ``reset_noise`` calls append to."""
    env = make_vec_env(lambda: gym.make("Pendulum-v1", max_episode_steps=50), n_envs=n_envs, seed=0)
    policy = ActorCriticPolicy(env.observation_space, env.action_space, lambda _: 1e-3, net_arch=[8], use_sde=True)
    policy.set_training_mode(False)
    sampler = SegmentSampler(env, policy, n_steps, env.reset())
    sampler.sde_sample_freq = sde_sample_freq
    return sampler, record_reset_noise(policy)


def test_gsde_draws_new_noise_every_sde_sample_freq_steps_and_stores_the_per_state_gaussian():
    sampler, calls = gsde_sampler(n_envs=2, n_steps=12, sde_sample_freq=4)
    segment = sampler.collect()
    assert calls == [2] * 4  # at the segment's start, as SB3's collect_rollouts, then at steps 0, 4 and 8
    batch = TrainingBatch.from_segment(segment, th.device("cpu"))
    with th.no_grad():
        distribution, _ = batch.evaluate(sampler.policy)
        log_probs = distribution.log_prob(batch.actions).reshape(segment.n_steps, segment.n_envs)
        stored = distribution_from_params(sampler.env.action_space, batch.behaviour_params)
        stored_log_probs = stored.log_prob(batch.actions).reshape(segment.n_steps, segment.n_envs)
    # The learner's log-probabilities at the behaviour's weights, and those of the stored parameters, are the recorded ones.
    np.testing.assert_allclose(log_probs.numpy(), segment.behaviour_log_probs, atol=1e-6, rtol=1e-5)
    np.testing.assert_allclose(stored_log_probs.numpy(), segment.behaviour_log_probs, atol=1e-6, rtol=1e-5)
    calls.clear()
    sampler.sde_sample_freq = -1
    sampler.collect()
    assert calls == [2]  # -1: one noise matrix per segment


class PolicyWithItsOwnDistribution(ActorCriticPolicy):
    def get_distribution(self, obs):
        return super().get_distribution(obs * 0.5)


@pytest.mark.parametrize("share_features_extractor", [True, False])
@pytest.mark.parametrize("action_shape", [(1,), (3,), (2, 2)])
def test_diag_gaussian_shortcut_draws_what_the_distribution_draws(action_shape, share_features_extractor):
    """The sampler's shortcut gives SB3's actions, log-probs and parameters bit for bit from the same random state."""
    observation_space = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
    action_space = gym.spaces.Box(-2.0, 2.0, action_shape, np.float32)
    policy = ActorCriticPolicy(
        observation_space, action_space, lambda _: 1e-3, net_arch=[8], share_features_extractor=share_features_extractor
    )
    with th.no_grad():
        policy.log_std.copy_(th.linspace(-3.0, 1.0, policy.log_std.numel()))
    assert samples_plain_diag_gaussian(policy)
    obs = th.as_tensor(np.random.default_rng(0).uniform(-1, 1, (4, 5)), dtype=th.float32)
    with th.no_grad():
        th.manual_seed(7)
        distribution = policy.get_distribution(obs)
        expected_actions = distribution.get_actions()
        expected = (expected_actions, distribution.log_prob(expected_actions), behaviour_params(distribution))
        th.manual_seed(7)
        shortcut = sample_diag_gaussian(policy, obs)
    for got, want in zip(shortcut, expected, strict=True):
        assert th.equal(got, want)


def test_diag_gaussian_shortcut_is_only_taken_for_sb3s_own_plain_gaussian():
    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    lr = lambda _: 1e-3  # noqa: E731
    assert not samples_plain_diag_gaussian(ActorCriticPolicy(box, box, lr, use_sde=True))
    assert not samples_plain_diag_gaussian(ActorCriticPolicy(box, gym.spaces.Discrete(3), lr))
    assert not samples_plain_diag_gaussian(PolicyWithItsOwnDistribution(box, box, lr))
    sampler = make_sampler(env_id="Pendulum-v1")
    assert sampler._samples_diag_gaussian
    sampler.policy = PolicyWithItsOwnDistribution(sampler.env.observation_space, sampler.env.action_space, lr)
    assert not sampler._samples_diag_gaussian


def test_thread_collector_blocks_when_learner_does_not_consume():
    sampler = make_sampler(n_steps=10)
    collector = ThreadCollector(sampler, queue_size=2)
    collector.start()
    try:
        segment_size = 10 * 2
        deadline = time.monotonic() + 30
        while collector.sampled_steps < 2 * segment_size and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # time enough to collect more, were it allowed to
        # At most queue_size segments ahead of the learner: backpressure, not unbounded memory.
        assert collector.sampled_steps == 2 * segment_size
        assert collector.get_segment().size == segment_size
    finally:
        collector.close()
    assert collector_threads() == []
    assert collector.delivered_steps + collector.queued_steps_dropped <= collector.sampled_steps


def test_thread_collector_uses_broadcast_weights():
    sampler = make_sampler(n_steps=5)
    collector = ThreadCollector(sampler, queue_size=1)
    new_weights = {name: th.zeros_like(value) for name, value in sampler.policy.state_dict().items()}
    collector.start()
    try:
        collector.broadcast(new_weights, version=7)
        deadline = time.monotonic() + 10
        while collector.get_segment().policy_version != 7:
            assert time.monotonic() < deadline
        segment = collector.get_segment()
        # All-zero logits: uniform behaviour policy.
        np.testing.assert_allclose(segment.behaviour_log_probs, np.log(0.5), rtol=1e-6)
    finally:
        collector.close()


def test_thread_collector_reports_env_failure_with_cause():
    env = make_vec_env(lambda: CrashingEnv(crash_after=30), n_envs=1)
    policy = ActorCriticPolicy(env.observation_space, env.action_space, lambda _: 1e-3)
    collector = ThreadCollector(SegmentSampler(env, policy, 8, env.reset()), queue_size=1)
    collector.start()
    start = time.monotonic()
    with pytest.raises(CollectorError) as error_info:
        while True:
            collector.get_segment()
    collector.close()
    assert time.monotonic() - start < 5
    assert isinstance(error_info.value.__cause__, RuntimeError)
    assert "environment exploded" in str(error_info.value.__cause__)


def test_sync_collector_collects_on_demand():
    sampler = make_sampler(n_steps=4)
    collector = SyncCollector(sampler)
    collector.start()
    assert collector.sampled_steps == 0
    segment = collector.get_segment()
    assert segment.size == 8 and collector.sampled_steps == 8 and collector.delivered_steps == 8
    collector.close()


def test_a_collector_takes_each_segment_it_starts_from_the_step_budget():
    collector = SyncCollector(make_sampler(n_steps=4))  # segments of 8 steps
    collector.set_step_budget(12)
    assert collector.take_budget() and collector.started_steps == 8 and not collector.budget_spent
    assert collector.take_budget() and collector.budget_spent  # started below the budget: rounded up to a segment
    assert not collector.take_budget() and collector.started_steps == 16  # spent: nothing more counted
    with pytest.raises(CollectorError, match="step budget"):
        collector.get_segment()
    assert collector.sampled_steps == 0


def test_circular_buffer_reuses_each_batch_k_times_in_turn():
    buffer = CircularBuffer(size=3, max_reuse=2)
    order, uses, arrivals = [], {}, 0
    for _ in range(12):
        if buffer.needs_batch():
            buffer.put(TrainingBatch.__new__(TrainingBatch))
            buffer._slots[buffer._cursor].name = arrivals
            arrivals += 1
        batch = buffer.next_batch()
        order.append(batch.name)
        uses[batch.name] = batch.uses
    # Warm-up: the third batch gets 2 - 2 * 2 // 3 = 1 use, so that the slots empty one at a time.
    assert order == [0, 1, 2, 0, 1, 3, 4, 5, 3, 4, 5, 6]
    assert [uses[name] for name in range(6)] == [2, 2, 1, 2, 2, 2]
    assert buffer.released_batches == 6 and buffer.released_uses == 11


def test_circular_buffer_needs_a_batch_every_k_steps_in_steady_state():
    buffer = CircularBuffer(size=4, max_reuse=20)
    arrivals = []
    for step in range(2000):
        if buffer.needs_batch():
            buffer.put(TrainingBatch.__new__(TrainingBatch))
            arrivals.append(step)
        assert buffer.next_batch().uses <= 20
    gaps = np.diff(arrivals[4:])
    assert gaps.min() >= 16 and gaps.max() <= 24 and abs(gaps.mean() - 20) < 0.5


@pytest.mark.parametrize("size,reuse,name", [(0, 1, "circular_buffer_size"), (1, 0, "max_batch_reuse")])
def test_circular_buffer_rejects_bad_sizes(size, reuse, name):
    with pytest.raises(ValueError, match=name):
        CircularBuffer(size, reuse)


def test_collector_kwargs_given_to_load_are_checked_when_learn_builds_the_collector(tmp_path):
    """The one check of ``collector_kwargs`` also covers options given to ``load()``: a clear error, never a hang."""
    import gymnasium as gym

    from sb3_impact import IMPACT

    IMPACT("MlpPolicy", "CartPole-v1", n_steps=32).save(tmp_path / "model")
    for options, error, cause in [({"queue_size": 0}, ValueError, "queue_size"), ({"bogus": 1}, TypeError, "bogus")]:
        model = IMPACT.load(tmp_path / "model", env=gym.make("CartPole-v1"), collector_kwargs=options)
        with pytest.raises(error, match=cause):
            model.learn(64)


def test_auto_is_the_process_collector_on_linux_and_the_thread_elsewhere(monkeypatch):
    from sb3_impact import IMPACT, IMPALA
    from sb3_impact.common.collectors import ProcessCollector, collector_class, resolved_collector_name

    for algo in (IMPACT, IMPALA):
        assert algo("MlpPolicy", "CartPole-v1", n_steps=8, device="cpu").collector == "auto"
    monkeypatch.setattr("sys.platform", "linux")
    if "fork" in __import__("multiprocessing").get_all_start_methods():
        assert resolved_collector_name("auto") == "process" and collector_class("auto") is ProcessCollector
    monkeypatch.setattr("sys.platform", "darwin")
    assert resolved_collector_name("auto") == "thread" and collector_class("auto") is ThreadCollector
    assert resolved_collector_name("sync") == "sync" and resolved_collector_name(ThreadCollector) == ""
