"""SAC with Remember-and-Forget Experience Replay (Haarnoja et al. 2018; Novati & Koumoutsakos, ICML 2019)."""

from typing import Any, ClassVar

import numpy as np
import torch as th
from stable_baselines3 import SAC
from stable_baselines3.common.utils import polyak_update
from stable_baselines3.sac.policies import SACPolicy

from sb3_impact.common.refer import diag_gaussian_log_prob
from sb3_impact.common.refer_replay import ATANH_BOUND, ReFERMixin, ReFERReplayBuffer, uniform_log_prob_pre_tanh


class SACReFER(ReFERMixin, SAC):
    """
    SAC whose replay follows ReF-ER (Novati & Koumoutsakos, ICML 2019, section 3).

    Each stored step keeps the squashed Gaussian that chose its action. When a step is replayed, its
    importance weight ``rho = pi(a|s) / mu(a|s)`` is computed (in log space; the tanh Jacobian cancels):

    - rule 1: a far-policy step (``rho`` outside ``(1 / c_max, c_max)``) contributes no critic and no actor
      gradient;
    - rule 2 (eq. 10-12): the actor loss is ``beta * L_actor(near steps) + (1 - beta) * D_KL(mu || pi)``, and
      ``beta`` keeps the memory's far-policy fraction near ``refer_d``;
    - ``c_max(t) = 1 + C / (1 + A t)`` (eq. 13).

    SAC learns its policy's std, so the penalty's gradient moves the std as well as the mean: ``D_KL(mu || pi)``
    grows as ``pi`` narrows below a stored behaviour, which holds the policy as wide as the behaviours in the memory
    (V-RACER's, whose std is learned too, is penalised the same way). ``refer_penalize_std=False`` stops the
    penalty's gradient at the std, so that it moves only the mean, as in the paper's DDPG and NAF runs, whose
    exploration std is fixed (sigma = 0.2, section 5); SAC's entropy term alone then sets the width.

    Everything else is SB3's SAC, and all its arguments are accepted except ``replay_buffer_class`` (always a
    :class:`~sb3_impact.common.refer_replay.ReFERReplayBuffer`), ``use_sde``, ``action_noise`` and
    ``n_steps > 1`` (ValueError: each changes the behaviour density away from the stored Gaussian).
    Warm-up steps are uniform as in SAC; they record the uniform density and get no KL penalty.
    The learning rate is not annealed by eq. 13: set ``learning_rate`` as a schedule for that.

    :param policy: the policy model to use (MlpPolicy, CnnPolicy, ...)
    :param env: the environment to learn from (if registered in Gym, can be str)
    :param refer_c: C of ``c_max(t) = 1 + C / (1 + A t)`` (paper: 4)
    :param refer_a: A, the annealing rate of ``c_max`` (paper: 5e-7)
    :param refer_d: D, the target fraction of far-policy steps in the memory (paper: 0.1)
    :param refer_rules: the rules in use: (1, 2) is ReF-ER, (1,) ReF-ER-1, (2,) ReF-ER-2, () SAC's replay
    :param refer_penalize_std: whether rule 2's penalty has a gradient with respect to the policy's std (True) or
        only with respect to its mean (False); rule 1's ``rho`` uses the whole Gaussian either way
    :param learner_threads: PyTorch intra-op threads during ``learn()`` (restored after it; None: PyTorch's
        setting). 1 by default: more threads spin when the cores are busy (see docs/algorithms/collectors.md)
    :param kwargs: SAC's other arguments
    """

    # policy_aliases are SAC's: its MultiInputPolicy is refused with a TypeError naming Dict
    policy: SACPolicy
    replay_buffer: ReFERReplayBuffer
    point_coordinates: ClassVar[str] = "pre_tanh"
    refused_arguments: ClassVar[dict[str, Any]] = {"use_sde": False, "action_noise": None, "n_steps": 1}

    def __init__(self, policy: Any, env: Any, refer_penalize_std: bool = True, **kwargs: Any):
        if not isinstance(refer_penalize_std, bool):
            raise TypeError(f"refer_penalize_std must be True or False, got {refer_penalize_std!r}")
        self.refer_penalize_std = refer_penalize_std
        super().__init__(policy, env, **kwargs)

    def _behaviour(self, buffer_actions: np.ndarray, warm_up: bool) -> tuple[np.ndarray, ...]:
        """The pre-tanh point ``u = atanh(a)`` and ``mu``'s Gaussian over it (uniform ``a`` during warm-up)."""
        points = np.arctanh(np.clip(buffer_actions.astype(np.float64), -ATANH_BOUND, ATANH_BOUND))
        with th.no_grad():
            observations = self.policy.obs_to_tensor(self._last_obs)[0]  # type: ignore[arg-type]
            mean, log_std, _ = self.actor.get_action_dist_params(observations)
            if warm_up:
                log_prob = uniform_log_prob_pre_tanh(buffer_actions)
            else:
                u = th.as_tensor(points, dtype=mean.dtype, device=mean.device)
                log_prob = diag_gaussian_log_prob(u, mean, log_std).cpu().numpy()
        return points, mean.cpu().numpy(), log_std.cpu().numpy(), log_prob

    def train(self, gradient_steps: int, batch_size: int = 64) -> None:
        """SB3's SAC update with ReF-ER's rule 1 on both losses and rule 2 on the actor (eq. 10)."""
        self.policy.set_training_mode(True)
        optimizers = [self.actor.optimizer, self.critic.optimizer]
        if self.ent_coef_optimizer is not None:
            optimizers += [self.ent_coef_optimizer]
        self._update_learning_rate(optimizers)
        self._refer_reset_stats()

        ent_coef_losses, ent_coefs = [], []
        actor_losses, critic_losses = [], []
        for gradient_step in range(gradient_steps):
            replay_data = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)

            mean, log_std, _ = self.actor.get_action_dist_params(replay_data.observations)
            actions_pi, log_prob = self.actor.action_dist.log_prob_from_params(mean, log_std)
            log_prob = log_prob.reshape(-1, 1)
            penalized_log_std = log_std if self.refer_penalize_std else log_std.detach()
            near, kl = self._refer_weights(replay_data, mean, penalized_log_std)

            if self.ent_coef_optimizer is not None and self.log_ent_coef is not None:
                ent_coef = th.exp(self.log_ent_coef.detach())
                assert isinstance(self.target_entropy, float)
                ent_coef_loss = -(self.log_ent_coef * (log_prob + self.target_entropy).detach()).mean()
                ent_coef_losses.append(ent_coef_loss.item())
                self.ent_coef_optimizer.zero_grad()
                ent_coef_loss.backward()
                self.ent_coef_optimizer.step()
            else:
                ent_coef = self.ent_coef_tensor
            ent_coefs.append(ent_coef.item())

            with th.no_grad():
                next_actions, next_log_prob = self.actor.action_log_prob(replay_data.next_observations)
                next_q_values = th.cat(self.critic_target(replay_data.next_observations, next_actions), dim=1)
                next_q_values, _ = th.min(next_q_values, dim=1, keepdim=True)
                next_q_values = next_q_values - ent_coef * next_log_prob.reshape(-1, 1)
                target_q_values = replay_data.rewards + (1 - replay_data.dones) * self.gamma * next_q_values

            critic_losses.append(self._refer_critic_step(replay_data, target_q_values, near, scale=0.5))  # rule 1

            q_values_pi = th.cat(self.critic(replay_data.observations, actions_pi), dim=1)
            min_qf_pi, _ = th.min(q_values_pi, dim=1, keepdim=True)
            actor_loss = self._refer_actor_loss(ent_coef * log_prob - min_qf_pi, near, kl)  # eq. 10
            actor_losses.append(actor_loss.item())
            self.actor.optimizer.zero_grad()
            actor_loss.backward()
            self.actor.optimizer.step()
            self._refer_step_done(self.actor.optimizer.param_groups[0]["lr"])  # eq. 12

            if gradient_step % self.target_update_interval == 0:
                polyak_update(self.critic.parameters(), self.critic_target.parameters(), self.tau)
                polyak_update(self.batch_norm_stats, self.batch_norm_stats_target, 1.0)

        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/ent_coef", np.mean(ent_coefs))
        self.logger.record("train/actor_loss", np.mean(actor_losses))
        self.logger.record("train/critic_loss", np.mean(critic_losses))
        if len(ent_coef_losses) > 0:
            self.logger.record("train/ent_coef_loss", np.mean(ent_coef_losses))
        self._refer_log()
