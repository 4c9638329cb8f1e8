"""IMPALA: the V-trace actor-critic (Espeholt et al., ICML 2018)."""

from typing import Any, ClassVar, TypeVar

import numpy as np
import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule

from sb3_impact.common.collectors import Collector
from sb3_impact.common.recurrent import is_recurrent
from sb3_impact.common.training_batch import TrainingBatch
from sb3_impact.common.vtrace_actor_critic import VTraceActorCritic
from sb3_impact.impala.loss import ImpalaTargets, impala_loss, impala_value_loss
from sb3_impact.impala.policies import (
    CnnLstmPolicy,
    CnnPolicy,
    MlpLstmPolicy,
    MlpPolicy,
    MultiInputLstmPolicy,
    MultiInputPolicy,
)

SelfIMPALA = TypeVar("SelfIMPALA", bound="IMPALA")


def _check_passes(n_epochs: Any, n_value_epochs: Any, value_batch_size: Any) -> None:
    if not isinstance(n_epochs, (int, np.integer)) or n_epochs < 1:
        raise ValueError(f"n_epochs must be an integer >= 1, got {n_epochs!r}")
    if isinstance(n_value_epochs, bool) or not isinstance(n_value_epochs, (int, np.integer)) or n_value_epochs < 0:
        raise ValueError(f"n_value_epochs must be an integer >= 0, got {n_value_epochs!r}")
    if value_batch_size is not None and (
        isinstance(value_batch_size, bool) or not isinstance(value_batch_size, (int, np.integer)) or value_batch_size < 1
    ):
        raise ValueError(f"value_batch_size must be an integer >= 1 or None, got {value_batch_size!r}")


class IMPALA(VTraceActorCritic):
    """
    IMPALA's V-trace actor-critic (paper: https://arxiv.org/abs/1802.01561, section 4).

    An asynchronous collector steps the environments with a slightly stale copy of the policy; every
    segment is consumed in arrival order by gradient steps on
    ``-rho_s A_s log pi(a_s|x_s) + vf_coef (v_s - V(x_s))^2 - ent_coef H(pi)``, where ``v_s`` are the V-trace
    targets and ``rho_s A_s`` the rho-clipped V-trace advantages (section 4.2), with the collector's policy as
    mu.

    The defaults are the paper's: one gradient step per segment, its targets computed with the current policy
    as pi. ``n_epochs`` and ``batch_size`` turn each segment into ``n_epochs`` passes in shuffled minibatches
    (RLlib's IMPALA offers the same as ``num_epochs`` and ``minibatch_size``); the targets are then computed
    once per pass, with the policy at the start of the pass as pi, as PPO computes its advantages once per
    rollout. ``train/n_updates`` counts passes, ``train/gradient_steps`` minibatch steps.

    ``n_value_epochs`` adds, after each pass, that many passes of value regression alone,
    ``vf_coef (v_s - V(x_s))^2`` in shuffled minibatches of ``value_batch_size``, with the V-trace targets
    recomputed at the start of each (section 4.1, eq. 1). They fit the critic, which one step per segment
    leaves far behind on continuous control, and do not move the policy (whose extra passes, without a trust
    region, collapse: docs/algorithms/impala.md). 0, the default, is the paper's update.

    :param policy: The policy model to use (MlpPolicy, CnnPolicy, MultiInputPolicy, their recurrent MlpLstmPolicy,
        CnnLstmPolicy, MultiInputLstmPolicy, or an ActorCriticPolicy subclass)
    :param env: The environment to learn from (if registered in Gym, can be str)
    :param learning_rate: The learning rate, a constant or a schedule of the remaining progress (1 to 0)
    :param n_steps: Vector steps per collected segment (the unroll length); one batch is ``n_steps * n_envs``
    :param batch_size: Minibatch size of the gradient steps in each pass over a batch (None: the whole batch,
        one gradient step per pass, as in the paper)
    :param n_epochs: Passes over each batch (1: the paper's single use)
    :param n_value_epochs: Passes of value regression alone over each batch after each pass (0: the paper's)
    :param value_batch_size: Minibatch size of those value passes (None: the whole batch)
    :param broadcast_interval: passes (batch draws) between weight broadcasts to the collector (which also gets
        the weights after every segment's training)
    :param gamma: Discount factor
    :param gae_lambda: lambda of V-trace's trace coefficients (1 is the paper's V-trace)
    :param vtrace_clip_rho_threshold: rho_bar of V-trace
    :param vtrace_clip_c_threshold: c_bar of V-trace
    :param vtrace_clip_pg_rho_threshold: clip of the ratio weighting the policy-gradient advantage
    :param normalize_advantage: Whether to normalize the advantages of each minibatch (off in the paper)
    :param ent_coef: Entropy coefficient
    :param vf_coef: Value function coefficient
    :param max_grad_norm: The maximum value for the gradient clipping
    :param use_sde: Whether to explore with generalized State-Dependent Exploration (gSDE, Box actions) instead of
        independent Gaussian noise; the behaviour policy stored per step is then the per-state Gaussian
        ``N(mean(s), sigma(s))`` (docs/algorithms/collectors.md, gSDE)
    :param sde_sample_freq: With gSDE, a new noise matrix every ``sde_sample_freq`` steps of the collector
        (-1: only at the start of each segment)
    :param collector: Where segments are collected (default "auto": ``"process"`` on Linux, ``"thread"`` elsewhere;
        chosen by measurement, see docs/algorithms/collectors.md): ``"sync"``, ``"thread"``, ``"process"``,
        ``"ray"`` or a ``Collector`` subclass (see :class:`~sb3_impact.common.segment_loop.SegmentLoopMixin`)
    :param collector_kwargs: The collector's options, e.g. ``queue_size`` (see docs/algorithms/collectors.md)
    :param learner_threads: PyTorch intra-op threads of the learner during ``learn()`` (restored after it; None:
        PyTorch's setting). 1 by default: more threads spin when the cores are busy (see docs/algorithms/collectors.md)
    :param stats_window_size: Window size for the rollout logging (episodes)
    :param tensorboard_log: the log location for tensorboard (if None, no logging)
    :param policy_kwargs: additional arguments to be passed to the policy on creation
    :param verbose: Verbosity level: 0 for no output, 1 for info messages, 2 for debug messages
    :param seed: Seed for the pseudo random generators
    :param device: Device (cpu, cuda, ...) of the learner; an asynchronous collector's policy copy runs on CPU
    :param _init_setup_model: Whether or not to build the network at the creation of the instance
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpPolicy": MlpPolicy,
        "CnnPolicy": CnnPolicy,
        "MultiInputPolicy": MultiInputPolicy,
        "MlpLstmPolicy": MlpLstmPolicy,
        "CnnLstmPolicy": CnnLstmPolicy,
        "MultiInputLstmPolicy": MultiInputLstmPolicy,
    }

    def __init__(
        self,
        policy: str | type[ActorCriticPolicy],
        env: GymEnv | str,
        learning_rate: float | Schedule = 7e-4,
        n_steps: int = 20,
        batch_size: int | None = None,
        n_epochs: int = 1,
        n_value_epochs: int = 0,
        value_batch_size: int | None = 64,
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
        use_sde: bool = False,
        sde_sample_freq: int = -1,
        collector: str | type[Collector] = "auto",
        collector_kwargs: dict[str, Any] | None = None,
        learner_threads: int | None = 1,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: th.device | str = "auto",
        _init_setup_model: bool = True,
    ) -> None:
        _check_passes(n_epochs, n_value_epochs, value_batch_size)
        self.n_epochs = n_epochs
        self.n_value_epochs = n_value_epochs
        self.value_batch_size = value_batch_size
        self.value_gradient_steps = 0
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
            max_batch_reuse=n_epochs,
            vtrace_clip_rho_threshold=vtrace_clip_rho_threshold,
            vtrace_clip_c_threshold=vtrace_clip_c_threshold,
            vtrace_clip_pg_rho_threshold=vtrace_clip_pg_rho_threshold,
            normalize_advantage=normalize_advantage,
            broadcast_interval=broadcast_interval,
            batch_size=batch_size,
            use_sde=use_sde,
            sde_sample_freq=sde_sample_freq,
            collector=collector,
            collector_kwargs=collector_kwargs,
            learner_threads=learner_threads,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            policy_kwargs=policy_kwargs,
            verbose=verbose,
            seed=seed,
            device=device,
            _init_setup_model=_init_setup_model,
        )

    def _setup_model(self) -> None:
        # Also when load(path, n_epochs=...) set them without the constructor.
        _check_passes(self.n_epochs, self.n_value_epochs, self.value_batch_size)
        self.max_batch_reuse = self.n_epochs
        super()._setup_model()
        if is_recurrent(self.policy) and self.n_value_epochs > 0 and self.value_batch_size is not None:
            if self.value_batch_size % self.n_steps != 0:
                raise ValueError(
                    f"value_batch_size ({self.value_batch_size}) must be a multiple of n_steps ({self.n_steps}) with a "
                    "recurrent policy: its value minibatches are whole segments of value_batch_size // n_steps environments"
                )

    def train(self) -> None:
        """
        Section 4.2: each draw of the batch (``n_epochs`` of them; the paper's one) is one pass over it, one gradient
        step on the whole batch (the paper) or shuffled minibatches on per-pass targets; then ``n_value_epochs``
        passes of value regression alone.
        """
        buffer = self._active_circular_buffer()
        self.policy.set_training_mode(True)  # callbacks (evaluation) may have switched it off
        while not buffer.needs_batch():
            batch = buffer.next_batch()
            self._update_learning_rate(self.policy.optimizer)
            minibatches = batch.minibatch_indices(self.batch_size)
            # In minibatches, the targets of the whole batch with the policy at the start of the pass as pi.
            pass_targets = None if len(minibatches) == 1 else self._pass_targets(batch)
            minibatch_stats = []
            for indices in minibatches:
                minibatch = batch.minibatch(indices)
                distribution, values = batch.evaluate(self.policy, minibatch)
                log_prob = distribution.log_prob(minibatch.actions)
                entropy = distribution.entropy()
                if pass_targets is None:  # the paper's single step: the targets with the current policy as pi
                    targets = ImpalaTargets(*self._vtrace_targets(batch, values, log_prob.detach(), self.policy))
                else:
                    targets = pass_targets[indices]
                loss, stats = impala_loss(
                    log_prob,
                    entropy,
                    values,
                    minibatch,
                    targets,
                    ent_coef=self.ent_coef,
                    vf_coef=self.vf_coef,
                    normalize_advantage=self.normalize_advantage,
                )
                self.policy.optimizer.zero_grad()
                loss.backward()
                th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                self.policy.optimizer.step()
                minibatch_stats.append(stats)
            self.gradient_steps += len(minibatch_stats)

            value_epochs_losses = []
            for _ in range(self.n_value_epochs):  # value regression alone, on targets recomputed for each pass
                value_targets = self._pass_targets(batch)
                value_losses = []
                for indices in batch.minibatch_indices(self.value_batch_size):
                    values = batch.predict_values(self.policy, batch.minibatch(indices))
                    value_loss = impala_value_loss(values, value_targets[indices])
                    self.policy.optimizer.zero_grad()
                    (self.vf_coef * value_loss).backward()
                    th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                    self.policy.optimizer.step()
                    value_losses.append(value_loss.detach())
                self.value_gradient_steps += len(value_losses)
                value_epochs_losses.append(th.stack(value_losses).mean().item())

            self._n_updates += 1
            extra = {"value_epochs_loss": float(np.mean(value_epochs_losses))} if value_epochs_losses else {}
            self._train_statistics.add_minibatches(minibatch_stats, **extra)
            if self._n_updates % self.broadcast_interval == 0:
                self._broadcast_weights()

    @th.no_grad()
    def _pass_targets(self, batch: TrainingBatch) -> ImpalaTargets:
        """V-trace targets of the whole batch, with the policy at the start of the pass as pi."""
        distribution, values = batch.evaluate(self.policy)
        return ImpalaTargets(*self._vtrace_targets(batch, values, distribution.log_prob(batch.actions), self.policy))

    def dump_logs(self, iteration: int = 0) -> None:
        if self.n_value_epochs > 0:
            self.logger.record("train/value_gradient_steps", self.value_gradient_steps)
        super().dump_logs(iteration)

    def learn(
        self: SelfIMPALA,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 100,
        tb_log_name: str = "IMPALA",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfIMPALA:
        return self._learn_from_segments(
            total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar
        )
