"""
The V-RACER loss under ReF-ER (Novati & Koumoutsakos, ICML 2019, Algorithm 3 and eqs. 5, 7, 9-12), twice:

- :func:`refer_vracer_loss` writes it as an autograd loss of ``log pi``, ``V`` and ``D_KL(mu || pi)``: the
  readable definition, and the reference the tests hold the fast version to;
- :func:`fused_refer_vracer_loss` is what :class:`~sb3_impact.vracer.VRACER` trains with. It takes the
  network's outputs (Gaussian mean, log std, ``V``) and computes the loss and its gradient with respect to
  them in one pass with the gradient written out, as the paper's code (smarties) does: the head adds three
  tensors to the autograd graph instead of some forty small operations (on one CPU thread those, not the
  matrix products, were most of a gradient step's time).
"""

import torch as th

from sb3_impact.common.estimators import clipped_ratio
from sb3_impact.common.refer import LOG_2PI, is_near_policy, log_c_max

# Without rule 1 nothing bounds rho; section 5.3 clips it at 1e3 (ReF-ER-2 and plain ER).
UNBOUNDED_RHO_CLIP = 1e3
# The per-batch statistics of fused_refer_vracer_loss, in the order of its ``statistics`` tensor.
LOSS_STATISTICS = ("policy_gradient_loss", "value_loss", "kl_mu_pi", "is_ratio_mean", "batch_near_fraction")


def refer_vracer_loss(
    log_pi: th.Tensor,
    log_mu: th.Tensor,
    values: th.Tensor,
    q_ret: th.Tensor,
    kl: th.Tensor,
    c_max: float,
    beta: float,
    refer_rules: tuple[int, ...] = (1, 2),
) -> tuple[th.Tensor, dict[str, th.Tensor]]:
    """
    The V-RACER loss under ReF-ER for one minibatch (Algorithm 3), whose gradient is eq. 10:
    ``beta * g`` on near-policy samples and ``-(1 - beta) grad D_KL(mu || pi)`` on every sample, with
    ``g`` the off-policy gradient ``rho (Q_ret - V) grad log pi`` (eq. 5) plus the V-tbc value gradient
    ``rho_bar (Q_ret - V) grad V`` (eqs. 7, 9).

    :param log_pi: ``log pi(a_t|s_t)`` with gradient, ``[B]``
    :param log_mu: ``log mu_t(a_t|s_t)``, ``[B]``
    :param values: ``V(s_t)`` with gradient, ``[B]``
    :param q_ret: the stored ``Q_ret[t]``, ``[B]``
    :param kl: ``D_KL(mu_t || pi(.|s_t))`` with gradient, ``[B]``
    :param c_max: the current ``c_max`` (rule 1)
    :param beta: the current penalty coefficient (rule 2; 1 when rule 2 is off)
    :param refer_rules: the rules in use; without rule 1 every sample is near and ``rho`` is clipped at 1e3
    :return: the loss and detached per-batch statistics (``log_rhos`` per sample, the rest averaged)
    """
    log_rhos = (log_pi - log_mu).detach()
    if 1 in refer_rules:  # rule 1: far-policy samples give no policy and no value gradient
        near = is_near_policy(log_rhos, c_max).to(values.dtype)
        rhos = clipped_ratio(log_rhos, c_max)  # unchanged where near
    else:
        near = th.ones_like(log_rhos)
        rhos = clipped_ratio(log_rhos, UNBOUNDED_RHO_CLIP)
    if 2 not in refer_rules:
        beta = 1.0
    rho_bars = clipped_ratio(log_rhos, 1.0)  # rho_bar = min(1, rho), eq. 7
    advantages = q_ret - values.detach()
    v_tbc = values.detach() + rho_bars * advantages  # eq. 7
    policy_losses = -rhos * advantages * log_pi  # its gradient is that of eq. 5, -rho (Q_ret - V)
    value_losses = 0.5 * (values - v_tbc).pow(2)  # eq. 9
    loss = (beta * near * (policy_losses + value_losses)).mean()
    if 2 in refer_rules:
        loss = loss + (1.0 - beta) * kl.mean()
    parts = {
        "log_rhos": log_rhos,
        "policy_gradient_loss": (near * -(rhos * advantages)).mean().detach(),
        "value_loss": (near * value_losses).mean().detach(),
        "kl_mu_pi": kl.mean().detach(),
        "is_ratio_mean": clipped_ratio(log_rhos, UNBOUNDED_RHO_CLIP).mean(),
        "batch_near_fraction": near.mean(),
    }
    return loss, parts


class _FusedReFERVRACERLoss(th.autograd.Function):
    """The loss of :func:`refer_vracer_loss` with its gradient in closed form (see :func:`fused_refer_vracer_loss`)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: th.autograd.function.FunctionCtx,
        mean: th.Tensor,
        log_std: th.Tensor,
        values: th.Tensor,
        actions: th.Tensor,
        behaviour_mean: th.Tensor,
        behaviour_log_std: th.Tensor,
        q_ret: th.Tensor,
        c_max: float | th.Tensor,
        beta: float | th.Tensor,
        rule_1: bool,
        rule_2: bool,
        kl_pi_mu: bool,
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        batch_size = values.shape[0]
        inverse_std = th.exp(-log_std)
        z_pi = (actions - mean) * inverse_std  # (a - m) / sigma
        z_mu = (actions - behaviour_mean) * th.exp(-behaviour_log_std)
        # log rho = log pi - log mu (the 2 pi terms cancel)
        log_rhos = (0.5 * (z_mu.square() - z_pi.square()) + behaviour_log_std - log_std).sum(-1)
        if rule_1:  # rule 1; rho = exp(min(log rho, log c_max)), unchanged where near
            near = is_near_policy(log_rhos, c_max).to(values.dtype)
            rhos = th.exp(th.clamp(log_rhos, max=log_c_max(c_max)))
        else:
            near = th.ones_like(log_rhos)
            rhos = clipped_ratio(log_rhos, UNBOUNDED_RHO_CLIP)
        if not rule_2:
            beta = 1.0
        advantages = q_ret - values  # Q_ret - V
        near_advantages = near * advantages
        td_errors = clipped_ratio(log_rhos, 1.0) * near_advantages  # rho_bar (Q_ret - V) = V_tbc - V, eqs. 7, 9
        policy_weights = rhos * near_advantages  # rho (Q_ret - V), eq. 5
        scale = beta / batch_size
        # d loss / d log pi = -beta rho (Q_ret - V) / B;  d log pi / d m = z / sigma,  d log pi / d log sigma = z^2 - 1
        weights = (-scale * policy_weights).unsqueeze(-1)
        grad_mean = weights * z_pi * inverse_std
        grad_log_std = weights * (z_pi.square() - 1.0)
        grad_values = -scale * td_errors  # eq. 9: V - V_tbc
        log_pi = (-0.5 * z_pi.square() - log_std).sum(-1) - 0.5 * LOG_2PI * mean.shape[-1]
        value_losses = 0.5 * td_errors.square()
        loss = scale * (value_losses.sum() - (policy_weights * log_pi).sum())
        # eq. 11: D_KL(mu || pi) = sum log s_pi - log s_mu + (s_mu^2 + (m_mu - m_pi)^2) / (2 s_pi^2) - 1/2, logged with
        # every rule set; with rule 2 (eq. 10) its gradient, or that of smarties' D_KL(pi || mu), on every sample
        inverse_variance = inverse_std.square()
        mean_gap = mean - behaviour_mean
        spread = (th.exp(2.0 * behaviour_log_std) + mean_gap.square()) * inverse_variance
        kl_mean = (log_std - behaviour_log_std + 0.5 * spread - 0.5).sum(-1).mean()
        if rule_2:
            if kl_pi_mu:  # D_KL(pi || mu) = sum log s_mu - log s_pi + (s_pi^2 + (m_pi - m_mu)^2) / (2 s_mu^2) - 1/2
                inverse_behaviour_variance = th.exp(-2.0 * behaviour_log_std)
                variance_ratio = th.exp(2.0 * (log_std - behaviour_log_std))
                penalty_kl = (
                    behaviour_log_std - log_std + 0.5 * (variance_ratio + mean_gap.square() * inverse_behaviour_variance)
                )
                penalty_mean = (penalty_kl - 0.5).sum(-1).mean()
                kl_grad_mean = mean_gap * inverse_behaviour_variance
                kl_grad_log_std = variance_ratio - 1.0
            else:
                penalty_mean = kl_mean
                kl_grad_mean = mean_gap * inverse_variance
                kl_grad_log_std = 1.0 - spread
            penalty = (1.0 - beta) / batch_size
            grad_mean = grad_mean + penalty * kl_grad_mean
            grad_log_std = grad_log_std + penalty * kl_grad_log_std
            loss = loss + (1.0 - beta) * penalty_mean
        ctx.save_for_backward(grad_mean, grad_log_std.sum_to_size(log_std.shape), grad_values)
        statistics = th.stack(
            [
                -policy_weights.mean(),
                value_losses.mean(),
                kl_mean,
                clipped_ratio(log_rhos, UNBOUNDED_RHO_CLIP).mean(),
                near.mean(),
            ]
        )
        ctx.mark_non_differentiable(log_rhos, statistics)
        return loss, log_rhos, statistics

    @staticmethod
    def backward(ctx: th.autograd.function.FunctionCtx, grad_loss: th.Tensor, *_: th.Tensor) -> tuple:  # type: ignore[override]
        grad_mean, grad_log_std, grad_values = ctx.saved_tensors  # type: ignore[attr-defined]
        return grad_loss * grad_mean, grad_loss * grad_log_std, grad_loss * grad_values, *([None] * 9)


def fused_refer_vracer_loss(
    mean: th.Tensor,
    log_std: th.Tensor,
    values: th.Tensor,
    actions: th.Tensor,
    behaviour_mean: th.Tensor,
    behaviour_log_std: th.Tensor,
    q_ret: th.Tensor,
    c_max: float | th.Tensor,
    beta: float | th.Tensor,
    refer_rules: tuple[int, ...] = (1, 2),
    kl_direction: str = "mu_pi",
) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """
    :func:`refer_vracer_loss` of the diagonal Gaussian ``pi = N(mean, exp(log_std)^2)`` against the stored
    behaviour ``mu``, with the gradient with respect to ``mean``, ``log_std`` and ``values`` in closed form:

    - eq. 5: ``d log pi / d m = (a - m) / sigma^2``, ``d log pi / d log sigma = ((a - m) / sigma)^2 - 1``,
      weighted by ``-beta rho (Q_ret - V) / B`` on near-policy samples;
    - eq. 9: ``d / d V = -beta rho_bar (Q_ret - V) / B`` on near-policy samples;
    - eq. 11: ``(1 - beta) / B`` times the gradient of ``D_KL(mu || pi)`` on every sample
      (:func:`~sb3_impact.common.refer.diag_gaussian_kl_grad`), or of ``D_KL(pi || mu)`` with ``kl_direction="pi_mu"``.

    Same loss value and gradient as :func:`refer_vracer_loss` (tested against it, extreme ratios included).

    :param mean: the policy's mean with gradient, ``[B, d]``
    :param log_std: its log standard deviation with gradient, ``[d]`` (state-independent) or ``[B, d]``
    :param values: ``V(s_t)`` with gradient, ``[B]``
    :param actions: the stored actions, ``[B, d]``
    :param behaviour_mean: ``mu_t``'s mean, ``[B, d]``
    :param behaviour_log_std: ``mu_t``'s log std, ``[B, d]``
    :param q_ret: the stored ``Q_ret[t]``, ``[B]``
    :param c_max: the current ``c_max`` (rule 1), a number above 1 or a 0-d tensor (under ``torch.compile``, a
        tensor does not trigger a recompilation when it changes)
    :param beta: the current penalty coefficient (rule 2), a number or a 0-d tensor
    :param refer_rules: the rules in use, as in :func:`refer_vracer_loss`
    :param kl_direction: ``"mu_pi"``: the penalty is ``D_KL(mu || pi)`` (eq. 11); ``"pi_mu"``: ``D_KL(pi || mu)``
        (smarties), with its own closed-form gradient
    :return: ``(loss, log_rhos [B], statistics [5])``, the statistics named by :data:`LOSS_STATISTICS`
    """
    return _FusedReFERVRACERLoss.apply(
        mean,
        log_std,
        values,
        actions,
        behaviour_mean,
        behaviour_log_std,
        q_ret,
        c_max,
        beta,
        1 in refer_rules,
        2 in refer_rules,
        kl_direction == "pi_mu",
    )
