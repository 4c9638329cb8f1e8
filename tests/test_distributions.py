"""Behaviour-policy storage: parameters stored per step rebuild the distribution exactly."""

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticPolicy

from sb3_impact.common.distributions import (
    behaviour_params,
    behaviour_params_dim,
    check_action_space,
    distribution_from_params,
    kl_from_params,
)

ACTION_SPACES = [
    spaces.Discrete(4),
    spaces.MultiDiscrete([3, 2, 5]),
    spaces.MultiBinary(3),
    spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32),
]


def make_policy(action_space, seed=0):
    th.manual_seed(seed)
    observation_space = spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
    return ActorCriticPolicy(observation_space, action_space, lambda _: 1e-3, net_arch=[16])


@pytest.mark.parametrize("action_space", ACTION_SPACES, ids=lambda s: type(s).__name__)
def test_round_trip_gives_same_log_probs_and_entropy(action_space):
    policy = make_policy(action_space)
    obs = th.randn(8, 3)
    distribution = policy.get_distribution(obs)
    actions = distribution.get_actions()
    params = behaviour_params(distribution)
    assert params.shape == (8, behaviour_params_dim(action_space))
    rebuilt = distribution_from_params(action_space, params)
    th.testing.assert_close(rebuilt.log_prob(actions), distribution.log_prob(actions))
    th.testing.assert_close(rebuilt.entropy(), distribution.entropy())
    th.testing.assert_close(kl_from_params(action_space, params, distribution), th.zeros(8), atol=1e-6, rtol=0)


@pytest.mark.parametrize("action_space", ACTION_SPACES, ids=lambda s: type(s).__name__)
def test_kl_against_monte_carlo(action_space):
    """KL(mu || pi) = E_mu[log mu - log pi], checked by sampling."""
    mu = make_policy(action_space, seed=1).get_distribution(th.zeros(1, 3))
    pi = make_policy(action_space, seed=2).get_distribution(th.zeros(1, 3))
    kl = kl_from_params(action_space, behaviour_params(mu), pi)
    samples = th.stack([mu.get_actions() for _ in range(20000)]).squeeze(1)
    mu_many = distribution_from_params(action_space, behaviour_params(mu).expand(len(samples), -1))
    pi_many = distribution_from_params(action_space, behaviour_params(pi).expand(len(samples), -1))
    estimate = (mu_many.log_prob(samples) - pi_many.log_prob(samples)).mean()
    assert kl.item() == pytest.approx(estimate.item(), abs=0.03)


def test_gaussian_kl_gradient_matches_autograd_of_closed_form():
    action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    mu_params = th.tensor([[0.3, -0.2, np.log(0.5), np.log(1.5)]], dtype=th.float32)
    pi_mean = th.tensor([[0.1, 0.4]], requires_grad=True)
    pi_log_std = th.tensor([np.log(0.8), np.log(1.1)], dtype=th.float32, requires_grad=True)
    pi = distribution_from_params(action_space, th.cat([pi_mean, pi_log_std.expand(1, 2)], dim=1))
    kl = kl_from_params(action_space, mu_params, pi).sum()
    kl.backward()
    # Closed form: sum log(s_pi/s_mu) + (s_mu^2 + (m_mu - m_pi)^2) / (2 s_pi^2) - 1/2
    m_mu, s_mu = mu_params[0, :2], mu_params[0, 2:].exp()
    m_pi, s_pi = pi_mean.detach()[0], pi_log_std.detach().exp()
    expected = (th.log(s_pi / s_mu) + (s_mu**2 + (m_mu - m_pi) ** 2) / (2 * s_pi**2) - 0.5).sum()
    assert kl.item() == pytest.approx(expected.item(), rel=1e-5)
    th.testing.assert_close(pi_mean.grad[0], (m_pi - m_mu) / s_pi**2)


@pytest.mark.parametrize(
    "action_space",
    [spaces.Tuple([spaces.Discrete(2)]), spaces.Dict({"a": spaces.Discrete(2)})],
    ids=["Tuple", "Dict"],
)
def test_unsupported_action_spaces_raise(action_space):
    with pytest.raises(ValueError, match="Unsupported action space"):
        check_action_space(action_space)


def test_behaviour_sampling_policy_protocol():
    """The sampler asks ``isinstance(policy, BehaviourSamplingPolicy)``: V-RACER's policy is one, SB3's are not."""
    from sb3_impact.common.distributions import BehaviourSamplingPolicy
    from sb3_impact.vracer.policies import VRACERPolicy

    box = spaces.Box(-1.0, 1.0, (2,))
    vracer_policy = VRACERPolicy(box, box, lambda _: 1e-3)
    assert isinstance(vracer_policy, BehaviourSamplingPolicy)
    assert not isinstance(ActorCriticPolicy(box, box, lambda _: 1e-3), BehaviourSamplingPolicy)
    with th.no_grad():
        actions, log_probs, params = vracer_policy.sample_behaviour(th.zeros(3, 2))
    assert actions.shape == (3, 2) and log_probs.shape == (3,) and params.shape == (3, 4)
    assert vracer_policy.env_actions(actions.numpy()).shape == (3, 2)
