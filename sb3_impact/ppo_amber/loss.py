"""The PPO-AMBER loss (Han & Sung, 2017, eqs. 7, 8 and 11) as a pure function of one minibatch."""

from dataclasses import dataclass

import torch as th
from stable_baselines3.common.type_aliases import DictRolloutBufferSamples, RolloutBufferSamples
from torch.nn import functional as F

from sb3_impact.common.estimators import clipped_surrogate


@dataclass
class AmberTargets:
    """What the memory stored with each sample at collection time (AMBER eq. 9) and never recomputes."""

    advantages: th.Tensor  # GAE A_t of collection time (AMBER eq. 4)
    returns: th.Tensor  # the value targets A_t + V(s_t) of collection time
    old_values: th.Tensor  # V(s_t) of collection time (the value clipping's centre)

    @classmethod
    def from_samples(cls, samples: RolloutBufferSamples | DictRolloutBufferSamples) -> "AmberTargets":
        return cls(samples.advantages, samples.returns, samples.old_values)


def amber_loss(
    log_prob: th.Tensor,
    entropy: th.Tensor | None,
    values: th.Tensor,
    behaviour_log_probs: th.Tensor,
    targets: AmberTargets,
    *,
    clip_range: float,
    clip_range_vf: float | None,
    ent_coef: float,
    vf_coef: float,
    normalize_advantage: bool,
) -> tuple[th.Tensor, dict[str, th.Tensor]]:
    """
    The PPO-AMBER loss of one minibatch drawn from the active batches: ``log_prob``, ``entropy`` (None: estimated
    from ``log_prob``) and ``values`` are the current policy's on its samples, ``behaviour_log_probs`` each
    sample's stored ``log mu``. Returns the loss and its terms (with the ratios ``ratio``), detached.
    """
    advantages = targets.advantages
    if normalize_advantage and len(advantages) > 1:  # per minibatch, as SB3's PPO
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    # docs/guide/equations.md, PPO-AMBER (AMBER eq. 7): clipped surrogate, ratio to each sample's stored mu
    policy_loss, ratio = clipped_surrogate(log_prob, behaviour_log_probs, advantages, clip_range)
    if clip_range_vf is not None:  # SB3's value clipping around the stored values
        values = targets.old_values + th.clamp(values - targets.old_values, -clip_range_vf, clip_range_vf)
    # docs/guide/equations.md, PPO-AMBER (AMBER eq. 8): value regression towards the stored targets
    value_loss = F.mse_loss(targets.returns, values)
    # docs/guide/equations.md, PPO-AMBER (AMBER eq. 11, with SB3's entropy bonus): minus the mean entropy
    entropy_loss = -th.mean(-log_prob) if entropy is None else -th.mean(entropy)
    # docs/guide/equations.md, PPO-AMBER (AMBER eq. 11): L^clip + c_v L_V - c_H H
    loss = policy_loss + ent_coef * entropy_loss + vf_coef * value_loss

    terms = {"policy_gradient_loss": policy_loss, "value_loss": value_loss, "entropy_loss": entropy_loss, "ratio": ratio}
    return loss, {name: term.detach() for name, term in terms.items()}
