"""
rl-zoo3 hyperparameter samplers for ``python -m rl_zoo3.train --algo ALGO --env ENV -optimize``.

Each algorithm has a sampler (``trial -> constructor arguments``) and a converter (``trial.params ->
constructor arguments``, what rl-zoo3 uses to rebuild a stored trial). Both follow rl-zoo3's conventions:
the trial records ``one_minus_gamma``, ``one_minus_gae_lambda``, ``*_pow`` sizes and ``net_arch`` /
``activation_fn`` names, and rl-zoo3's on-policy converter turns them into arguments. Only what rl-zoo3 does not
do is written here: the algorithms' own parameters, ``log_std_init``/``ortho_init`` and the size rules below.

Size rules (decided so that every sampled trial builds, written once in the converters):

- ``batch_size`` (IMPACT, PTR-PPO) is at most ``n_steps``: the converter only sees ``trial.params``, not
  ``n_envs``, and ``n_steps <= n_steps * n_envs`` holds for any number of envs.
- With a recurrent policy (the entry's ``policy`` is ``MlpLstmPolicy``, ``CnnLstmPolicy`` or
  ``MultiInputLstmPolicy``), IMPACT and IMPALA train on minibatches of whole segments, so the trial draws
  ``minibatch_segments_pow`` in ``[0, log2(n_envs)]`` instead of ``batch_size_pow``/``batch_size`` and the
  converter sets ``batch_size = n_steps * 2**minibatch_segments_pow`` (IMPALA's ``value_batch_size`` too); such a
  trial also draws the LSTM's ``lstm_hidden_size`` and ``enable_critic_lstm``. The sampler reads whether the policy
  is recurrent from the trial's ``recurrent_policy`` user attribute, which the optimiser sets
  (:func:`sb3_impact.zoo.patch_experiment_manager`).
- PTR-PPO's ``memory_size`` is at least ``replay_batch``.
- V-RACER's ``buffer_size`` is at least ``batch_size``.
- PTR-PPO replays at most 8 rounds of at most 16 segments per rollout: a round of ``replay_batch`` segments
  of ``n_steps`` costs as much as ``replay_batch / n_envs`` epochs of PPO, and larger values made single
  trials take tens of minutes without being what the paper does (2 + 8 epochs, replay batch = n_envs).

PPO-AMBER's sampler searches only what AMBER adds to PPO (its docstring says why); PPO's own hyperparameters
come from the yml entry.

Continuous action spaces (rl-zoo3 passes ``n_actions > 0`` for ``Box``) also sample the policy's
``log_std_init``; discrete ones do not.
"""

from collections.abc import Callable
from typing import Any

import optuna
from torch import nn

from sb3_impact.vracer.policies import Softsign

Sampler = Callable[[optuna.Trial, int, int, dict], dict[str, Any]]
Converter = Callable[[dict[str, Any]], dict[str, Any]]

# Keys of trial.params that belong in policy_kwargs, not in the constructor.
POLICY_KEYS = ("log_std_init", "ortho_init", "lstm_hidden_size", "enable_critic_lstm")
VRACER_NET_ARCH = {"small": [64, 64], "medium": [128, 128], "big": [256, 256], "large": [128, 128, 128]}
# ``Softsign`` is V-RACER's default activation: nn.Softsign's values with a cheaper backward.
VRACER_ACTIVATION = {"softsign": Softsign, "tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


def _is_recurrent_trial(trial: optuna.Trial) -> bool:
    """Whether the entry this trial tunes has a recurrent policy (the user attribute the optimiser sets)."""
    return bool(trial.user_attrs.get("recurrent_policy", False))


def _sample_recurrent(trial: optuna.Trial, n_envs: int) -> dict[str, Any]:
    """
    A recurrent trial's minibatch size in whole segments (a power of two no larger than ``n_envs``) and its LSTM:
    the hidden size and whether the critic has an LSTM of its own (the keys rl-zoo3 names for RecurrentPPO; the
    sampled ``policy_kwargs`` replace the entry's, so the LSTM size is searched rather than reset to its default).
    """
    return {
        "minibatch_segments_pow": trial.suggest_int("minibatch_segments_pow", 0, max(int(n_envs).bit_length() - 1, 0)),
        "lstm_hidden_size": trial.suggest_categorical("lstm_hidden_size", [16, 32, 64, 128, 256]),
        "enable_critic_lstm": trial.suggest_categorical("enable_critic_lstm", [False, True]),
    }


def _sample_actor_critic(trial: optuna.Trial, n_actions: int, n_steps_range: tuple[int, int]) -> dict[str, Any]:
    """Raw trial values shared by the actor-critic algorithms (rl-zoo3's PPO space, less PPO's own keys)."""
    params: dict[str, Any] = {
        "n_steps_pow": trial.suggest_int("n_steps_pow", *n_steps_range),
        "one_minus_gamma": trial.suggest_float("one_minus_gamma", 0.0001, 0.03, log=True),
        "one_minus_gae_lambda": trial.suggest_float("one_minus_gae_lambda", 0.0001, 0.1, log=True),
        "learning_rate": trial.suggest_float("learning_rate", 1e-5, 0.002, log=True),
        "ent_coef": trial.suggest_float("ent_coef", 1e-8, 0.1, log=True),
        "max_grad_norm": trial.suggest_float("max_grad_norm", 0.3, 5.0, log=True),
        "net_arch": trial.suggest_categorical("net_arch", ["tiny", "small", "medium"]),
        "activation_fn": trial.suggest_categorical("activation_fn", ["tanh", "relu"]),
        "ortho_init": trial.suggest_categorical("ortho_init", [True, False]),
    }
    if n_actions > 0:
        params["log_std_init"] = trial.suggest_float("log_std_init", -3.0, 1.0)
    return params


def _sample_ppo_epochs(trial: optuna.Trial) -> dict[str, Any]:
    """PPO's minibatch size, epochs and clip range (PTR-PPO searches them; PPO-AMBER takes them from its entry)."""
    return {
        "batch_size_pow": trial.suggest_int("batch_size_pow", 5, 10),
        "n_epochs": trial.suggest_categorical("n_epochs", [1, 2, 5, 10, 20]),
        "clip_range": trial.suggest_categorical("clip_range", [0.1, 0.2, 0.3, 0.4]),
    }


def convert_actor_critic_params(params: dict[str, Any]) -> dict[str, Any]:
    """rl-zoo3's on-policy converter, plus ``log_std_init``/``ortho_init`` into ``policy_kwargs``."""
    # Imported here: importing rl_zoo3.hyperparams_opt runs the startup hook, which imports this module.
    from rl_zoo3.hyperparams_opt import convert_onpolicy_params

    params = dict(params)
    policy_extras = {key: params.pop(key) for key in POLICY_KEYS if key in params}
    hyperparams = convert_onpolicy_params(params)
    hyperparams["policy_kwargs"].update(policy_extras)
    if "minibatch_segments_pow" in params:
        hyperparams.pop("minibatch_segments_pow", None)
        hyperparams["batch_size"] = hyperparams["n_steps"] * 2 ** params["minibatch_segments_pow"]
    elif hyperparams.get("batch_size") is not None:
        hyperparams["batch_size"] = min(hyperparams["batch_size"], hyperparams["n_steps"])
    return hyperparams


def sample_impact_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """
    IMPACT: segment length, minibatch size, circular buffer size N, reuses per batch K, target-worker clip rho,
    surrogate clip, KL penalty and the shared actor-critic space (gamma, lambda, learning rate, network...).
    """
    params = _sample_actor_critic(trial, n_actions, (4, 10))
    if _is_recurrent_trial(trial):
        params.update(_sample_recurrent(trial, n_envs))
    else:
        params["batch_size_pow"] = trial.suggest_int("batch_size_pow", 5, 10)
    params.update(
        circular_buffer_size=trial.suggest_categorical("circular_buffer_size", [1, 2, 4, 8, 16]),
        max_batch_reuse=trial.suggest_categorical("max_batch_reuse", [1, 2, 5, 10, 20]),
        target_worker_clip=trial.suggest_float("target_worker_clip", 1.0, 4.0),
        clip_range=trial.suggest_categorical("clip_range", [0.1, 0.2, 0.3, 0.4]),
        kl_coef=trial.suggest_categorical("kl_coef", [0.0, 0.1, 1.0]),
        vf_coef=trial.suggest_float("vf_coef", 0.25, 1.0),
    )
    return convert_actor_critic_params(params)


def sample_impala_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """
    IMPALA: unroll length, passes over each batch and their minibatch size, value-only passes, V-trace clips,
    advantage normalisation and the shared actor-critic space.
    """
    params = _sample_actor_critic(trial, n_actions, (3, 9))
    if _is_recurrent_trial(trial):
        params.update(_sample_recurrent(trial, n_envs))
    else:
        # None: one gradient step on the whole batch per pass (the paper's).
        params["batch_size"] = trial.suggest_categorical("batch_size", [None, 32, 64, 128, 256, 512])
    params.update(
        n_epochs=trial.suggest_categorical("n_epochs", [1, 2, 4, 8]),
        n_value_epochs=trial.suggest_categorical("n_value_epochs", [0, 1, 4, 10]),
        vtrace_clip_rho_threshold=trial.suggest_categorical("vtrace_clip_rho_threshold", [1.0, 2.0]),
        vtrace_clip_pg_rho_threshold=trial.suggest_categorical("vtrace_clip_pg_rho_threshold", [1.0, 2.0]),
        normalize_advantage=trial.suggest_categorical("normalize_advantage", [True, False]),
        vf_coef=trial.suggest_float("vf_coef", 0.25, 1.0),
    )
    return convert_impala_params(params)


def convert_impala_params(params: dict[str, Any]) -> dict[str, Any]:
    """Actor-critic conversion; a recurrent trial's value passes take the same whole-segment minibatches."""
    hyperparams = convert_actor_critic_params(params)
    if "minibatch_segments_pow" in params:
        hyperparams["value_batch_size"] = hyperparams["batch_size"]
    return hyperparams


def sample_ppo_amber_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """
    PPO-AMBER: AMBER's own hyperparameters on top of the yml entry's PPO ones: the replay length L, the
    batch-drop factor eps_b (paper, eq. 10) and the clip range (replayed batches are further from the policy,
    so the clip that suits PPO need not suit AMBER). Everything else comes from the entry, which is rl-zoo3's
    tuned PPO entry for the task, so a trial changes only what AMBER adds to PPO. For a task without one, tune
    SB3 PPO first (``--algo ppo -optimize``) and copy its best trial into the entry (``-conf``).
    """
    return convert_ppo_amber_params(
        {
            "clip_range": trial.suggest_categorical("clip_range", [0.1, 0.2, 0.3, 0.4]),
            "replay_length": trial.suggest_categorical("replay_length", [1, 2, 4, 8, 16]),
            "batch_drop_factor": trial.suggest_float("batch_drop_factor", 0.01, 1.0, log=True),
        }
    )


def convert_ppo_amber_params(params: dict[str, Any]) -> dict[str, Any]:
    """AMBER's sampled keys are constructor arguments as they are."""
    return dict(params)


def sample_ptr_ppo_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """PTR-PPO: PPO's space plus the trajectory priority, replay rounds, segments per round and memory size."""
    params = _sample_actor_critic(trial, n_actions, (5, 11))
    params.update(_sample_ppo_epochs(trial))
    params.update(
        priority=trial.suggest_categorical("priority", ["max", "mean", "reward"]),
        priority_alpha=trial.suggest_float("priority_alpha", 0.0, 1.0),
        replay_rounds=trial.suggest_categorical("replay_rounds", [0, 1, 2, 4, 8]),
        replay_batch_pow=trial.suggest_int("replay_batch_pow", 0, 4),
        memory_size_pow=trial.suggest_int("memory_size_pow", 4, 11),
        eps_marg=trial.suggest_float("eps_marg", 0.05, 0.5),
    )
    return convert_ptr_ppo_params(params)


def convert_ptr_ppo_params(params: dict[str, Any]) -> dict[str, Any]:
    """Actor-critic conversion, then ``replay_batch = 2**replay_batch_pow`` and ``memory_size >= replay_batch``."""
    params = dict(params)
    replay_batch = 2 ** params.pop("replay_batch_pow")
    memory_size = max(2 ** params.pop("memory_size_pow"), replay_batch)
    return {**convert_actor_critic_params(params), "replay_batch": replay_batch, "memory_size": memory_size}


def sample_vracer_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """
    V-RACER with ReF-ER: learning rate, batch size, gamma, replay memory size, the ReF-ER constants C (cut-off),
    D (target fraction of far-policy samples) and A (penalty annealing), network and activation.
    """
    params = {
        "one_minus_gamma": trial.suggest_float("one_minus_gamma", 0.0001, 0.03, log=True),
        "learning_rate": trial.suggest_float("learning_rate", 1e-5, 0.002, log=True),
        "batch_size_pow": trial.suggest_int("batch_size_pow", 6, 10),
        "buffer_size_pow": trial.suggest_int("buffer_size_pow", 14, 20),
        "refer_c": trial.suggest_float("refer_c", 1.5, 10.0, log=True),
        "refer_d": trial.suggest_float("refer_d", 0.01, 0.3, log=True),
        "refer_a": trial.suggest_float("refer_a", 1e-8, 1e-5, log=True),
        "net_arch": trial.suggest_categorical("net_arch", list(VRACER_NET_ARCH)),
        "activation_fn": trial.suggest_categorical("activation_fn", list(VRACER_ACTIVATION)),
    }
    return convert_vracer_params(params)


def convert_vracer_params(params: dict[str, Any]) -> dict[str, Any]:
    """
    ``trial.params`` to V-RACER's arguments. rl-zoo3's off-policy converter is not used: its network table has
    neither V-RACER's default 128 x 128 nor the paper's Softsign activation.
    """
    params = dict(params)
    batch_size = 2 ** params.pop("batch_size_pow")
    return {
        "gamma": 1 - params.pop("one_minus_gamma"),
        "batch_size": batch_size,
        "buffer_size": max(2 ** params.pop("buffer_size_pow"), batch_size),
        "policy_kwargs": {
            "net_arch": VRACER_NET_ARCH[params.pop("net_arch")],
            "activation_fn": VRACER_ACTIVATION[params.pop("activation_fn")],
        },
        **params,
    }


REFER_CONSTANTS = ("refer_c", "refer_d", "refer_a")


def _sample_refer_constants(trial: optuna.Trial) -> dict[str, float]:
    """ReF-ER's C (cut-off), D (target far-policy fraction) and A (annealing), the ranges V-RACER samples."""
    return {
        "refer_c": trial.suggest_float("refer_c", 1.5, 10.0, log=True),
        "refer_d": trial.suggest_float("refer_d", 0.01, 0.3, log=True),
        "refer_a": trial.suggest_float("refer_a", 1e-8, 1e-5, log=True),
    }


def _without_refer_constants(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    refer = {key: params[key] for key in REFER_CONSTANTS if key in params}
    return {key: value for key, value in params.items() if key not in refer}, refer


def sample_sac_refer_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """SAC with ReF-ER: rl-zoo3's SAC space plus ReF-ER's C, D and A."""
    from rl_zoo3.hyperparams_opt import sample_sac_params  # imported here: rl_zoo3's import runs our hook

    return {**sample_sac_params(trial, n_actions, n_envs, additional_args), **_sample_refer_constants(trial)}


def sample_td3_refer_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict) -> dict[str, Any]:
    """
    TD3 with ReF-ER: rl-zoo3's TD3 space, except that the exploration noise is always Gaussian with
    ``noise_std`` in [0.05, 0.5] (it is the policy's sigma in rho; rl-zoo3 also samples Ornstein-Uhlenbeck or no
    noise, which ReF-ER cannot use), plus ReF-ER's C, D and A.
    """
    import numpy as np
    from stable_baselines3.common.noise import NormalActionNoise

    params = {
        "one_minus_gamma": trial.suggest_float("one_minus_gamma", 0.0001, 0.03, log=True),
        "batch_size_pow": trial.suggest_int("batch_size_pow", 2, 11),
        "learning_rate": trial.suggest_float("learning_rate", 1e-5, 0.002, log=True),
        "train_freq": trial.suggest_int("train_freq", 1, 10),
        "tau": trial.suggest_float("tau", 0.001, 0.08, log=True),
        "noise_std": trial.suggest_float("noise_std", 0.05, 0.5),
        "net_arch": trial.suggest_categorical("net_arch", ["small", "medium", "big"]),
        **_sample_refer_constants(trial),
    }
    converted = convert_refer_offpolicy_params(params)
    del converted["noise_type"]
    converted["action_noise"] = NormalActionNoise(np.zeros(n_actions), converted.pop("noise_std") * np.ones(n_actions))
    return converted


def convert_refer_offpolicy_params(params: dict[str, Any]) -> dict[str, Any]:
    """
    ``trial.params`` to SACReFER/TD3ReFER arguments: rl-zoo3's off-policy converter, ReF-ER's constants as they are.
    A TD3 trial's noise is given as rl-zoo3 gives it, ``noise_type: normal`` and ``noise_std``, for rl-zoo3 to build
    (the converter does not know the number of actions).
    """
    from rl_zoo3.hyperparams_opt import convert_offpolicy_params

    base, refer = _without_refer_constants(params)
    if "noise_std" in base:
        base["noise_type"] = "normal"
    return {**convert_offpolicy_params(base), **refer}


SAMPLERS: dict[str, Sampler] = {
    "impact": sample_impact_params,
    "impala": sample_impala_params,
    "ppo_amber": sample_ppo_amber_params,
    "ptr_ppo": sample_ptr_ppo_params,
    "vracer": sample_vracer_params,
    "sac_refer": sample_sac_refer_params,
    "td3_refer": sample_td3_refer_params,
}
CONVERTERS: dict[str, Converter] = {
    "impact": convert_actor_critic_params,
    "impala": convert_impala_params,
    "ppo_amber": convert_ppo_amber_params,
    "ptr_ppo": convert_ptr_ppo_params,
    "vracer": convert_vracer_params,
    "sac_refer": convert_refer_offpolicy_params,
    "td3_refer": convert_refer_offpolicy_params,
}


def register_samplers() -> None:
    """Add the samplers and converters to rl-zoo3's tables (``HYPERPARAMS_SAMPLER``/``_CONVERTER``), idempotent."""
    from rl_zoo3 import hyperparams_opt

    for name, sampler in SAMPLERS.items():
        hyperparams_opt.HYPERPARAMS_SAMPLER.setdefault(name, sampler)
        hyperparams_opt.HYPERPARAMS_CONVERTER.setdefault(name, CONVERTERS[name])
