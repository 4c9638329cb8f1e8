"""The PTR-PPO replay loss (Liang et al., 2021, eqs. 16, 21-23) as a pure function of one minibatch."""

from dataclasses import dataclass

import torch as th
from gymnasium import spaces
from stable_baselines3.common.distributions import Distribution

from sb3_impact.common.distributions import kl_from_params
from sb3_impact.common.estimators import clamped_ratio, clipped_surrogate
from sb3_impact.common.training_batch import Minibatch


@dataclass
class ReplayTargets:
    """
    A replay round's targets for its segments' samples, flat ``[T * B]`` in time-major order, computed once per round
    with the network at the start of the round (Algorithm 1, line 22) and held constant by the loss
    (:func:`~sb3_impact.ptr_ppo.scoring.replay_targets`).
    """

    advantages: th.Tensor  # A^marg = rho^marg A^done (eq. 21)
    td_targets: th.Tensor  # r + gamma V(s') (1 - d), bootstrapped at time-limit ends (eq. 16, corrected)
    value_weights: th.Tensor  # pi / b, truncated like eq. 20 (the weight of eq. 16)
    reference_log_probs: th.Tensor  # log pi_ref, the denominator of the surrogate's ratio (``replay_ratio``)
    rho_marg: th.Tensor  # rho^marg, the truncated done-cut importance weight of A^marg (eqs. 19-20)
    behaviour_params: th.Tensor  # b's distribution parameters [T * B, P] (the logged KL(b || pi))

    def __getitem__(self, indices: slice | th.Tensor) -> "ReplayTargets":
        return ReplayTargets(
            self.advantages[indices],
            self.td_targets[indices],
            self.value_weights[indices],
            self.reference_log_probs[indices],
            self.rho_marg[indices],
            self.behaviour_params[indices],
        )


def ptr_ppo_replay_loss(
    distribution: Distribution,
    values: th.Tensor,
    minibatch: Minibatch,
    targets: ReplayTargets,
    action_space: spaces.Space,
    *,
    clip_range: float,
    ent_coef: float,
    vf_coef: float,
    normalize_advantage: bool,
) -> tuple[th.Tensor, dict[str, th.Tensor]]:
    """
    The PTR-PPO loss of one replayed minibatch: ``distribution`` and ``values`` are the current network's on
    ``minibatch``, ``targets`` the round's for the same samples. Returns the loss and its ``train/`` statistics by
    name, detached and unsynced.
    """
    log_prob = distribution.log_prob(minibatch.actions)
    entropy = distribution.entropy()
    advantages = targets.advantages
    if normalize_advantage and len(advantages) > 1:  # per minibatch, as SB3's PPO
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    # docs/guide/equations.md, PTR-PPO (PTR-PPO eq. 22): clipped surrogate of A^marg, ratio to pi_ref in log space
    policy_loss, ratio = clipped_surrogate(log_prob, targets.reference_log_probs, advantages, clip_range)
    # docs/guide/equations.md, PTR-PPO (PTR-PPO eq. 16, V(s) and V(s') in their places): w (r + gamma V(s') (1 - d) - V(s))^2
    value_loss = (targets.value_weights * (targets.td_targets - values) ** 2).mean()
    # docs/guide/equations.md, PTR-PPO (PTR-PPO eq. 23): minus the mean entropy
    entropy_loss = -th.mean(entropy) if entropy is not None else -th.mean(-log_prob)
    # docs/guide/equations.md, PTR-PPO (PTR-PPO eq. 23): J_pi + c_v J_V - beta H, as a loss
    loss = policy_loss + ent_coef * entropy_loss + vf_coef * value_loss

    with th.no_grad():
        is_ratio = clamped_ratio(log_prob - minibatch.behaviour_log_probs)  # pi / b, whatever replay_ratio is
        stats = {
            "replay_loss": loss.detach(),
            "replay_policy_gradient_loss": policy_loss.detach(),
            "replay_value_loss": value_loss.detach(),
            "replay_entropy_loss": entropy_loss.detach(),
            "replay_clip_fraction": (th.abs(ratio - 1) > clip_range).float().mean(),
            "replay_kl": kl_from_params(action_space, targets.behaviour_params, distribution).mean(),
            "replay_is_ratio_mean": is_ratio.mean(),
            "replay_is_ratio_max": is_ratio.max(),
            "replay_ratio_mean": ratio.mean(),
            "replay_ratio_max": ratio.max(),
        }
    return loss, stats
