"""PTR-PPO: the sum-tree, the priority memory and the algorithm (its estimators are in test_estimators.py)."""

import copy
import inspect
import math
import zipfile

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import IdentityEnv, IdentityEnvBox, IdentityEnvMultiBinary, IdentityEnvMultiDiscrete
from stable_baselines3.common.logger import KVWriter, Logger
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_impact import PTRPPO
from sb3_impact.common.distributions import distribution_from_params
from sb3_impact.common.segments import Segment, SegmentMemory, SegmentValues
from sb3_impact.common.training_statistics import TrainingStatistics
from sb3_impact.ptr_ppo import ptr_ppo as ptr_ppo_module
from sb3_impact.ptr_ppo.memory import PRIORITY_EPS, RunningReturnStatistics, TrajectoryMemory
from sb3_impact.ptr_ppo.ptr_ppo import REPLAY_RATIOS
from sb3_impact.ptr_ppo.scoring import segment_priorities
from sb3_impact.ptr_ppo.sum_tree import SumTree
from sb3_impact.vracer.memory import EpisodeReplayMemory

from .conftest import DictObsEnv, ImageEnv
from .test_estimators import slow_gae, slow_rho_done, slow_rho_marg, slow_surrogate

SMALL = dict(n_steps=16, batch_size=32, policy_kwargs=dict(net_arch=[16]), device="cpu")


# ------------------------------------------------------------------------------------------ sum-tree


def internal_sums_match(tree: SumTree) -> bool:
    nodes = tree._nodes
    parents = np.arange(1, tree._leaf_offset)
    return bool(np.all(nodes[parents] == nodes[2 * parents] + nodes[2 * parents + 1]))


@pytest.mark.parametrize("capacity", [1, 2, 7, 256, 1000])
def test_sum_tree_total_after_many_random_updates_has_no_drift(capacity):
    rng = np.random.default_rng(0)
    tree, naive = SumTree(capacity), np.zeros(capacity)
    for _ in range(3000):
        indices = rng.integers(0, capacity, size=rng.integers(1, 9))
        # priorities spanning 16 orders of magnitude, with zeros: the worst case for incremental sums
        values = np.where(rng.random(indices.size) < 0.2, 0.0, 10.0 ** rng.uniform(-8, 8, size=indices.size))
        tree.update(indices, values)
        for index, value in zip(indices, values, strict=True):
            naive[index] = value
    np.testing.assert_array_equal(tree.priorities, naive)
    assert math.isclose(tree.total, math.fsum(naive), rel_tol=1e-12)
    assert internal_sums_match(tree)  # every node is exactly the sum of its children: nothing accumulates
    tree.update(np.arange(capacity), 0.0)
    assert tree.total == 0.0  # an incremental (+= delta) tree would keep a rounding residue here


@pytest.mark.parametrize("stratified", [False, True])
def test_sum_tree_sampling_frequencies_match_priorities(stratified):
    rng = np.random.default_rng(1)
    priorities = np.array([0.0, 1.0, 2.0, 0.0, 5.0, 0.5, 10.0, 0.01, 0.0, 3.0, 1e-3])
    tree = SumTree(len(priorities))
    tree.update(np.arange(len(priorities)), priorities)
    n_draws = 200_000
    samples = np.concatenate([tree.sample(50, rng, stratified=stratified) for _ in range(n_draws // 50)])
    counts = np.bincount(samples, minlength=len(priorities))
    expected = n_draws * priorities / priorities.sum()
    # per-slot binomial bounds (5 sigma, fixed seed) and a chi-square statistic over the positive slots
    sigma = np.sqrt(n_draws * (priorities / priorities.sum()) * (1 - priorities / priorities.sum()))
    assert np.all(np.abs(counts - expected) <= 5 * sigma + 1), (counts, expected)
    positive = priorities > 0
    chi_square = np.sum((counts[positive] - expected[positive]) ** 2 / expected[positive])
    assert chi_square < 35.0  # 99.99% quantile of chi2 with 7 degrees of freedom is about 29.9 (+ margin)
    assert counts[~positive].sum() == 0


def test_sum_tree_never_returns_zero_priority_slots_even_on_boundaries():
    tree = SumTree(6)
    tree.update(np.arange(6), [0.0, 0.1, 0.0, 0.2, 0.0, 0.0])
    cumulative = np.array([0.0, 0.1, 0.1 + 0.2])
    values = np.concatenate([cumulative, [tree.total, np.nextafter(tree.total, 0), 0.1 + 1e-17, 1e300]])
    assert set(tree.find(values).tolist()) <= {1, 3}
    rng = np.random.default_rng(2)
    assert set(tree.sample(10_000, rng).tolist()) == {1, 3}
    tree.update(3, 0.0)  # a slot set back to 0 is never sampled again
    assert set(tree.sample(1000, rng, stratified=True).tolist()) == {1}


def test_sum_tree_edge_cases():
    tree = SumTree(1)
    tree.update(0, 2.5)
    assert tree.total == 2.5 and tree.sample(4, np.random.default_rng(0)).tolist() == [0, 0, 0, 0]
    tree = SumTree(5)
    with pytest.raises(ValueError, match="all 0"):
        tree.sample(1, np.random.default_rng(0))
    tree.update([1, 1, 1], [1.0, 2.0, 3.0])  # repeated indices: the last value wins
    assert tree[1] == 3.0 and tree.total == 3.0
    with pytest.raises(ValueError, match="priorities"):
        tree.update(0, -1.0)
    with pytest.raises(ValueError, match="priorities"):
        tree.update(0, float("nan"))
    with pytest.raises(IndexError):
        tree.update(5, 1.0)
    with pytest.raises(ValueError, match="capacity"):
        SumTree(0)
    tree.update(np.array([], dtype=np.int64), np.array([]))  # an empty update is a no-op
    assert tree.total == 3.0


# ------------------------------------------------------------------------------------------ priorities


def test_max_and_mean_priorities_by_hand():
    advantages = th.tensor([[1.0, -0.5], [-3.0, 0.25], [2.0, 0.0]])  # [T=3, B=2]
    np.testing.assert_allclose(segment_priorities(advantages, "max"), [3.0, 0.5])
    np.testing.assert_allclose(segment_priorities(advantages, "mean"), [2.0, 0.75 / 3])


def test_reward_priority_by_hand_with_statistics_updated_on_insertion_only():
    memory = TrajectoryMemory(capacity=4, priority_alpha=1.0)
    first = make_segments(n_segments=2, n_steps=3, seed=0)
    first.rewards[:] = np.array([[1.0, 1.0, 1.0], [0.0, 0.0, 1.0]]).T  # returns 3 and 1 (time-major)
    slots = memory.add_segment(first)
    # eq. 14 after inserting 3 and 1: mean 2, std sqrt(((3-2)^2 + (1-2)^2) / 2) = 1
    assert memory.return_statistics.mean == 2.0 and memory.return_statistics.std == 1.0
    np.testing.assert_allclose(memory.reward_priorities(slots), [1.0, 1.0])
    memory.update_priorities(slots, memory.reward_priorities(slots))
    memory.sample(3, np.random.default_rng(0))
    assert memory.return_statistics.count == 2  # sampling and priority updates leave the statistics alone
    second = make_segments(n_segments=1, n_steps=3, seed=1)
    second.rewards[:] = 2.0  # return 6: mean 10/3, M2 = 2 + (6 - 2)(6 - 10/3)
    new_slots = memory.add_segment(second)
    mean, std = 10 / 3, math.sqrt((2 + 4 * (6 - 10 / 3)) / 3)
    np.testing.assert_allclose([memory.return_statistics.mean, memory.return_statistics.std], [mean, std])
    np.testing.assert_allclose(
        memory.reward_priorities(np.concatenate([slots, new_slots])), np.abs([3 - mean, 1 - mean, 6 - mean]) / std
    )
    np.testing.assert_allclose(np.std([3.0, 1.0, 6.0]), std)


def test_running_return_statistics_match_numpy():
    returns = np.random.default_rng(3).normal(5.0, 3.0, size=500)
    statistics = RunningReturnStatistics()
    for chunk in np.array_split(returns, 7):
        statistics.update(chunk)
    assert math.isclose(statistics.mean, returns.mean(), rel_tol=1e-12)
    assert math.isclose(statistics.std, returns.std(), rel_tol=1e-10)
    assert np.all(RunningReturnStatistics().normalised_priorities(np.array([1.0, 2.0])) == 0.0)
    equal_up_to_rounding = RunningReturnStatistics()  # CartPole: every segment returns n_steps, up to float32 noise
    equal_up_to_rounding.update(np.array([32.0] * 50 + [32.00001]))
    assert np.all(equal_up_to_rounding.normalised_priorities(np.array([32.0, 32.00001])) == 0.0)


def test_memory_priorities_get_exponent_and_floor():
    memory = TrajectoryMemory(capacity=3, priority_alpha=0.5)
    slots = memory.add_segment(make_segments(n_segments=3, n_steps=2, seed=0))
    memory.update_priorities(slots, [0.0, 4.0, 9.0])
    np.testing.assert_allclose(memory.tree.priorities, np.sqrt(np.array([0.0, 4.0, 9.0]) + PRIORITY_EPS))
    uniform = TrajectoryMemory(capacity=3, priority_alpha=0.0)
    uniform.update_priorities(uniform.add_segment(make_segments(n_segments=3, n_steps=2, seed=0)), [0.0, 4.0, 9.0])
    np.testing.assert_allclose(uniform.tree.priorities, 1.0)


# ------------------------------------------------------------------------------------------ memory


def make_segments(n_segments: int, n_steps: int, seed: int, obs_dim: int = 3) -> Segment:
    """A random time-major segment of ``n_segments`` environments, with terminations and truncations."""
    rng = np.random.default_rng(seed)
    truncations = rng.random((n_steps, n_segments)) < 0.2
    terminations = (rng.random((n_steps, n_segments)) < 0.2) & ~truncations
    indices = np.argwhere(truncations)
    return Segment(
        observations=rng.normal(size=(n_steps, n_segments, obs_dim)).astype(np.float32),
        actions=rng.integers(0, 2, size=(n_steps, n_segments, 1)),
        rewards=rng.normal(size=(n_steps, n_segments)).astype(np.float32),
        terminations=terminations,
        truncations=truncations,
        behaviour_log_probs=rng.normal(size=(n_steps, n_segments)).astype(np.float32),
        behaviour_params=rng.normal(size=(n_steps, n_segments, 2)).astype(np.float32),
        next_observations=rng.normal(size=(n_segments, obs_dim)).astype(np.float32),
        final_observations=rng.normal(size=(len(indices), obs_dim)).astype(np.float32) if len(indices) else None,
        final_observation_indices=indices.reshape(-1, 2),
        infos=[[{} for _ in range(n_segments)] for _ in range(n_steps)],
        policy_version=seed,
    )


def test_memory_is_fifo_and_returns_what_was_stored():
    memory = TrajectoryMemory(capacity=4, priority_alpha=1.0)
    first, second = make_segments(3, 5, seed=0), make_segments(3, 5, seed=1)
    np.testing.assert_array_equal(memory.add_segment(first), [0, 1, 2])
    np.testing.assert_array_equal(memory.add_segment(second), [3, 0, 1])
    assert len(memory) == 4 and memory.inserted == 6 and memory.overwritten == 2
    np.testing.assert_array_equal(memory.filled_slots(), [2, 3, 0, 1])  # oldest first
    stored = memory.get(np.array([2, 0]))  # environment 2 of the first segment, environment 1 of the second
    np.testing.assert_array_equal(stored.observations[:, 0], first.observations[:, 2])
    np.testing.assert_array_equal(stored.observations[:, 1], second.observations[:, 1])
    np.testing.assert_array_equal(stored.rewards[:, 1], second.rewards[:, 1])
    np.testing.assert_array_equal(stored.truncations[:, 1], second.truncations[:, 1])
    np.testing.assert_array_equal(stored.next_observations[0], first.next_observations[2])
    assert stored.policy_version == 0
    # final observations follow their (step, environment) to the slot's column
    for (step, column), final in zip(stored.final_observation_indices, list(stored.final_observations), strict=True):
        source, env = (first, 2) if column == 0 else (second, 1)
        index = [tuple(position) for position in source.final_observation_indices].index((step, env))
        np.testing.assert_array_equal(final, source.final_observations[index])
    assert len(stored.final_observation_indices) == stored.truncations.sum()
    np.testing.assert_array_equal(memory.returns[0], second.rewards[:, 1].astype(np.float64).sum())
    many = make_segments(6, 5, seed=2)  # more environments than slots: only the last 4 survive
    memory.add_segment(many)
    np.testing.assert_array_equal(memory.get(memory.filled_slots()).observations, many.observations[:, 2:])
    assert memory.overwritten == 2 + 6


def test_both_replay_memories_take_a_segment_through_one_interface():
    """PTR-PPO's trajectory memory and V-RACER's episode memory: add_segment(segment, values) -> the slots written."""
    segment = make_segments(n_segments=3, n_steps=6, seed=4)
    segment.actions = segment.actions.astype(np.float32)  # V-RACER's memory is for Box actions
    trajectories = TrajectoryMemory(capacity=4, priority_alpha=1.0)
    episodes = EpisodeReplayMemory(100, spaces.Box(-5, 5, (3,)), spaces.Box(-1, 1, (1,)), n_envs=3)
    assert isinstance(trajectories, SegmentMemory) and isinstance(episodes, SegmentMemory)
    interface = inspect.signature(SegmentMemory.add_segment)
    assert inspect.signature(TrajectoryMemory.add_segment) == inspect.signature(EpisodeReplayMemory.add_segment) == interface

    np.testing.assert_array_equal(trajectories.add_segment(segment), [0, 1, 2])  # a slot per segment column
    values = SegmentValues(np.ones((6, 3), dtype=np.float32), np.where(segment.truncations, 2.0, 0.0).astype(np.float32))
    with pytest.raises(ValueError, match="keeps no value estimates"):
        trajectories.add_segment(segment, values)

    with pytest.raises(ValueError, match="values"):
        episodes.add_segment(segment)
    slots = episodes.add_segment(segment, values)  # a slot per step of the episodes that ended in the segment
    ended = [
        (t, column) for column in range(3) for t in range(6) if t <= np.flatnonzero(segment.dones[:, column]).max(initial=-1)
    ]
    assert len(slots) == len(ended) == len(episodes) > 0 and episodes.n_staged_steps == segment.size - len(ended)
    stored = sorted(episodes.rewards[slots].tolist())
    np.testing.assert_allclose(stored, sorted(segment.rewards[tuple(np.array(ended).T)].tolist()))


# ------------------------------------------------------------------------------------------ algorithm


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_no_replay_rounds_is_sb3_ppo(env_id):
    shared = dict(n_steps=32, batch_size=16, n_epochs=3, gamma=0.95, gae_lambda=0.9, ent_coef=0.01, vf_coef=0.5, seed=7)
    shared.update(learning_rate=1e-3, clip_range=0.2, max_grad_norm=0.5, policy_kwargs=dict(net_arch=[16]), device="cpu")
    env_kwargs = dict(max_episode_steps=20)  # time-limit truncations inside the segment
    # Each model is built right before it learns: both draw the same random numbers from the seed.
    ppo = PPO("MlpPolicy", make_vec_env(env_id, n_envs=2, seed=1, env_kwargs=env_kwargs), **shared).learn(64)
    ptr = PTRPPO("MlpPolicy", make_vec_env(env_id, n_envs=2, seed=1, env_kwargs=env_kwargs), replay_rounds=0, **shared)
    ptr.learn(64)
    assert ptr._n_updates == ppo._n_updates == 3
    assert len(ptr.replay_memory) == 2  # the rollout was still stored
    # Same samples, minibatches and steps; the values are evaluated in one batched pass after collection rather
    # than one step at a time, which changes float32 rounding, hence the tolerance.
    for (name, expected), actual in zip(ppo.policy.state_dict().items(), ptr.policy.state_dict().values(), strict=True):
        th.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, msg=name)
    # and with replay rounds the parameters move away from PPO's
    ptr = PTRPPO("MlpPolicy", make_vec_env(env_id, n_envs=2, seed=1, env_kwargs=env_kwargs), replay_rounds=1, **shared)
    ptr.learn(64)
    assert ptr.replay_updates == 4
    assert not th.equal(ptr.policy.state_dict()["action_net.weight"], ppo.policy.state_dict()["action_net.weight"])


def test_stored_segments_hold_raw_rewards_truncations_and_behaviour_policy():
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0, env_kwargs=dict(max_episode_steps=10))
    model = PTRPPO("MlpPolicy", env, replay_rounds=0, **SMALL).learn(32)
    memory = model.replay_memory
    stored = memory.get(memory.filled_slots())
    # CartPole pays 1 per step: the sampler recorded the environment's rewards, with no bootstrap folded in
    np.testing.assert_array_equal(stored.rewards, 1.0)
    assert stored.truncations.sum() >= 2 and not (stored.truncations & stored.terminations).any()
    np.testing.assert_array_equal(np.argwhere(stored.truncations), stored.final_observation_indices)
    # the behaviour distribution rebuilt from the stored parameters gives the stored log-probabilities
    params = th.as_tensor(stored.behaviour_params.reshape(-1, 2))
    log_probs = distribution_from_params(model.action_space, params).log_prob(th.as_tensor(stored.actions.reshape(-1)))
    np.testing.assert_allclose(log_probs.numpy(), stored.behaviour_log_probs.reshape(-1), rtol=1e-5, atol=1e-6)
    # after the segment: the observation the next rollout started from
    np.testing.assert_array_equal(stored.next_observations[-2:], model._last_obs)


@pytest.mark.parametrize("priority", ["max", "mean", "reward"])
def test_insertion_priorities_follow_the_definition(priority):
    env = make_vec_env("Pendulum-v1", n_envs=2, seed=0, env_kwargs=dict(max_episode_steps=12))
    model = PTRPPO("MlpPolicy", env, replay_rounds=0, priority=priority, **SMALL).learn(64)
    memory = model.replay_memory
    slots = memory.filled_slots()
    assert len(slots) == 4 and memory.return_statistics.std > 0
    slots = slots[2:]  # inserted by the last iteration, after its PPO update: the network has not changed since
    if priority == "reward":
        expected = np.abs(memory.returns[slots] - memory.return_statistics.mean) / memory.return_statistics.std
    else:
        expected = segment_priorities(model._score_segments(memory.batch(slots)).advantages, priority)
    np.testing.assert_allclose(memory.priorities[slots], expected, rtol=1e-5)


@pytest.mark.parametrize(
    "env_factory",
    [
        lambda: IdentityEnv(4),
        lambda: IdentityEnvMultiDiscrete(3),
        lambda: IdentityEnvMultiBinary(3),
        lambda: IdentityEnvBox(eps=0.5),
    ],
    ids=["Discrete", "MultiDiscrete", "MultiBinary", "Box"],
)
def test_learns_on_every_action_space(env_factory):
    model = PTRPPO("MlpPolicy", make_vec_env(env_factory, n_envs=2, seed=0), replay_rounds=2, seed=0, **SMALL).learn(96)
    assert model.replay_updates == 3 * 2 and len(model.replay_memory) == 6  # 3 iterations, 2 rounds of 32 steps
    assert all(th.isfinite(p).all() for p in model.policy.parameters())


def test_multi_input_cnn_and_discrete_observations():
    PTRPPO("MultiInputPolicy", DictObsEnv(), n_steps=8, batch_size=8, replay_rounds=1, device="cpu", seed=0).learn(16)
    cnn = dict(features_extractor_kwargs=dict(features_dim=16), net_arch=[])
    PTRPPO("CnnPolicy", ImageEnv(), n_steps=8, batch_size=8, replay_rounds=1, policy_kwargs=cnn, device="cpu").learn(16)
    env = DummyVecEnv([lambda: IdentityEnv(space=spaces.Discrete(3))])  # Discrete observations too
    PTRPPO("MlpPolicy", env, replay_rounds=1, **SMALL).learn(48)


def test_save_load_round_trip_without_the_memory(tmp_path):
    model = PTRPPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2, seed=0), replay_rounds=2, priority="reward", **SMALL)
    model.learn(64)
    assert len(model.replay_memory) == 4
    model.save(tmp_path / "model.zip")
    with zipfile.ZipFile(tmp_path / "model.zip") as archive:
        data = archive.read("data").decode()
    assert "_memory" not in data
    loaded = PTRPPO.load(tmp_path / "model.zip", env=make_vec_env("CartPole-v1", n_envs=2, seed=0), device="cpu")
    for name, tensor in model.policy.state_dict().items():
        th.testing.assert_close(loaded.policy.state_dict()[name], tensor)
    assert (loaded.priority, loaded.memory_size, loaded.replay_rounds, loaded.eps_marg) == ("reward", 256, 2, 0.2)
    assert len(loaded.replay_memory) == 0
    loaded.learn(64, reset_num_timesteps=False)
    assert len(loaded.replay_memory) == 4 and loaded.num_timesteps == 128


def per_sample_log_probs_and_values(policy, observations: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log pi(a|s) and V(s) one observation at a time (float64 copies), as a slow reference."""
    log_probs, values = [], []
    with th.no_grad():
        for observation, action in zip(observations, actions, strict=True):
            value, log_prob, _ = policy.evaluate_actions(th.as_tensor(observation[None]), th.as_tensor(action[None]).flatten())
            log_probs.append(float(log_prob))
            values.append(float(value))
    return np.array(log_probs), np.array(values)


@pytest.mark.parametrize("replay_ratio", REPLAY_RATIOS)
def test_replay_round_surrogate_against_slow_reference_from_the_paper(replay_ratio):
    """
    One replay round (one minibatch: replay_batch * n_steps = batch_size) against eqs. 18-22 computed one sample at
    a time: rho^marg from pi / b (eqs. 19-20) times the GAE (eq. 18), and r_t = pi / pi_ref with pi_ref = b, the
    policy backed up before the fresh update (Algorithm 1, line 16) or the network at the start of the round (line 22).
    """
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0, env_kwargs=dict(max_episode_steps=12))
    model = PTRPPO("MlpPolicy", env, replay_rounds=1, replay_ratio=replay_ratio, seed=0, **SMALL).learn(64)
    # Line 16 (theta_old <- theta), then a stand-in for the fresh update: pi moves away from pi_old (and from b).
    model._backup_old_policy()
    snapshot = model.policy_class(model.observation_space, model.action_space, model.lr_schedule, **model.policy_kwargs)
    snapshot.load_state_dict(model.policy.state_dict())  # the reference's own copy of theta_old
    generator = th.Generator().manual_seed(0)
    with th.no_grad():
        for parameter in model.policy.parameters():
            parameter.add_(0.5 * th.randn(parameter.shape, generator=generator))
    memory = model.replay_memory
    slots = memory.sample(model.effective_replay_batch, copy.deepcopy(model._replay_rng))
    segment = memory.get(slots)
    n_steps, n_envs = segment.n_steps, segment.n_envs
    observations = segment.observations.reshape(n_steps * n_envs, -1)  # time-major, as the model flattens
    actions = segment.actions.reshape(n_steps * n_envs, -1)
    log_pi, values = per_sample_log_probs_and_values(model.policy, observations, actions)
    log_b = segment.behaviour_log_probs.reshape(-1).astype(np.float64)
    log_ref = {
        "behaviour": log_b,
        "old_policy": per_sample_log_probs_and_values(snapshot, observations, actions)[0],
        "round_policy": log_pi,
    }[replay_ratio]
    # eq. 18 with the current values, bootstrapping after the segment and at time-limit ends
    with th.no_grad():
        bootstrap = model.policy.predict_values(th.as_tensor(segment.next_observations)).numpy().reshape(-1)
        final_values = np.zeros((n_steps, n_envs))
        for (step, column), final in zip(
            segment.final_observation_indices,
            [] if segment.final_observations is None else list(segment.final_observations),
            strict=True,
        ):
            final_values[step, column] = float(model.policy.predict_values(th.as_tensor(final[None])))
    gae = slow_gae(
        segment.rewards.astype(np.float64),
        values.reshape(n_steps, n_envs),
        bootstrap,
        final_values,
        segment.terminations,
        segment.truncations,
        model.gamma,
        model.gae_lambda,
    )
    rho = slow_rho_done(np.exp(log_pi - log_b).reshape(n_steps, n_envs), segment.terminations | segment.truncations)
    rho_marg = np.array([slow_rho_marg(value, model.eps_marg) for value in rho.flat])
    advantages = rho_marg * gae.reshape(-1)  # eq. 21
    advantages = (advantages - advantages.mean()) / (advantages.std(ddof=1) + 1e-8)  # normalize_advantage
    clip = model.clip_range(1.0)
    expected_loss = slow_surrogate(list(log_pi), list(log_ref), list(advantages), clip)

    stats = model._replay_round(TrainingStatistics())
    assert math.isclose(stats["replay_policy_gradient_loss"], expected_loss, rel_tol=1e-4, abs_tol=1e-5)
    assert math.isclose(stats["replay_ratio_mean"], float(np.mean(np.exp(log_pi - log_ref))), rel_tol=1e-4)
    assert math.isclose(stats["replay_is_ratio_mean"], float(np.mean(np.exp(log_pi - log_b))), rel_tol=1e-4)
    if replay_ratio == "round_policy":
        assert math.isclose(stats["replay_ratio_mean"], 1.0, rel_tol=1e-5)  # the ratio starts every round at 1
    else:  # the perturbation moved pi away from b and pi_old: the three surrogates differ here
        assert not math.isclose(stats["replay_ratio_mean"], 1.0, rel_tol=1e-3)


@pytest.mark.parametrize("replay_ratio", REPLAY_RATIOS)
def test_one_minibatch_round_scores_with_its_gradient_forward_pass(replay_ratio, monkeypatch):
    """
    A round of one minibatch takes its scores from the forward pass of its gradient step: the same training as
    scoring with a separate evaluation-mode pass (forced here by pretending the network has mode-dependent layers).
    """

    def train(fused: bool):
        monkeypatch.setattr(ptr_ppo_module, "has_mode_dependent_layers", lambda module: not fused)
        env = make_vec_env("CartPole-v1", n_envs=2, seed=0, env_kwargs=dict(max_episode_steps=12))
        model = PTRPPO("MlpPolicy", env, replay_rounds=2, replay_ratio=replay_ratio, seed=0, **SMALL)
        assert model._fuses_scoring_forward(model.n_steps * model.effective_replay_batch) == fused
        model.learn(128)
        return model

    fused, separate = train(True), train(False)
    assert fused.replay_updates == separate.replay_updates == 8
    np.testing.assert_allclose(fused.replay_memory.priorities, separate.replay_memory.priorities, rtol=1e-4, atol=1e-6)
    for (name, expected), actual in zip(separate.policy.state_dict().items(), fused.policy.state_dict().values(), strict=True):
        th.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5, msg=name)
    # More than one minibatch per round: scored in a separate pass.
    assert not PTRPPO("MlpPolicy", "CartPole-v1", **{**SMALL, "batch_size": 16})._fuses_scoring_forward(32)


def test_old_policy_is_the_policy_before_the_fresh_update():
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = PTRPPO("MlpPolicy", env, replay_rounds=1, replay_ratio="old_policy", **SMALL)
    before = copy.deepcopy(model.policy.state_dict())
    model.learn(32)  # one iteration: line 16 backs up the initial weights, then the fresh update and a round move them
    assert model._old_policy is not None and not model._old_policy.training
    for name, tensor in before.items():
        th.testing.assert_close(model._old_policy.state_dict()[name], tensor)
    assert not th.equal(model.policy.state_dict()["action_net.weight"], before["action_net.weight"])
    assert not any(parameter.requires_grad for parameter in model._old_policy.parameters())
    assert PTRPPO("MlpPolicy", env, **SMALL).replay_ratio == "old_policy"  # the default (measured, docs)
    behaviour = PTRPPO("MlpPolicy", env, replay_rounds=1, replay_ratio="behaviour", **SMALL).learn(32)
    assert behaviour._old_policy is None  # only "old_policy" keeps a second network


def test_replay_ratio_survives_save_and_load(tmp_path):
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = PTRPPO("MlpPolicy", env, replay_rounds=1, replay_ratio="old_policy", **SMALL).learn(32)
    model.save(tmp_path / "model.zip")
    with zipfile.ZipFile(tmp_path / "model.zip") as archive:
        data = archive.read("data").decode()
    assert "_old_policy" not in data
    loaded = PTRPPO.load(tmp_path / "model.zip", env=env, device="cpu")
    assert loaded.replay_ratio == "old_policy" and loaded._old_policy is None
    loaded.learn(32, reset_num_timesteps=False)  # rebuilt at the next line 16
    assert loaded._old_policy is not None and loaded.replay_updates == 2


class CaptureWriter(KVWriter):
    def __init__(self) -> None:
        self.records: list[dict] = []

    def write(self, key_values, key_excluded, step=0) -> None:
        self.records.append(dict(key_values))


def test_logs_the_ptr_ppo_and_ppo_keys():
    model = PTRPPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2, seed=0), replay_rounds=1, **SMALL)
    writer = CaptureWriter()
    model.set_logger(Logger(folder=None, output_formats=[writer]))
    model.learn(32)
    assert len(writer.records) == 1  # dumped at the start of the iteration's train(), as SB3's PPO
    logged = model.logger.name_to_value  # as SB3, learn() ends without a dump: the last values stay in the logger
    assert logged["collector/sampled_steps"] == logged["collector/trained_steps"] == 32
    keys = ["priority_mean", "priority_max", "rho_marg_mean", "replay_loss", "policy_gradient_loss", "approx_kl"]
    for key in [*keys, "replay_policy_gradient_loss", "replay_is_ratio_mean", "replay_is_ratio_max", "replay_ratio_mean"]:
        assert f"train/{key}" in logged and np.isfinite(logged[f"train/{key}"]), key


def count_optimizer_steps(model: PTRPPO) -> list[int]:
    """A counter (one entry) of the policy optimizer's steps from now on."""
    counter = [0]

    def count(*_) -> None:
        counter[0] += 1

    model.policy.optimizer.register_step_post_hook(count)
    return counter


@pytest.mark.parametrize(
    "kwargs, fresh_steps, replay_steps",
    [
        (dict(replay_rounds=0), 2, 0),  # replay off: 2 epochs of one 32-sample minibatch, no replay
        (dict(replay_rounds=3), 2, 3),  # a round of 2 segments of 16 steps is one minibatch
        (dict(replay_rounds=3, batch_size=8), 8, 12),  # 4 minibatches per epoch and per round
        (dict(replay_rounds=2, batch_size=8, target_kl=1e-12), 1, 8),  # the fresh epochs stop after their first step
    ],
)
def test_replay_share_is_the_replay_fraction_of_the_gradient_steps_of_train(kwargs, fresh_steps, replay_steps):
    model = PTRPPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2, seed=0), n_epochs=2, **{**SMALL, **kwargs})
    steps = count_optimizer_steps(model)
    model.learn(32)  # one iteration, one train(): its fresh epochs, then its rounds on the segments just inserted
    assert steps[0] == fresh_steps + replay_steps and model.replay_updates == replay_steps
    assert model.logger.name_to_value["train/replay_share"] == replay_steps / (fresh_steps + replay_steps)


def test_the_segment_loop_hands_train_its_rollout_and_a_plain_train_inserts_nothing():
    model = PTRPPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2, seed=0), replay_rounds=1, **SMALL).learn(32)
    memory = model.replay_memory
    assert memory.inserted == 2 and model.replay_updates == 1
    model.train()  # SB3's call, after collect_rollouts say: the fresh update and the rounds, no new segment
    assert memory.inserted == 2 and model.replay_updates == 2 and 0 < model.logger.name_to_value["train/replay_share"] < 1


@pytest.mark.parametrize(
    "kwargs, parameter",
    [
        (dict(priority="median"), "priority"),
        (dict(memory_size=4, replay_batch=8), "memory_size"),
        (dict(memory_size=1), "memory_size"),  # replay_batch None means n_envs = 2
        (dict(eps_marg=0.0), "eps_marg"),
        (dict(eps_marg=1.0), "eps_marg"),
        (dict(priority_alpha=-0.1), "priority_alpha"),
        (dict(replay_rounds=-1), "replay_rounds"),
        (dict(replay_batch=0), "replay_batch"),
        (dict(replay_ratio="pi_old"), "replay_ratio"),
    ],
)
def test_bad_input_raises_naming_the_parameter(kwargs, parameter):
    with pytest.raises(ValueError, match=parameter):
        PTRPPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2), **{**SMALL, **kwargs})


def test_bad_replay_ratio_lists_the_allowed_values():
    with pytest.raises(ValueError, match="replay_ratio") as error:
        PTRPPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2), replay_ratio="pi/b", **SMALL)
    assert all(value in str(error.value) for value in ("behaviour", "old_policy", "round_policy"))


def test_more_envs_than_memory_slots_keeps_the_newest_segments():
    env = make_vec_env("CartPole-v1", n_envs=4, seed=0)
    model = PTRPPO("MlpPolicy", env, memory_size=2, replay_batch=2, replay_rounds=1, **SMALL).learn(128)  # 8 segments
    assert len(model.replay_memory) == 2 and model.replay_memory.overwritten == 6


@pytest.mark.parametrize("priority", ["max", "mean", "reward"])
def test_short_learn_on_cartpole(priority):
    env = make_vec_env("CartPole-v1", n_envs=4, seed=0)
    small = dict(n_steps=32, batch_size=64, policy_kwargs=dict(net_arch=[32]), device="cpu", seed=0)
    model = PTRPPO("MlpPolicy", env, replay_rounds=2, memory_size=8, priority=priority, **small).learn(512)
    assert len(model.replay_memory) == 8 and model.replay_memory.overwritten == 8
    assert model.replayed_segments == 4 * 2 * 4  # 4 iterations, 2 rounds of n_envs segments
    assert all(th.isfinite(p).all() for p in model.policy.parameters())
    assert np.all(np.isfinite(model.replay_memory.priorities))


@pytest.mark.slow
def test_learns_cartpole():
    env = make_vec_env("CartPole-v1", n_envs=8, seed=0)
    model = PTRPPO("MlpPolicy", env, n_steps=32, batch_size=256, learning_rate=1e-3, seed=0, device="cpu")
    model.learn(30_000)
    assert np.mean([info["r"] for info in model.ep_info_buffer]) > 150
