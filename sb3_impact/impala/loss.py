"""The V-trace actor-critic loss (Espeholt et al., ICML 2018, section 4.2) as a pure function of one minibatch."""

from dataclasses import dataclass

import torch as th
from torch.nn import functional as F

from sb3_impact.common.estimators import MAX_RATIO, approx_kl, clipped_ratio
from sb3_impact.common.training_batch import Minibatch


@dataclass
class ImpalaTargets:
    """The V-trace targets of a batch's samples, flat ``[T * B]`` in its time-major order, held constant by the loss."""

    value_targets: th.Tensor  # v_s (IMPALA eq. 1)
    pg_advantages: th.Tensor  # rho_s (r_s + gamma_s v_{s+1} - V(x_s)) (IMPALA eq. 4)

    def __getitem__(self, indices: slice | th.Tensor) -> "ImpalaTargets":
        return ImpalaTargets(self.value_targets[indices], self.pg_advantages[indices])


def impala_loss(
    log_prob: th.Tensor,
    entropy: th.Tensor,
    values: th.Tensor,
    minibatch: Minibatch,
    targets: ImpalaTargets,
    *,
    ent_coef: float,
    vf_coef: float,
    normalize_advantage: bool,
) -> tuple[th.Tensor, dict[str, th.Tensor]]:
    """
    The V-trace actor-critic loss of one minibatch: ``log_prob``, ``entropy`` and ``values`` are the learner's on
    ``minibatch``. Returns the loss and its terms, detached and unsynced.
    """
    advantages = targets.pg_advantages
    if normalize_advantage and len(advantages) > 1:  # per minibatch (off in the paper)
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    # docs/guide/equations.md, V-trace (IMPALA) (IMPALA eq. 4, sec. 4.2): -rho_s A_s log pi(a_s|x_s)
    policy_loss = -(advantages * log_prob).mean()
    # docs/guide/equations.md, V-trace (IMPALA) (IMPALA sec. 4.2): l2 loss to the V-trace targets v_s (eq. 1)
    value_loss = F.mse_loss(values, targets.value_targets)
    # docs/guide/equations.md, V-trace (IMPALA) (IMPALA sec. 4.2): the entropy bonus
    entropy_loss = -entropy.mean()
    # docs/guide/equations.md, V-trace (IMPALA) (IMPALA sec. 4.2): the three directions, rescaled
    loss = policy_loss + ent_coef * entropy_loss + vf_coef * value_loss

    with th.no_grad():
        is_ratio = clipped_ratio(log_prob.detach() - minibatch.behaviour_log_probs, MAX_RATIO)  # pi / mu
        stats = {
            "policy_gradient_loss": policy_loss.detach(),
            "value_loss": value_loss.detach(),
            "entropy_loss": entropy_loss.detach(),
            "loss": loss.detach(),
            "is_ratio_mean": is_ratio.mean(),
            "is_ratio_max": is_ratio.max(),
            "approx_kl": approx_kl(log_prob.detach() - minibatch.behaviour_log_probs),  # KL(pi_worker || pi)
        }
    return loss, stats


def impala_value_loss(values: th.Tensor, targets: ImpalaTargets) -> th.Tensor:
    """The value regression of the extra value passes (``n_value_epochs``), ``values`` the learner's, unscaled."""
    # docs/guide/equations.md, V-trace (IMPALA) (IMPALA sec. 4.1, eq. 1): l2 loss to v_s, recomputed for each pass
    return F.mse_loss(values, targets.value_targets)
