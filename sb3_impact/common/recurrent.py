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


def states_to_device(states: RNNStates, device: th.device | str) -> RNNStates:
    return RNNStates(tuple(t.to(device) for t in states.pi), tuple(t.to(device) for t in states.vf))  # type: ignore[arg-type]


def select_envs(states: RNNStates, envs: slice | th.Tensor) -> RNNStates:
    """The states of the environments ``envs`` (columns of the ``[layers, B, H]`` states)."""
    return RNNStates((states.pi[0][:, envs], states.pi[1][:, envs]), (states.vf[0][:, envs], states.vf[1][:, envs]))


def lstm_sequence(
    lstm: nn.LSTM,
    features: th.Tensor,
    state: LSTMState,
    episode_starts: th.Tensor,
    keep_after: np.ndarray | None = None,
) -> tuple[th.Tensor, LSTMState, LSTMState | None]:
    """
    ``lstm`` over ``features`` ``[T, B, F]`` from ``state``, the state zeroed before each observation whose
    ``episode_starts`` ``[T, B]`` is 1 (RecurrentPPO's ``_process_sequence``, time-major). Returns the outputs
    ``[T, B, H]``, the state after the last step, and the state after each ``(step, env)`` of ``keep_after``
    (``[K, 2]``; states ``[layers, K, H]``), or None without it.

    Without a reset inside, one call. Otherwise each column is cut into its episodes' pieces (and after each
    ``keep_after`` step), which run as one packed batch of sequences: the pieces that start an episode from zero
    states, each column's first piece from ``state``; a piece's last state is its column's state after its last step.
    """
    n_steps, n_envs = episode_starts.shape
    keep = (1.0 - episode_starts[0]).view(1, -1, 1)
    state = (keep * state[0], keep * state[1])
    cuts = episode_starts.detach().cpu().numpy() != 0
    cuts[0] = True  # every column's first piece starts at step 0
    if keep_after is not None and len(keep_after):
        inside = keep_after[keep_after[:, 0] + 1 < n_steps]
        if not cuts[inside[:, 0] + 1, inside[:, 1]].all():
            raise ValueError("keep_after: each (step, env) must end an episode or be the last step (a time-limit end)")
    if not cuts[1:].any():
        output, state = lstm(features, state)
        kept = None
        if keep_after is not None:  # only the last step can be asked for: the final state
            envs = th.as_tensor(keep_after[:, 1], device=features.device)
            kept = (state[0][:, envs], state[1][:, envs])
        return output, state, kept

    # Pieces in column order: (env, start), their lengths up to the next cut of their column or the end.
    piece_envs, piece_starts = np.nonzero(cuts.T)
    next_starts = np.append(piece_starts[1:], n_steps)
    last_of_column = np.append(piece_envs[1:] != piece_envs[:-1], True)
    lengths = np.where(last_of_column, n_steps, next_starts) - piece_starts
    offsets = np.arange(int(lengths.max()))
    steps = np.minimum(piece_starts[None, :] + offsets[:, None], n_steps - 1)  # [max length, pieces], padding clipped
    device = features.device
    padded = features[th.as_tensor(steps, device=device), th.as_tensor(piece_envs, device=device)[None, :]]
    first = th.as_tensor(piece_starts == 0, dtype=features.dtype, device=device).view(1, -1, 1)
    columns = th.as_tensor(piece_envs, device=device)
    initial = (state[0][:, columns] * first, state[1][:, columns] * first)
    packed = nn.utils.rnn.pack_padded_sequence(padded, th.as_tensor(lengths), enforce_sorted=False)
    packed_output, (hidden, cell) = lstm(packed, initial)
    padded_output, _ = nn.utils.rnn.pad_packed_sequence(packed_output, total_length=len(offsets))
    # Back to [T, B]: step t of column e is offset t - start of its piece.
    piece_of = np.cumsum(cuts.T.reshape(-1)).reshape(n_envs, n_steps).T - 1  # [T, B] piece index
    offset_of = np.arange(n_steps)[:, None] - piece_starts[piece_of]
    flat = th.as_tensor((offset_of * len(piece_envs) + piece_of).reshape(-1), device=device)
    output = padded_output.reshape(-1, padded_output.shape[-1])[flat].reshape(n_steps, n_envs, -1)
    last_pieces = th.as_tensor(np.flatnonzero(last_of_column), device=device)
    final_state = (hidden[:, last_pieces], cell[:, last_pieces])
    kept = None
    if keep_after is not None:  # the piece that ends at (step, env) holds the state after that step
        ending = th.as_tensor(piece_of[keep_after[:, 0], keep_after[:, 1]], device=device)
        kept = (hidden[:, ending], cell[:, ending])
    return output, final_state, kept


class RecurrentOutput(NamedTuple):
    """What :func:`recurrent_forward` returns: latents flat ``[T * B, ...]`` (after the MLP extractor)."""

    latent_pi: th.Tensor | None  # None when only the critic was asked for
    latent_vf: th.Tensor
    states: RNNStates  # after the last step
    kept_states: RNNStates | None  # after each (step, env) of keep_after, [layers, K, H]


def recurrent_forward(
    policy: RecurrentActorCriticPolicy,
    observations: th.Tensor | TensorDict,
    states: RNNStates,
    episode_starts: th.Tensor,
    *,
    actor: bool = True,
    keep_after: np.ndarray | None = None,
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
    kept_pi: LSTMState | None = None
    kept_vf: LSTMState | None = None
    latent_pi = None
    if actor or policy.shared_lstm:
        output, pi_states, kept_pi = lstm_sequence(
            policy.lstm_actor, sequence(pi_features), states.pi, episode_starts, keep_after
        )
        latent_pi = output.reshape(n_steps * n_envs, -1)
    if policy.lstm_critic is not None:
        output, vf_states, kept_vf = lstm_sequence(
            policy.lstm_critic, sequence(vf_features), states.vf, episode_starts, keep_after
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
    kept = None
    if keep_after is not None:  # a part that did not run (the actor, a critic without LSTM) gets zeros: unused
        zeros = th.zeros((states.pi[0].shape[0], len(keep_after), states.pi[0].shape[2]), device=states.pi[0].device)
        kept = RNNStates(kept_pi or (zeros, zeros), kept_vf or (zeros, zeros))
    return RecurrentOutput(
        None if latent_pi is None or not actor else policy.mlp_extractor.forward_actor(latent_pi),
        policy.mlp_extractor.forward_critic(latent_vf),
        RNNStates(pi_states, vf_states),
        kept,
    )
