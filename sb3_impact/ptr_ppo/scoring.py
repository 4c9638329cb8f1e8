"""
PTR-PPO's scoring of trajectory segments (Liang et al., 2021, eqs. 12-13, 16, 18-21) as pure functions: the
network's values and log-probabilities of a batch in, its GAE, replay targets and priorities out.
"""

from dataclasses import dataclass

import numpy as np
import torch as th

from sb3_impact.common.estimators import (
    done_cut_log_rho,
    fold_truncation_bootstrap,
    gae_with_episode_ends,
    truncated_importance_weight,
)
from sb3_impact.common.training_batch import TrainingBatch
from sb3_impact.ptr_ppo.loss import ReplayTargets

# Trajectory priorities over |GAE| of a segment (eqs. 12-13); "reward" (eq. 14) is the memory's, from its returns.
ADVANTAGE_PRIORITIES = ("max", "mean")


@dataclass
class SegmentScores:
    """A batch of segments scored by one network, time-major ``[T, B]`` (one column per segment)."""

    advantages: th.Tensor  # A^done: GAE cut at episode ends (eq. 18, with the gamma and lambda of eq. 10)
    td_targets: th.Tensor  # r + gamma V(s') (1 - d), bootstrapped at time-limit ends (eq. 16, corrected)
    log_ratios: th.Tensor  # log pi - log b of each step (the factors of eq. 19)
    dones: th.Tensor  # d: the episode ended at the step (terminated or truncated)


def score_segments(
    batch: TrainingBatch,
    values: th.Tensor,
    log_probs: th.Tensor,
    bootstrap_values: th.Tensor,
    final_values: th.Tensor,
    *,
    gamma: float,
    gae_lambda: float,
) -> SegmentScores:
    """
    The scores of ``batch`` under one network: its values ``V(s_t)`` and log-probabilities ``log pi(a_t|s_t)`` of the
    stored actions (flat ``[T * B]`` in time-major order, no gradient), ``V`` of the observations after the segments
    (``[B]``) and of the final observations of time-limit ends (``[T, B]``, zero elsewhere;
    :meth:`TrainingBatch.bootstrap_values`).
    """
    values = values.reshape(batch.n_steps, batch.n_envs)
    log_probs = log_probs.reshape(batch.n_steps, batch.n_envs)
    # docs/guide/equations.md, episode ends: gamma V(final observation) folded into a truncated step's reward
    rewards, discounts = fold_truncation_bootstrap(batch.rewards, batch.terminations, batch.truncations, final_values, gamma)
    next_values = th.cat([values[1:], bootstrap_values.unsqueeze(0)], dim=0)
    return SegmentScores(
        # docs/guide/equations.md, PTR-PPO (PTR-PPO eq. 18): A_t = delta_t + gamma lambda (1 - d_t) A_{t+1}
        advantages=gae_with_episode_ends(rewards, values, bootstrap_values, discounts, gae_lambda),
        # docs/guide/equations.md, PTR-PPO (PTR-PPO eq. 16, corrected): the one-step TD target
        td_targets=rewards + discounts * next_values,
        log_ratios=log_probs - batch.behaviour_log_probs,
        dones=batch.terminations | batch.truncations,
    )


def replay_targets(
    scores: SegmentScores, reference_log_probs: th.Tensor, behaviour_params: th.Tensor, eps_marg: float
) -> ReplayTargets:
    """
    The targets a replay round holds constant for its samples, flat ``[T * B]`` in time-major order:
    ``reference_log_probs`` is the log-denominator of the surrogate's ratio (``replay_ratio``), ``behaviour_params``
    the stored behaviour distribution's parameters.
    """
    # docs/guide/equations.md, PTR-PPO (PTR-PPO eqs. 19-20): done-cut importance product, truncated
    rho_marg = truncated_importance_weight(done_cut_log_rho(scores.log_ratios, scores.dones), eps_marg)
    return ReplayTargets(
        # docs/guide/equations.md, PTR-PPO (PTR-PPO eq. 21): A^marg = rho^marg A^done
        advantages=(rho_marg * scores.advantages).flatten(),
        td_targets=scores.td_targets.flatten(),
        # docs/guide/equations.md, PTR-PPO (PTR-PPO eq. 16): the weight pi / b, truncated as eq. 20 truncates rho
        value_weights=truncated_importance_weight(scores.log_ratios, eps_marg).flatten(),
        reference_log_probs=reference_log_probs,
        rho_marg=rho_marg.flatten(),
        behaviour_params=behaviour_params,
    )


def segment_priorities(advantages: th.Tensor, priority: str) -> np.ndarray:
    """Eq. (12) (``"max"``) or eq. (13) (``"mean"``) over ``|A_t|`` of each segment, ``advantages`` ``[T, B]``."""
    magnitudes = advantages.abs()
    if priority == "max":
        return magnitudes.max(dim=0).values.cpu().numpy().astype(np.float64)
    if priority == "mean":
        return magnitudes.mean(dim=0).cpu().numpy().astype(np.float64)
    raise ValueError(f"priority must be one of {ADVANTAGE_PRIORITIES} here, got {priority!r}")
