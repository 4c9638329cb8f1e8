"""IMPALA: the V-trace actor-critic (Espeholt et al., ICML 2018)."""

from typing import Any, ClassVar, TypeVar

import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule
from torch.nn import functional as F

from sb3_impact.common.collectors import Collector
from sb3_impact.common.policy_evaluation import evaluate_policy_and_values
from sb3_impact.common.training_batch import TrainingBatch
from sb3_impact.common.vtrace_actor_critic import VTraceActorCritic
from sb3_impact.impala.policies import CnnPolicy, MlpPolicy, MultiInputPolicy

SelfIMPALA = TypeVar("SelfIMPALA", bound="IMPALA")


class IMPALA(VTraceActorCritic):
    """
    IMPALA's V-trace actor-critic (paper: https://arxiv.org/abs/1802.01561, section 4).

    An asynchronous collector steps the environments with a slightly stale copy of the policy; every
    segment is consumed once, in arrival order, by one gradient step on
    ``-rho_s A_s log pi(a_s|x_s) + vf_coef (v_s - V(x_s))^2 - ent_coef H(pi)``, where ``v_s`` are the V-trace
    targets and ``rho_s A_s`` the rho-clipped V-trace advantages (section 4.2), computed with the current
    policy as pi and the collector's policy as mu.

    :param policy: The policy model to use (MlpPolicy, CnnPolicy, MultiInputPolicy, or an ActorCriticPolicy subclass)
    :param env: The environment to learn from (if registered in Gym, can be str)
    :param learning_rate: The learning rate, a constant or a schedule of the remaining progress (1 to 0)
    :param n_steps: Vector steps per collected segment (the unroll length); one batch is ``n_steps * n_envs``
    :param broadcast_interval: gradient steps between weight broadcasts to the collector
    :param gamma: Discount factor
    :param gae_lambda: lambda of V-trace's trace coefficients (1 is the paper's V-trace)
    :param vtrace_clip_rho_threshold: rho_bar of V-trace
    :param vtrace_clip_c_threshold: c_bar of V-trace
    :param vtrace_clip_pg_rho_threshold: clip of the ratio weighting the policy-gradient advantage
    :param normalize_advantage: Whether to normalize the advantages of each batch (off in the paper)
    :param ent_coef: Entropy coefficient
    :param vf_coef: Value function coefficient
    :param max_grad_norm: The maximum value for the gradient clipping
    :param collector: Where segments are collected (default "thread"): ``"sync"``, ``"thread"``, ``"process"``,
        ``"ray"`` or a ``Collector`` subclass (see :class:`~sb3_impact.common.segment_loop.SegmentLoopMixin`)
    :param collector_kwargs: The collector's options, e.g. ``queue_size`` (see docs/algorithms/collectors.md)
    :param stats_window_size: Window size for the rollout logging (episodes)
    :param tensorboard_log: the log location for tensorboard (if None, no logging)
    :param policy_kwargs: additional arguments to be passed to the policy on creation
    :param verbose: Verbosity level: 0 for no output, 1 for info messages, 2 for debug messages
    :param seed: Seed for the pseudo random generators
    :param device: Device (cpu, cuda, ...) of the learner; the collector's policy copy always runs on CPU
    :param _init_setup_model: Whether or not to build the network at the creation of the instance
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpPolicy": MlpPolicy,
        "CnnPolicy": CnnPolicy,
        "MultiInputPolicy": MultiInputPolicy,
    }

    def __init__(
        self,
        policy: str | type[ActorCriticPolicy],
        env: GymEnv | str,
        learning_rate: float | Schedule = 7e-4,
        n_steps: int = 20,
        broadcast_interval: int = 1,
        gamma: float = 0.99,
        gae_lambda: float = 1.0,
        vtrace_clip_rho_threshold: float = 1.0,
        vtrace_clip_c_threshold: float = 1.0,
        vtrace_clip_pg_rho_threshold: float = 1.0,
        normalize_advantage: bool = False,
        ent_coef: float = 0.01,
        vf_coef: float = 0.5,
        max_grad_norm: float = 40.0,
        collector: str | type[Collector] = "thread",
        collector_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: th.device | str = "auto",
        _init_setup_model: bool = True,
    ) -> None:
        super().__init__(
            policy,
            env,
            learning_rate=learning_rate,
            n_steps=n_steps,
            gamma=gamma,
            gae_lambda=gae_lambda,
            ent_coef=ent_coef,
            vf_coef=vf_coef,
            max_grad_norm=max_grad_norm,
            circular_buffer_size=1,
            max_batch_reuse=1,
            vtrace_clip_rho_threshold=vtrace_clip_rho_threshold,
            vtrace_clip_c_threshold=vtrace_clip_c_threshold,
            vtrace_clip_pg_rho_threshold=vtrace_clip_pg_rho_threshold,
            normalize_advantage=normalize_advantage,
            broadcast_interval=broadcast_interval,
            collector=collector,
            collector_kwargs=collector_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            policy_kwargs=policy_kwargs,
            verbose=verbose,
            seed=seed,
            device=device,
            _init_setup_model=_init_setup_model,
        )

    def _train_step(self, batch: TrainingBatch) -> dict[str, float]:
        distribution, values = evaluate_policy_and_values(self.policy, batch.observations)
        log_prob = distribution.log_prob(batch.actions)
        entropy = distribution.entropy()
        # V-trace targets and advantages with the current policy as pi (section 4.1, eq. 1).
        vs, pg_advantages = self._vtrace_targets(batch, values, log_prob.detach(), self.policy)
        advantages = self._prepare_advantages(pg_advantages)
        # Section 4.2: policy gradient rho_s (r_s + gamma v_{s+1} - V(x_s)) grad log pi(a_s|x_s).
        policy_loss = -(advantages * log_prob).mean()
        # Section 4.2: value regression towards v_s.
        value_loss = F.mse_loss(values, vs.flatten())
        # Section 4.2: entropy bonus.
        entropy_loss = -entropy.mean()
        loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss
        self._clip_gradients_and_step(loss)
        with th.no_grad():
            is_ratio = self._behaviour_ratio(log_prob, batch.behaviour_log_probs.flatten())
            names = ["policy_gradient_loss", "value_loss", "entropy_loss", "loss", "is_ratio_mean", "is_ratio_max"]
            values = [policy_loss, value_loss, entropy_loss, loss, is_ratio.mean(), is_ratio.max()]
            return dict(zip(names, th.stack(values).tolist(), strict=True))  # one device sync

    def learn(
        self: SelfIMPALA,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 100,
        tb_log_name: str = "IMPALA",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfIMPALA:
        return super().learn(
            total_timesteps=total_timesteps,
            callback=callback,
            log_interval=log_interval,
            tb_log_name=tb_log_name,
            reset_num_timesteps=reset_num_timesteps,
            progress_bar=progress_bar,
        )
