"""
Behaviour-policy storage: a flat parameter vector per step from which the behaviour distribution mu
can be rebuilt later, to compute ``pi / mu`` ratios and ``KL(mu || pi)`` against any newer policy.

Layout of the parameter vector, per action space:

- ``Discrete(n)``: the ``n`` logits;
- ``MultiDiscrete([n_1, .., n_k])``: the logits of each sub-space, concatenated;
- ``MultiBinary(k)``: the ``k`` Bernoulli logits;
- ``Box`` (any shape, ``d`` = its number of elements): the Gaussian mean (``d``) followed by the log standard
  deviation (``d``), over the flat action as SB3's policies sample it (the sampler reshapes to the space's shape).
  With unsquashed gSDE the behaviour policy of a state is also a diagonal Gaussian, ``N(mean, std(s))``.
"""

import math
from typing import Protocol, runtime_checkable

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.distributions import (
    BernoulliDistribution,
    CategoricalDistribution,
    DiagGaussianDistribution,
    Distribution,
    MultiCategoricalDistribution,
    StateDependentNoiseDistribution,
    kl_divergence,
)
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy

SUPPORTED_ACTION_SPACES = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Box)


@runtime_checkable
class BehaviourSamplingPolicy(Protocol):
    """
    A policy that samples its own behaviour step instead of going through ``get_distribution``: a collector's
    sampler then stores what :meth:`sample_behaviour` returns and steps the environment with :meth:`env_actions`.
    V-RACER's :class:`~sb3_impact.vracer.policies.VRACERPolicy` implements it. A policy that also has
    ``sample_behaviour_and_values(obs)`` (the same and ``V(s) [n]``, from the same forward pass) has its values
    recorded too, as the segment's ``extras["behaviour_values"]`` (``[n_steps, n_envs]``).
    """

    def sample_behaviour(self, obs: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """``(actions [n, ...], log mu(a|s) [n], behaviour parameters [n, p])`` for a batch of observations."""

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        """What the environment is stepped with, given the stored (sampled) actions."""


def check_action_space(action_space: spaces.Space) -> None:
    """Raise ``ValueError`` unless the action space can be stored and rebuilt by this module."""
    if not isinstance(action_space, SUPPORTED_ACTION_SPACES):
        names = ", ".join(space.__name__ for space in SUPPORTED_ACTION_SPACES)
        raise ValueError(f"Unsupported action space {action_space}: supported are {names}")
    if isinstance(action_space, spaces.MultiBinary) and not isinstance(action_space.n, (int, np.integer)):
        raise ValueError(f"Unsupported action space {action_space}: MultiBinary must have an integer n")


def behaviour_params_dim(action_space: spaces.Space) -> int:
    """Length of the per-step parameter vector for ``action_space``."""
    check_action_space(action_space)
    if isinstance(action_space, spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, spaces.MultiDiscrete):
        return int(np.sum(action_space.nvec))
    if isinstance(action_space, spaces.MultiBinary):
        return int(action_space.n)
    return 2 * int(np.prod(action_space.shape))


def behaviour_params(distribution: Distribution) -> th.Tensor:
    """Flatten the parameters of an SB3 action distribution into ``[batch, behaviour_params_dim]``."""
    if isinstance(distribution, CategoricalDistribution):
        return distribution.distribution.logits
    if isinstance(distribution, MultiCategoricalDistribution):
        return th.cat([sub.logits for sub in distribution.distribution], dim=1)
    if isinstance(distribution, BernoulliDistribution):
        return distribution.distribution.logits
    if isinstance(distribution, DiagGaussianDistribution) or (
        isinstance(distribution, StateDependentNoiseDistribution) and distribution.bijector is None
    ):
        normal = distribution.distribution
        return th.cat([normal.mean, th.log(normal.stddev)], dim=1)
    raise ValueError(
        f"Cannot store behaviour parameters of {type(distribution).__name__}: squashed Gaussians are not supported"
    )


_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


def samples_plain_diag_gaussian(policy: BasePolicy) -> bool:
    """
    Whether ``policy`` is an SB3 ``ActorCriticPolicy`` with a plain diagonal Gaussian (no gSDE) whose way to its
    distribution is SB3's own: :func:`sample_diag_gaussian` then gives the same draws without building it.
    """
    policy_class = type(policy)
    return (
        isinstance(policy, ActorCriticPolicy)
        and type(policy.action_dist) is DiagGaussianDistribution
        and policy_class.get_distribution is ActorCriticPolicy.get_distribution
        and policy_class._get_action_dist_from_latent is ActorCriticPolicy._get_action_dist_from_latent
    )


def sample_diag_gaussian(policy: ActorCriticPolicy, obs: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """
    ``get_distribution(obs)``, then ``get_actions()``, ``log_prob(actions)`` and :func:`behaviour_params`, with
    SB3's and ``torch.distributions.Normal``'s arithmetic written out: the same draws from the same random state,
    bit for bit, for about two thirds of the time. The collectors' sampler takes it for such policies: a
    worker's step is mostly this call.

    a = mu + eps * sigma, eps ~ N(0, 1);  log pi(a) = sum_i [-(a_i - mu_i)^2 / (2 sigma_i^2) - log sigma_i - log sqrt(2 pi)]
    """
    features = BasePolicy.extract_features(policy, obs, policy.pi_features_extractor)
    mean = policy.action_net(policy.mlp_extractor.forward_actor(features))
    std = th.ones_like(mean) * policy.log_std.exp()
    actions = mean + th.empty_like(mean).normal_() * std
    log_std = std.log()
    log_probs = (-((actions - mean) ** 2) / (2 * std**2) - log_std - _LOG_SQRT_2PI).sum(dim=1)
    return actions, log_probs, th.cat([mean, log_std], dim=1)


def distribution_from_params(action_space: spaces.Space, params: th.Tensor) -> Distribution:
    """Rebuild the SB3 distribution whose parameters :func:`behaviour_params` stored."""
    check_action_space(action_space)
    if isinstance(action_space, spaces.Discrete):
        return CategoricalDistribution(int(action_space.n)).proba_distribution(action_logits=params)
    if isinstance(action_space, spaces.MultiDiscrete):
        return MultiCategoricalDistribution(list(action_space.nvec)).proba_distribution(action_logits=params)
    if isinstance(action_space, spaces.MultiBinary):
        return BernoulliDistribution(int(action_space.n)).proba_distribution(action_logits=params)
    action_dim = int(np.prod(action_space.shape))
    mean, log_std = params[:, :action_dim], params[:, action_dim:]
    return DiagGaussianDistribution(action_dim).proba_distribution(mean, log_std)


def kl_from_params(action_space: spaces.Space, params: th.Tensor, distribution: Distribution) -> th.Tensor:
    """``KL(mu || pi)`` per sample, ``mu`` given by stored parameters and ``pi`` by an SB3 distribution."""
    behaviour = distribution_from_params(action_space, params)
    if isinstance(distribution, StateDependentNoiseDistribution):  # per state, gSDE's pi is a diagonal Gaussian
        return th.distributions.kl_divergence(behaviour.distribution, distribution.distribution).sum(dim=1)
    kl = kl_divergence(behaviour, distribution)
    if kl.dim() > 1:  # independent Bernoulli dimensions are not summed by SB3
        kl = kl.sum(dim=1)
    return kl
