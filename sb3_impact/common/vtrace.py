"""V-trace off-policy targets (Espeholt et al., 2018, section 4.1) and the bootstrap rules around them.

All tensors are time-major: ``[T, B]`` for per-step quantities, ``[B]`` for the bootstrap values.
Importance ratios are formed as ``exp(log pi - log mu)`` with the clipping done in log space, so
ratios spanning many orders of magnitude never overflow.
"""

import math

import torch as th


def _clipped_ratio(log_rhos: th.Tensor, threshold: float) -> th.Tensor:
    """``min(threshold, exp(log_rhos))`` computed without ever exponentiating a large number."""
    return th.exp(th.clamp(log_rhos, max=math.log(threshold)))


def _check_threshold(name: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite positive number, got {value}")


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
    V-trace value targets and policy-gradient advantages for a batch of segments.

    With ``rho_t = min(rho_bar, pi/mu)``, ``c_t = lambda * min(c_bar, pi/mu)`` and
    ``delta_t = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t))``:

    - value targets (IMPALA eq. 1, in backward form):
      ``v_s = V(x_s) + delta_s + gamma_s c_s (v_{s+1} - V(x_{s+1}))`` with ``v_T = bootstrap``;
    - policy-gradient advantages (IMPALA section 4.2):
      ``min(rho_bar_pg, pi/mu) (r_s + gamma_s v_{s+1} - V(x_s))``.

    ``lambda_ < 1`` gives the V-trace GAE-lambda estimator used by IMPACT (section 3).

    :param behaviour_log_probs: ``log mu(a_t|x_t)``, shape ``[T, B]``
    :param target_log_probs: ``log pi(a_t|x_t)``, shape ``[T, B]``
    :param rewards: ``r_t``, shape ``[T, B]``
    :param values: ``V(x_t)``, shape ``[T, B]``
    :param bootstrap_values: ``V(x_T)``, the value of the observation after the last step, shape ``[B]``
    :param discounts: ``gamma_t``: gamma, or 0 where the episode terminated at step t, shape ``[T, B]``
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
    rhos = _clipped_ratio(log_rhos, clip_rho_threshold)
    cs = lambda_ * _clipped_ratio(log_rhos, clip_c_threshold)

    values_tp1 = th.cat([values[1:], bootstrap_values.unsqueeze(0)], dim=0)
    deltas = rhos * (rewards + discounts * values_tp1 - values)

    vs_minus_values = th.empty_like(values)
    accumulator = th.zeros_like(bootstrap_values)
    for t in range(values.shape[0] - 1, -1, -1):
        accumulator = deltas[t] + discounts[t] * cs[t] * accumulator
        vs_minus_values[t] = accumulator
    vs = values + vs_minus_values

    vs_tp1 = th.cat([vs[1:], bootstrap_values.unsqueeze(0)], dim=0)
    pg_rhos = _clipped_ratio(log_rhos, clip_pg_rho_threshold)
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
    Turn per-step episode ends into the ``(rewards, discounts)`` that :func:`vtrace` expects.

    - ``terminated``: the MDP ended, the discount is 0.
    - ``truncated`` (time limit): the MDP did not end, so ``gamma * V(final observation)`` is added to
      the reward and the discount is set to 0. This bootstraps from the true last state and cuts the
      trace, since the next stored observation belongs to a new episode. A segment processed this way
      gives exactly the targets of its pieces processed separately (papers README, "Bootstrapping").

    :param rewards: ``[T, B]``
    :param terminations: ``[T, B]`` booleans
    :param truncations: ``[T, B]`` booleans (false wherever ``terminations`` is true)
    :param final_values: ``[T, B]``, ``V(final observation)`` where truncated, ignored elsewhere
    :param gamma: discount factor
    :return: ``(rewards, discounts)``, both ``[T, B]``
    """
    truncations = truncations & ~terminations
    dones = terminations | truncations
    discounts = gamma * (~dones).to(rewards.dtype)
    bootstrapped = th.where(truncations, rewards + gamma * final_values, rewards)
    return bootstrapped, discounts
