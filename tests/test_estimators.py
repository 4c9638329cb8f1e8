"""
The estimators of :mod:`sb3_impact.common.estimators`, each against a slow reference written straight from the
paper's formula (plain Python loops over t): V-trace (IMPALA eq. 1), the time-limit bootstrap, GAE with episode
ends and the PTR-PPO importance weights (eqs. 18-20, 22), AMBER's R' (eq. 10), Retrace / V-tbc (ReF-ER eqs. 6-8)
and the ratio functions, with terminations, truncations and extreme log-ratios.
"""

import math

import numpy as np
import pytest
import torch as th

from sb3_impact.common.estimators import (
    MAX_LOG_RATIO,
    MAX_RATIO,
    approx_kl,
    batch_average_is_weight,
    clamp_log_ratio,
    clamped_ratio,
    clipped_ratio,
    clipped_surrogate,
    done_cut_log_rho,
    fold_truncation_bootstrap,
    gae_with_episode_ends,
    linear_suffix_scan,
    retrace_q_ret,
    rho_bar_from_log,
    truncated_importance_weight,
    v_tbc,
    vtrace,
)

GAMMA = 0.9
# Log-ratios far beyond anything exp() can represent (float32 overflows at ~88, float64 at ~709).
EXTREME_LOG_RATIOS = (1e4, -1e4, 1e9, -1e9)


def min_ratio(threshold: float, log_ratio: float) -> float:
    """``min(threshold, exp(log_ratio))`` in plain Python floats, without ever overflowing."""
    return threshold if log_ratio >= math.log(threshold) else math.exp(log_ratio)


def clamped(log_ratio: float) -> float:
    """``log_ratio`` clamped to ``[-MAX_LOG_RATIO, MAX_LOG_RATIO]``."""
    return min(max(log_ratio, -MAX_LOG_RATIO), MAX_LOG_RATIO)


# ------------------------------------------------------------------------------------------ V-trace (IMPALA)


def reference_vtrace(behaviour_lp, target_lp, rewards, values, bootstrap, discounts, rho_bar, c_bar, pg_rho_bar, lambda_):
    """v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t, one (s, b) at a time, in float64."""
    n_steps, n_envs = values.shape
    ratios = np.exp(target_lp - behaviour_lp)
    rhos = np.minimum(rho_bar, ratios)
    cs = lambda_ * np.minimum(c_bar, ratios)
    values_ext = np.concatenate([values, bootstrap[None]], axis=0)
    vs = np.zeros((n_steps, n_envs))
    for b in range(n_envs):
        for s in range(n_steps):
            total = values_ext[s, b]
            for t in range(s, n_steps):
                trace = 1.0
                for i in range(s, t):
                    trace *= discounts[i, b] * cs[i, b]
                delta = rhos[t, b] * (rewards[t, b] + discounts[t, b] * values_ext[t + 1, b] - values_ext[t, b])
                total += trace * delta
            vs[s, b] = total
    vs_ext = np.concatenate([vs, bootstrap[None]], axis=0)
    pg_advantages = np.minimum(pg_rho_bar, ratios) * (rewards + discounts * vs_ext[1:] - values)
    return vs, pg_advantages


def random_inputs(rng, n_steps, n_envs, gamma=0.97, terminal_probability=0.15):
    behaviour_lp = rng.uniform(-3.0, 0.0, size=(n_steps, n_envs))
    # Ratios pi/mu spanning 0.01 .. 100, so every clip is exercised.
    target_lp = behaviour_lp + rng.uniform(math.log(0.01), math.log(100.0), size=(n_steps, n_envs))
    rewards = rng.normal(size=(n_steps, n_envs))
    values = rng.normal(size=(n_steps, n_envs))
    bootstrap = rng.normal(size=n_envs)
    discounts = gamma * (rng.uniform(size=(n_steps, n_envs)) > terminal_probability)
    return behaviour_lp, target_lp, rewards, values, bootstrap, discounts


def run_vtrace(inputs, **kwargs):
    tensors = [th.as_tensor(x, dtype=th.float64) for x in inputs]
    vs, pg = vtrace(*tensors, **kwargs)
    return vs.numpy(), pg.numpy()


@pytest.mark.parametrize("n_steps", [1, 2, 7, 20])
@pytest.mark.parametrize(
    "rho_bar,c_bar,pg_rho_bar,lambda_",
    [(1.0, 1.0, 1.0, 1.0), (2.0, 0.5, 1.5, 1.0), (1.0, 1.0, 1.0, 0.9), (10.0, 3.0, 0.7, 0.5)],
)
def test_vtrace_matches_double_sum(n_steps, rho_bar, c_bar, pg_rho_bar, lambda_):
    rng = np.random.default_rng(n_steps * 100 + int(rho_bar * 10) + int(lambda_ * 7))
    inputs = random_inputs(rng, n_steps, n_envs=5)
    assert (inputs[5] == 0).any() or n_steps < 5  # zero discounts mid-segment
    kwargs = dict(clip_rho_threshold=rho_bar, clip_c_threshold=c_bar, clip_pg_rho_threshold=pg_rho_bar, lambda_=lambda_)
    vs, pg = run_vtrace(inputs, **kwargs)
    ref_vs, ref_pg = reference_vtrace(*inputs, rho_bar, c_bar, pg_rho_bar, lambda_)
    np.testing.assert_allclose(vs, ref_vs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(pg, ref_pg, rtol=1e-10, atol=1e-10)


def test_on_policy_vtrace_is_n_step_return():
    rng = np.random.default_rng(0)
    n_steps, n_envs, gamma = 6, 3, 0.9
    behaviour_lp, _, rewards, values, bootstrap, _ = random_inputs(rng, n_steps, n_envs)
    discounts = np.full((n_steps, n_envs), gamma)
    discounts[2, 1] = 0.0  # episode ends at step 2 in env 1
    vs, _ = run_vtrace((behaviour_lp, behaviour_lp, rewards, values, bootstrap, discounts))
    expected = np.zeros_like(vs)
    for b in range(n_envs):
        future = bootstrap[b]
        for t in range(n_steps - 1, -1, -1):
            future = rewards[t, b] + discounts[t, b] * future
            expected[t, b] = future
    np.testing.assert_allclose(vs, expected, rtol=1e-10)


def test_extreme_ratios_stay_finite_in_float32():
    rng = np.random.default_rng(1)
    inputs = list(random_inputs(rng, 16, 4))
    inputs[1] = inputs[0] + rng.choice([-500.0, 500.0, -80.0, 80.0], size=inputs[0].shape)
    tensors = [th.as_tensor(x, dtype=th.float32) for x in inputs]
    vs, pg = vtrace(*tensors, clip_rho_threshold=2.0, clip_c_threshold=1.0, clip_pg_rho_threshold=2.0)
    assert th.isfinite(vs).all() and th.isfinite(pg).all()


def test_outputs_carry_no_gradient():
    rng = np.random.default_rng(2)
    tensors = [th.as_tensor(x, dtype=th.float32).requires_grad_() for x in random_inputs(rng, 4, 2)]
    vs, pg = vtrace(*tensors)
    assert not vs.requires_grad and not pg.requires_grad


@pytest.mark.parametrize(
    "kwargs",
    [{"clip_rho_threshold": 0.0}, {"clip_c_threshold": -1.0}, {"clip_pg_rho_threshold": math.inf}, {"lambda_": 1.5}],
)
def test_invalid_thresholds_are_rejected(kwargs):
    rng = np.random.default_rng(3)
    tensors = [th.as_tensor(x) for x in random_inputs(rng, 3, 2)]
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=name):
        vtrace(*tensors, **kwargs)


def test_mismatched_shapes_are_rejected():
    rng = np.random.default_rng(4)
    tensors = [th.as_tensor(x) for x in random_inputs(rng, 3, 2)]
    tensors[2] = tensors[2][:2]
    with pytest.raises(ValueError, match="rewards"):
        vtrace(*tensors)


def test_truncated_segment_equals_its_two_pieces():
    """A truncation at step k gives the targets of [0, k] bootstrapped on V(final obs) and of [k+1, T) alone."""
    rng = np.random.default_rng(5)
    n_steps, n_envs, gamma, k = 10, 3, 0.95, 4
    behaviour_lp, target_lp, rewards, values, bootstrap, _ = random_inputs(rng, n_steps, n_envs)
    terminations = np.zeros((n_steps, n_envs), dtype=bool)
    terminations[7, 2] = True
    truncations = np.zeros((n_steps, n_envs), dtype=bool)
    truncations[k, :] = True
    final_values = np.zeros((n_steps, n_envs))
    final_values[k] = rng.normal(size=n_envs)  # V(final observation) of the truncated episodes
    kwargs = dict(clip_rho_threshold=1.5, clip_c_threshold=1.0, clip_pg_rho_threshold=1.2, lambda_=0.95)

    folded_rewards, discounts = fold_truncation_bootstrap(
        th.as_tensor(rewards), th.as_tensor(terminations), th.as_tensor(truncations), th.as_tensor(final_values), gamma
    )
    whole = run_vtrace((behaviour_lp, target_lp, folded_rewards.numpy(), values, bootstrap, discounts.numpy()), **kwargs)

    plain_discounts = gamma * ~terminations
    first = run_vtrace(
        (
            behaviour_lp[: k + 1],
            target_lp[: k + 1],
            rewards[: k + 1],
            values[: k + 1],
            final_values[k],
            plain_discounts[: k + 1],
        ),
        **kwargs,
    )
    second = run_vtrace(
        (behaviour_lp[k + 1 :], target_lp[k + 1 :], rewards[k + 1 :], values[k + 1 :], bootstrap, plain_discounts[k + 1 :]),
        **kwargs,
    )
    for whole_part, first_part, second_part in zip(whole, first, second, strict=True):
        np.testing.assert_allclose(whole_part, np.concatenate([first_part, second_part]), rtol=1e-10, atol=1e-12)


def test_termination_wins_over_truncation():
    rewards = th.ones(2, 1)
    terminations = th.tensor([[True], [False]])
    truncations = th.tensor([[True], [False]])
    folded, discounts = fold_truncation_bootstrap(rewards, terminations, truncations, th.full((2, 1), 5.0), 0.9)
    assert folded[0, 0] == 1.0 and discounts[0, 0] == 0.0 and discounts[1, 0] == pytest.approx(0.9)


# ------------------------------------------------------------------------------------------ PTR-PPO


def test_rho_done_is_cut_at_done_by_hand():
    ratios = th.tensor([[2.0], [0.5], [4.0], [3.0], [0.25]])  # [T=5, B=1]
    dones = th.tensor([[False], [True], [False], [False], [False]])
    rho = done_cut_log_rho(ratios.log(), dones).exp().flatten()
    # t=0: 2 * 0.5 (cut after the done at t=1); t=1: 0.5 alone; t>=2: product to the end of the segment
    th.testing.assert_close(rho, th.tensor([1.0, 0.5, 3.0, 0.75, 0.25]))


def slow_rho_done(ratios: np.ndarray, dones: np.ndarray) -> np.ndarray:
    """Eq. (19) per step: pi_t/b_t * (d_t + (1 - d_t) prod_{k>t} pi_k/b_k), the product itself cut at the next done."""
    n_steps, n_envs = ratios.shape
    rho = np.zeros_like(ratios)
    for b in range(n_envs):
        for t in range(n_steps):
            product = ratios[t, b]
            k = t
            while not dones[k, b] and k + 1 < n_steps:
                k += 1
                product *= ratios[k, b]
            rho[t, b] = product
    return rho


def slow_rho_marg(rho: float, eps: float) -> float:
    return min(1 - eps, rho) + max((rho - (1 - eps)) / rho, 0.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rho_done_and_rho_marg_against_slow_references(seed):
    rng = np.random.default_rng(seed)
    log_ratios = rng.normal(0.0, 0.7, size=(9, 4))
    dones = rng.random((9, 4)) < 0.25
    log_rho = done_cut_log_rho(th.as_tensor(log_ratios), th.as_tensor(dones))
    np.testing.assert_allclose(log_rho.exp().numpy(), slow_rho_done(np.exp(log_ratios), dones), rtol=1e-10)
    for eps in (0.05, 0.2, 0.6):
        expected = np.array([slow_rho_marg(rho, eps) for rho in np.exp(log_rho.numpy()).flat]).reshape(log_rho.shape)
        np.testing.assert_allclose(truncated_importance_weight(log_rho, eps).numpy(), expected, rtol=1e-10, atol=1e-12)


def test_importance_weights_stay_finite_and_bounded_for_extreme_ratios():
    log_ratios = th.tensor([[1e4, -1e4, 80.0], [200.0, -300.0, -80.0], [float("1e30"), 0.0, 80.0]], dtype=th.float32)
    dones = th.zeros_like(log_ratios, dtype=th.bool)
    log_rho = done_cut_log_rho(log_ratios, dones)
    weights = truncated_importance_weight(log_rho, 0.2)
    assert th.isfinite(log_rho).all() and th.isfinite(weights).all()
    assert (weights >= 0).all() and (weights <= 2 - 0.2).all()
    extremes = truncated_importance_weight(th.tensor([-1e9, 1e9, 0.0]), 0.2)
    th.testing.assert_close(extremes, th.tensor([0.0, 1.8, 0.8 + 0.2]))


def slow_gae(rewards, values, bootstrap, final_values, terminations, truncations, gamma, lam):
    """Sum_k (gamma lambda)^(k-t) delta_k up to the end of the episode, with delta from eq. (11) and the bootstrap rules."""
    n_steps, n_envs = rewards.shape
    advantages = np.zeros_like(rewards)
    for b in range(n_envs):
        deltas = []
        for t in range(n_steps):
            if terminations[t, b]:
                next_value = 0.0
            elif truncations[t, b]:
                next_value = final_values[t, b]
            elif t + 1 < n_steps:
                next_value = values[t + 1, b]
            else:
                next_value = bootstrap[b]
            deltas.append(rewards[t, b] + gamma * next_value - values[t, b])
        for t in range(n_steps):
            total, k = 0.0, t
            while True:
                total += (gamma * lam) ** (k - t) * deltas[k]
                if terminations[k, b] or truncations[k, b] or k + 1 == n_steps:
                    break
                k += 1
            advantages[t, b] = total
    return advantages


def replay_gae(rewards, values, bootstrap, final_values, terminations, truncations, gamma, lam):
    tensors = [th.as_tensor(x) for x in (rewards, values, bootstrap, final_values, terminations, truncations)]
    rewards_t, values_t, bootstrap_t, final_t, term_t, trunc_t = tensors
    folded, discounts = fold_truncation_bootstrap(rewards_t, term_t, trunc_t, final_t, gamma)
    return gae_with_episode_ends(folded, values_t, bootstrap_t, discounts, lam).numpy()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_replay_gae_against_slow_reference_with_terminations_and_truncations(seed):
    rng = np.random.default_rng(seed)
    shape = (12, 5)
    truncations = rng.random(shape) < 0.15
    terminations = (rng.random(shape) < 0.15) & ~truncations
    args = (rng.normal(size=shape), rng.normal(size=shape), rng.normal(size=5), rng.normal(size=shape))
    expected = slow_gae(*args, terminations, truncations, 0.97, 0.9)
    np.testing.assert_allclose(replay_gae(*args, terminations, truncations, 0.97, 0.9), expected, rtol=1e-10, atol=1e-12)


def test_segment_with_truncation_equals_its_two_pieces():
    rng = np.random.default_rng(4)
    rewards, values, final = rng.normal(size=(8, 1)), rng.normal(size=(8, 1)), rng.normal(size=(8, 1))
    bootstrap = rng.normal(size=1)
    truncations = np.zeros((8, 1), dtype=bool)
    truncations[3] = True
    no_ends = np.zeros((8, 1), dtype=bool)
    whole = replay_gae(rewards, values, bootstrap, final, no_ends, truncations, 0.99, 0.95)
    # first piece: steps 0-3 bootstrapped with V(final observation); second piece: steps 4-7
    first = replay_gae(rewards[:4], values[:4], final[3], final[:4], no_ends[:4], no_ends[:4], 0.99, 0.95)
    second = replay_gae(rewards[4:], values[4:], bootstrap, final[4:], no_ends[4:], no_ends[4:], 0.99, 0.95)
    np.testing.assert_allclose(whole, np.concatenate([first, second]), rtol=1e-12)


def slow_surrogate(log_pi: list[float], log_ref: list[float], advantages: list[float], eps: float) -> float:
    """
    Eq. (22) as a loss, one sample at a time: -mean(min(r A, clip(r, 1 - eps, 1 + eps) A)) with r = pi / pi_ref (eq. 4),
    r formed from the log-ratio clamped to [-MAX_LOG_RATIO, MAX_LOG_RATIO] (docs/guide/equations.md, "Importance
    ratios": ratios are exp(log - log)).
    """
    total = 0.0
    for lp, lq, a in zip(log_pi, log_ref, advantages, strict=True):
        r = math.exp(min(max(lp - lq, -MAX_LOG_RATIO), MAX_LOG_RATIO))
        total += min(r * a, min(max(r, 1 - eps), 1 + eps) * a)
    return -total / len(advantages)


def test_clipped_surrogate_against_slow_reference_with_extreme_log_ratios():
    # log pi, log pi_ref and A^marg by hand: inside the clip, outside on both sides with both signs of A,
    # and log-ratios of +-80, +-1e4 (a stale snapshot or behaviour probability far from the current policy).
    log_pi = [-0.5, -0.5, -0.1, -2.0, -0.1, -2.0, 0.0, -1e4, 0.0, -1e4, -90.0, -1.0]
    log_ref = [-0.6, -0.4, -2.0, -0.1, -2.0, -0.1, -1e4, 0.0, -1e4, 0.0, -10.0, -91.0]
    advantages = [1.0, -2.0, 0.5, 0.5, -0.5, -0.5, 3.0, 3.0, -3.0, -3.0, 1.5, -1.5]
    eps = 0.2
    log_pi_t = th.tensor(log_pi, dtype=th.float64, requires_grad=True)
    loss, ratio = clipped_surrogate(
        log_pi_t, th.tensor(log_ref, dtype=th.float64), th.tensor(advantages, dtype=th.float64), eps
    )
    assert th.isfinite(loss) and th.isfinite(ratio).all()
    assert math.isclose(loss.item(), slow_surrogate(log_pi, log_ref, advantages, eps), rel_tol=1e-12)
    # Where the exact (unclamped) objective is finite the clamp does not change it: r -> inf with A > 0 gives
    # (1 + eps) A, r -> 0 gives 0 (A > 0) or (1 - eps) A (A < 0).
    exact = {6: (1 + eps) * 3.0, 7: 0.0, 9: (1 - eps) * -3.0, 10: 0.0}
    per_sample_loss, _ = zip(
        *[
            clipped_surrogate(
                log_pi_t[i : i + 1],
                th.tensor([log_ref[i]], dtype=th.float64),
                th.tensor([advantages[i]], dtype=th.float64),
                eps,
            )
            for i in exact
        ],
        strict=True,
    )
    for (index, value), sample_loss in zip(exact.items(), per_sample_loss, strict=True):
        assert math.isclose(-sample_loss.item(), value, abs_tol=1e-6), index
    loss.backward()
    assert th.isfinite(log_pi_t.grad).all()
    # PPO's clip: no gradient where the clipped term is the minimum, or where the log-ratio is clamped
    for index in (2, 5, 6, 7, 8, 9, 10, 11):
        assert log_pi_t.grad[index] == 0.0, index
    assert log_pi_t.grad[0] != 0.0 and log_pi_t.grad[1] != 0.0
    # float32 too (the learner's dtype)
    loss32, ratio32 = clipped_surrogate(th.tensor(log_pi), th.tensor(log_ref), th.tensor(advantages), eps)
    assert th.isfinite(loss32) and th.isfinite(ratio32).all()
    assert math.isclose(loss32.item(), slow_surrogate(log_pi, log_ref, advantages, eps), rel_tol=1e-5)


# ------------------------------------------------------------------------------------------ Retrace / V-tbc (V-RACER)


def reference_q_ret(rewards, values, log_rhos, terminated, final_value, gamma):
    """Eqs. 6-7 step by step, backwards; V_tbc after the last step is 0 (terminated) or V(s_T) (truncated)."""
    q_ret = [0.0] * len(rewards)
    v_tbc_next = 0.0 if terminated else float(final_value)
    for t in reversed(range(len(rewards))):
        q_ret[t] = float(rewards[t]) + gamma * v_tbc_next
        rho_bar = 1.0 if log_rhos[t] >= 0 else math.exp(float(log_rhos[t]))  # min(1, rho) without overflow
        v_tbc_next = float(values[t]) + rho_bar * (q_ret[t] - float(values[t]))
    return np.array(q_ret)


def random_episode(rng, length, extreme=False):
    rewards = rng.normal(size=length)
    values = rng.normal(size=length)
    scale = 60.0 if extreme else 1.5
    log_rhos = rng.normal(scale=scale, size=length)
    if extreme:
        log_rhos[rng.integers(length)] = 800.0  # exp() would overflow
        log_rhos[rng.integers(length)] = -800.0  # exp() would underflow to 0
    return rewards, values, log_rhos


@pytest.mark.parametrize("extreme", [False, True])
def test_retrace_matches_reference_on_random_episodes(extreme):
    rng = np.random.default_rng(0)
    pieces = {"rewards": [], "values": [], "log_rhos": [], "is_last": [], "last_values": []}
    expected = []
    for episode in range(12):
        length = int(rng.integers(1, 40))
        rewards, values, log_rhos = random_episode(rng, length, extreme)
        terminated = episode % 2 == 0
        final_value = float(rng.normal()) * 5
        expected.append(reference_q_ret(rewards, values, log_rhos, terminated, final_value, GAMMA))
        is_last = np.zeros(length, dtype=bool)
        is_last[-1] = True
        last_values = np.zeros(length)
        last_values[-1] = 0.0 if terminated else final_value
        for key, value in zip(pieces, (rewards, values, log_rhos, is_last, last_values), strict=True):
            pieces[key].append(value)
    flat = {key: np.concatenate(value) for key, value in pieces.items()}
    q_ret = retrace_q_ret(flat["rewards"], flat["values"], flat["log_rhos"], flat["is_last"], flat["last_values"], GAMMA)
    assert np.all(np.isfinite(q_ret))
    np.testing.assert_allclose(q_ret, np.concatenate(expected), rtol=1e-10, atol=1e-10)


def test_retrace_episodes_processed_together_equal_separately():
    rng = np.random.default_rng(1)
    rewards, values, log_rhos = random_episode(rng, 30)
    is_last = np.zeros(30, dtype=bool)
    is_last[[9, 29]] = True  # a truncated episode of 10 steps, then a terminated one of 20
    last_values = np.zeros(30)
    last_values[9] = 3.0
    together = retrace_q_ret(rewards, values, log_rhos, is_last, last_values, GAMMA)
    first = retrace_q_ret(rewards[:10], values[:10], log_rhos[:10], is_last[:10], last_values[:10], GAMMA)
    second = retrace_q_ret(rewards[10:], values[10:], log_rhos[10:], is_last[10:], last_values[10:], GAMMA)
    np.testing.assert_allclose(together, np.concatenate([first, second]))


def test_v_tbc_is_vtrace_with_weights_clipped_at_one():
    """Section 2: V-tbc equals V-trace with rho_bar = c_bar = 1 (here against the project's V-trace)."""
    rng = np.random.default_rng(2)
    for terminated in (True, False):
        rewards, values, log_rhos = random_episode(rng, 25)
        final_value = 2.5
        is_last = np.zeros(25, dtype=bool)
        is_last[-1] = True
        last_values = np.where(is_last, 0.0 if terminated else final_value, 0.0)
        q_ret = retrace_q_ret(rewards, values, log_rhos, is_last, last_values, GAMMA)
        ours = v_tbc(q_ret, values, log_rhos)
        discounts = np.full(25, GAMMA)
        if terminated:
            discounts[-1] = 0.0
        column = lambda x: th.as_tensor(np.asarray(x, dtype=np.float64)).unsqueeze(1)  # noqa: E731
        vs, _ = vtrace(
            column(np.zeros(25)),
            column(log_rhos),
            column(rewards),
            column(values),
            th.tensor([final_value], dtype=th.float64),
            column(discounts),
        )
        np.testing.assert_allclose(ours, vs.squeeze(1).numpy(), rtol=1e-9, atol=1e-9)


def test_retrace_on_policy_is_the_discounted_return():
    rewards = np.array([1.0, 2.0, 3.0])
    q_ret = retrace_q_ret(rewards, np.array([5.0, -5.0, 9.0]), np.zeros(3), np.array([False, False, True]), np.zeros(3), 0.5)
    np.testing.assert_allclose(q_ret, [1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3])


def test_retrace_rejects_incomplete_episode():
    with pytest.raises(ValueError, match="is_last"):
        retrace_q_ret(np.ones(2), np.ones(2), np.zeros(2), np.array([True, False]), np.zeros(2), GAMMA)


# ------------------------------------------------------------------------------------------ AMBER's R'


def test_batch_average_is_weight_matches_hand_computation():
    behaviour = th.log(th.tensor([0.5, 0.2, 0.4, 0.1]))
    current = th.log(th.tensor([1.0, 0.1, 0.4, 0.3]))
    # ratios 2, 0.5, 1, 3 -> 1 + |1 - ratio| = 2, 1.5, 1, 3 -> mean 7.5 / 4
    assert batch_average_is_weight(current, behaviour) == pytest.approx(7.5 / 4)
    assert batch_average_is_weight(behaviour, behaviour) == 1.0


def test_batch_average_is_weight_stays_finite_for_extreme_ratios():
    behaviour = th.tensor([0.0, -1e4, 0.0])
    current = th.tensor([-1e4, 0.0, 0.0])  # ratios e^-1e4 and e^1e4: log ratio clamped to +-20
    value = batch_average_is_weight(current, behaviour)
    assert math.isfinite(value)
    assert value == pytest.approx((2.0 + math.exp(20.0) + 1.0) / 3, rel=1e-6)


# ------------------------------------------------------------------------------------------ ratio functions


RATIO_INPUTS = [0.0, 1.5, -3.0, 19.5, 20.0, 25.0, -20.0, -25.0, 80.0, -80.0, 800.0, -800.0, *EXTREME_LOG_RATIOS]


@pytest.mark.parametrize("dtype", [th.float32, th.float64])
def test_clamped_ratio_against_reference(dtype):
    log_ratios = th.tensor(RATIO_INPUTS, dtype=dtype)
    ratios = clamped_ratio(log_ratios)
    expected = th.tensor([math.exp(clamped(x)) for x in RATIO_INPUTS], dtype=dtype)
    assert th.isfinite(ratios).all() and (ratios > 0).all()
    th.testing.assert_close(ratios, expected, rtol=1e-6 if dtype == th.float32 else 1e-15, atol=0.0)
    th.testing.assert_close(clamp_log_ratio(log_ratios), th.tensor([clamped(x) for x in RATIO_INPUTS], dtype=dtype))


@pytest.mark.parametrize("threshold", [1.0, 0.8, 2.0, 1e3, MAX_RATIO])
def test_clipped_ratio_against_reference_for_tensors_and_arrays(threshold):
    expected = np.array([min_ratio(threshold, x) for x in RATIO_INPUTS])
    from_tensor = clipped_ratio(th.tensor(RATIO_INPUTS, dtype=th.float64), threshold).numpy()
    from_array = clipped_ratio(np.array(RATIO_INPUTS), threshold)
    for result in (from_tensor, from_array):
        assert np.all(np.isfinite(result)) and np.all(result <= threshold * (1 + 1e-15))
        np.testing.assert_allclose(result, expected, rtol=1e-15, atol=0.0)
    assert math.log(MAX_RATIO) == MAX_LOG_RATIO  # clipped_ratio(x, MAX_RATIO) clamps the log-ratio at MAX_LOG_RATIO


def test_clipped_ratio_float32_stays_finite():
    log_ratios = th.tensor(RATIO_INPUTS, dtype=th.float32)
    for threshold in (1.0, 2.0, 1e3, MAX_RATIO):
        ratios = clipped_ratio(log_ratios, threshold)
        assert ratios.dtype == th.float32 and th.isfinite(ratios).all()
        expected = th.tensor([min_ratio(threshold, x) for x in RATIO_INPUTS], dtype=th.float32)
        th.testing.assert_close(ratios, expected, rtol=1e-6, atol=0.0)


# ------------------------------------------------------------------------------------------ V-trace with episode ends


def slow_vtrace_with_episode_ends(
    log_mu, log_pi, rewards, values, bootstrap, final_values, terminations, truncations, gamma, rho_bar, c_bar, pg_rho_bar, lam
):
    """
    IMPALA eq. (1) as a sum over t that stops at the end of the episode, with the bootstrap rules of
    docs/guide/equations.md ("Episode ends and bootstrapping"): after a termination the next value is 0, after a
    truncation it is V(final observation), at the end of the segment it is V(x_T). Ratios from log-probabilities,
    one float at a time.
    """
    n_steps, n_envs = rewards.shape
    vs = np.zeros((n_steps, n_envs))
    pg_advantages = np.zeros((n_steps, n_envs))
    for b in range(n_envs):

        def next_value(t, targets, b=b):
            if terminations[t, b]:
                return 0.0
            if truncations[t, b]:
                return float(final_values[t, b])
            return float(targets[t + 1, b]) if t + 1 < n_steps else float(bootstrap[b])

        for s in range(n_steps):
            total, trace, t = float(values[s, b]), 1.0, s
            while True:
                log_ratio = float(log_pi[t, b]) - float(log_mu[t, b])
                delta = min_ratio(rho_bar, log_ratio) * (rewards[t, b] + gamma * next_value(t, values) - values[t, b])
                total += trace * delta
                if terminations[t, b] or truncations[t, b] or t + 1 == n_steps:
                    break
                trace *= gamma * lam * min_ratio(c_bar, log_ratio)
                t += 1
            vs[s, b] = total
        for s in range(n_steps):
            log_ratio = float(log_pi[s, b]) - float(log_mu[s, b])
            pg_advantages[s, b] = min_ratio(pg_rho_bar, log_ratio) * (rewards[s, b] + gamma * next_value(s, vs) - values[s, b])
    return vs, pg_advantages


def episode_end_inputs(rng, n_steps, n_envs, extreme):
    log_mu = rng.uniform(-3.0, 0.0, size=(n_steps, n_envs))
    log_pi = log_mu + rng.uniform(math.log(0.01), math.log(100.0), size=(n_steps, n_envs))
    if extreme:
        mask = rng.random((n_steps, n_envs)) < 0.4
        log_pi = np.where(mask, rng.choice(EXTREME_LOG_RATIOS, size=(n_steps, n_envs)), log_pi)
        log_mu = np.where(mask, 0.0, log_mu)
    truncations = rng.random((n_steps, n_envs)) < 0.15
    terminations = (rng.random((n_steps, n_envs)) < 0.15) & ~truncations
    terminations[-1, 0], truncations[-1, 1] = True, True  # an episode end on the segment's last step
    truncations[-1, 0], terminations[-1, 1] = False, False
    rewards, values = rng.normal(size=(n_steps, n_envs)), rng.normal(size=(n_steps, n_envs))
    final_values = np.where(truncations, rng.normal(size=(n_steps, n_envs)) * 3, 0.0)
    return log_mu, log_pi, rewards, values, rng.normal(size=n_envs), final_values, terminations, truncations


@pytest.mark.parametrize("extreme", [False, True])
@pytest.mark.parametrize("clips", [(1.0, 1.0, 1.0, 1.0), (2.0, 0.5, 1.5, 0.95), (10.0, 3.0, 0.7, 0.5)])
def test_vtrace_with_terminations_and_truncations_against_slow_reference(extreme, clips):
    rho_bar, c_bar, pg_rho_bar, lam = clips
    rng = np.random.default_rng(int(extreme) * 10 + int(rho_bar))
    gamma = 0.97
    inputs = episode_end_inputs(rng, 15, 4, extreme)
    log_mu, log_pi, rewards, values, bootstrap, final_values, terminations, truncations = inputs
    assert terminations[:-1].any() and truncations[:-1].any()
    expected = slow_vtrace_with_episode_ends(*inputs, gamma, rho_bar, c_bar, pg_rho_bar, lam)
    for dtype, rtol in ((th.float64, 1e-10), (th.float32, 1e-4)):

        def tensor(x, dtype=dtype):
            return th.as_tensor(x, dtype=dtype)

        folded, discounts = fold_truncation_bootstrap(
            tensor(rewards), th.as_tensor(terminations), th.as_tensor(truncations), tensor(final_values), gamma
        )
        vs, pg = vtrace(
            tensor(log_mu),
            tensor(log_pi),
            folded,
            tensor(values),
            tensor(bootstrap),
            discounts,
            clip_rho_threshold=rho_bar,
            clip_c_threshold=c_bar,
            clip_pg_rho_threshold=pg_rho_bar,
            lambda_=lam,
        )
        assert th.isfinite(vs).all() and th.isfinite(pg).all()
        np.testing.assert_allclose(vs.double().numpy(), expected[0], rtol=rtol, atol=rtol)
        np.testing.assert_allclose(pg.double().numpy(), expected[1], rtol=rtol, atol=rtol)


# ------------------------------------------------------------------------------------------ PTR-PPO, extreme ratios


def slow_log_rho_done(log_ratios, dones):
    """Eq. (19) in log space, one step at a time: sum of the clamped log-ratios from t to the next done (inclusive)."""
    n_steps, n_envs = log_ratios.shape
    out = np.zeros((n_steps, n_envs))
    for b in range(n_envs):
        for t in range(n_steps):
            total, k = clamped(float(log_ratios[t, b])), t
            while not dones[k, b] and k + 1 < n_steps:
                k += 1
                total += clamped(float(log_ratios[k, b]))
            out[t, b] = total
    return out


def slow_rho_marg_from_log(log_rho: float, eps: float) -> float:
    """Eq. (20): min(1 - eps, rho) + [(rho - (1 - eps)) / rho]_+, the bracket 0 where rho <= 1 - eps."""
    bound = 1.0 - eps
    correction = 0.0 if log_rho <= math.log(bound) else 1.0 - bound * math.exp(-log_rho)
    return min_ratio(bound, log_rho) + correction


@pytest.mark.parametrize("dtype", [th.float32, th.float64])
def test_done_cut_rho_and_rho_marg_with_extreme_log_ratios_against_slow_reference(dtype):
    rng = np.random.default_rng(7)
    log_ratios = rng.normal(0.0, 2.0, size=(10, 6))
    mask = rng.random(log_ratios.shape) < 0.3
    log_ratios = np.where(mask, rng.choice(EXTREME_LOG_RATIOS, size=log_ratios.shape), log_ratios)
    dones = rng.random(log_ratios.shape) < 0.2
    dones[-1, 0] = True
    log_rho = done_cut_log_rho(th.as_tensor(log_ratios, dtype=dtype), th.as_tensor(dones))
    expected = slow_log_rho_done(log_ratios, dones)
    assert th.isfinite(log_rho).all()
    np.testing.assert_allclose(log_rho.double().numpy(), expected, rtol=1e-5 if dtype == th.float32 else 1e-12, atol=1e-5)
    for eps in (0.05, 0.2, 0.6):
        weights = truncated_importance_weight(log_rho, eps)
        assert th.isfinite(weights).all() and (weights >= 0).all() and (weights <= 2 - eps).all()
        expected_weights = [slow_rho_marg_from_log(x, eps) for x in log_rho.double().flatten().tolist()]
        np.testing.assert_allclose(weights.double().flatten().numpy(), expected_weights, rtol=1e-5, atol=1e-6)
    direct = truncated_importance_weight(th.tensor(RATIO_INPUTS, dtype=dtype), 0.2)
    np.testing.assert_allclose(direct.double().numpy(), [slow_rho_marg_from_log(x, 0.2) for x in RATIO_INPUTS], rtol=1e-6)


@pytest.mark.parametrize("log_ratio", EXTREME_LOG_RATIOS)
def test_clipped_surrogate_with_extreme_log_ratios_against_slow_reference(log_ratio):
    rng = np.random.default_rng(3)
    log_ref = rng.uniform(-2.0, 0.0, size=6)
    log_pi = log_ref + rng.normal(0.0, 0.1, size=6)
    log_pi[[1, 4]] = log_ref[[1, 4]] + log_ratio  # one positive and one negative advantage with an extreme ratio
    advantages = np.array([1.0, 2.0, -0.5, 0.3, -1.5, 0.7])
    for dtype, rel in ((th.float64, 1e-12), (th.float32, 1e-5)):
        log_pi_t = th.tensor(log_pi, dtype=dtype, requires_grad=True)
        loss, ratio = clipped_surrogate(log_pi_t, th.tensor(log_ref, dtype=dtype), th.tensor(advantages, dtype=dtype), 0.2)
        loss.backward()
        assert th.isfinite(loss) and th.isfinite(ratio).all() and th.isfinite(log_pi_t.grad).all()
        expected = slow_surrogate(log_pi_t.detach().double().tolist(), list(log_ref), list(advantages), 0.2)
        assert math.isclose(loss.item(), expected, rel_tol=rel), (dtype, loss.item(), expected)


# ------------------------------------------------------------------------------------------ Retrace, extreme ratios


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_retrace_and_v_tbc_with_extreme_log_rhos_against_reference(dtype):
    """Terminated and truncated episodes one after another, log-rhos of +-1e4 and +-1e9 (float32 as in the memory)."""
    rng = np.random.default_rng(11)
    pieces = {"rewards": [], "values": [], "log_rhos": [], "is_last": [], "last_values": []}
    expected_q, expected_v = [], []
    for episode in range(8):
        length = int(rng.integers(1, 25))
        rewards, values, log_rhos = random_episode(rng, length)
        log_rhos = np.where(rng.random(length) < 0.4, rng.choice(EXTREME_LOG_RATIOS, size=length), log_rhos).astype(dtype)
        terminated = episode % 2 == 0
        final_value = float(rng.normal()) * 5
        q_ret = reference_q_ret(rewards, values, log_rhos, terminated, final_value, GAMMA)
        expected_q.append(q_ret)
        rho_bars = [1.0 if x >= 0 else math.exp(float(x)) for x in log_rhos]
        expected_v.append([v + rho * (q - v) for v, rho, q in zip(values, rho_bars, q_ret, strict=True)])
        is_last = np.zeros(length, dtype=bool)
        is_last[-1] = True
        last_values = np.where(is_last, 0.0 if terminated else final_value, 0.0)
        for key, value in zip(pieces, (rewards, values, log_rhos, is_last, last_values), strict=True):
            pieces[key].append(value)
    flat = {key: np.concatenate(value) for key, value in pieces.items()}
    assert flat["log_rhos"].dtype == dtype
    q_ret = retrace_q_ret(flat["rewards"], flat["values"], flat["log_rhos"], flat["is_last"], flat["last_values"], GAMMA)
    ours_v = v_tbc(q_ret, flat["values"], flat["log_rhos"])
    assert np.all(np.isfinite(q_ret)) and np.all(np.isfinite(ours_v))
    tolerance = 1e-10 if dtype == np.float64 else 1e-5  # float32: rho_bar is exponentiated in float32
    np.testing.assert_allclose(q_ret, np.concatenate(expected_q), rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(ours_v, np.concatenate(expected_v), rtol=tolerance, atol=tolerance)
    rho_bars = rho_bar_from_log(flat["log_rhos"])
    assert np.all(np.isfinite(rho_bars)) and np.all((rho_bars >= 0) & (rho_bars <= 1))
    np.testing.assert_allclose(rho_bars, [min_ratio(1.0, float(x)) for x in flat["log_rhos"]], rtol=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_linear_suffix_scan_against_backward_loop(seed):
    rng = np.random.default_rng(seed)
    n = 97
    offsets = rng.normal(size=n)
    factors = rng.uniform(-1.2, 1.2, size=n)
    factors[rng.random(n) < 0.1] = 0.0  # episode ends
    expected = [0.0] * (n + 1)
    for i in reversed(range(n)):
        expected[i] = offsets[i] + factors[i] * expected[i + 1]
    np.testing.assert_allclose(linear_suffix_scan(offsets, factors), expected[:n], rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------------------------------ AMBER's R', extreme ratios


@pytest.mark.parametrize("dtype", [th.float32, th.float64])
def test_batch_average_is_weight_against_per_sample_reference(dtype):
    rng = np.random.default_rng(5)
    behaviour = rng.uniform(-4.0, 0.0, size=20)
    current = behaviour + rng.normal(0.0, 1.0, size=20)
    current[:4] = np.array(EXTREME_LOG_RATIOS)
    behaviour[:4] = 0.0
    cast = [float(x) for x in th.tensor(current, dtype=dtype).double()], [float(x) for x in th.tensor(behaviour, dtype=dtype)]
    terms = [1.0 + abs(1.0 - math.exp(clamped(pi - mu))) for pi, mu in zip(*cast, strict=True)]
    value = batch_average_is_weight(th.tensor(current, dtype=dtype), th.tensor(behaviour, dtype=dtype))
    assert math.isfinite(value)
    assert value == pytest.approx(sum(terms) / len(terms), rel=1e-12)


def test_approx_kl_estimates_the_kl_from_behaviour_samples_and_stays_finite():
    """approx_kl against KL(mu || pi) of two Gaussians computed in closed form, on samples from mu; zero for equal
    policies; non-negative and finite for extreme log-ratios."""
    generator = th.Generator().manual_seed(0)
    mu, pi = th.distributions.Normal(0.0, 1.0), th.distributions.Normal(0.3, 1.2)
    actions = th.randn(200_000, generator=generator, dtype=th.float64)  # samples of mu
    log_ratio = pi.log_prob(actions) - mu.log_prob(actions)
    exact = th.distributions.kl_divergence(mu, pi).item()
    assert approx_kl(log_ratio).item() == pytest.approx(exact, rel=0.03)
    assert approx_kl(th.zeros(5)).item() == 0.0
    extreme = th.tensor([-1e4, -50.0, 0.0, 50.0, 1e4], dtype=th.float32)
    value = approx_kl(extreme)
    assert th.isfinite(value) and value.item() >= 0.0
