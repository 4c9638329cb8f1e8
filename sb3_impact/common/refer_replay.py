"""
ReF-ER for SB3's off-policy actor-critics (SAC, TD3): a replay buffer that remembers each step's behaviour,
and the rules of Novati & Koumoutsakos (ICML 2019, section 3) as a loss hook.

Every stored step keeps the behaviour ``mu`` that chose its action, as a diagonal Gaussian over a *point*:

- SAC: the pre-tanh action ``u = atanh(a)``, with ``mu = N(m_mu(s), s_mu(s))``. The tanh Jacobian is the same
  for ``pi`` and ``mu`` and cancels in ``rho = pi(a|s) / mu(a|s)``.
- TD3: the action ``a`` itself, with ``mu = N(m_mu(s), sigma)``: the deterministic action plus the exploration
  noise (the paper's DDPG, appendix A).

Warm-up steps (uniform random actions before ``learning_starts``) record the uniform density and are left out
of the KL penalty, which has no closed form for them.

The loss hook (:class:`ReFERMixin`) gives each sampled step its weight:

- rule 1: ``near = 1`` iff ``1 / c_max < rho < c_max``; far steps give no critic and no actor gradient;
- rule 2 (eq. 10): the actor's gradient is ``beta * g_near - (1 - beta) * grad D_KL(mu || pi)`` (eq. 11), and
  ``beta`` follows eq. 12 after each gradient step with the actor's learning rate as ``eta``;
- ``c_max(t) = 1 + C / (1 + A t)`` (eq. 13). The learning rate follows the algorithm's own schedule: unlike
  V-RACER, the SAC/TD3 wrappers do not anneal it (an SB3 user sets ``learning_rate`` as a schedule instead).

The critic loss is masked by rule 1 but not scaled by ``beta``: with separate critic and actor optimisers the
penalty only competes with the actor's objective (as in the paper's DDPG).
"""

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar, NamedTuple, TypeVar

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.type_aliases import MaybeCallback
from stable_baselines3.common.vec_env import VecNormalize

from sb3_impact.common.observations import check_finite_final_observations, check_finite_step
from sb3_impact.common.recurrent import refuse_recurrent_policy
from sb3_impact.common.refer import (
    annealed_c_max,
    check_refer_parameters,
    diag_gaussian_kl,
    diag_gaussian_log_prob,
    is_near_policy,
    update_beta,
)
from sb3_impact.common.threads import DEFAULT_LEARNER_THREADS, check_learner_threads, learner_threads

SelfReFER = TypeVar("SelfReFER", bound="ReFERMixin")

LOG_2 = math.log(2.0)
# Actions on the bounds of [-1, 1] (tanh saturation in float32) are moved inside before atanh.
ATANH_BOUND = 1.0 - 1e-6


class ReFERReplayBufferSamples(NamedTuple):
    """SB3's ``ReplayBufferSamples`` fields, then the behaviour of each sampled step."""

    observations: th.Tensor
    actions: th.Tensor
    next_observations: th.Tensor
    dones: th.Tensor
    rewards: th.Tensor
    discounts: th.Tensor | None
    behaviour_points: th.Tensor
    behaviour_mean: th.Tensor
    behaviour_log_std: th.Tensor
    behaviour_log_prob: th.Tensor
    behaviour_from_policy: th.Tensor
    indices: tuple[np.ndarray, np.ndarray]


class ReFERReplayBuffer(ReplayBuffer):
    """
    SB3's ``ReplayBuffer`` plus, per stored step, its behaviour ``mu`` and its most recent ``log rho``.

    The algorithm stages the behaviour of the current vector step with :meth:`stage_behaviour` before SB3's
    ``_store_transition`` calls :meth:`add`. The memory's far-policy count (rule 2's ``n_far``) is kept up to
    date as steps are added, overwritten and re-evaluated, each classified with the ``c_max`` of its last
    evaluation (section 3: "we store for each step its most recent rho").

    Transitions added from outside ``learn()`` (``add``/``extend`` without a staged behaviour, e.g.
    demonstrations, as SAC users add them) get the warm-up's behaviour: the uniform density on ``[-1, 1]^d`` of
    the (scaled, as SB3's buffers store them) action, mapped through tanh for SAC, and no KL penalty
    (``behaviour_from_policy = 0``). Rule 1 then applies to them as to warm-up steps: ``rho = pi / uniform``.
    ``point_coordinates`` tells the coordinates (``"pre_tanh"`` for SAC, ``"action"`` for TD3); SACReFER and
    TD3ReFER set it. A buffer built on its own (``None``) refuses an unstaged :meth:`add`.
    """

    point_coordinates: str | None = None  # the class default; see the docstring

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
    ):
        if isinstance(observation_space, spaces.Dict):
            raise TypeError("ReFERReplayBuffer supports Box, Discrete and MultiDiscrete observations, not Dict")
        if not isinstance(action_space, spaces.Box):
            raise TypeError(f"ReF-ER needs a Box action space (a density per action), got {action_space}")
        super().__init__(
            buffer_size,
            observation_space,
            action_space,
            device,
            n_envs=n_envs,
            optimize_memory_usage=optimize_memory_usage,
            handle_timeout_termination=handle_timeout_termination,
        )
        shape = (self.buffer_size, self.n_envs, self.action_dim)
        self.behaviour_points = np.zeros(shape, dtype=np.float32)
        self.behaviour_mean = np.zeros(shape, dtype=np.float32)
        self.behaviour_log_std = np.zeros(shape, dtype=np.float32)
        self.behaviour_log_prob = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.behaviour_from_policy = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.log_rhos = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.far = np.zeros((self.buffer_size, self.n_envs), dtype=bool)
        self.n_far = 0
        self._staged: tuple[np.ndarray, ...] | None = None

    def stage_behaviour(
        self, points: np.ndarray, mean: np.ndarray, log_std: np.ndarray, log_prob: np.ndarray, from_policy: bool
    ) -> None:
        """The behaviour of the next :meth:`add`: ``[n_envs, action_dim]`` points, mean, log std; ``[n_envs]`` log mu."""
        n, d = self.n_envs, self.action_dim
        self._staged = (
            np.reshape(points, (n, d)),
            np.reshape(mean, (n, d)),
            np.reshape(log_std, (n, d)),
            np.reshape(log_prob, (n,)),
            np.full((n,), float(from_policy), dtype=np.float32),
        )

    def stage_uniform_behaviour(self, actions: np.ndarray) -> None:
        """Stage the warm-up's uniform behaviour for ``actions`` (in ``[-1, 1]``), as an external :meth:`add` gets."""
        flat = np.asarray(actions, dtype=np.float32).reshape(self.n_envs, self.action_dim)
        zeros = np.zeros_like(flat)
        if self.point_coordinates == "pre_tanh":
            points = np.arctanh(np.clip(flat.astype(np.float64), -ATANH_BOUND, ATANH_BOUND))
            self.stage_behaviour(points, zeros, zeros, uniform_log_prob_pre_tanh(flat), from_policy=False)
        elif self.point_coordinates == "action":
            log_prob = np.full(self.n_envs, -self.action_dim * LOG_2)
            self.stage_behaviour(flat, zeros, zeros, log_prob, from_policy=False)
        else:
            raise RuntimeError(
                "ReFERReplayBuffer.add needs the behaviour of the step: stage_behaviour() first, or set "
                "point_coordinates to 'pre_tanh' (SAC) or 'action' (TD3); SACReFER and TD3ReFER do this for you"
            )

    def add(self, *args: Any, **kwargs: Any) -> None:
        if self._staged is None:  # added from outside learn(): the warm-up's uniform behaviour
            self.stage_uniform_behaviour(args[2] if len(args) > 2 else kwargs["action"])
        pos = self.pos
        self.n_far -= int(np.count_nonzero(self.far[pos]))  # the steps this one overwrites
        self.far[pos] = False
        self.log_rhos[pos] = 0.0  # pi = mu when the step is taken
        (
            self.behaviour_points[pos],
            self.behaviour_mean[pos],
            self.behaviour_log_std[pos],
            self.behaviour_log_prob[pos],
            self.behaviour_from_policy[pos],
        ) = self._staged
        self._staged = None
        super().add(*args, **kwargs)

    def _get_samples(self, batch_inds: np.ndarray, env: VecNormalize | None = None) -> ReFERReplayBufferSamples:  # type: ignore[override]
        env_indices = np.random.randint(0, high=self.n_envs, size=(len(batch_inds),))
        if self.optimize_memory_usage:
            next_obs = self.observations[(batch_inds + 1) % self.buffer_size, env_indices, :]
        else:
            next_obs = self.next_observations[batch_inds, env_indices, :]
        at = (batch_inds, env_indices)
        dones = self.dones[at] * (1 - self.timeouts[at])
        data = (
            self._normalize_obs(self.observations[at], env),
            self.actions[at],
            self._normalize_obs(next_obs, env),
            dones.reshape(-1, 1),
            self._normalize_reward(self.rewards[at].reshape(-1, 1), env),
        )
        behaviour = (
            self.behaviour_points[at],
            self.behaviour_mean[at],
            self.behaviour_log_std[at],
            self.behaviour_log_prob[at],
            self.behaviour_from_policy[at],
        )
        return ReFERReplayBufferSamples(
            *map(self.to_torch, data), None, *map(self.to_torch, behaviour), indices=(batch_inds, env_indices)
        )

    def update_log_rhos(self, indices: tuple[np.ndarray, np.ndarray], log_rhos: np.ndarray, c_max: float) -> None:
        """Store the sampled steps' new ``log rho`` and update the far-policy count (a step may repeat)."""
        flat = np.unique(indices[0] * self.n_envs + indices[1])
        unique_at = np.unravel_index(flat, (self.buffer_size, self.n_envs))
        far_before = int(np.count_nonzero(self.far[unique_at]))
        self.log_rhos[indices] = log_rhos
        self.far[indices] = ~is_near_policy(log_rhos, c_max)
        self.n_far += int(np.count_nonzero(self.far[unique_at])) - far_before

    def far_fraction(self) -> float:
        """``n_far / N`` over the stored steps (eq. 12)."""
        n_stored = self.size() * self.n_envs
        return self.n_far / n_stored if n_stored else 0.0


def uniform_log_prob_pre_tanh(squashed_actions: np.ndarray) -> np.ndarray:
    """Log density of ``u = atanh(a)`` when ``a`` is uniform on ``[-1, 1]^d``: ``sum_d log((1 - a^2) / 2)``."""
    a = np.clip(squashed_actions.astype(np.float64), -ATANH_BOUND, ATANH_BOUND)
    return np.sum(np.log1p(-(a**2)) - LOG_2, axis=-1)


def check_refer_compatible(algo: str, kwargs: dict[str, Any], refused: dict[str, Any]) -> None:
    """ValueError when an argument in ``refused`` differs from the only value ReF-ER supports."""
    replay_buffer_class = kwargs.get("replay_buffer_class")
    if replay_buffer_class not in (None, ReFERReplayBuffer):
        raise ValueError(f"{algo} stores its steps in a ReFERReplayBuffer; got replay_buffer_class={replay_buffer_class}")
    for name, supported in refused.items():
        if name in kwargs and kwargs[name] != supported:
            raise ValueError(
                f"{algo} does not support {name}={kwargs[name]!r} (only {supported!r}): ReF-ER needs the density "
                "of the behaviour that chose each stored action"
            )


class ReFERMixin(ABC):
    """
    ReF-ER as a loss hook for an SB3 off-policy actor-critic (see the module docstring), placed before the SB3
    class in the bases: ``class SACReFER(ReFERMixin, SAC)``.

    The constructor takes ReF-ER's constants and passes everything else to the SB3 class, with a
    :class:`ReFERReplayBuffer`; ``refused_arguments`` lists the SB3 arguments that only have one valid value.
    The algorithm class provides :meth:`_behaviour` (the Gaussian of the acting policy) and calls
    :meth:`_refer_weights`, :meth:`_refer_critic_step`, :meth:`_refer_actor_loss` and :meth:`_refer_step_done` from
    its ``train``.
    """

    refused_arguments: ClassVar[dict[str, Any]] = {}
    # The coordinates of the stored behaviour points: "pre_tanh" (SAC) or "action" (TD3); see ReFERReplayBuffer.
    point_coordinates: ClassVar[str]
    replay_buffer: ReFERReplayBuffer
    critic: Any
    num_timesteps: int
    learning_starts: int
    logger: Logger

    def __init__(
        self,
        policy: Any,
        env: Any,
        refer_c: float = 4.0,
        refer_a: float = 5e-7,
        refer_d: float = 0.1,
        refer_rules: tuple[int, ...] | list[int] = (1, 2),
        learner_threads: int | None = DEFAULT_LEARNER_THREADS,
        **kwargs: Any,
    ):
        refuse_recurrent_policy(policy, type(self).__name__)
        check_refer_compatible(type(self).__name__, kwargs, self.refused_arguments)
        self.refer_rules = check_refer_parameters(refer_c, refer_a, refer_d, refer_rules)
        self.refer_c = refer_c
        self.refer_a = refer_a
        self.refer_d = refer_d
        self.learner_threads = check_learner_threads(learner_threads)
        self.beta = 1.0
        super().__init__(policy, env, **{**kwargs, "replay_buffer_class": ReFERReplayBuffer})  # type: ignore[call-arg]

    def _setup_model(self) -> None:
        # A list after a JSON round trip; load(path, refer_c=...) sets them without the constructor: check again.
        self.refer_rules = check_refer_parameters(self.refer_c, self.refer_a, self.refer_d, self.refer_rules)
        super()._setup_model()  # type: ignore[misc]
        self.replay_buffer.point_coordinates = self.point_coordinates

    def load_replay_buffer(self, *args: Any, **kwargs: Any) -> None:
        super().load_replay_buffer(*args, **kwargs)  # type: ignore[misc]
        self.replay_buffer.point_coordinates = self.point_coordinates

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_refer_stats"]  # type: ignore[misc]

    @property
    def c_max(self) -> float:
        """``c_max(t) = 1 + C / (1 + A t)`` (eq. 13), ``t`` the environment step."""
        return annealed_c_max(self.refer_c, self.refer_a, self.num_timesteps)

    @abstractmethod
    def _behaviour(self, buffer_actions: np.ndarray, warm_up: bool) -> tuple[np.ndarray, ...]:
        """
        ``(points, mean, log_std, log_prob)`` of the behaviour that chose ``buffer_actions``; each algorithm
        defines its own (SB3's ``BaseAlgorithm`` is an ABC, so a class without it cannot be instantiated).
        """

    def _sample_action(self, learning_starts: int, action_noise: Any = None, n_envs: int = 1) -> tuple[np.ndarray, np.ndarray]:
        actions, buffer_actions = super()._sample_action(learning_starts, action_noise, n_envs)  # type: ignore[misc]
        warm_up = self.num_timesteps < learning_starts
        flat_actions = buffer_actions.reshape(len(buffer_actions), -1)  # the policy's Gaussian is over the flat action
        self.replay_buffer.stage_behaviour(*self._behaviour(flat_actions, warm_up), from_policy=not warm_up)
        return actions, buffer_actions

    def _store_transition(
        self,
        replay_buffer: ReplayBuffer,
        buffer_action: np.ndarray,
        new_obs: np.ndarray,
        reward: np.ndarray,
        dones: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """SB3's ``_store_transition``, after the NaN/inf check every sb3-impact algorithm makes."""
        check_finite_step(new_obs, reward, "collection")
        check_finite_final_observations(infos, np.flatnonzero(dones), "collection")  # SB3 stores them as next_obs
        super()._store_transition(replay_buffer, buffer_action, new_obs, reward, dones, infos)  # type: ignore[misc]

    def _refer_weights(
        self, replay_data: ReFERReplayBufferSamples, mean: th.Tensor, log_std: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor]:
        """
        Rule 1's weight ``near`` and eq. 11's ``D_KL(mu || pi)`` per sampled step, both ``[B, 1]``; also stores
        each step's new ``log rho = log pi - log mu`` in the memory. ``mean``/``log_std`` are the current
        policy's Gaussian over the behaviour points (with gradient, for the penalty).
        """
        log_pi = diag_gaussian_log_prob(replay_data.behaviour_points, mean.detach(), log_std.detach())
        log_rhos = log_pi - replay_data.behaviour_log_prob
        c_max = self.c_max
        self.replay_buffer.update_log_rhos(replay_data.indices, log_rhos.cpu().numpy(), c_max)
        near = is_near_policy(log_rhos, c_max).float() if 1 in self.refer_rules else th.ones_like(log_rhos)
        kl = diag_gaussian_kl(replay_data.behaviour_mean, replay_data.behaviour_log_std, mean, log_std)
        kl = kl * replay_data.behaviour_from_policy  # no closed form for the uniform warm-up behaviour
        self._refer_stats["batch_near_fraction"].append(near.mean().item())
        self._refer_stats["kl_mu_pi"].append(kl.mean().item())
        return near.reshape(-1, 1), kl.reshape(-1, 1)

    def _refer_critic_step(
        self, replay_data: ReFERReplayBufferSamples, target_q_values: th.Tensor, near: th.Tensor, scale: float = 1.0
    ) -> float:
        """
        One step of the critic's optimiser on ``scale * sum_i mean(near * (Q_i(s, a) - target)^2)`` over its Q
        networks: rule 1, far-policy steps give no critic gradient (``scale``: 0.5 as SB3's SAC, 1 as its TD3).
        Returns the loss.
        """
        current_q_values = self.critic(replay_data.observations, replay_data.actions)
        critic_loss = scale * sum((near * (current_q - target_q_values).pow(2)).mean() for current_q in current_q_values)
        assert isinstance(critic_loss, th.Tensor)
        self.critic.optimizer.zero_grad()
        critic_loss.backward()
        self.critic.optimizer.step()
        return critic_loss.item()

    def _refer_actor_loss(self, actor_losses: th.Tensor, near: th.Tensor, kl: th.Tensor) -> th.Tensor:
        """Eq. 10 as a loss: ``beta * mean(near * L) + (1 - beta) * mean(D_KL)`` (rule 2 off: ``mean(near * L)``)."""
        if 2 not in self.refer_rules:
            return (near * actor_losses).mean()
        return self.beta * (near * actor_losses).mean() + (1.0 - self.beta) * kl.mean()

    def _refer_step_done(self, learning_rate: float) -> None:
        """Eq. 12 after a gradient step, with the actor's learning rate as ``eta``."""
        if 2 in self.refer_rules:
            self.beta = update_beta(self.beta, self.replay_buffer.far_fraction(), self.refer_d, learning_rate)

    def learn(
        self: SelfReFER,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 4,
        tb_log_name: str | None = None,
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfReFER:
        """
        The SB3 class's ``learn`` with ``learner_threads`` PyTorch threads (restored after it); the TensorBoard run
        is named after the class (``SACReFER``, ``TD3ReFER``) by default.
        """
        with learner_threads(getattr(self, "learner_threads", DEFAULT_LEARNER_THREADS)):
            return super().learn(  # type: ignore[misc]
                total_timesteps=total_timesteps,
                callback=callback,
                log_interval=log_interval,
                tb_log_name=type(self).__name__ if tb_log_name is None else tb_log_name,
                reset_num_timesteps=reset_num_timesteps,
                progress_bar=progress_bar,
            )

    def _refer_reset_stats(self) -> None:
        self._refer_stats: dict[str, list[float]] = {"batch_near_fraction": [], "kl_mu_pi": []}

    def _refer_log(self) -> None:
        for key, values in self._refer_stats.items():
            if values:
                self.logger.record(f"train/{key}", float(np.mean(values)))
        self.logger.record("train/beta", self.beta)
        self.logger.record("train/c_max", self.c_max)
        self.logger.record("train/far_fraction", self.replay_buffer.far_fraction())
