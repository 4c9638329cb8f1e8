"""
Retrace / V-tbc return estimates of V-RACER (Novati & Koumoutsakos, ICML 2019, eqs. 6-8).

With ``Q^w := V^w`` (V-RACER) and ``rho_bar_t = min(1, rho_t)``, the stored estimate of step ``t`` is

    Q_ret[t] = r_{t+1} + gamma * V_tbc[t+1]                                  (eq. 6)
    V_tbc[t] = V(s_t) + rho_bar_t * (Q_ret[t] - V(s_t))                      (eq. 7)

so that ``Q_ret[t] = r_{t+1} + gamma * (V(s_{t+1}) + rho_bar_{t+1} (Q_ret[t+1] - V(s_{t+1})))`` (eq. 8).
At the last step of an episode ``V_tbc[T]`` is 0 if the episode terminated and ``V(s_T)`` (the value of
the final observation) if it was truncated by a time limit (papers README).

Storage convention: step ``t`` holds ``s_t``, ``a_t``, the reward ``r_{t+1}`` that followed ``a_t``, the last
computed ``V(s_t)`` and ``log rho_t``. Several episodes may be laid out one after another in flat arrays,
with ``is_last`` marking the last step of each; the recursion never crosses an episode end.

The recursion is linear, ``Q[t] = a[t] + b[t] Q[t+1]`` with ``b[t] = 0`` at episode ends, so it is
evaluated with a parallel (Hillis-Steele) suffix scan in ``O(log L)`` vectorised passes over all
steps at once (``L``: longest episode), with no division and no exponentiation of large numbers.
"""

import numpy as np


def rho_bar_from_log(log_rhos: np.ndarray) -> np.ndarray:
    """``min(1, rho)`` from ``log rho`` (never overflows)."""
    return np.exp(np.minimum(log_rhos, 0.0))


def linear_suffix_scan(offsets: np.ndarray, factors: np.ndarray) -> np.ndarray:
    """
    Solve ``x[i] = offsets[i] + factors[i] * x[i + 1]`` (with ``x[n] = 0``) for all ``i`` at once.

    Compose ``(a1, b1) o (a2, b2) = (a1 + b1 a2, b1 b2)`` over windows that double at each pass; stops
    as soon as every window has reached a zero factor (an episode end), i.e. after
    ``ceil(log2(longest episode))`` passes.
    """
    offsets = np.array(offsets, dtype=np.float64)
    factors = np.array(factors, dtype=np.float64)
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
) -> np.ndarray:
    """
    ``Q_ret[t]`` (eq. 8) for every step of episodes stored one after another in flat arrays.

    :param rewards: ``r_{t+1}`` (already scaled), shape ``[n]``
    :param values: the stored ``V(s_t)``, shape ``[n]``
    :param log_rhos: the stored ``log rho_t = log pi(a_t|s_t) - log mu_t(a_t|s_t)``, shape ``[n]``
    :param is_last: true at the last stored step of each episode; ``is_last[-1]`` must be true
    :param last_values: ``V_tbc[T]`` where ``is_last``: 0 if the episode terminated, ``V(s_T)`` if it was
        truncated (ignored elsewhere), shape ``[n]``
    :param gamma: discount factor
    :return: ``Q_ret``, shape ``[n]`` (float64)
    """
    if len(rewards) == 0:
        return np.zeros(0)
    if not is_last[-1]:
        raise ValueError("is_last must be true at the last step: every episode in the arrays must be complete")
    rho_bar_next = np.append(rho_bar_from_log(log_rhos[1:]), 0.0)
    values_next = np.append(values[1:], 0.0)
    # Q[t] = r[t] + gamma (1 - rho_bar[t+1]) V[t+1] + gamma rho_bar[t+1] Q[t+1] inside an episode
    offsets = np.where(is_last, rewards + gamma * last_values, rewards + gamma * (1.0 - rho_bar_next) * values_next)
    factors = np.where(is_last, 0.0, gamma * rho_bar_next)
    return linear_suffix_scan(offsets, factors)


def v_tbc(q_ret: np.ndarray, values: np.ndarray, log_rhos: np.ndarray) -> np.ndarray:
    """``V_tbc[t] = V(s_t) + rho_bar_t (Q_ret[t] - V(s_t))`` (eq. 7)."""
    return values + rho_bar_from_log(log_rhos) * (q_ret - values)
