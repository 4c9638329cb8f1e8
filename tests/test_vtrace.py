"""V-trace against a slow double sum written from IMPALA eq. (1) and the papers README."""

import math

import numpy as np
import pytest
import torch as th

from sb3_impact.common.estimators import fold_truncation_bootstrap, vtrace


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
