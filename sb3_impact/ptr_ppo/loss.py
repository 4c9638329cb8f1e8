"""The PTR-PPO replay loss (Liang et al., 2021, eqs. 16, 21-23) as a pure function of one minibatch."""

from dataclasses import dataclass

import torch as th

from sb3_impact.common.estimators import clipped_surrogate


@dataclass
class ReplayTargets:
    """
    A replay round's targets for its segments' samples, flat ``[T * B]`` in time-major order, computed once per round
    with the network at the start of the round (Algorithm 1, line 22) and held constant by the loss.
    """

    advantages: th.Tensor  # A^marg = rho^marg A^done (eq. 21)
    td_targets: th.Tensor  # r + gamma V(s') (1 - d), bootstrapped at time-limit ends (eq. 16, corrected)
    value_weights: th.Tensor  # pi / b, truncated like eq. 20 (the weight of eq. 16)
    reference_log_probs: th.Tensor  # log pi_ref, the denominator of the surrogate's ratio (``replay_ratio``)

    def __getitem__(self, indices: slice | th.Tensor) -> "ReplayTargets":
        return ReplayTargets(
            self.advantages[indices], self.td_targets[indices], self.value_weights[indices], self.reference_log_probs[indices]
        )


def ptr_ppo_replay_loss(
    log_prob: th.Tensor,
    entropy: th.Tensor | None,
    values: th.Tensor,
    targets: ReplayTargets,
    *,
    clip_range: float,
    ent_coef: float,
    vf_coef: float,
    normalize_advantage: bool,
) -> tuple[th.Tensor, dict[str, th.Tensor]]:
    """
    The PTR-PPO loss of one replayed minibatch: ``log_prob``, ``entropy`` (None: estimated from ``log_prob``) and
    ``values`` are the current network's on its samples. Returns the loss and its terms (with the ratios ``ratio``),
    detached and unsynced.
    """
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

    terms = {"policy_gradient_loss": policy_loss, "value_loss": value_loss, "entropy_loss": entropy_loss, "ratio": ratio}
    return loss, {name: term.detach() for name, term in terms.items()}
