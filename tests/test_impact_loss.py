"""
IMPACT's loss (:func:`sb3_impact.impact.loss.impact_loss`) against a slow reference written from the paper, one
sample at a time: the target-worker clipped ratio R = pi_theta / max(pi_target, pi_worker / rho) (IMPACT sec. 3.1),
PPO's epsilon-clip on top of it (app. E), the value and entropy terms (Alg. 1, line 8); with extreme log-probabilities
and rho = inf, the paper's ablation R_1 = pi_theta / pi_target (figure 3a).
"""

import math

import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.distributions import CategoricalDistribution

from sb3_impact.common.estimators import MAX_LOG_RATIO
from sb3_impact.common.training_batch import Minibatch
from sb3_impact.impact.loss import ImpactTargets, impact_loss

CLIP_RANGE, ENT_COEF, VF_COEF = 0.2, 0.01, 0.5
# Per sample: the learner's logits over 3 actions, the action, log pi_worker, log pi_target, the advantage, the
# learner's value and its V-trace target. Rows 1-6 hold the extremes: a worker far likelier than the target (the
# clipping's case), a target far likelier than the worker, both near zero probability, log-ratios past exp()'s range.
SAMPLES = [
    ([0.1, 0.2, -0.3], 0, -1.0, -1.1, 1.0, 0.3, 0.5),
    ([2.0, -1.0, 0.0], 0, -0.1, -1e4, 2.0, -1.0, 1.0),
    ([0.0, 0.0, 0.0], 1, -50.0, -0.1, -1.5, 0.0, 0.2),
    ([5.0, -5.0, 0.0], 1, -1e4, -1e4, 0.7, 1.0, -1.0),
    ([0.0, 1.0, 2.0], 2, 0.0, -90.0, -3.0, 2.0, 2.5),
    ([30.0, -30.0, 0.0], 1, -1e9, -0.5, 1.2, -0.2, 0.0),
    ([-1.0, 0.5, 0.2], 0, -0.3, -200.0, -0.4, 0.1, 0.1),
    ([0.3, 0.3, -0.6], 2, -1.5, -1.4, 0.9, 0.0, -0.3),
]


def log_softmax(logits: list[float], action: int) -> float:
    top = max(logits)
    return logits[action] - top - math.log(sum(math.exp(x - top) for x in logits))


def entropy(logits: list[float]) -> float:
    return -sum(math.exp(log_softmax(logits, a)) * log_softmax(logits, a) for a in range(len(logits)))


def slow_ratio(log_pi: float, log_worker: float, log_target: float, rho: float) -> float:
    """R = pi_theta / max(pi_target, pi_worker / rho), from log-probabilities (log-ratio clamped as all ratios are)."""
    log_denominator = max(log_target, log_worker - math.log(rho)) if math.isfinite(rho) else log_target
    return math.exp(min(max(log_pi - log_denominator, -MAX_LOG_RATIO), MAX_LOG_RATIO))


def slow_impact_loss(rho: float) -> tuple[float, list[float]]:
    """-mean(min(R A, clip(R, 1 - eps, 1 + eps) A)) - c_H mean(H) + c_v mean((V - v)^2), and the ratios R."""
    surrogate = entropies = value_error = 0.0
    ratios = []
    for logits, action, log_worker, log_target, advantage, value, value_target in SAMPLES:
        ratio = slow_ratio(log_softmax(logits, action), log_worker, log_target, rho)
        ratios.append(ratio)
        surrogate += min(ratio * advantage, min(max(ratio, 1 - CLIP_RANGE), 1 + CLIP_RANGE) * advantage)
        entropies += entropy(logits)
        value_error += (value - value_target) ** 2
    n = len(SAMPLES)
    return -surrogate / n - ENT_COEF * entropies / n + VF_COEF * value_error / n, ratios


def torch_impact_loss(rho: float, dtype: th.dtype) -> tuple[th.Tensor, dict[str, th.Tensor], th.Tensor]:
    columns = list(zip(*SAMPLES, strict=True))
    logits = th.tensor(columns[0], dtype=dtype, requires_grad=True)
    distribution = CategoricalDistribution(3).proba_distribution(action_logits=logits)
    values = th.tensor(columns[5], dtype=dtype, requires_grad=True)
    minibatch = Minibatch(
        indices=slice(None),
        observations=th.zeros(len(SAMPLES), 1, dtype=dtype),
        actions=th.tensor(columns[1]),
        behaviour_log_probs=th.tensor(columns[2], dtype=dtype),
    )
    targets = ImpactTargets(
        log_probs=th.tensor(columns[3], dtype=dtype),
        params=th.zeros(len(SAMPLES), 3, dtype=dtype),  # the KL penalty is off here
        value_targets=th.tensor(columns[6], dtype=dtype),
        advantages=th.tensor(columns[4], dtype=dtype),
    )
    loss, stats = impact_loss(
        distribution,
        values,
        minibatch,
        targets,
        spaces.Discrete(3),
        clip_range=CLIP_RANGE,
        target_worker_clip=rho,
        ent_coef=ENT_COEF,
        vf_coef=VF_COEF,
        kl_coef=None,
        measure_kl=False,
        normalize_advantage=False,
    )
    loss.backward()
    return loss, stats, logits.grad


@pytest.mark.parametrize("rho", [1.0, 2.0, 4.0, math.inf])
@pytest.mark.parametrize("dtype,rel", [(th.float64, 1e-10), (th.float32, 1e-5)])
def test_impact_loss_against_slow_reference_with_extreme_log_probabilities(rho, dtype, rel):
    loss, stats, logits_grad = torch_impact_loss(rho, dtype)
    expected, _ = slow_impact_loss(rho)
    assert math.isclose(loss.item(), expected, rel_tol=rel, abs_tol=rel), (loss.item(), expected)
    assert th.isfinite(logits_grad).all()
    assert all(th.isfinite(value).all() for value in stats.values())


def test_target_worker_ratio_is_the_papers_two_forms_and_r1_without_clipping():
    for logits, action, log_worker, log_target, *_ in SAMPLES:
        log_pi = log_softmax(logits, action)
        if max(abs(log_pi - log_worker), abs(log_worker - log_target)) > 50:
            continue  # the second form's factors overflow in floats; the first form covers them above
        pi, worker, target = math.exp(log_pi), math.exp(log_worker), math.exp(log_target)
        for rho in (1.0, 2.0, 4.0):
            # sec. 3.1: pi / max(pi_target, pi_worker / rho) = min(pi_worker / pi_target, rho) * pi / pi_worker
            second_form = min(worker / target, rho) * pi / worker
            assert math.isclose(slow_ratio(log_pi, log_worker, log_target, rho), second_form, rel_tol=1e-12)
        # rho = inf: no clipping, R_1 = pi / pi_target whatever the worker's probability
        assert math.isclose(slow_ratio(log_pi, log_worker, log_target, math.inf), pi / target, rel_tol=1e-12)
    # The clipping matters on these samples: the worker far likelier than the target (rows 1, 4 and 6)
    _, clipped = slow_impact_loss(2.0)
    _, unclipped = slow_impact_loss(math.inf)
    assert all(unclipped[row] > clipped[row] for row in (1, 4, 6))
    assert all(unclipped[row] == clipped[row] for row in (2, 3, 5))
