"""
Return and importance-weight estimators of every algorithm, as plain functions (in the style of TorchRL's
``objectives/value/functional.py``).

Conventions, shared by every function here:

- time-major tensors: ``[T, B]`` for per-step quantities (``T`` steps of ``B`` environments), ``[B]`` for the
  values of the observations after the last step. Retrace (V-RACER) is the one exception: its episodes
  are laid one after another in flat numpy arrays ``[n]`` (the replay memory's layout), with ``is_last``
  marking the last step of each;
- the same names for the same things: ``behaviour_log_probs`` (``log mu``, the policy that collected the
  data), ``target_log_probs`` (``log pi``, the policy being evaluated or trained), ``log_rhos`` (per-step
  ``log pi - log mu``), ``rewards``, ``values`` (``V(x_t)``), ``bootstrap_values`` (``V(x_T)``),
  ``discounts`` (``gamma``, or 0 where an episode ended at ``t``), ``lambda_``;
- importance ratios are formed from log-probabilities, as ``exp(log pi - log mu)``, never as a quotient of
  probabilities, and only through :func:`clamped_ratio` (the log-ratio clamped to
  ``[-MAX_LOG_RATIO, MAX_LOG_RATIO]``) or :func:`clipped_ratio` (``min(threshold, ratio)`` with the minimum
  taken in log space). Neither ever exponentiates a large number, so ratios spanning many orders of
  magnitude stay finite.

Equations are cited by their numbers in the papers: IMPALA (Espeholt et al., 2018), AMBER (Han & Sung, 2017),
PTR-PPO (Liang et al., 2021) and ReF-ER / V-RACER (Novati & Koumoutsakos, 2019). docs/guide/equations.md writes
each one out, with the project's decision wherever a paper is ambiguous or has a typo.
"""

import math
from typing import TypeVar

import numpy as np
import torch as th

# exp() of a log-ratio beyond this is clamped: the PPO clip already zeroes the gradient of such samples
# on the clipped side, and the clamp keeps the unclipped side and the logged ratios finite.
MAX_LOG_RATIO = 20.0
# exp(MAX_LOG_RATIO): the largest ratio :func:`clamped_ratio` returns (math.log(MAX_RATIO) == MAX_LOG_RATIO exactly).
MAX_RATIO = math.exp(MAX_LOG_RATIO)

ArrayOrTensor = TypeVar("ArrayOrTensor", th.Tensor, np.ndarray)


# ------------------------------------------------------------------------------------------ ratios


def clamp_log_ratio(log_ratio: th.Tensor) -> th.Tensor:
    """``log_ratio`` clamped to ``[-MAX_LOG_RATIO, MAX_LOG_RATIO]``: the log of :func:`clamped_ratio`."""
    return th.clamp(log_ratio, -MAX_LOG_RATIO, MAX_LOG_RATIO)


def clamped_ratio(log_ratio: th.Tensor) -> th.Tensor:
    """``exp(log_ratio)`` with the log-ratio clamped to ``[-MAX_LOG_RATIO, MAX_LOG_RATIO]`` (finite for any input)."""
    return th.exp(clamp_log_ratio(log_ratio))


def clipped_ratio(log_ratio: ArrayOrTensor, threshold: float) -> ArrayOrTensor:
    """
    ``min(threshold, exp(log_ratio))``, computed as ``exp(min(log threshold, log_ratio))`` so that a large
    log-ratio is never exponentiated. Accepts a tensor or a numpy array (Retrace's memory is numpy).

    :param log_ratio: ``log pi - log mu``, any shape
    :param threshold: the clip, a positive number (``rho_bar``, ``c_bar``, ``c_max``, ...)
    """
    log_threshold = math.log(threshold)
    if isinstance(log_ratio, th.Tensor):
        return th.exp(th.clamp(log_ratio, max=log_threshold))
    return np.exp(np.minimum(log_ratio, log_threshold))


def approx_kl(log_ratio: th.Tensor) -> th.Tensor:
    """
    The mean of ``(r - 1) - log r`` with ``r = pi / mu`` (Schulman's low-variance estimator of ``KL(mu || pi)`` on
    samples from ``mu``, the one SB3's PPO logs as ``approx_kl``), in log space and clamped like
    :func:`clamped_ratio`: non-negative and finite for any log-ratio.
    """
    clamped = clamp_log_ratio(log_ratio)
    return (th.expm1(clamped) - clamped).mean()


def _check_threshold(name: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite positive number, got {value}")


# ------------------------------------------------------------------------------------------ V-trace (IMPALA, IMPACT)


@th.no_grad()
def vtrace(
    behaviour_log_probs: th.Tensor,
    target_log_probs: th.Tensor,
    rewards: th.Tensor,
    values: th.Tensor,
    bootstrap_values: th.Tensor,
    discounts: th.Tensor,
    clip_rho_threshold: float = 1.0,
    clip_c_threshold: float = 1.0,
    clip_pg_rho_threshold: float = 1.0,
    lambda_: float = 1.0,
) -> tuple[th.Tensor, th.Tensor]:
    """
    V-trace value targets and policy-gradient advantages for a batch of segments (IMPALA eq. 1 and
    section 4.2; docs/guide/equations.md, "V-trace (IMPALA)").

    With ``rho_t = min(rho_bar, pi/mu)``, ``c_t = lambda * min(c_bar, pi/mu)`` and
    ``delta_t = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t))``:

    - value targets (IMPALA eq. 1, in backward form):
      ``v_s = V(x_s) + delta_s + gamma_s c_s (v_{s+1} - V(x_{s+1}))`` with ``v_T = bootstrap``;
    - policy-gradient advantages (IMPALA section 4.2):
      ``min(rho_bar_pg, pi/mu) (r_s + gamma_s v_{s+1} - V(x_s))``.

    ``lambda_ < 1`` gives the V-trace GAE-lambda estimator used by IMPACT (section 3). Time-limit
    truncations are folded into ``rewards`` and ``discounts`` beforehand by :func:`fold_truncation_bootstrap`.

    :param behaviour_log_probs: ``log mu(a_t|x_t)``, shape ``[T, B]``
    :param target_log_probs: ``log pi(a_t|x_t)``, shape ``[T, B]``
    :param rewards: ``r_t``, shape ``[T, B]``
    :param values: ``V(x_t)``, shape ``[T, B]``
    :param bootstrap_values: ``V(x_T)``, the value of the observation after the last step, shape ``[B]``
    :param discounts: ``gamma_t``: gamma, or 0 where the episode ended at step t, shape ``[T, B]``
    :param clip_rho_threshold: rho_bar, clips the ratio in the TD errors
    :param clip_c_threshold: c_bar, clips the trace coefficients
    :param clip_pg_rho_threshold: clips the ratio weighting the policy-gradient advantage
    :param lambda_: trace-cutting coefficient (1 is plain V-trace)
    :return: ``(vs, pg_advantages)``, both ``[T, B]`` and without gradient
    """
    _check_threshold("clip_rho_threshold", clip_rho_threshold)
    _check_threshold("clip_c_threshold", clip_c_threshold)
    _check_threshold("clip_pg_rho_threshold", clip_pg_rho_threshold)
    if not 0.0 <= lambda_ <= 1.0:
        raise ValueError(f"lambda_ must be in [0, 1], got {lambda_}")
    if values.dim() != 2:
        raise ValueError(f"values must be time-major [T, B], got shape {tuple(values.shape)}")
    for name, tensor in (
        ("behaviour_log_probs", behaviour_log_probs),
        ("target_log_probs", target_log_probs),
        ("rewards", rewards),
        ("discounts", discounts),
    ):
        if tensor.shape != values.shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, expected {tuple(values.shape)} like values")
    if bootstrap_values.shape != values.shape[1:]:
        raise ValueError(f"bootstrap_values has shape {tuple(bootstrap_values.shape)}, expected {tuple(values.shape[1:])}")

    log_rhos = target_log_probs - behaviour_log_probs
    rhos = clipped_ratio(log_rhos, clip_rho_threshold)
    cs = lambda_ * clipped_ratio(log_rhos, clip_c_threshold)

    values_tp1 = th.cat([values[1:], bootstrap_values.unsqueeze(0)], dim=0)
    deltas = rhos * (rewards + discounts * values_tp1 - values)

    vs_minus_values = th.empty_like(values)
    accumulator = th.zeros_like(bootstrap_values)
    for t in range(values.shape[0] - 1, -1, -1):
        accumulator = deltas[t] + discounts[t] * cs[t] * accumulator
        vs_minus_values[t] = accumulator
    vs = values + vs_minus_values

    vs_tp1 = th.cat([vs[1:], bootstrap_values.unsqueeze(0)], dim=0)
    pg_rhos = clipped_ratio(log_rhos, clip_pg_rho_threshold)
    pg_advantages = pg_rhos * (rewards + discounts * vs_tp1 - values)
    return vs, pg_advantages


def fold_truncation_bootstrap(
    rewards: th.Tensor,
    terminations: th.Tensor,
    truncations: th.Tensor,
    final_values: th.Tensor,
    gamma: float,
) -> tuple[th.Tensor, th.Tensor]:
    """
    Turn per-step episode ends into the ``(rewards, discounts)`` that :func:`vtrace` and
    :func:`gae_with_episode_ends` expect (docs/guide/equations.md, "Episode ends and bootstrapping").

    - ``terminated``: the MDP ended, the discount is 0.
    - ``truncated`` (time limit): the MDP did not end, so ``gamma * V(final observation)`` is added to
      the reward and the discount is set to 0. This bootstraps from the true last state and cuts the
      trace, since the next stored observation belongs to a new episode. A segment processed this way
      gives exactly the targets of its pieces processed separately.

    :param rewards: ``[T, B]``
    :param terminations: ``[T, B]`` booleans
    :param truncations: ``[T, B]`` booleans (a termination wins where both are true)
    :param final_values: ``[T, B]``, ``V(final observation)`` where truncated, ignored elsewhere
    :param gamma: discount factor
    :return: ``(rewards, discounts)``, both ``[T, B]``
    """
    truncations = truncations & ~terminations
    dones = terminations | truncations
    discounts = gamma * (~dones).to(rewards.dtype)
    bootstrapped = th.where(truncations, rewards + gamma * final_values, rewards)
    return bootstrapped, discounts


# ------------------------------------------------------------------------------------------ PTR-PPO


def gae_with_episode_ends(
    rewards: th.Tensor, values: th.Tensor, bootstrap_values: th.Tensor, discounts: th.Tensor, lambda_: float
) -> th.Tensor:
    """
    ``A^done_t`` of PTR-PPO eq. (18) with the discount and lambda of eq. (10) (GAE): ``A_t = delta_t + discount_t
    lambda A_{t+1}``, ``delta_t = r_t + discount_t V(s_{t+1}) - V(s_t)`` (eq. 11), ``V(s_T) = bootstrap_values``.

    ``discounts`` is ``gamma`` or 0 where an episode ended at ``t`` (see :func:`fold_truncation_bootstrap`,
    which also folds the time-limit bootstrap ``gamma V(final observation)`` into ``rewards``), so the trace
    is cut at every episode end. This is V-trace with ``pi = mu`` (every ratio 1, ``c_t = lambda``):
    ``v_t - V(s_t)`` of :func:`vtrace`.

    :param rewards: ``[T, B]``, with the time-limit bootstrap folded in
    :param values: ``V(s_t)``, ``[T, B]``
    :param bootstrap_values: ``V(s_T)``, ``[B]``
    :param discounts: ``[T, B]``
    :param lambda_: GAE's lambda
    :return: the advantages ``[T, B]``, without gradient
    """
    on_policy = th.zeros_like(values)
    vs, _ = vtrace(on_policy, on_policy, rewards, values, bootstrap_values, discounts, lambda_=lambda_)
    return vs - values


def done_cut_log_rho(log_rhos: th.Tensor, dones: th.Tensor) -> th.Tensor:
    """
    ``log rho^done_t`` of PTR-PPO eq. (19), time-major ``[T, B]``: the product of the per-step ratios ``pi / b``
    from step ``t`` to the end of the segment, cut after the first step at or after ``t`` that ends an
    episode: ``rho^done_t = (pi_t / b_t) * [d_t + (1 - d_t) rho^done_{t+1}]`` with ``rho^done_T = 1``.

    :param log_rhos: ``log pi(a_t|s_t) - log b(a_t|s_t)``, ``[T, B]``, clamped to ``[-MAX_LOG_RATIO, MAX_LOG_RATIO]``
        here (:func:`clamp_log_ratio`) so that the sum stays finite
    :param dones: episode ends (terminated or truncated) at step ``t``, ``[T, B]`` booleans
    :return: ``log rho^done``, ``[T, B]``
    """
    log_rhos = clamp_log_ratio(log_rhos)
    log_rho = th.empty_like(log_rhos)
    accumulator = th.zeros_like(log_rhos[0])
    for t in range(log_rhos.shape[0] - 1, -1, -1):
        accumulator = log_rhos[t] + th.where(dones[t], th.zeros_like(accumulator), accumulator)
        log_rho[t] = accumulator
    return log_rho


def truncated_importance_weight(log_rhos: th.Tensor, eps_marg: float) -> th.Tensor:
    """
    ``rho^marg`` of PTR-PPO eq. (20), as written: ``min(1 - eps, rho) + [(rho - (1 - eps)) / rho]_+``.

    Equal to ``rho`` up to ``1 - eps``, then ``2 - eps - (1 - eps) / rho``: continuous, increasing and
    below ``2 - eps``. Computed from ``log rho`` without exponentiating a large number.

    :param log_rhos: ``log rho`` (of :func:`done_cut_log_rho`, or per step), any shape
    :param eps_marg: ``epsilon_marg`` in ``(0, 1)``
    """
    log_bound = math.log(1.0 - eps_marg)
    capped = clipped_ratio(log_rhos, 1.0 - eps_marg)
    # (rho - c) / rho = 1 - c / rho, positive only where log rho > log c: 1 / max(rho, c), clamped below to
    # keep exp finite (an inverse ratio, bounded by 1 / c).
    correction = th.clamp(1.0 - (1.0 - eps_marg) * th.exp(-th.clamp(log_rhos, min=log_bound)), min=0.0)
    return capped + correction


def clipped_surrogate(
    target_log_probs: th.Tensor, reference_log_probs: th.Tensor, advantages: th.Tensor, clip_range: float
) -> tuple[th.Tensor, th.Tensor]:
    """
    PPO's clipped surrogate as a loss, PTR-PPO eq. (22) (PPO-AMBER eq. 3 / 7, IMPACT section 3.1 with its ratio's
    denominator): ``-mean(min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t))`` with
    ``r_t = exp(log pi_theta - log pi_ref)`` (PTR-PPO eq. 4) formed by :func:`clamped_ratio`, so that ``r_t``
    stays finite for any input. Returns the loss and the ratios ``r_t``.

    :param target_log_probs: ``log pi_theta(a_t|s_t)`` of the network being trained (with gradient), ``[N]``
    :param reference_log_probs: the ratio's denominator (``log b``, ``log pi_old``, ...; no gradient), ``[N]``
    :param advantages: the advantages, normalised or not by the caller, ``[N]``
    :param clip_range: PPO's epsilon
    """
    ratio = clamped_ratio(target_log_probs - reference_log_probs)
    loss = -th.min(advantages * ratio, advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)).mean()
    return loss, ratio


# ------------------------------------------------------------------------------------------ PPO-AMBER


def batch_average_is_weight(target_log_probs: th.Tensor, behaviour_log_probs: th.Tensor) -> float:
    """
    R' of one stored batch, AMBER eq. (10): ``mean_n (1 + |1 - pi(a_n|s_n) / mu(a_n|s_n)|)``.

    The ratio is formed in float64 by :func:`clamped_ratio` (log-ratio clamped to
    ``[-MAX_LOG_RATIO, MAX_LOG_RATIO]``), so that R' stays finite for any pair of policies.

    :param target_log_probs: ``log pi(a_n|s_n)`` of the current policy, ``[N]`` (any shape)
    :param behaviour_log_probs: the stored ``log mu_l(a_n|s_n)``, same shape
    """
    ratio = clamped_ratio(target_log_probs.double() - behaviour_log_probs.double())
    return float((1.0 + th.abs(1.0 - ratio)).mean())


# ------------------------------------------------------------------------------------------ Retrace (V-RACER)
#
# Retrace / V-tbc of V-RACER (ReF-ER eqs. 6-8). With ``Q^w := V^w`` (V-RACER) and
# ``rho_bar_t = min(1, rho_t)``, the stored estimate of step ``t`` is
#
#     Q_ret[t] = r_{t+1} + gamma * V_tbc[t+1]                                  (eq. 6)
#     V_tbc[t] = V(s_t) + rho_bar_t * (Q_ret[t] - V(s_t))                      (eq. 7)
#
# so that ``Q_ret[t] = r_{t+1} + gamma * (V(s_{t+1}) + rho_bar_{t+1} (Q_ret[t+1] - V(s_{t+1})))`` (eq. 8).
# At the last step of an episode ``V_tbc[T]`` is 0 if the episode terminated and ``V(s_T)`` (the value of
# the final observation) if it was truncated by a time limit (docs/guide/equations.md, "V-RACER and ReF-ER").
#
# Storage convention: step ``t`` holds ``s_t``, ``a_t``, the reward ``r_{t+1}`` that followed ``a_t``, the last
# computed ``V(s_t)`` and ``log rho_t``. Several episodes may be laid out one after another in flat arrays,
# with ``is_last`` marking the last step of each; the recursion never crosses an episode end.
#
# The recursion is linear, ``Q[t] = a[t] + b[t] Q[t+1]`` with ``b[t] = 0`` at episode ends, so it is
# evaluated with a parallel (Hillis-Steele) suffix scan in ``O(log L)`` vectorised passes over all
# steps at once (``L``: longest episode), with no division and no exponentiation of large numbers.


def rho_bar_from_log(log_rhos: np.ndarray) -> np.ndarray:
    """``rho_bar = min(1, rho)`` of ReF-ER eq. (7) from ``log rho`` (:func:`clipped_ratio` at 1; never overflows)."""
    return clipped_ratio(log_rhos, 1.0)


def linear_suffix_scan(offsets: np.ndarray, factors: np.ndarray, dtype: type = np.float64) -> np.ndarray:
    """
    Solve ``x[i] = offsets[i] + factors[i] * x[i + 1]`` (with ``x[n] = 0``) for all ``i`` at once: the linear
    recursion of ReF-ER eq. (8) (see :func:`retrace_q_ret`), flat arrays ``[n]``.

    Compose ``(a1, b1) o (a2, b2) = (a1 + b1 a2, b1 b2)`` over windows that double at each pass; stops
    as soon as every window has reached a zero factor (an episode end), i.e. after
    ``ceil(log2(longest episode))`` passes.

    :param dtype: the precision of the passes (float32 halves their memory traffic: the replay memory of
        V-RACER, whose estimates are stored in float32, uses it)
    :return: ``x``, ``[n]`` (``dtype``)
    """
    offsets = np.array(offsets, dtype=dtype)
    factors = np.array(factors, dtype=dtype)
    n = len(offsets)
    shift = 1
    while shift < n and np.any(factors[: n - shift] != 0.0):
        offsets[: n - shift] += factors[: n - shift] * offsets[shift:]
        factors[: n - shift] *= factors[shift:]
        factors[n - shift :] = 0.0  # windows running past the end met the (zero) end of the last episode
        shift *= 2
    return offsets


def retrace_q_ret(
    rewards: np.ndarray,
    values: np.ndarray,
    log_rhos: np.ndarray,
    is_last: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    dtype: type = np.float64,
) -> np.ndarray:
    """
    ``Q_ret[t]`` of ReF-ER eq. (8) (eqs. 6-7 unrolled) for every step of episodes stored one after another in
    flat arrays (not time-major: the replay memory's layout, see the comment above).

    :param rewards: ``r_{t+1}`` (already scaled), shape ``[n]``
    :param values: the stored ``V(s_t)``, shape ``[n]``
    :param log_rhos: the stored ``log rho_t = log pi(a_t|s_t) - log mu_t(a_t|s_t)``, shape ``[n]``
    :param is_last: true at the last stored step of each episode; ``is_last[-1]`` must be true
    :param last_values: ``V_tbc[T]`` where ``is_last``: 0 if the episode terminated, ``V(s_T)`` if it was
        truncated (ignored elsewhere), shape ``[n]``
    :param gamma: discount factor
    :param dtype: the precision of the computation (see :func:`linear_suffix_scan`)
    :return: ``Q_ret``, shape ``[n]`` (``dtype``)
    """
    if len(rewards) == 0:
        return np.zeros(0)
    if not is_last[-1]:
        raise ValueError("is_last must be true at the last step: every episode in the arrays must be complete")
    rewards, values, log_rhos, last_values = (
        np.asarray(array, dtype=dtype) for array in (rewards, values, log_rhos, last_values)
    )
    rho_bar_next = np.append(rho_bar_from_log(log_rhos[1:]), dtype(0.0))
    values_next = np.append(values[1:], dtype(0.0))
    # Q[t] = r[t] + gamma (1 - rho_bar[t+1]) V[t+1] + gamma rho_bar[t+1] Q[t+1] inside an episode
    offsets = np.where(is_last, rewards + gamma * last_values, rewards + gamma * (1.0 - rho_bar_next) * values_next)
    factors = np.where(is_last, dtype(0.0), dtype(gamma) * rho_bar_next)
    return linear_suffix_scan(offsets, factors, dtype)


def v_tbc(q_ret: np.ndarray, values: np.ndarray, log_rhos: np.ndarray) -> np.ndarray:
    """``V_tbc[t] = V(s_t) + rho_bar_t (Q_ret[t] - V(s_t))``, ReF-ER eq. (7); flat arrays ``[n]``."""
    return values + rho_bar_from_log(log_rhos) * (q_ret - values)
