"""The IMPACT loss (Luo et al., ICLR 2020, section 3 and Algorithm 1, line 8) as a pure function of one minibatch."""

import math
from dataclasses import dataclass

import torch as th
from gymnasium import spaces
from stable_baselines3.common.distributions import Distribution
from torch.nn import functional as F

from sb3_impact.common.distributions import kl_from_params
from sb3_impact.common.estimators import MAX_RATIO, approx_kl, clipped_ratio, clipped_surrogate
from sb3_impact.common.training_batch import Minibatch


@dataclass
class ImpactTargets:
    """
    What a batch's first draw appends to it (Algorithm 1, line 7), kept for all its K draws: the target network's
    evaluation of the batch, flat ``[T * B]`` in the batch's time-major order.
    """

    log_probs: th.Tensor  # log pi_target(a_t|s_t)
    params: th.Tensor  # pi_target's distribution parameters [T * B, P] (the KL penalty)
    value_targets: th.Tensor  # V-trace v_t with pi_target as pi and the target's value head as V
    advantages: th.Tensor  # V-GAE: v_t - V_target(s_t)

    def __getitem__(self, indices: slice | th.Tensor) -> "ImpactTargets":
        return ImpactTargets(
            self.log_probs[indices], self.params[indices], self.value_targets[indices], self.advantages[indices]
        )


def impact_loss(
    distribution: Distribution,
    values: th.Tensor,
    minibatch: Minibatch,
    targets: ImpactTargets,
    action_space: spaces.Space,
    *,
    clip_range: float,
    target_worker_clip: float,
    ent_coef: float,
    vf_coef: float,
    kl_coef: float | None,
    measure_kl: bool,
    normalize_advantage: bool,
) -> tuple[th.Tensor, dict[str, th.Tensor]]:
    """
    The IMPACT loss of one minibatch: ``distribution`` and ``values`` are the learner's on ``minibatch``, ``targets``
    the target network's on the same samples. ``kl_coef`` None: no KL penalty (the KL is then only measured, without
    gradient, when ``measure_kl``). Returns the loss and its terms, detached and unsynced.
    """
    log_prob = distribution.log_prob(minibatch.actions)
    entropy = distribution.entropy()
    advantages = targets.advantages
    if normalize_advantage and len(advantages) > 1:  # per minibatch, as SB3's PPO
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    # docs/guide/equations.md, IMPACT (IMPACT sec. 3.1): pi_theta / max(pi_target, pi_worker / rho), in log space;
    # rho = inf needs no branch: log(pi_worker) - inf = -inf, so the max is pi_target and the ratio the paper's
    # ablation R_1 = pi_theta / pi_target (figure 3a)
    log_denominator = th.maximum(targets.log_probs, minibatch.behaviour_log_probs - math.log(target_worker_clip))
    # docs/guide/equations.md, IMPACT (IMPACT app. E): PPO's epsilon-clip on top of that ratio
    policy_loss, ratio = clipped_surrogate(log_prob, log_denominator, advantages, clip_range)
    # docs/guide/equations.md, IMPACT (IMPACT Alg. 1, line 8): value regression towards the V-trace targets
    value_loss = F.mse_loss(values, targets.value_targets)
    # docs/guide/equations.md, IMPACT (the entropy bonus, absent from IMPACT Alg. 1): minus the mean entropy
    entropy_loss = -entropy.mean()
    # docs/guide/equations.md, IMPACT (IMPACT Alg. 1, line 8): L^pi + c_v L^V - c_H H (+ eta L^KL below)
    loss = policy_loss + ent_coef * entropy_loss + vf_coef * value_loss
    # docs/guide/equations.md, IMPACT (IMPACT Alg. 1, line 8): the penalty eta KL(pi_target || pi_theta)
    kl_to_target = None
    if kl_coef is not None:
        kl_to_target = kl_from_params(action_space, targets.params, distribution).mean()
        loss = loss + kl_coef * kl_to_target
    elif measure_kl:
        with th.no_grad():
            kl_to_target = kl_from_params(action_space, targets.params, distribution).mean()

    with th.no_grad():
        is_ratio = clipped_ratio(log_prob.detach() - minibatch.behaviour_log_probs, MAX_RATIO)  # pi / pi_worker
        stats = {
            "policy_gradient_loss": policy_loss.detach(),
            "value_loss": value_loss.detach(),
            "entropy_loss": entropy_loss.detach(),
            "loss": loss.detach(),
            "is_ratio_mean": is_ratio.mean(),
            "is_ratio_max": is_ratio.max(),
            "approx_kl": approx_kl(log_prob.detach() - minibatch.behaviour_log_probs),  # KL(pi_worker || pi)
            "clip_fraction": (th.abs(ratio - 1) > clip_range).float().mean(),
        }
        if kl_to_target is not None:
            stats["kl_to_target"] = kl_to_target.detach()
    return loss, stats
