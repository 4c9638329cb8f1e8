"""TD3 with Remember-and-Forget Experience Replay (Fujimoto et al. 2018; Novati & Koumoutsakos, ICML 2019)."""

import math
from typing import Any, ClassVar

import numpy as np
import torch as th
from stable_baselines3 import TD3
from stable_baselines3.common.noise import NormalActionNoise, VectorizedActionNoise
from stable_baselines3.common.utils import polyak_update
from stable_baselines3.td3.policies import TD3Policy

from sb3_impact.common.refer import diag_gaussian_log_prob
from sb3_impact.common.refer_replay import LOG_2, ReFERMixin, ReFERReplayBuffer

# Appendix A: DDPG with ReF-ER explores with Gaussian noise of standard deviation 0.2.
PAPER_NOISE_STD = 0.2


class TD3ReFER(ReFERMixin, TD3):
    """
    TD3 whose replay follows ReF-ER (Novati & Koumoutsakos, ICML 2019; their DDPG, section 5.1 and appendix A).

    The policy is read as ``pi = N(m(s), sigma^2 I)``: the deterministic action plus the Gaussian exploration
    noise of standard deviation ``sigma``. Each stored step keeps the behaviour's deterministic action ``m_mu``, so
    ``log rho = (|a - m_mu|^2 - |a - m_pi|^2) / (2 sigma^2)`` and ``D_KL(mu || pi) = |m_mu - m_pi|^2 / (2 sigma^2)``.

    - rule 1: a far-policy step contributes no critic and no actor gradient;
    - rule 2 (eq. 10-12): the actor loss (every ``policy_delay`` updates, as in TD3) is
      ``beta * L_actor(near steps) + (1 - beta) * D_KL``;
    - ``c_max(t) = 1 + C / (1 + A t)`` (eq. 13).

    ``action_noise`` must be a zero-mean :class:`~stable_baselines3.common.noise.NormalActionNoise`; its sigma is
    the policy's. Without one, TD3ReFER explores with ``NormalActionNoise(0, 0.2)``, the paper's choice.
    Other noise (Ornstein-Uhlenbeck), ``replay_buffer_class`` and ``n_steps > 1`` raise ValueError.
    Warm-up steps are uniform as in TD3; they record the uniform density and get no KL penalty.

    :param policy: the policy model to use (MlpPolicy, CnnPolicy, ...)
    :param env: the environment to learn from (if registered in Gym, can be str)
    :param refer_c: C of ``c_max(t) = 1 + C / (1 + A t)`` (paper: 4)
    :param refer_a: A, the annealing rate of ``c_max`` (paper: 5e-7)
    :param refer_d: D, the target fraction of far-policy steps in the memory (paper: 0.1)
    :param refer_rules: the rules in use: (1, 2) is ReF-ER, (1,) ReF-ER-1, (2,) ReF-ER-2, () TD3's replay
    :param learner_threads: PyTorch intra-op threads during ``learn()`` (restored after it; None: PyTorch's
        setting). 1 by default: more threads spin when the cores are busy (see docs/algorithms/collectors.md)
    :param kwargs: TD3's other arguments
    """

    # policy_aliases are TD3's: its MultiInputPolicy is refused with a TypeError naming Dict
    policy: TD3Policy
    replay_buffer: ReFERReplayBuffer
    point_coordinates: ClassVar[str] = "action"
    refused_arguments: ClassVar[dict[str, Any]] = {"n_steps": 1}

    def _setup_model(self) -> None:
        super()._setup_model()
        shape = self.action_space.shape  # SB3 adds the noise to actions of the space's shape
        if self.action_noise is None:
            self.action_noise = NormalActionNoise(np.zeros(shape), np.full(shape, PAPER_NOISE_STD))
        if isinstance(self.action_noise, VectorizedActionNoise):  # SB3 wraps it for several envs; saved so
            self.action_noise = self.action_noise.base_noise
        if not isinstance(self.action_noise, NormalActionNoise):
            raise ValueError(
                f"TD3ReFER needs Gaussian exploration noise (NormalActionNoise), got {type(self.action_noise).__name__}"
            )
        noise_mean, noise_std = (
            np.broadcast_to(x, shape).reshape(-1) for x in (self.action_noise._mu, self.action_noise._sigma)
        )
        if np.any(noise_mean != 0) or not np.all(noise_std > 0):
            raise ValueError("TD3ReFER needs a zero-mean NormalActionNoise with a positive sigma")
        self.noise_log_std = np.log(noise_std).astype(np.float32)

    def _behaviour(self, buffer_actions: np.ndarray, warm_up: bool) -> tuple[np.ndarray, ...]:
        """The action and ``mu = N(m_mu(s), sigma)`` (uniform on ``[-1, 1]^d`` during warm-up)."""
        with th.no_grad():
            observations = self.policy.obs_to_tensor(self._last_obs)[0]  # type: ignore[arg-type]
            mean = self.actor(observations)
        log_std = np.broadcast_to(self.noise_log_std, buffer_actions.shape).copy()
        if warm_up:
            log_prob = np.full(len(buffer_actions), -buffer_actions.shape[-1] * LOG_2)
        else:
            log_prob = diag_gaussian_log_prob(
                th.as_tensor(buffer_actions, dtype=mean.dtype), mean.cpu(), th.as_tensor(log_std)
            ).numpy()
        return buffer_actions, mean.cpu().numpy(), log_std, log_prob

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        """SB3's TD3 update with ReF-ER's rule 1 on both losses and rule 2 on the delayed actor update (eq. 10)."""
        self.policy.set_training_mode(True)
        self._update_learning_rate([self.actor.optimizer, self.critic.optimizer])
        self._refer_reset_stats()
        noise_log_std = th.as_tensor(self.noise_log_std, device=self.device)

        actor_losses, critic_losses = [], []
        for _ in range(gradient_steps):
            self._n_updates += 1
            replay_data = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)
            actor_update = self._n_updates % self.policy_delay == 0
            with th.set_grad_enabled(actor_update):
                mean = self.actor(replay_data.observations)
            near, kl = self._refer_weights(replay_data, mean, noise_log_std.expand_as(mean))

            with th.no_grad():
                noise = replay_data.actions.clone().data.normal_(0, self.target_policy_noise)
                noise = noise.clamp(-self.target_noise_clip, self.target_noise_clip)
                next_actions = (self.actor_target(replay_data.next_observations) + noise).clamp(-1, 1)
                next_q_values = th.cat(self.critic_target(replay_data.next_observations, next_actions), dim=1)
                next_q_values, _ = th.min(next_q_values, dim=1, keepdim=True)
                target_q_values = replay_data.rewards + (1 - replay_data.dones) * self.gamma * next_q_values

            critic_losses.append(self._refer_critic_step(replay_data, target_q_values, near))  # rule 1

            if actor_update:
                actor_loss = self._refer_actor_loss(-self.critic.q1_forward(replay_data.observations, mean), near, kl)
                actor_losses.append(actor_loss.item())
                self.actor.optimizer.zero_grad()
                actor_loss.backward()
                self.actor.optimizer.step()
                polyak_update(self.critic.parameters(), self.critic_target.parameters(), self.tau)
                polyak_update(self.actor.parameters(), self.actor_target.parameters(), self.tau)
                polyak_update(self.critic_batch_norm_stats, self.critic_batch_norm_stats_target, 1.0)
                polyak_update(self.actor_batch_norm_stats, self.actor_batch_norm_stats_target, 1.0)
            self._refer_step_done(self.actor.optimizer.param_groups[0]["lr"])  # eq. 12

        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        if len(actor_losses) > 0:
            self.logger.record("train/actor_loss", np.mean(actor_losses))
        self.logger.record("train/critic_loss", np.mean(critic_losses))
        self.logger.record("train/noise_std", float(math.exp(float(np.mean(self.noise_log_std)))))
        self._refer_log()
