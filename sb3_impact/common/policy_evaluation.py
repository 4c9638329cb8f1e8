"""Evaluating an actor-critic policy on stored data: one feature pass for both heads, in bounded chunks."""

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch as th
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.type_aliases import TensorDict
from stable_baselines3.common.utils import obs_as_tensor

from sb3_impact.common.observations import (
    concatenate_observations,
    map_observation,
    merge_time_and_envs,
    observation_chunks,
)
from sb3_impact.common.segments import Segment

# Samples per forward pass when a whole stored batch is evaluated without gradient (bounds memory).
EVALUATION_CHUNK = 4096

ChunkResult = TypeVar("ChunkResult")


def evaluate_policy_and_values(
    policy: ActorCriticPolicy, observations: th.Tensor | TensorDict
) -> tuple[Distribution, th.Tensor]:
    """Action distribution and values ``[N]`` of ``policy``, sharing one feature pass (as ``evaluate_actions``)."""
    features = policy.extract_features(observations)
    if policy.share_features_extractor:
        latent_pi, latent_vf = policy.mlp_extractor(features)
    else:
        pi_features, vf_features = features
        latent_pi = policy.mlp_extractor.forward_actor(pi_features)
        latent_vf = policy.mlp_extractor.forward_critic(vf_features)
    return policy._get_action_dist_from_latent(latent_pi), policy.value_net(latent_vf).flatten()


@th.no_grad()
def evaluate_in_chunks(
    policy: ActorCriticPolicy,
    observations: Any,
    size: int,
    evaluate: Callable[[slice, Distribution, th.Tensor], ChunkResult],
    chunk_size: int = EVALUATION_CHUNK,
) -> list[ChunkResult]:
    """
    ``evaluate(chunk, distribution, values)`` over the first ``size`` flat observations, ``chunk_size`` at a
    time, without gradient. ``observations`` are tensors on the policy's device or numpy arrays (moved
    there one chunk at a time), either possibly dicts.
    """
    results = []
    for chunk, chunk_observations in observation_chunks(observations, size, chunk_size):
        first = next(iter(chunk_observations.values())) if isinstance(chunk_observations, dict) else chunk_observations
        if isinstance(first, np.ndarray):
            chunk_observations = obs_as_tensor(chunk_observations, policy.device)
        distribution, values = evaluate_policy_and_values(policy, chunk_observations)
        results.append(evaluate(chunk, distribution, values))
    return results


def values_and_log_probs_in_chunks(
    policy: ActorCriticPolicy, observations: Any, actions: th.Tensor, chunk_size: int = EVALUATION_CHUNK
) -> tuple[th.Tensor, th.Tensor]:
    """
    ``V(s)`` and ``log pi(a|s)`` ``[N]`` of ``policy`` for flat observations and ``actions`` ``[N, ...]`` on its
    device, without gradient, ``chunk_size`` samples at a time (:func:`evaluate_in_chunks`).
    """
    results = evaluate_in_chunks(
        policy,
        observations,
        len(actions),
        lambda chunk, distribution, values: (values, distribution.log_prob(actions[chunk])),
        chunk_size,
    )
    return th.cat([values for values, _ in results]), th.cat([log_probs for _, log_probs in results])


def segment_values(
    segment: Segment, predict_values: Callable[[Any], np.ndarray], chunk_size: int = EVALUATION_CHUNK
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """
    ``V`` under ``predict_values`` (numpy observations in, ``[N]`` values out) of a segment's observations
    ``[T, B]``, of the observations after it ``[B]``, and of the final observations of its time-limit ends at
    their ``(t, env)`` positions ``[T, B]`` (zero elsewhere), in chunks of ``chunk_size`` observations.
    """
    n_steps, n_envs, size = segment.n_steps, segment.n_envs, segment.size
    parts = [map_observation(segment.observations, merge_time_and_envs), segment.next_observations]
    if segment.final_observations is not None:
        parts.append(segment.final_observations)
    observations = concatenate_observations(parts)
    total = size + n_envs + len(segment.final_observation_indices)
    values = np.concatenate(
        [np.asarray(predict_values(chunk)).reshape(-1) for _, chunk in observation_chunks(observations, total, chunk_size)]
    )
    final_values = _at_final_positions(segment, values[size + n_envs :])
    return values[:size].reshape(n_steps, n_envs), values[size : size + n_envs], final_values


def final_observation_values(segment: Segment, predict_values: Callable[[Any], np.ndarray]) -> np.ndarray:
    """``V`` under ``predict_values`` of a segment's final observations at their ``(t, env)`` positions ``[T, B]``."""
    if segment.final_observations is None:
        return _at_final_positions(segment, np.zeros(0, dtype=np.float32))
    return _at_final_positions(segment, np.asarray(predict_values(segment.final_observations)).reshape(-1))


def _at_final_positions(segment: Segment, values: np.ndarray) -> np.ndarray:
    final_values = np.zeros((segment.n_steps, segment.n_envs), dtype=np.float32)
    if len(segment.final_observation_indices):
        steps, envs = segment.final_observation_indices.T
        final_values[steps, envs] = values
    return final_values
