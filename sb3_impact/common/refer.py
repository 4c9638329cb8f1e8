"""
Remember-and-Forget Experience Replay (ReF-ER; Novati & Koumoutsakos, ICML 2019, section 3).

Algorithm-independent pieces: the near/far-policy test (rule 1), the penalty coefficient update
(rule 2, eq. 12), the annealing of c_max and of the learning rate (eq. 13), and the KL divergence
``D_KL(mu || pi)`` between diagonal Gaussians with its analytic gradient (eq. 11).
Importance ratios are handled as ``log rho`` throughout.
"""

import math
from typing import Any

import numpy as np
import torch as th

LOG_2PI = math.log(2.0 * math.pi)


def check_refer_rules(refer_rules: Any) -> tuple[int, ...]:
    """``refer_rules`` as a sorted tuple drawn from ``{1, 2}``; ValueError otherwise."""
    message = f"refer_rules must be a subset of (1, 2) such as (1, 2), (1,), (2,) or (), got {refer_rules!r}"
    if isinstance(refer_rules, (str, bytes)):
        raise ValueError(message)
    try:
        rules = tuple(refer_rules)
    except TypeError:
        raise ValueError(message) from None
    if any(isinstance(rule, bool) or rule not in (1, 2) for rule in rules) or len(set(rules)) != len(rules):
        raise ValueError(message)
    return tuple(sorted(int(rule) for rule in rules))


def check_refer_parameters(refer_c: float, refer_a: float, refer_d: float, refer_rules: Any) -> tuple[int, ...]:
    """Check C, A, D (eqs. 12-13) and the rules; return the rules as :func:`check_refer_rules` does."""
    if not (refer_c > 0 and math.isfinite(refer_c)):
        raise ValueError(f"refer_c must be a finite positive number, got {refer_c}")
    if not 0 < refer_d < 1:
        raise ValueError(f"refer_d must be in (0, 1), got {refer_d}")
    if not (refer_a >= 0 and math.isfinite(refer_a)):
        raise ValueError(f"refer_a must be a finite non-negative number, got {refer_a}")
    return check_refer_rules(refer_rules)


def annealed_c_max(refer_c: float, refer_a: float, timestep: int) -> float:
    """``c_max(t) = 1 + C / (1 + A t)`` (eq. 13)."""
    return 1.0 + refer_c / (1.0 + refer_a * timestep)


def annealed_lr_factor(refer_a: float, timestep: int) -> float:
    """``eta(t) / eta = 1 / (1 + A t)`` (eq. 13)."""
    return 1.0 / (1.0 + refer_a * timestep)


def log_c_max(c_max: float | th.Tensor) -> float | th.Tensor:
    """``log c_max``, rule 1's bound on ``|log rho|`` (a 0-d tensor ``c_max``, as under ``torch.compile``, stays one)."""
    return th.log(c_max) if isinstance(c_max, th.Tensor) else math.log(c_max)


def is_near_policy(log_rhos: th.Tensor | np.ndarray, c_max: float | th.Tensor) -> th.Tensor | np.ndarray:
    """
    Rule 1: a sample is near-policy iff ``1 / c_max < rho < c_max``, i.e. ``|log rho| < log c_max``. The one place
    the rule is written: the memories, the losses and :func:`far_fraction` call it.
    """
    return abs(log_rhos) < log_c_max(c_max)


def far_fraction(log_rhos: np.ndarray, c_max: float, n_samples: int | None = None) -> float:
    """
    ``n_far / N``: the fraction of far-policy samples (not :func:`is_near_policy`) among ``log_rhos`` (rule 2, eq. 12).

    ``n_samples`` overrides ``N`` when ``log_rhos`` holds padding (padding must be 0: near-policy).
    """
    n = len(log_rhos) if n_samples is None else n_samples
    if n == 0:
        return 0.0
    return float(np.count_nonzero(~is_near_policy(np.asarray(log_rhos), c_max))) / n


def update_beta(beta: float, far_fraction: float, refer_d: float, learning_rate: float) -> float:
    """Rule 2 (eq. 12): ``beta <- (1 - eta) beta`` if ``n_far / N > D``, else ``(1 - eta) beta + eta``."""
    beta = (1.0 - learning_rate) * beta
    if far_fraction <= refer_d:
        beta += learning_rate
    return min(max(beta, 0.0), 1.0)


def diag_gaussian_log_prob(actions: th.Tensor, mean: th.Tensor, log_std: th.Tensor) -> th.Tensor:
    """``log N(actions; mean, diag(exp(log_std)^2))`` summed over the last dimension."""
    z = (actions - mean) * th.exp(-log_std)
    return (-0.5 * z.pow(2) - log_std - 0.5 * LOG_2PI).sum(dim=-1)


def diag_gaussian_kl(mu_mean: th.Tensor, mu_log_std: th.Tensor, pi_mean: th.Tensor, pi_log_std: th.Tensor) -> th.Tensor:
    """
    ``D_KL(mu || pi)`` of diagonal Gaussians, summed over the last dimension:

        sum_d  log s_pi - log s_mu + (s_mu^2 + (m_mu - m_pi)^2) / (2 s_pi^2) - 1/2
    """
    variance_ratio = th.exp(2.0 * (mu_log_std - pi_log_std))
    mean_term = (mu_mean - pi_mean).pow(2) * th.exp(-2.0 * pi_log_std)
    return (pi_log_std - mu_log_std + 0.5 * (variance_ratio + mean_term) - 0.5).sum(dim=-1)


def diag_gaussian_kl_grad(
    mu_mean: th.Tensor, mu_log_std: th.Tensor, pi_mean: th.Tensor, pi_log_std: th.Tensor
) -> tuple[th.Tensor, th.Tensor]:
    """
    Analytic gradient of :func:`diag_gaussian_kl` with respect to ``pi``'s parameters (eq. 11):

        d KL / d m_pi       = (m_pi - m_mu) / s_pi^2
        d KL / d log s_pi   = 1 - (s_mu^2 + (m_mu - m_pi)^2) / s_pi^2
    """
    inverse_variance = th.exp(-2.0 * pi_log_std)
    grad_mean = (pi_mean - mu_mean) * inverse_variance
    grad_log_std = 1.0 - (th.exp(2.0 * mu_log_std) + (mu_mean - pi_mean).pow(2)) * inverse_variance
    return grad_mean, grad_log_std
