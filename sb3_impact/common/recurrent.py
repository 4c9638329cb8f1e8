"""
Recurrent policies on segments: sb3-contrib's ``RecurrentActorCriticPolicy`` (``MlpLstmPolicy``, ``CnnLstmPolicy``,
``MultiInputLstmPolicy``) stepped by the sampler and replayed by the learner.

The sampler records, with each segment, the LSTM states it started from (actor and critic, as RecurrentPPO's
rollout buffer stores them) and, per step, whether the observation starts an episode. The learner replays the
whole segment through the LSTMs from those stored states, zeroing the states before each episode start
(:func:`recurrent_forward`); the step-by-step sampling and the replay are the same function, so that with equal
weights the learner's log-probabilities are the behaviour's. The bootstrap values come from the same replay: the
critic's states after the last step (zeroed where the episode ended), and after each time-limit end for its
final observation.

Time-major throughout: observations flat ``[T * B, ...]``, episode starts ``[T, B]``, states ``[layers, B, H]``.
"""

from typing import Any, NamedTuple

import numpy as np
import torch as th
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import TensorDict
from torch import nn

#: The policy names of sb3-contrib's recurrent policies (what ``IMPACT("MlpLstmPolicy", env)`` takes).
RECURRENT_POLICY_NAMES = ("MlpLstmPolicy", "CnnLstmPolicy", "MultiInputLstmPolicy")

LSTMState = tuple[th.Tensor, th.Tensor]
#: A segment's initial LSTM states as arrays: actor hidden, actor cell, critic hidden, critic cell, ``[layers, B, H]``.
SegmentLSTMStates = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def is_recurrent(policy: object) -> bool:
    """Whether ``policy`` (an instance or a class) is an sb3-contrib recurrent actor-critic policy."""
    if isinstance(policy, type):
        return issubclass(policy, RecurrentActorCriticPolicy)
    return isinstance(policy, RecurrentActorCriticPolicy)


def refuse_recurrent_policy(policy: object, algorithm: str) -> None:
    """A clear error at construction for an algorithm that does not offer recurrent policies."""
    if (isinstance(policy, str) and policy in RECURRENT_POLICY_NAMES) or is_recurrent(policy):
        raise ValueError(
            f"{algorithm} does not support recurrent policies ({policy if isinstance(policy, str) else policy.__name__}): "  # type: ignore[attr-defined]
            "its replay samples single transitions, which carry no LSTM state. Recurrent policies are offered by "
            "IMPACT and IMPALA (MlpLstmPolicy, CnnLstmPolicy, MultiInputLstmPolicy) and by sb3-contrib's RecurrentPPO"
        )


def constructor_parameters(policy: BasePolicy) -> dict[str, Any]:
    """
    What rebuilds ``policy`` (``policy.__class__(**parameters)``): SB3's ``_get_constructor_parameters``, plus the
    LSTM's own for a recurrent policy (sb3-contrib 2.9's leaves them out, so a copy would get its default sizes).
    """
    parameters = policy._get_constructor_parameters()
    if is_recurrent(policy):
        parameters.update(
            lstm_hidden_size=policy.lstm_actor.hidden_size,
            n_lstm_layers=policy.lstm_actor.num_layers,
            shared_lstm=policy.shared_lstm,
            enable_critic_lstm=policy.enable_critic_lstm,
            lstm_kwargs=policy.lstm_kwargs,
            share_features_extractor=policy.share_features_extractor,
        )
    return parameters


def zero_lstm_states(policy: RecurrentActorCriticPolicy, n_envs: int) -> RNNStates:
    """Zero actor and critic states for ``n_envs`` environments, on the policy's device."""
    n_layers, _, hidden_size = policy.lstm_hidden_state_shape
    shape = (n_layers, n_envs, hidden_size)

    def zeros() -> th.Tensor:
        return th.zeros(shape, device=policy.device)

    return RNNStates((zeros(), zeros()), (zeros(), zeros()))


def lstm_states_to_numpy(states: RNNStates) -> SegmentLSTMStates:
    (pi_hidden, pi_cell), (vf_hidden, vf_cell) = states.pi, states.vf
    return tuple(tensor.detach().cpu().numpy().astype(np.float32) for tensor in (pi_hidden, pi_cell, vf_hidden, vf_cell))  # type: ignore[return-value]


def lstm_states_from_numpy(arrays: SegmentLSTMStates, device: th.device | str) -> RNNStates:
    pi_hidden, pi_cell, vf_hidden, vf_cell = (th.as_tensor(array, device=device) for array in arrays)
    return RNNStates((pi_hidden, pi_cell), (vf_hidden, vf_cell))


def select_envs(states: RNNStates, envs: slice | th.Tensor) -> RNNStates:
    """The states of the environments ``envs`` (columns of the ``[layers, B, H]`` states)."""
    return RNNStates((states.pi[0][:, envs], states.pi[1][:, envs]), (states.vf[0][:, envs], states.vf[1][:, envs]))


def lstm_sequence(
    lstm: nn.LSTM,
    features: th.Tensor,
    state: LSTMState,
    episode_starts: th.Tensor,
    keep_steps: tuple[int, ...] = (),
) -> tuple[th.Tensor, LSTMState, dict[int, LSTMState]]:
    """
    ``lstm`` over ``features`` ``[T, B, F]`` from ``state``, the state zeroed before each observation whose
    ``episode_starts`` ``[T, B]`` is 1 (as RecurrentPPO's ``_process_sequence``, in time-major order). Returns the
    outputs ``[T, B, H]``, the state after the last step, and the state after each step in ``keep_steps``.
    """
    kept: dict[int, LSTMState] = {}
    if not keep_steps and not bool((episode_starts[1:] != 0).any()):  # no reset inside: one call
        keep = (1.0 - episode_starts[0]).view(1, -1, 1)
        output, state = lstm(features, (keep * state[0], keep * state[1]))
        return output, state, kept
    outputs = []
    for step in range(features.shape[0]):
        keep = (1.0 - episode_starts[step]).view(1, -1, 1)
        output, state = lstm(features[step : step + 1], (keep * state[0], keep * state[1]))
        outputs.append(output)
        if step in keep_steps:
            kept[step] = state
    return th.cat(outputs), state, kept


class RecurrentOutput(NamedTuple):
    """What :func:`recurrent_forward` returns: latents flat ``[T * B, ...]`` (after the MLP extractor)."""

    latent_pi: th.Tensor | None  # None when only the critic was asked for
    latent_vf: th.Tensor
    states: RNNStates  # after the last step
    kept_states: dict[int, RNNStates]  # after each step of keep_steps


def recurrent_forward(
    policy: RecurrentActorCriticPolicy,
    observations: th.Tensor | TensorDict,
    states: RNNStates,
    episode_starts: th.Tensor,
    *,
    actor: bool = True,
    keep_steps: tuple[int, ...] = (),
) -> RecurrentOutput:
    """
    The recurrent policy over ``T`` steps of ``B`` environments: ``observations`` flat time-major ``[T * B, ...]``,
    ``episode_starts`` ``[T, B]`` (float), ``states`` the LSTM states before the first step. The critic follows
    the policy's own choice (its own LSTM, the actor's LSTM shared, or a linear layer), as
    ``RecurrentActorCriticPolicy.forward``. ``actor=False`` skips the actor where the critic does not need it.
    """
    n_steps, n_envs = episode_starts.shape
    features = policy.extract_features(observations)
    pi_features, vf_features = (features, features) if policy.share_features_extractor else features

    def sequence(tensor: th.Tensor) -> th.Tensor:
        return tensor.reshape(n_steps, n_envs, -1)

    pi_states, vf_states = states.pi, states.vf
    kept_pi: dict[int, LSTMState] = {}
    kept_vf: dict[int, LSTMState] = {}
    latent_pi = None
    if actor or policy.shared_lstm:
        output, pi_states, kept_pi = lstm_sequence(
            policy.lstm_actor, sequence(pi_features), states.pi, episode_starts, keep_steps
        )
        latent_pi = output.reshape(n_steps * n_envs, -1)
    if policy.lstm_critic is not None:
        output, vf_states, kept_vf = lstm_sequence(
            policy.lstm_critic, sequence(vf_features), states.vf, episode_starts, keep_steps
        )
        latent_vf = output.reshape(n_steps * n_envs, -1)
    elif policy.shared_lstm:  # the actor's LSTM, without gradient into it from the value loss
        assert latent_pi is not None
        latent_vf = latent_pi.detach()
        vf_states = (pi_states[0].detach(), pi_states[1].detach())
        kept_vf = kept_pi
    else:  # no LSTM for the critic: a linear layer to the LSTM's width
        latent_vf = policy.critic(vf_features)
        vf_states = pi_states
        kept_vf = kept_pi
    kept = {step: RNNStates(kept_pi.get(step, pi_states), kept_vf.get(step, vf_states)) for step in keep_steps}
    return RecurrentOutput(
        None if latent_pi is None or not actor else policy.mlp_extractor.forward_actor(latent_pi),
        policy.mlp_extractor.forward_critic(latent_vf),
        RNNStates(pi_states, vf_states),
        kept,
    )
