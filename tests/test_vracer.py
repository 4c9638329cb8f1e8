"""
V-RACER with ReF-ER: estimators against slow references written from the paper, memory, save/load, bad input,
asynchronous collection.
"""

import math
import multiprocessing
import os
import threading
import time
import zipfile

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import KVWriter, Logger
from stable_baselines3.common.type_aliases import TrainFreq, TrainFrequencyUnit

from sb3_impact import VRACER
from sb3_impact.common.collectors import CollectorError
from sb3_impact.common.refer import (
    annealed_c_max,
    annealed_lr_factor,
    diag_gaussian_kl,
    diag_gaussian_kl_grad,
    diag_gaussian_log_prob,
    far_fraction,
    is_near_policy,
    update_beta,
)
from sb3_impact.vracer.loss import LOSS_STATISTICS, fused_refer_vracer_loss, refer_vracer_loss
from sb3_impact.vracer.memory import EpisodeReplayMemory
from sb3_impact.vracer.policies import TRUNCATION_STDS, Softsign, truncated_standard_normal
from sb3_impact.vracer.vracer import segment_steps

from .conftest import collector_processes, collector_threads
from .test_estimators import reference_q_ret

GAMMA = 0.9


# --- slow references, written from the paper -------------------------------------------------------


def reference_beta(beta, far_fraction_value, refer_d, eta):
    """Eq. 12."""
    if far_fraction_value > refer_d:
        return (1 - eta) * beta
    return (1 - eta) * beta + eta


# --- ReF-ER rules -----------------------------------------------------------------------------------


def test_near_far_boundaries():
    c_max = 2.5
    log_c = math.log(c_max)
    log_rhos = th.tensor([0.0, log_c - 1e-6, log_c, log_c + 1e-6, -log_c + 1e-6, -log_c, -log_c - 1e-6, 1e4, -1e4])
    expected = [True, True, False, False, True, False, False, False, False]
    assert is_near_policy(log_rhos, c_max).tolist() == expected
    assert is_near_policy(log_rhos.numpy(), c_max).tolist() == expected
    # same classification as the paper's 1/c_max < rho < c_max on ratios away from the boundary
    rhos = np.array([0.3, 0.41, 0.39, 1.0, 2.4, 2.6])
    assert is_near_policy(np.log(rhos), c_max).tolist() == [bool(1 / c_max < rho < c_max) for rho in rhos]
    assert far_fraction(log_rhos.numpy().astype(np.float64), c_max) == pytest.approx(6 / 9)
    assert far_fraction(np.array([0.0, 0.0, 5.0, 0.0]), c_max, n_samples=2) == pytest.approx(0.5)  # zero padding


def test_beta_update_matches_eq_12():
    rng = np.random.default_rng(3)
    beta = reference = 1.0
    for _ in range(200):
        fraction, eta = float(rng.uniform(0, 0.3)), float(rng.uniform(0, 0.05))
        beta, reference = update_beta(beta, fraction, 0.1, eta), reference_beta(reference, fraction, 0.1, eta)
        assert beta == pytest.approx(reference, abs=1e-12)
    assert update_beta(0.5, 0.1, 0.1, 0.01) == pytest.approx(0.505)  # n_far / N = D: "otherwise" branch
    assert update_beta(0.5, 0.1000001, 0.1, 0.01) == pytest.approx(0.495)
    assert update_beta(1.0, 0.0, 0.1, 0.3) == 1.0 and update_beta(0.0, 0.9, 0.1, 0.3) == 0.0  # fixed points


def test_annealing_eq_13():
    assert annealed_c_max(4.0, 5e-7, 0) == 5.0
    assert annealed_c_max(4.0, 5e-7, 2_000_000) == pytest.approx(1 + 4 / 2)
    assert annealed_lr_factor(5e-7, 2_000_000) == pytest.approx(0.5)
    assert annealed_c_max(4.0, 0.0, 10**9) == 5.0


@pytest.mark.parametrize("extreme", [False, True])
def test_gaussian_kl_value_and_gradient(extreme):
    gen = th.Generator().manual_seed(4)
    spread = 3.0 if extreme else 0.5
    shape = (64, 3)
    mu_mean, pi_mean = th.randn(shape, generator=gen, dtype=th.float64) * 4, th.randn(shape, generator=gen, dtype=th.float64)
    mu_log_std = th.randn(shape, generator=gen, dtype=th.float64) * spread
    pi_log_std = th.randn(shape, generator=gen, dtype=th.float64) * spread
    pi_mean.requires_grad_(True)
    pi_log_std.requires_grad_(True)
    kl = diag_gaussian_kl(mu_mean, mu_log_std, pi_mean, pi_log_std)
    normal = th.distributions.Normal
    expected = th.distributions.kl_divergence(normal(mu_mean, mu_log_std.exp()), normal(pi_mean, pi_log_std.exp())).sum(-1)
    th.testing.assert_close(kl, expected)
    assert th.all(kl >= 0) and th.all(th.isfinite(kl))
    grad_mean, grad_log_std = th.autograd.grad(kl.sum(), (pi_mean, pi_log_std))
    analytic_mean, analytic_log_std = diag_gaussian_kl_grad(mu_mean, mu_log_std, pi_mean.detach(), pi_log_std.detach())
    th.testing.assert_close(analytic_mean, grad_mean)
    th.testing.assert_close(analytic_log_std, grad_log_std)
    th.testing.assert_close(diag_gaussian_kl(mu_mean, mu_log_std, mu_mean, mu_log_std), th.zeros(64, dtype=th.float64))


def test_gaussian_log_prob_matches_torch():
    gen = th.Generator().manual_seed(5)
    actions, mean, log_std = (th.randn(10, 2, generator=gen) for _ in range(3))
    expected = th.distributions.Normal(mean, log_std.exp()).log_prob(actions).sum(-1)
    th.testing.assert_close(diag_gaussian_log_prob(actions, mean, log_std), expected)


def test_loss_far_samples_give_only_the_kl_gradient():
    """Rule 1: no policy and no value gradient from far samples; rule 2: beta g - (1 - beta) grad KL (eq. 10)."""
    c_max, beta = 2.0, 0.7
    log_mu = th.zeros(4)
    log_pi = th.tensor([0.1, -0.2, 3.0, -3.0], requires_grad=True)  # two near, two far
    values = th.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    kl_inputs = th.ones(4, requires_grad=True)
    q_ret = th.tensor([2.0, 0.0, 10.0, -10.0])
    loss, parts = refer_vracer_loss(log_pi, log_mu, values, q_ret, kl_inputs * 1.0, c_max, beta, (1, 2))
    loss.backward()
    assert log_pi.grad[2] == 0 and log_pi.grad[3] == 0 and values.grad[2] == 0 and values.grad[3] == 0
    rhos = th.exp(log_pi.detach()[:2])
    advantages = q_ret[:2] - values.detach()[:2]
    th.testing.assert_close(log_pi.grad[:2], -beta * rhos * advantages / 4)  # eq. 5
    rho_bars = th.clamp(rhos, max=1.0)
    th.testing.assert_close(values.grad[:2], -beta * rho_bars * advantages / 4)  # eqs. 7, 9
    th.testing.assert_close(kl_inputs.grad, th.full((4,), (1 - beta) / 4))  # eq. 10 on every sample
    assert parts["batch_near_fraction"].item() == 0.5

    # plain ER: every sample counts, rho is clipped at 1e3, no KL term
    log_pi = th.tensor([50.0, -50.0], requires_grad=True)
    kl_inputs = th.ones(2, requires_grad=True)
    loss, _ = refer_vracer_loss(log_pi, th.zeros(2), th.zeros(2), th.ones(2), kl_inputs * 1.0, c_max, beta, ())
    loss.backward()
    assert th.isfinite(loss)
    th.testing.assert_close(log_pi.grad, -th.tensor([1e3, math.exp(-50.0)]) / 2)
    assert kl_inputs.grad is None or th.all(kl_inputs.grad == 0)


def reference_loss_and_gradients(
    mean, log_std, values, actions, behaviour_mean, behaviour_log_std, q_ret, c_max, beta, rules, kl_direction="mu_pi"
):
    """The autograd loss (refer_vracer_loss) and its gradient with respect to the network's outputs."""
    mean, log_std, values = (tensor.detach().clone().requires_grad_(True) for tensor in (mean, log_std, values))
    expanded = log_std.expand_as(mean)
    log_pi = diag_gaussian_log_prob(actions, mean, expanded)
    log_mu = diag_gaussian_log_prob(actions, behaviour_mean, behaviour_log_std)
    kl = diag_gaussian_kl(behaviour_mean, behaviour_log_std, mean, expanded)
    penalty = kl if kl_direction == "mu_pi" else diag_gaussian_kl(mean, expanded, behaviour_mean, behaviour_log_std)
    loss, parts = refer_vracer_loss(log_pi, log_mu, values, q_ret, penalty, c_max, beta, rules)
    parts["kl_mu_pi"] = kl.mean().detach()  # logged: D_KL(mu || pi) whichever the penalty
    loss.backward()
    return loss.detach(), parts, (mean.grad, log_std.grad, values.grad)


@pytest.mark.parametrize("rules", [(1, 2), (1,), (2,), ()])
@pytest.mark.parametrize("extreme", [False, True])
@pytest.mark.parametrize("kl_direction", ["mu_pi", "pi_mu"])
def test_fused_loss_matches_the_autograd_loss(rules, extreme, kl_direction):
    """The closed-form gradient of fused_refer_vracer_loss equals autograd's of refer_vracer_loss (eqs. 5, 9-11)."""
    gen = th.Generator().manual_seed(7)
    batch, dim = 64, 3
    # extreme: every other sample's behaviour is far from pi (|log rho| up to hundreds, rho clipped at 1e3)
    spread = th.where(th.arange(batch) % 2 == 0, 5.0, 0.1).to(th.float64).unsqueeze(-1) if extreme else 0.3
    mean = th.randn(batch, dim, generator=gen, dtype=th.float64)
    log_std = th.randn(dim, generator=gen, dtype=th.float64) * 0.5 - 0.5
    behaviour_mean = mean + spread * th.randn(batch, dim, generator=gen, dtype=th.float64)
    behaviour_log_std = log_std + spread * th.randn(batch, dim, generator=gen, dtype=th.float64)
    actions = behaviour_mean + th.exp(behaviour_log_std) * th.randn(batch, dim, generator=gen, dtype=th.float64)
    values, q_ret = th.randn(batch, generator=gen, dtype=th.float64), 5 * th.randn(batch, generator=gen, dtype=th.float64)
    inputs = (mean, log_std, values, actions, behaviour_mean, behaviour_log_std, q_ret, 2.5, 0.8)
    expected_loss, parts, expected_grads = reference_loss_and_gradients(*inputs, rules, kl_direction)

    leaves = [tensor.clone().requires_grad_(True) for tensor in inputs[:3]]
    loss, log_rhos, statistics = fused_refer_vracer_loss(*leaves, *inputs[3:], rules, kl_direction)
    loss.backward()
    th.testing.assert_close(loss.detach(), expected_loss)
    th.testing.assert_close(log_rhos, parts["log_rhos"])
    for leaf, expected in zip(leaves, expected_grads, strict=True):
        th.testing.assert_close(leaf.grad, expected)
    for name, value in zip(LOSS_STATISTICS, statistics, strict=True):
        th.testing.assert_close(value, parts[name].to(value.dtype))
    assert th.all(th.isfinite(statistics)) and all(th.all(th.isfinite(leaf.grad)) for leaf in leaves)
    if extreme:  # the extreme case does exercise far samples and huge ratios
        assert log_rhos.abs().max() > 50 and (1 not in rules or 0.3 < parts["batch_near_fraction"] < 0.7)

    # c_max and beta as 0-d tensors (the compiled path): the same result
    tensor_loss, _, tensor_statistics = fused_refer_vracer_loss(
        *inputs[:7], th.tensor(2.5), th.tensor(0.8), rules, kl_direction
    )
    th.testing.assert_close(tensor_loss, expected_loss)
    th.testing.assert_close(tensor_statistics, statistics.detach())


def test_softsign_matches_torch_in_value_and_gradient():
    x = th.randn(50, 7, dtype=th.float64) * 5
    x[0, :3] = th.tensor([0.0, 1e30, -1e30], dtype=th.float64)
    th.testing.assert_close(Softsign()(x), th.nn.Softsign()(x))
    assert th.autograd.gradcheck(Softsign(), (x[1:].clone().requires_grad_(True),))


# --- replay memory ----------------------------------------------------------------------------------


def make_memory(capacity=10, n_envs=1, gamma=GAMMA):
    return EpisodeReplayMemory(capacity, gym.spaces.Box(-1, 1, (2,)), gym.spaces.Box(-1, 1, (1,)), n_envs=n_envs, gamma=gamma)


def add_episode(memory, episode_id, length, truncated=False, final_value=0.0):
    """One environment; steps with reward = episode_id and observation = (episode_id, t)."""
    for t in range(length):
        done = t == length - 1
        final = np.array([episode_id, length], dtype=np.float32) if done else None
        memory.add(
            np.array([[episode_id, t]], dtype=np.float32),
            np.zeros((1, 1)),
            np.array([float(episode_id)]),
            np.zeros((1, 2)),
            np.array([0.5]),
            np.array([done]),
            np.array([truncated]),
            [final],
            np.array([final_value]),
            np.array([[episode_id, t + 1]], dtype=np.float32),
        )


def stored_episode_ids(memory):
    return memory.observations[""][memory.ordered_slots(), 0].astype(int).tolist()


def test_memory_fifo_eviction_by_whole_episode():
    memory = make_memory(capacity=10)
    add_episode(memory, 1, 4)
    add_episode(memory, 2, 3)
    assert stored_episode_ids(memory) == [1] * 4 + [2] * 3 and len(memory) == 7
    add_episode(memory, 3, 5)  # does not fit: episode 1 goes, whole
    assert stored_episode_ids(memory) == [2] * 3 + [3] * 5
    assert memory.n_steps_evicted == 4 and memory.n_episodes_evicted == 1
    add_episode(memory, 4, 2)  # fits (10 steps), wraps around the ring
    assert stored_episode_ids(memory) == [2] * 3 + [3] * 5 + [4] * 2 and len(memory) == 10
    add_episode(memory, 5, 1)
    assert stored_episode_ids(memory) == [3] * 5 + [4] * 2 + [5]
    slots = memory.ordered_slots()
    assert memory.is_first[slots].tolist() == [True, False, False, False, False, True, False, True]
    assert memory.is_last[slots].tolist() == [False, False, False, False, True, False, True, True]
    # steps inside each episode keep their order
    assert memory.observations[""][slots, 1].astype(int).tolist() == [0, 1, 2, 3, 4, 0, 1, 0]
    # evicted slots no longer count for the far fraction
    assert np.count_nonzero(memory.log_rhos) == 0


def test_memory_episode_longer_than_capacity_keeps_its_end_and_counts_the_rest():
    memory = make_memory(capacity=5)
    add_episode(memory, 1, 8)
    assert len(memory) == 5 and memory.n_steps_dropped == 3
    assert memory.observations[""][memory.ordered_slots(), 1].astype(int).tolist() == [3, 4, 5, 6, 7]


def test_memory_interleaved_envs_store_contiguous_episodes():
    memory = make_memory(capacity=20, n_envs=2)
    for t in range(3):  # env 0: 3-step episode; env 1: 2-step episode, then a running one
        obs = np.array([[0, t], [1, t]], dtype=np.float32)
        dones = np.array([t == 2, t == 1])
        finals = [np.zeros(2, dtype=np.float32) if d else None for d in dones]
        rewards, truncateds = np.array([0.0, 1.0]), np.zeros(2, bool)
        memory.add(
            obs, np.zeros((2, 1)), rewards, np.zeros((2, 2)), np.zeros(2), dones, truncateds, finals, np.zeros(2), obs + 1
        )
    assert stored_episode_ids(memory) == [1, 1, 0, 0, 0]
    assert memory.n_staged_steps == 1


def test_memory_q_ret_refresh_and_recompute_match_reference():
    rng = np.random.default_rng(6)
    memory = make_memory(capacity=30)
    episodes = [(1, 7, False, 0.0), (2, 9, True, 4.0), (3, 6, True, -2.0), (4, 11, False, 0.0)]  # evicts episode 1
    for episode_id, length, truncated, final_value in episodes:
        add_episode(memory, episode_id, length, truncated, final_value)
    memory.reward_scale = 2.0
    for _ in range(5):
        slots = memory.sample_slots(8)
        values, log_rhos = rng.normal(size=8), rng.normal(scale=3, size=8)
        before = memory.q_ret.copy()
        memory.refresh(slots, values, log_rhos, c_max=3.0)
        for slot in np.unique(slots):  # eq. 6 one step back
            if not memory.is_first[slot]:
                rho_bar = min(1.0, math.exp(memory.log_rhos[slot]))
                v = memory.values[slot]
                expected = memory.rewards[slot - 1] / 2.0 + GAMMA * (v + rho_bar * (before[slot] - v))
                assert memory.q_ret[slot - 1] == pytest.approx(expected, rel=1e-5)
        # the far-policy count follows the refreshed steps (a slot drawn twice counts once, with its last rho)
        stored = memory.ordered_slots()
        assert memory.n_far == np.count_nonzero(np.abs(memory.log_rhos[stored]) >= math.log(3.0))
        assert memory.far_fraction() == pytest.approx(memory.n_far / len(memory))
    memory.count_far_policy(1.5)
    assert memory.n_far == np.count_nonzero(np.abs(memory.log_rhos[memory.ordered_slots()]) >= math.log(1.5))
    assert memory.head + len(memory) > memory.capacity  # the ring wraps: recompute_q_ret reads it in two parts
    memory.recompute_q_ret()
    slots = memory.ordered_slots()
    position = 0
    for episode in memory.episodes:
        part = slots[position : position + episode.length]
        expected = reference_q_ret(
            memory.rewards[part] / 2.0,
            memory.values[part],
            memory.log_rhos[part],
            not episode.truncated,
            memory.last_values[part[-1]],
            GAMMA,
        )
        np.testing.assert_allclose(memory.q_ret[part], expected, rtol=1e-5)
        position += episode.length
    assert [episode.truncated for episode in memory.episodes] == [True, True, False]
    assert memory.last_values[memory.truncated_episode_ends()[0]].tolist() == [4.0, -2.0]


def test_memory_samples_uniformly_among_stored_steps():
    memory = make_memory(capacity=10)
    for episode_id, length in ((1, 4), (2, 3), (3, 5)):
        add_episode(memory, episode_id, length)
    np.random.seed(0)
    slots = memory.sample_slots(8000)
    counts = np.bincount(slots, minlength=10)
    valid = set(memory.ordered_slots().tolist())
    assert all(counts[slot] > 0 for slot in valid) and all(counts[slot] == 0 for slot in set(range(10)) - valid)
    assert counts[list(valid)].min() > 8000 / 8 * 0.8 and counts[list(valid)].max() < 8000 / 8 * 1.2


def random_columns(rng, n_steps, n_envs):
    """Columns ``[T, B]`` of a vector segment: observation (column, t), episodes ending at random steps."""
    observations = np.stack([[[column, t] for column in range(n_envs)] for t in range(n_steps)]).astype(np.float32)
    dones = rng.random((n_steps, n_envs)) < 0.3
    truncateds = dones & (rng.random((n_steps, n_envs)) < 0.5)
    return dict(
        observations=observations + rng.normal(size=observations.shape).astype(np.float32),
        actions=rng.normal(size=(n_steps, n_envs, 1)),
        rewards=rng.normal(size=(n_steps, n_envs)),
        behaviour_params=rng.normal(size=(n_steps, n_envs, 2)).astype(np.float32),
        values=rng.normal(size=(n_steps, n_envs)).astype(np.float32),
        dones=dones,
        truncateds=truncateds,
        final_values=np.where(truncateds, rng.normal(size=(n_steps, n_envs)), 0.0).astype(np.float32),
        next_observations=rng.normal(size=(n_envs, 2)).astype(np.float32),
    )


MEMORY_ARRAYS = ("actions", "rewards", "behaviour_params", "values", "q_ret", "is_first", "is_last", "last_values")


@pytest.mark.parametrize("capacity", [1000, 12])  # 12: episodes are evicted, some longer than the memory lose steps
def test_memory_add_columns_cuts_columns_at_episode_ends_as_step_by_step_adds_do(capacity):
    """Segments of several steps (several episode ends per column, Ray env ids) store what one add per step stores."""
    rng = np.random.default_rng(3)
    env_ids = np.array([4, 1, 2])
    by_segment, by_step = make_memory(capacity=capacity, n_envs=5), make_memory(capacity=capacity, n_envs=5)
    for n_steps in (1, 9, 4, 13, 2):
        columns = random_columns(rng, n_steps, 3)
        final_indices = np.argwhere(columns["truncateds"])
        finals = columns["observations"][tuple(final_indices.T)] + 100.0  # s_T of each truncated end, time-major
        by_segment.add_columns(
            columns["observations"],
            columns["actions"],
            columns["rewards"],
            columns["behaviour_params"],
            columns["values"],
            columns["dones"],
            columns["truncateds"],
            finals if len(finals) else None,
            final_indices,
            columns["final_values"],
            columns["next_observations"],
            env_ids,
        )
        final_at = {tuple(index): final for index, final in zip(final_indices.tolist(), finals, strict=True)}
        for t in range(n_steps):
            after = columns["observations"][t + 1] if t + 1 < n_steps else columns["next_observations"]
            by_step.add(
                *(columns[key][t] for key in ("observations", "actions", "rewards", "behaviour_params", "values")),
                columns["dones"][t],
                columns["truncateds"][t],
                [final_at.get((t, column)) for column in range(3)],
                columns["final_values"][t],
                after,
                env_ids,
            )
    assert by_segment.n_episodes_added == by_step.n_episodes_added > 10
    assert by_segment.n_steps_dropped == by_step.n_steps_dropped and by_segment.n_steps_evicted == by_step.n_steps_evicted
    assert (by_segment.head, len(by_segment)) == (by_step.head, len(by_step))
    for name in MEMORY_ARRAYS:
        np.testing.assert_array_equal(getattr(by_segment, name), getattr(by_step, name), err_msg=name)
    np.testing.assert_array_equal(by_segment.observations[""], by_step.observations[""])
    for a, b in zip(by_segment.episodes, by_step.episodes, strict=True):
        assert (a.start, a.length, a.truncated) == (b.start, b.length, b.truncated)
        assert (a.final_observation is None) == (not a.truncated) and np.array_equal(a.final_observation, b.final_observation)
    assert by_segment.n_staged_steps == by_step.n_staged_steps > 0
    for env in env_ids:
        np.testing.assert_array_equal(by_segment.staged_next_observations[env], by_step.staged_next_observations[env])


def test_memory_pickled_with_per_step_staging_still_loads():
    """A memory pickled when running episodes were staged as per-step tuples closes them as it did."""
    memory = make_memory(capacity=20, n_envs=2)
    add_episode(memory, 1, 3)
    state = dict(memory.__dict__)
    del state["staged"], state["device"]
    steps = [({"": np.array([7.0, t], dtype=np.float32)}, np.array([0.1 * t]), float(t), np.zeros(2), 0.5) for t in range(4)]
    state["staging"] = [steps, []]
    state["staged_next_observations"] = [np.array([7.0, 4.0], dtype=np.float32), None]
    old = EpisodeReplayMemory.__new__(EpisodeReplayMemory)
    old.__setstate__(state)
    assert old.n_staged_steps == 4 and old.device == th.device("cpu")
    assert old.close_staged_episodes(lambda observations: np.full(len(observations), 2.0)) == 4
    episode = old.episodes[-1]
    assert (episode.length, episode.truncated) == (4, True) and old.last_values[(episode.start + 3) % 20] == 2.0
    slots = (episode.start + np.arange(4)) % 20
    np.testing.assert_array_equal(old.observations[""][slots, 1], [0, 1, 2, 3])
    np.testing.assert_allclose(old.actions[slots, 0], [0.0, 0.1, 0.2, 0.3], rtol=1e-6)
    np.testing.assert_array_equal(old.rewards[slots], [0, 1, 2, 3])


# --- algorithm --------------------------------------------------------------------------------------


class RecordingWriter(KVWriter):
    def __init__(self):
        self.records = []

    def write(self, key_values, key_excluded, step=0):
        self.records.append(dict(key_values))


SMALL = dict(learning_starts=300, batch_size=32, buffer_size=1000, retrace_interval=50, device="cpu")


def small_model(seed=0, **kwargs):
    return VRACER("MlpPolicy", "Pendulum-v1", seed=seed, policy_kwargs=dict(net_arch=[32, 32]), **{**SMALL, **kwargs})


def test_compiled_loss_matches_eager_and_trains(tmp_path):
    """compile_loss=True: the compiled forward pass and loss give the eager values and gradients; learn and save work."""
    model = small_model(compile_loss=True)
    model.learn(600)
    assert model._n_updates > 0 and model._compiled_batch_loss is not None
    memory = model.replay_buffer
    slots = memory.sample_slots(64)
    batch = [
        th.as_tensor(array[slots])
        for array in (memory.observations[""], memory.actions, memory.behaviour_params, memory.q_ret)
    ]
    results = []
    for batch_loss in (model._batch_loss, model._batch_loss_function()):
        model.policy.zero_grad()
        loss, log_rhos, values, statistics = batch_loss(*batch, 2.0, 0.7)
        loss.backward()
        results.append((loss, log_rhos, values, statistics, [p.grad.clone() for p in model.policy.parameters()]))
    (eager, compiled) = results
    for expected, actual in zip(eager[:4], compiled[:4], strict=True):
        th.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)
    for expected, actual in zip(eager[4], compiled[4], strict=True):
        th.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)
    model.save(tmp_path / "model.zip")
    assert VRACER.load(tmp_path / "model.zip").compile_loss


def test_compile_failure_warns_and_trains_uncompiled(monkeypatch):
    from torch._dynamo.exc import BackendCompilerFailed

    def failing_compile(function):
        def compiled(*args):
            raise BackendCompilerFailed(failing_compile, RuntimeError("no C++ compiler"), None)

        return compiled

    monkeypatch.setattr(th, "compile", failing_compile)
    model = small_model(compile_loss=True)
    with pytest.warns(RuntimeWarning, match="could not build the loss"):
        model.learn(400)
    assert model._n_updates > 0 and model._compile_failed


def test_smarties_options_train_and_round_trip(tmp_path):
    """The options that follow the authors' code (smarties) instead of the paper: they train, save and load."""
    policy_kwargs = dict(net_arch=[32, 32], std_parameterization="smarties", weight_init="glorot", clip_env_actions=False)
    model = VRACER(
        "MlpPolicy",
        "Pendulum-v1",
        seed=0,
        policy_kwargs=policy_kwargs,
        kl_direction="pi_mu",
        observation_statistics_rate=0.5,
        **SMALL,
    )
    standardizer = model.policy.obs_standardizer
    model.learn(700)
    mean_before = standardizer.statistics()[""][0].clone()
    model.replay_buffer.observations[""][: len(model.replay_buffer)] += 10.0  # the memory's mean moves by 10
    memory_mean = th.as_tensor(model.replay_buffer.observation_statistics()[""][0], dtype=th.float32)
    model._adapt_observation_statistics()
    th.testing.assert_close(standardizer.statistics()[""][0], 0.5 * (mean_before + memory_mean))  # half way
    assert th.exp(2 * model.policy.log_std()).min() > 0
    assert model.policy.env_actions(np.array([[2.0]]))[0, 0] == pytest.approx(4.0)  # unclipped, unscaled to [-2, 2]
    model.save(tmp_path / "model.zip")
    loaded = VRACER.load(tmp_path / "model.zip")
    assert (loaded.kl_direction, loaded.observation_statistics_rate) == ("pi_mu", 0.5)
    assert loaded.policy.std_parameterization == "smarties" and not loaded.policy.clip_env_actions


def test_short_learn_on_pendulum_logs_refer_quantities():
    model = small_model()
    writer = RecordingWriter()
    model.set_logger(Logger(folder=None, output_formats=[writer]))
    model.learn(800, log_interval=1)
    keys = {key for record in writer.records for key in record}
    required = {"train/beta", "train/c_max", "train/far_fraction", "train/kl_mu_pi", "train/is_ratio_mean"}
    assert required | {"train/value_loss", "train/policy_gradient_loss"} <= keys
    last = next(record for record in reversed(writer.records) if "train/beta" in record)
    assert all(math.isfinite(value) for key, value in last.items() if key.startswith("train/"))
    assert last["train/c_max"] == pytest.approx(annealed_c_max(4.0, 5e-7, 800))
    assert all(th.all(th.isfinite(parameter)) for parameter in model.policy.parameters())
    # one gradient step per env step after learning_starts (the first episode ends at step 200)
    assert model._n_updates == 800 - 300
    memory = model.replay_buffer
    assert len(memory) == 800 and memory.n_staged_steps == 0  # 4 whole truncated episodes
    assert all(episode.truncated for episode in memory.episodes)
    assert bool(model.policy.obs_standardizer.initialized)
    assert model.reward_scale == pytest.approx(memory.root_mean_square_reward() + 1e-7, rel=0.2)


@pytest.mark.parametrize("rules", [(1,), (2,), ()])
def test_ablations_run_and_keep_their_rules(rules):
    model = small_model(refer_rules=list(rules))
    model.learn(500)
    assert model.refer_rules == rules
    if 2 not in rules:
        assert model.beta == 1.0
    assert all(th.all(th.isfinite(parameter)) for parameter in model.policy.parameters())


def test_predict_uses_saved_standardisation_and_load_restores_it(tmp_path):
    model = small_model()
    model.learn(350)  # first gradient step at 301: the memory holds the first episode (200 steps)
    standardizer = model.policy.obs_standardizer
    assert len(model.replay_buffer) == 200
    mean, std = model.replay_buffer.observation_statistics()[""]
    stats = standardizer.statistics()[""]
    np.testing.assert_allclose(stats[0].numpy(), mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats[1].numpy(), std, rtol=1e-5, atol=1e-6)
    model.learn(300, reset_num_timesteps=False)  # computed once (appendix B), then fixed
    np.testing.assert_allclose(standardizer.statistics()[""][0].numpy(), mean, rtol=1e-5, atol=1e-6)
    observations = np.random.default_rng(7).uniform(-1, 1, size=(20, 3)).astype(np.float32)
    actions, _ = model.predict(observations, deterministic=True)
    assert np.all(np.abs(actions) <= 2.0)

    model.save(tmp_path / "model.zip")
    with zipfile.ZipFile(tmp_path / "model.zip") as archive:
        assert '"replay_buffer":' not in archive.read("data").decode()
    loaded = VRACER.load(tmp_path / "model.zip", device="cpu")
    assert bool(loaded.policy.obs_standardizer.initialized)
    np.testing.assert_array_equal(loaded.predict(observations, deterministic=True)[0], actions)
    assert loaded.reward_scale == model.reward_scale and loaded.beta == model.beta
    assert loaded.refer_rules == model.refer_rules and len(loaded.replay_buffer) == 0

    # the standardisation matters: without it the same network acts differently
    standardizer.set_active(False)
    assert not np.allclose(model.predict(observations, deterministic=True)[0], actions)


def test_save_and_load_replay_buffer_then_continue(tmp_path):
    model = small_model()
    model.learn(500)
    model.save_replay_buffer(tmp_path / "memory.pkl")
    loaded = small_model(seed=1)
    loaded.load_replay_buffer(tmp_path / "memory.pkl")
    memory, original = loaded.replay_buffer, model.replay_buffer
    assert isinstance(memory, EpisodeReplayMemory) and len(memory) == len(original)
    for name in ("actions", "rewards", "behaviour_params", "values", "log_rhos", "q_ret", "is_first", "is_last"):
        np.testing.assert_array_equal(getattr(memory, name), getattr(original, name))
    np.testing.assert_array_equal(memory.observations[""], original.observations[""])
    assert memory.n_staged_steps == original.n_staged_steps == 100
    loaded.learn(400)  # the loaded memory's running episode is closed as truncated: no step lost
    assert len(memory) == 500 + 400 and memory.n_staged_steps == 0 and memory.n_steps_dropped == 0
    assert loaded._n_updates == 100
    with pytest.raises(TypeError, match="EpisodeReplayMemory"):
        from stable_baselines3.common.save_util import save_to_pkl

        save_to_pkl(tmp_path / "other.pkl", {"not": "a memory"})
        loaded.load_replay_buffer(tmp_path / "other.pkl")


def test_replay_buffer_device_is_the_models_after_load_replay_buffer(tmp_path):
    """SB3's buffers have ``.device`` (the model's; SB3's tests read it): so does the memory, also when loaded."""
    model = small_model()
    assert model.replay_buffer.device == model.device == th.device("cpu")
    model.learn(250)
    model.replay_buffer.device = th.device("cuda")  # as saved by a model on a GPU (no GPU needed to unpickle it)
    model.save_replay_buffer(tmp_path / "memory.pkl")
    loaded = small_model(seed=1)
    loaded.load_replay_buffer(tmp_path / "memory.pkl")
    assert loaded.replay_buffer.device == loaded.device == th.device("cpu")
    assert len(loaded.replay_buffer) == len(model.replay_buffer)


def test_second_learn_closes_running_episodes_as_truncated():
    model = small_model(learning_starts=100)
    model.learn(250)
    assert model.replay_buffer.n_staged_steps == 50
    model.learn(10)  # reset_num_timesteps=True resets the env: the running episode enters the memory
    memory = model.replay_buffer
    assert memory.n_steps_dropped == 0 and len(memory) == 250 and memory.n_staged_steps == 10
    assert memory.episodes[-1].length == 50 and memory.episodes[-1].truncated


def test_policy_initial_variance_and_truncated_sampling():
    model = small_model()
    policy = model.policy
    th.testing.assert_close(th.exp(2 * policy.log_std()), th.full((1,), 0.2))
    obs = th.zeros(5000, 3)
    mean, log_std, values = policy.forward_parts(obs)
    actions, params, _ = policy.act(obs)
    z = (actions - mean) / th.exp(log_std)
    assert z.abs().max() <= 3.0 + 1e-5 and z.std() > 0.8
    th.testing.assert_close(params, th.cat([mean, log_std], dim=1))
    assert mean.abs().max() < 0.1 and values.abs().max() < 0.1  # near-zero outputs at the start (appendix A)


def test_dict_observations_with_multi_input_policy():
    from stable_baselines3.common.env_util import make_vec_env

    class DictPendulum(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env)
            self.observation_space = gym.spaces.Dict({"state": env.observation_space})

        def observation(self, observation):
            return {"state": observation}

    env = make_vec_env("Pendulum-v1", n_envs=2, seed=0, wrapper_class=DictPendulum)
    model = VRACER("MultiInputPolicy", env, seed=0, **{**SMALL, "learning_starts": 400})
    model.learn(500)
    assert model._n_updates > 0 and bool(model.policy.obs_standardizer.initialized)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(refer_c=0), "refer_c"),
        (dict(refer_c=-1.0), "refer_c"),
        (dict(refer_d=0.0), "refer_d"),
        (dict(refer_d=1.0), "refer_d"),
        (dict(refer_a=-1e-7), "refer_a"),
        (dict(buffer_size=100, batch_size=256), "buffer_size"),
        (dict(refer_rules=(3,)), "refer_rules"),
        (dict(refer_rules=(1, 1)), "refer_rules"),
        (dict(refer_rules="12"), "refer_rules"),
        (dict(refer_rules=(True,)), "refer_rules"),
        (dict(refer_rules=1), "refer_rules"),
        (dict(retrace_interval=0), "retrace_interval"),
        (dict(observation_statistics_rate=1.5), "observation_statistics_rate"),
        (dict(kl_direction="pi||mu"), "kl_direction"),
        (dict(policy_kwargs=dict(std_parameterization="exp")), "std_parameterization"),
        (dict(policy_kwargs=dict(weight_init="orthogonal")), "weight_init"),
    ],
)
def test_bad_input_names_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        VRACER("MlpPolicy", "Pendulum-v1", **kwargs)


def test_discrete_action_space_is_refused():
    with pytest.raises(ValueError, match="action space"):
        VRACER("MlpPolicy", "CartPole-v1")


# --- asynchronous collection ------------------------------------------------------------------------

ASYNC_MODES = [dict(collector="thread"), dict(collector="process")]
ASYNC_IDS = ["thread", "process"]
PENDULUM_DT = 0.05


def async_model(seed=0, **kwargs):
    return small_model(seed=seed, **{"collector": "thread", "train_freq": 4, **kwargs})


def assert_pendulum_memory_is_consistent(memory):
    """
    Every stored step obeys Pendulum's reward and dynamics: ``r_t`` from ``s_t`` and the clipped action, and
    ``theta_{t+1} = theta_t + thetadot_{t+1} dt`` between consecutive steps of an episode and towards the
    ``s_T`` of truncated episodes. Misaligned rewards, actions or observations, or a gap inside an episode,
    break it.
    """
    slots = memory.ordered_slots()
    obs = memory.observations[""][slots].astype(np.float64)
    theta, thetadot = np.arctan2(obs[:, 1], obs[:, 0]), obs[:, 2]
    torque = 2.0 * np.clip(memory.actions[slots, 0].astype(np.float64), -1.0, 1.0)
    expected_rewards = -(theta**2 + 0.1 * thetadot**2 + 0.001 * torque**2)
    np.testing.assert_allclose(memory.rewards[slots], expected_rewards, rtol=1e-4, atol=1e-3)

    def angle_step(before, after):
        return np.angle(np.exp(1j * (after - before)))

    same_episode = ~memory.is_last[slots][:-1]
    np.testing.assert_allclose(
        angle_step(theta[:-1], theta[1:])[same_episode], PENDULUM_DT * thetadot[1:][same_episode], atol=1e-4
    )
    truncated = [episode for episode in memory.episodes if episode.truncated]
    assert all(episode.final_observation is not None for episode in truncated)
    for episode in truncated:
        last = memory.observations[""][(episode.start + episode.length - 1) % memory.capacity].astype(np.float64)
        final = np.asarray(episode.final_observation, dtype=np.float64)
        step = angle_step(np.arctan2(last[1], last[0]), np.arctan2(final[1], final[0]))
        assert step == pytest.approx(PENDULUM_DT * final[2], abs=1e-4)


class CollectorWatch(BaseCallback):
    """Records whether a collector thread or child process was running while training."""

    def __init__(self):
        super().__init__()
        self.seen_thread = self.seen_process = False

    def _on_step(self) -> bool:
        self.seen_thread |= bool(collector_threads())
        self.seen_process |= bool(multiprocessing.active_children())
        return True


@pytest.mark.parametrize("mode", ASYNC_MODES, ids=ASYNC_IDS)
def test_async_learn_trains_stores_every_step_and_logs_the_policy_lag(mode):
    model = async_model(**mode)
    writer = RecordingWriter()
    model.set_logger(Logger(folder=None, output_formats=[writer]))
    model.learn(800, log_interval=5)
    assert model.num_timesteps == 800
    # gradient_steps=-1: one per env step of each segment stored after 300 steps were collected (304, ..., 800)
    assert model._n_updates == 800 - 300
    assert model.sampled_steps == model.trained_steps + model.dropped_steps
    assert model.trained_steps == 800
    memory = model.replay_buffer
    assert len(memory) == 800 and memory.n_staged_steps == 0 and memory.n_steps_dropped == 0
    assert [episode.length for episode in memory.episodes] == [200] * 4
    assert_pendulum_memory_is_consistent(memory)
    # the stored rewards are the raw ones: each episode's sum is Monitor's return
    returns = [episode["r"] for episode in model.ep_info_buffer]
    sums = [memory.rewards[episode.start : episode.start + episode.length].sum() for episode in memory.episodes]
    np.testing.assert_allclose(sums, returns, rtol=1e-4)
    assert bool(model.policy.obs_standardizer.initialized)
    assert all(th.all(th.isfinite(parameter)) for parameter in model.policy.parameters())

    lags = [record["train/policy_lag"] for record in writer.records if "train/policy_lag" in record]
    assert len(lags) >= 800 // 4 // 5 and all(0 <= lag <= model._n_updates for lag in lags)
    keys = {key for record in writer.records for key in record}
    assert {"train/beta", "train/policy_lag_max", "collector/sampled_steps", "collector/trained_steps"} <= keys
    assert "collector/in_flight_steps" in writer.records[-1] and "collector/dropped_steps" in model.logger.name_to_value


def test_sync_memory_passes_the_same_consistency_check():
    model = small_model(train_freq=4)
    model.learn(800)
    assert_pendulum_memory_is_consistent(model.replay_buffer)
    assert model.sampled_steps == model.trained_steps == 800 and model.dropped_steps == 0  # trains on every step


@pytest.mark.parametrize("mode", ASYNC_MODES, ids=ASYNC_IDS)
def test_async_learn_leaves_no_collector_and_continues_without_gaps(mode):
    model = async_model(**mode)
    watch = CollectorWatch()
    model.learn(500, callback=watch)
    if mode["collector"] == "thread":
        assert watch.seen_thread and not watch.seen_process
    else:
        assert watch.seen_process
    assert collector_threads() == [] and multiprocessing.active_children() == []
    assert not any(thread.name == "sb3-impact-collector" for thread in threading.enumerate())
    updates = model._n_updates
    model.learn(300, reset_num_timesteps=False)  # the episodes the collector ran past were closed: no gap
    assert collector_threads() == [] and multiprocessing.active_children() == []
    assert model.num_timesteps == 800 and model._n_updates == updates + 300
    assert model.sampled_steps == model.trained_steps + model.dropped_steps
    memory = model.replay_buffer
    assert len(memory) + memory.n_staged_steps == 800 and memory.n_steps_dropped == 0
    assert_pendulum_memory_is_consistent(memory)


def test_thread_collector_caps_the_learner_threads_while_it_runs():
    class Threads(BaseCallback):
        def __init__(self):
            super().__init__()
            self.seen = []

        def _on_step(self) -> bool:
            self.seen.append(th.get_num_threads())
            return True

    before, callback = th.get_num_threads(), Threads()
    async_model(collector="thread").learn(400, callback=callback)
    assert max(callback.seen) <= max(1, min(before, (os.cpu_count() or 2) - 1))
    assert th.get_num_threads() == before


def test_async_callback_stop_drops_the_segment_and_closes_the_episode():
    class StopAt(BaseCallback):
        def _on_step(self) -> bool:
            return self.num_timesteps < 350

    model = async_model()
    model.learn(10_000, callback=StopAt())
    assert 350 <= model.num_timesteps < 360
    assert model.dropped_steps > 0 and model.sampled_steps == model.trained_steps + model.dropped_steps
    assert len(model.replay_buffer) == model.trained_steps and model.replay_buffer.n_staged_steps == 0
    assert_pendulum_memory_is_consistent(model.replay_buffer)


@pytest.mark.parametrize(
    "train_freq",
    [(1, "episode"), (2, "episode"), TrainFreq(1, TrainFrequencyUnit.EPISODE), (4, "fortnight"), 0, (1,)],
)
@pytest.mark.parametrize("collector", ["sync", "thread"])
def test_train_freq_must_count_steps_with_every_collector(train_freq, collector):
    # Segments have a fixed number of vector steps: episode units are refused at construction.
    with pytest.raises(ValueError, match="train_freq"):
        VRACER("MlpPolicy", "Pendulum-v1", collector=collector, train_freq=train_freq)


def test_segment_steps_accepts_step_units():
    assert segment_steps(8) == segment_steps((8, "step")) == 8
    assert segment_steps(TrainFreq(3, TrainFrequencyUnit.STEP)) == 3


def test_bad_collection_parameters_are_refused():
    with pytest.raises(ValueError, match="collector"):
        VRACER("MlpPolicy", "Pendulum-v1", collector="pigeon")
    with pytest.raises(ValueError, match="queue_size"):
        VRACER("MlpPolicy", "Pendulum-v1", collector="thread", collector_kwargs=dict(queue_size=0))
    with pytest.raises(TypeError, match="num_workers"):
        VRACER("MlpPolicy", "Pendulum-v1", collector="process", collector_kwargs=dict(num_workers=2))


def test_policy_behaviour_sampling_for_the_collector():
    model = small_model()
    policy = model.policy
    obs = th.as_tensor(np.random.default_rng(8).uniform(-1, 1, size=(500, 3)), dtype=th.float32)
    with th.no_grad():
        th.manual_seed(0)
        actions, log_probs, params = policy.sample_behaviour(obs)
        th.manual_seed(0)
        expected_actions, expected_params, _ = policy.act(obs)
    th.testing.assert_close(actions, expected_actions)
    th.testing.assert_close(params, expected_params)
    mean, log_std = params.chunk(2, dim=1)
    th.testing.assert_close(log_probs, diag_gaussian_log_prob(actions, mean, log_std))
    env_actions = policy.env_actions(actions.numpy())
    np.testing.assert_allclose(env_actions, 2.0 * np.clip(actions.numpy(), -1, 1), atol=1e-6)
    assert (np.abs(actions.numpy()) > 1).any() and np.abs(env_actions).max() <= 2.0


def test_async_model_save_and_load_round_trip(tmp_path):
    model = async_model(collector="process", collector_kwargs=dict(queue_size=2))
    model.learn(400)
    model.save(tmp_path / "model.zip")
    with zipfile.ZipFile(tmp_path / "model.zip") as archive:
        data = archive.read("data").decode()
    assert '"_collector"' not in data and '"replay_buffer":' not in data
    loaded = VRACER.load(tmp_path / "model.zip", env=make_vec_env("Pendulum-v1", n_envs=1, seed=1), device="cpu")
    assert loaded.collector == "process" and loaded.collector_kwargs == dict(queue_size=2)
    assert loaded.train_freq == model.train_freq and loaded._n_updates == model._n_updates
    observations = np.random.default_rng(9).uniform(-1, 1, size=(10, 3)).astype(np.float32)
    np.testing.assert_array_equal(
        loaded.predict(observations, deterministic=True)[0], model.predict(observations, deterministic=True)[0]
    )
    loaded.learn(400)  # a fresh memory: learning_starts again
    assert loaded._n_updates > model._n_updates and loaded.sampled_steps == loaded.trained_steps + loaded.dropped_steps


class CrashingPendulum(gym.Wrapper):
    """Pendulum-v1 whose step raises after ``crash_after`` steps."""

    def __init__(self, crash_after: int) -> None:
        super().__init__(gym.make("Pendulum-v1"))
        self.crash_after, self.steps = crash_after, 0

    def step(self, action):
        self.steps += 1
        if self.steps >= self.crash_after:
            raise RuntimeError("environment exploded")
        return super().step(action)


@pytest.mark.parametrize("mode", ASYNC_MODES, ids=ASYNC_IDS)
def test_async_env_crash_ends_learn_promptly_with_collector_error(mode):
    env = make_vec_env(lambda: CrashingPendulum(crash_after=150), n_envs=1)
    model = VRACER("MlpPolicy", env, train_freq=4, **{**SMALL, "learning_starts": 100}, **mode)
    start = time.monotonic()
    with pytest.raises(CollectorError) as error_info:
        model.learn(10_000)
    assert time.monotonic() - start < 10
    assert "environment exploded" in str(error_info.value.__cause__)
    assert collector_threads() == [] and collector_processes() == []
    assert model._last_obs is None and model.replay_buffer.n_staged_steps == 0


@pytest.mark.skipif(not th.cuda.is_available(), reason="needs a CUDA device")
def test_async_learner_on_gpu_with_cpu_collector():
    model = async_model(device="cuda")
    model.learn(500)
    assert model.policy.device.type == "cuda" and model._n_updates > 0
    assert model.sampled_steps == model.trained_steps + model.dropped_steps
    assert_pendulum_memory_is_consistent(model.replay_buffer)


def test_truncated_noise_stays_within_three_stds_with_the_truncated_normals_spread():
    th.manual_seed(0)
    noise = truncated_standard_normal(th.empty(200_000), TRUNCATION_STDS)
    assert noise.abs().max() <= TRUNCATION_STDS
    # The standard normal truncated at +-3: mean 0, std sqrt(1 - 2 * 3 * phi(3) / (1 - 2 * Phi(-3))) = 0.9866.
    assert abs(float(noise.mean())) < 0.01 and float(noise.std()) == pytest.approx(0.9866, abs=0.005)
    forced = truncated_standard_normal(th.full((5,), 10.0), 0.5)  # many redraws: still inside
    assert forced.abs().max() <= 0.5


def test_softsign_without_gradient_gives_the_autograd_functions_values():
    x = th.linspace(-50, 50, 101)
    with th.no_grad():
        np.testing.assert_allclose(Softsign()(x).numpy(), th.nn.functional.softsign(x).numpy(), rtol=1e-6)
    x.requires_grad_(True)
    np.testing.assert_allclose(Softsign()(x).detach().numpy(), th.nn.functional.softsign(x).detach().numpy(), rtol=1e-6)


def test_the_values_recorded_with_each_action_are_the_learners_and_fill_the_memory():
    """One forward pass per step: V(s_t) comes with the action when no update came between; the memory gets them."""
    model = VRACER("MlpPolicy", "Pendulum-v1", learning_starts=10**6, buffer_size=1000, seed=0, device="cpu")
    collector = model.make_collector()
    segment = collector.get_segment()
    recorded = segment.extras["behaviour_values"]
    assert recorded.shape == (segment.n_steps, segment.n_envs)
    np.testing.assert_allclose(recorded.reshape(-1), model._batch_values(segment.observations.reshape(-1, 3)), atol=1e-6)
    model.learn(300)  # no gradient step: every segment's values are the recorded ones, the memory holds them
    memory = model.replay_buffer
    slots = np.arange(min(len(memory), 50))
    if len(slots):
        observations = memory.observations_at(slots)
        np.testing.assert_allclose(memory.values[slots], model._batch_values(observations), atol=1e-5)
