"""V-RACER with Remember-and-Forget Experience Replay (Novati & Koumoutsakos, ICML 2019)."""

import io
import math
import pathlib
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.noise import ActionNoise
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.save_util import load_from_pkl
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule
from stable_baselines3.common.utils import obs_as_tensor, update_learning_rate

from sb3_impact.common.observations import Observation, stack_observations
from sb3_impact.vracer.memory import EpisodeReplayMemory
from sb3_impact.vracer.policies import CnnPolicy, MlpPolicy, MultiInputPolicy, VRACERPolicy
from sb3_impact.vracer.refer import (
    annealed_c_max,
    annealed_lr_factor,
    diag_gaussian_kl,
    diag_gaussian_log_prob,
    is_near_policy,
    update_beta,
)

SelfVRACER = TypeVar("SelfVRACER", bound="VRACER")

# Without rule 1 nothing bounds rho; section 5.3 clips it at 1e3 (ReF-ER-2 and plain ER).
UNBOUNDED_RHO_CLIP = 1e3
REWARD_SCALE_EPSILON = 1e-7  # appendix B


def check_refer_rules(refer_rules: Any) -> tuple[int, ...]:
    """``refer_rules`` as a sorted tuple drawn from ``{1, 2}``; ValueError otherwise."""
    message = f"refer_rules must be a subset of (1, 2) such as (1, 2), (1,), (2,) or (), got {refer_rules!r}"
    if isinstance(refer_rules, (str, bytes)):
        raise ValueError(message)
    try:
        rules = tuple(refer_rules)
    except TypeError:
        raise ValueError(message) from None
    if any(isinstance(rule, bool) or rule not in (1, 2) for rule in rules) or len(set(rules)) != len(rules):
        raise ValueError(message)
    return tuple(sorted(int(rule) for rule in rules))


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
        rhos = th.exp(th.clamp(log_rhos, max=math.log(c_max)))  # unchanged where near
    else:
        near = th.ones_like(log_rhos)
        rhos = th.exp(th.clamp(log_rhos, max=math.log(UNBOUNDED_RHO_CLIP)))
    if 2 not in refer_rules:
        beta = 1.0
    rho_bars = th.exp(th.clamp(log_rhos, max=0.0))
    advantages = q_ret - values.detach()
    v_tbc = values.detach() + rho_bars * advantages  # eq. 7
    policy_losses = -rhos * advantages * log_pi  # its gradient is that of eq. 5, -rho (Q_ret - V)
    value_losses = 0.5 * (values - v_tbc).pow(2)  # eq. 9
    loss = (beta * near * (policy_losses + value_losses)).mean()
    if 2 in refer_rules:
        loss = loss + (1.0 - beta) * kl.mean()
    parts = {
        "log_rhos": log_rhos,
        "policy_loss": (near * -(rhos * advantages)).mean().detach(),
        "value_loss": (near * value_losses).mean().detach(),
        "kl_mu_pi": kl.mean().detach(),
        "rho_mean": th.exp(th.clamp(log_rhos, max=math.log(UNBOUNDED_RHO_CLIP))).mean(),
        "batch_near_fraction": near.mean(),
    }
    return loss, parts


class VRACER(OffPolicyAlgorithm):
    """
    V-RACER (off-policy actor-critic with Retrace / V-tbc) trained with ReF-ER.

    Paper: https://arxiv.org/abs/1807.05827 (section 2, section 3, appendices A-C). One network outputs
    ``V(s)`` and a Gaussian policy. Whole episodes are kept in a replay memory of ``buffer_size`` steps
    (FIFO by episode); every gradient step samples ``batch_size`` steps uniformly and follows Algorithm 3:
    the off-policy gradient ``rho (Q_ret - V) grad log pi`` (eq. 5) and the V-tbc value loss (eqs. 7, 9),
    skipped for far-policy samples (rule 1: ``|log rho| >= log c_max``), weighted by ``beta`` against the
    penalty ``grad KL(mu || pi)`` on every sample (rule 2, eqs. 10-12). ``c_max`` and the learning rate
    are annealed with the environment step (eq. 13).

    :param policy: The policy model to use (MlpPolicy, CnnPolicy, MultiInputPolicy, or a VRACERPolicy subclass)
    :param env: The environment to learn from (if registered in Gym, can be str); Box action spaces only
    :param learning_rate: eta, a constant or a schedule of the remaining progress (1 to 0); the effective rate is
        ``learning_rate(progress) / (1 + refer_a * t)`` (eq. 13)
    :param buffer_size: N, the number of steps the replay memory holds (paper: 2^18)
    :param learning_starts: N_start, environment steps collected before the first gradient step; the state
        statistics of appendix B are computed from them. Unlike SAC/TD3 these steps follow the policy
        (V-RACER needs the behaviour mu of every stored action)
    :param batch_size: B, steps per gradient step (paper: 256)
    :param gamma: Discount factor (paper: 0.995)
    :param train_freq: Update the model every ``train_freq`` steps (or ``(n, "episode")``)
    :param gradient_steps: Gradient steps after each rollout; -1 (default) gives one gradient step per
        environment step (F = 1 in the paper) whatever the number of environments
    :param refer_c: C of ``c_max(t) = 1 + C / (1 + A t)`` (paper: 4)
    :param refer_a: A, the annealing rate of c_max and of the learning rate (paper: 5e-7)
    :param refer_d: D, the target fraction of far-policy steps in the memory (paper: 0.1)
    :param refer_rules: the ReF-ER rules in use: (1, 2) is ReF-ER, (1,) ReF-ER-1, (2,) ReF-ER-2, () plain ER.
        Without rule 1 the importance weights are clipped at 1e3 (section 5.3)
    :param retrace_interval: gradient steps between two recomputations of every stored Q_ret from the stored
        V and rho (and of the reward scale); sampled steps also update Q_ret one step back at once
    :param standardize_states: standardise observations with the replay-memory mean and std (appendix B)
    :param scale_rewards: divide rewards by ``sqrt(E[r^2])`` over the replay memory (appendix B)
    :param stats_window_size: Window size for the rollout logging (episodes)
    :param tensorboard_log: the log location for tensorboard (if None, no logging)
    :param policy_kwargs: additional arguments to be passed to the policy on creation
    :param verbose: Verbosity level: 0 for no output, 1 for info messages, 2 for debug messages
    :param seed: Seed for the pseudo random generators
    :param device: Device (cpu, cuda, ...) on which the code should be run
    :param _init_setup_model: Whether or not to build the network at the creation of the instance
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpPolicy": MlpPolicy,
        "CnnPolicy": CnnPolicy,
        "MultiInputPolicy": MultiInputPolicy,
    }
    policy: VRACERPolicy
    replay_buffer: EpisodeReplayMemory  # type: ignore[assignment]

    def __init__(
        self,
        policy: str | type[VRACERPolicy],
        env: GymEnv | str,
        learning_rate: float | Schedule = 1e-4,
        buffer_size: int = 2**18,
        learning_starts: int = 10_000,
        batch_size: int = 256,
        gamma: float = 0.995,
        train_freq: int | tuple[int, str] = 1,
        gradient_steps: int = -1,
        refer_c: float = 4.0,
        refer_a: float = 5e-7,
        refer_d: float = 0.1,
        refer_rules: tuple[int, ...] | list[int] = (1, 2),
        retrace_interval: int = 100,
        standardize_states: bool = True,
        scale_rewards: bool = True,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: th.device | str = "auto",
        _init_setup_model: bool = True,
    ) -> None:
        if not (refer_c > 0 and math.isfinite(refer_c)):
            raise ValueError(f"refer_c must be a finite positive number, got {refer_c}")
        if not 0 < refer_d < 1:
            raise ValueError(f"refer_d must be in (0, 1), got {refer_d}")
        if not (refer_a >= 0 and math.isfinite(refer_a)):
            raise ValueError(f"refer_a must be a finite non-negative number, got {refer_a}")
        self.refer_rules = check_refer_rules(refer_rules)
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if buffer_size < batch_size:
            raise ValueError(f"buffer_size ({buffer_size}) must be at least batch_size ({batch_size})")
        if retrace_interval < 1:
            raise ValueError(f"retrace_interval must be a positive number of gradient steps, got {retrace_interval}")
        if not 0 < gamma <= 1:
            raise ValueError(f"gamma must be in (0, 1], got {gamma}")
        if learning_starts < 0:
            raise ValueError(f"learning_starts must be non-negative, got {learning_starts}")
        super().__init__(
            policy,
            env,
            learning_rate,
            buffer_size=buffer_size,
            learning_starts=learning_starts,
            batch_size=batch_size,
            tau=1.0,
            gamma=gamma,
            train_freq=train_freq,
            gradient_steps=gradient_steps,
            action_noise=None,
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            verbose=verbose,
            device=device,
            support_multi_env=True,
            seed=seed,
            use_sde=False,
            sde_support=False,
        )
        if env is not None and not (isinstance(self.action_space, spaces.Box) and len(self.action_space.shape) == 1):
            raise ValueError(
                f"Unsupported action space {self.action_space}: V-RACER needs a one-dimensional Box action space "
                "(its policy is a diagonal Gaussian)"
            )
        self.refer_c = refer_c
        self.refer_a = refer_a
        self.refer_d = refer_d
        self.retrace_interval = retrace_interval
        self.standardize_states = standardize_states
        self.scale_rewards = scale_rewards
        self.beta = 1.0
        self.reward_scale = 1.0
        self.skipped_gradient_steps = 0
        self._memory_estimates_stale = True
        self._last_behaviour: tuple[np.ndarray, np.ndarray] | None = None
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        self.refer_rules = check_refer_rules(self.refer_rules)  # a list after a JSON round trip (load)
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        if self.replay_buffer is None:
            self.replay_buffer = EpisodeReplayMemory(
                self.buffer_size, self.observation_space, self.action_space, n_envs=self.n_envs, gamma=self.gamma
            )
        self.policy = self.policy_class(self.observation_space, self.action_space, self.lr_schedule, **self.policy_kwargs)
        self.policy = self.policy.to(self.device)
        self._convert_train_freq()

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_last_behaviour"]

    @property
    def c_max(self) -> float:
        """``c_max(t) = 1 + C / (1 + A t)`` at the current environment step (eq. 13)."""
        return annealed_c_max(self.refer_c, self.refer_a, self.num_timesteps)

    def current_learning_rate(self) -> float:
        """``eta(t) = learning_rate(progress) / (1 + A t)`` (eq. 13)."""
        return self.lr_schedule(self._current_progress_remaining) * annealed_lr_factor(self.refer_a, self.num_timesteps)

    # --- collection -------------------------------------------------------------------------------

    def _sample_action(
        self, learning_starts: int, action_noise: ActionNoise | None = None, n_envs: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        """Sample the policy (also during warm-up) and keep mu_t and V(s_t) for the memory."""
        assert self._last_obs is not None, "self._last_obs was not set"
        obs_tensor, _ = self.policy.obs_to_tensor(self._last_obs)
        with th.no_grad():
            actions, params, values = self.policy.act(obs_tensor)
        self._last_behaviour = (params.cpu().numpy(), values.cpu().numpy())
        buffer_actions = actions.cpu().numpy().reshape((-1, *self.action_space.shape))
        env_actions = self.policy.unscale_action(np.clip(buffer_actions, -1.0, 1.0))
        return env_actions, buffer_actions

    def _values_of(self, observations: list[Observation]) -> np.ndarray:
        obs_tensor, _ = self.policy.obs_to_tensor(stack_observations(observations))
        with th.no_grad():
            return self.policy.predict_values(obs_tensor).cpu().numpy().reshape(-1)

    def _store_transition(
        self,
        replay_buffer: ReplayBuffer,
        buffer_action: np.ndarray,
        new_obs: Observation,
        reward: np.ndarray,
        dones: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """
        Stage the step in the memory; an ended episode enters it with ``V(s_T)`` if it was truncated.

        The stored observations are the ones the policy acted on (with a VecNormalize wrapper, the normalised
        ones; V-RACER standardises states itself, so one is not needed); the rewards are the original ones.
        """
        assert self._last_behaviour is not None
        rewards = self._vec_normalize_env.get_original_reward() if self._vec_normalize_env is not None else reward
        n_envs = len(dones)
        truncateds = np.array([bool(info.get("TimeLimit.truncated", False)) for info in infos])
        final_observations: list[Observation | None] = [None] * n_envs
        final_values = np.zeros(n_envs, dtype=np.float32)
        for env_index in range(n_envs):
            if dones[env_index]:
                final_observations[env_index] = infos[env_index].get("terminal_observation")
        truncated_envs = [i for i in range(n_envs) if dones[i] and truncateds[i] and final_observations[i] is not None]
        if truncated_envs:
            final_values[truncated_envs] = self._values_of([final_observations[i] for i in truncated_envs])
        truncateds &= np.array([obs is not None for obs in final_observations])  # no s_T: treat the end as terminal
        params, values = self._last_behaviour
        self.replay_buffer.add(
            self._last_obs,
            buffer_action,
            rewards,
            params,
            values,
            dones,
            truncateds,
            final_observations,
            final_values,
            new_obs,
        )
        self._last_obs = new_obs  # type: ignore[assignment]

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        reset_num_timesteps: bool = True,
        tb_log_name: str = "run",
        progress_bar: bool = False,
    ) -> tuple[int, BaseCallback]:
        # The environments are about to be reset: end the running episodes as truncated (bootstrapping from
        # the observation that followed their last step) so that none of their steps is lost.
        if reset_num_timesteps or self._last_obs is None:
            self.replay_buffer.close_staged_episodes(self._values_of)
        if self.env is not None and self.replay_buffer.n_envs != self.env.num_envs:
            self.replay_buffer.set_n_envs(self.env.num_envs)
        return super()._setup_learn(total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar)

    # --- replay memory persistence -------------------------------------------------------------------

    def load_replay_buffer(self, path: str | pathlib.Path | io.BufferedIOBase, truncate_last_traj: bool = True) -> None:
        """Load a replay memory saved with ``save_replay_buffer`` (``truncate_last_traj`` is unused)."""
        memory = load_from_pkl(path, self.verbose)
        if not isinstance(memory, EpisodeReplayMemory):
            raise TypeError(f"expected a pickled EpisodeReplayMemory, got {type(memory).__name__}")
        if memory.n_envs != self.n_envs:  # its running episodes belong to other environments: end them now
            memory.close_staged_episodes(self._values_of)
            memory.set_n_envs(self.n_envs)
        self.replay_buffer = memory
        self._memory_estimates_stale = True

    # --- training -------------------------------------------------------------------------------------

    def _initialize_statistics(self) -> None:
        """Appendix B: state mean/std from the memory, once, before the first gradient step."""
        if self.standardize_states and not bool(self.policy.obs_standardizer.initialized):
            self.policy.obs_standardizer.set_statistics(self.replay_buffer.observation_statistics())
            # The stored V(s_T) were computed before standardisation: refresh them with Q_ret
            self._memory_estimates_stale = True

    def _update_memory_estimates(self) -> None:
        """Reward scale (eq. 16), V(s_T) of truncated episodes, and every Q_ret from the stored V and rho (eq. 8)."""
        memory = self.replay_buffer
        if self.scale_rewards:
            self.reward_scale = memory.root_mean_square_reward() + REWARD_SCALE_EPSILON
        memory.reward_scale = self.reward_scale
        last_slots, final_observations = memory.truncated_episode_ends()
        if len(last_slots):
            memory.set_last_values(last_slots, self._values_of(final_observations))
        memory.recompute_q_ret()
        self._memory_estimates_stale = False

    def train(self, gradient_steps: int, batch_size: int = 256) -> None:
        memory = self.replay_buffer
        if len(memory) < batch_size:  # no complete episodes yet: nothing to learn from
            self.skipped_gradient_steps += gradient_steps
            self.logger.record("train/skipped_gradient_steps", self.skipped_gradient_steps)
            return
        self.policy.set_training_mode(True)
        self._initialize_statistics()
        sums: dict[str, float] = {}
        for _ in range(gradient_steps):
            if self._memory_estimates_stale or self._n_updates % self.retrace_interval == 0:
                self._update_memory_estimates()
            c_max, learning_rate = self.c_max, self.current_learning_rate()
            update_learning_rate(self.policy.optimizer, learning_rate)

            slots = memory.sample_slots(batch_size)
            observations = obs_as_tensor(memory.observations_at(slots), self.device)
            actions = th.as_tensor(memory.actions[slots], device=self.device)
            behaviour = th.as_tensor(memory.behaviour_params[slots], device=self.device)
            q_ret = th.as_tensor(memory.q_ret[slots], device=self.device)
            mu_mean, mu_log_std = behaviour.chunk(2, dim=1)

            mean, log_std, values = self.policy.forward_parts(observations)
            log_pi = diag_gaussian_log_prob(actions, mean, log_std)
            log_mu = diag_gaussian_log_prob(actions, mu_mean, mu_log_std)
            kl = diag_gaussian_kl(mu_mean, mu_log_std, mean, log_std)  # D_KL(mu || pi), eq. 11
            loss, parts = refer_vracer_loss(log_pi, log_mu, values, q_ret, kl, c_max, self.beta, self.refer_rules)

            self.policy.optimizer.zero_grad()
            loss.backward()
            self.policy.optimizer.step()

            # Algorithm 3: store the current V and rho of the sampled steps, update Q_ret one step back
            memory.refresh(slots, values.detach().cpu().numpy(), parts.pop("log_rhos").cpu().numpy())
            far = memory.far_fraction(c_max)
            if 2 in self.refer_rules:
                self.beta = update_beta(self.beta, far, self.refer_d, learning_rate)  # eq. 12
            self._n_updates += 1
            for key, value in (*((key, value.item()) for key, value in parts.items()), ("far_fraction", far)):
                sums[key] = sums.get(key, 0.0) + value

        for key, value in sums.items():
            self.logger.record(f"train/{key}", value / gradient_steps)
        self.logger.record("train/beta", self.beta)
        self.logger.record("train/c_max", self.c_max)
        self.logger.record("train/learning_rate", self.current_learning_rate())
        self.logger.record("train/std", th.exp(self.policy.log_std()).mean().item())
        self.logger.record("train/reward_scale", self.reward_scale)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/memory_steps", len(memory))
        self.logger.record("train/memory_evicted_steps", memory.n_steps_evicted)
        if self.skipped_gradient_steps:
            self.logger.record("train/skipped_gradient_steps", self.skipped_gradient_steps)

    def learn(
        self: SelfVRACER,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 4,
        tb_log_name: str = "VRACER",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfVRACER:
        return super().learn(
            total_timesteps=total_timesteps,
            callback=callback,
            log_interval=log_interval,
            tb_log_name=tb_log_name,
            reset_num_timesteps=reset_num_timesteps,
            progress_bar=progress_bar,
        )
