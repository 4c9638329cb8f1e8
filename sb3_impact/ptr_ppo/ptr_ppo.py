"""PTR-PPO: proximal policy optimization with prioritized trajectory replay (Liang et al., 2021)."""

import math
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch as th
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule

from sb3_impact.common.collectors import Collector
from sb3_impact.common.modes import evaluation_mode, has_mode_dependent_layers
from sb3_impact.common.policy_evaluation import values_and_log_probs_in_chunks
from sb3_impact.common.segment_ppo import SegmentPPO
from sb3_impact.common.segments import Segment
from sb3_impact.common.training_batch import TrainingBatch
from sb3_impact.common.training_statistics import TrainingStatistics
from sb3_impact.ptr_ppo.loss import ReplayTargets, ptr_ppo_replay_loss
from sb3_impact.ptr_ppo.memory import TrajectoryMemory
from sb3_impact.ptr_ppo.policies import CnnPolicy, MlpPolicy, MultiInputPolicy
from sb3_impact.ptr_ppo.scoring import SegmentScores, replay_targets, score_segments, segment_priorities

SelfPTRPPO = TypeVar("SelfPTRPPO", bound="PTRPPO")

PRIORITIES = ("max", "mean", "reward")
# Denominator of the replay surrogate's ratio (eq. 22 with r_t of eq. 4): the stored behaviour probability
# b, the policy backed up before the fresh update (Algorithm 1, line 16) or the policy backed up at the start
# of each replay round (Algorithm 1, line 22). See PTRPPO's ``replay_ratio``.
REPLAY_RATIOS = ("behaviour", "old_policy", "round_policy")


class PTRPPO(SegmentPPO):
    """
    PTR-PPO: PPO with prioritized trajectory replay.

    Paper: https://arxiv.org/abs/2112.03798 (section 4, Algorithm 1). Rollouts come from a collector
    (:class:`~sb3_impact.common.segment_ppo.SegmentPPO`: synchronous by default, asynchronous with
    ``collector="thread"``, ``"process"`` or ``"ray"``). Every iteration is an SB3 PPO update (``n_epochs``
    epochs) on the fresh rollout; then the rollout's ``n_envs`` segments (one environment's
    ``n_steps`` steps each) enter a FIFO priority memory of ``memory_size`` segments, and ``replay_rounds``
    rounds follow. Each round samples ``replay_batch`` segments with probability ``p^alpha / sum p^alpha``,
    scores them with the current network (GAE cut at episode ends, eq. 18; done-cut importance product,
    eq. 19; truncated weight ``rho^marg``, eq. 20), takes one epoch of minibatch steps (size ``batch_size``)
    on the clipped surrogate with advantage ``rho^marg * GAE`` (eqs. 21-22; the ratio's denominator is set
    by ``replay_ratio``), an importance-weighted one-step TD value loss (eq. 16, corrected) and the entropy
    bonus (eq. 23), and finally updates the sampled segments' priorities.

    :param policy: The policy model to use (MlpPolicy, CnnPolicy, MultiInputPolicy)
    :param env: The environment to learn from (if registered in Gym, can be str)
    :param learning_rate: The learning rate (Table 1: 1e-4), a constant or a schedule of the remaining progress
    :param n_steps: Steps per environment per rollout, i.e. the length of one trajectory segment
    :param batch_size: Minibatch size, for the fresh rollout and for the replay rounds
    :param n_epochs: PPO epochs on each fresh rollout (2: the paper trains the fresh data twice, section 5.3.2)
    :param gamma: Discount factor (Table 1: 0.99)
    :param gae_lambda: GAE lambda (Table 1: 0.95)
    :param clip_range: PPO clipping parameter epsilon (Table 1: 0.1), for the fresh and the replayed data
    :param clip_range_vf: Value clipping of the fresh-rollout PPO update (as SB3 PPO; not used in replay)
    :param normalize_advantage: Normalize the advantages of each minibatch (fresh and replayed)
    :param ent_coef: Entropy coefficient beta (Table 1: 0.001)
    :param vf_coef: Value function coefficient, for the fresh and the replayed data
    :param max_grad_norm: The maximum value for the gradient clipping
    :param memory_size: Segments kept in the priority memory (the paper's default 256)
    :param replay_rounds: Replay rounds N per iteration (0: plain PPO)
    :param replay_batch: Segments M sampled per replay round (None: ``n_envs``, as many as a fresh rollout)
    :param priority: Trajectory priority: ``"max"`` or ``"mean"`` of ``|GAE|`` (eqs. 12-13) or ``"reward"``,
        the normalised undiscounted segment return (eq. 14)
    :param priority_alpha: Exponent alpha of the sampling probabilities (eq. 2; 0 is uniform sampling)
    :param eps_marg: epsilon^marg of the truncated importance weight (eq. 20; Table 1: 0.2), in (0, 1)
    :param replay_ratio: Denominator of the replay surrogate's ratio ``r_t = pi_theta / pi_ref`` (eq. 22 uses
        ``r_t`` of eq. 4, ``pi_theta / pi_theta_old``). The advantage is always ``rho^marg * A^done`` (eq. 21),
        ``rho^marg`` built from ``pi / b`` (eqs. 19-20), and the value loss is always weighted by ``pi / b``
        (eq. 16). ``"behaviour"``: ``pi_ref = b``, the probability stored at collection (section 4.1: "we
        record the probabilities p ... we do not need to store theta_old"); the correction from ``b`` then
        enters twice, through ``rho^marg`` and through the ratio. ``"old_policy"``: ``pi_ref`` = the policy
        backed up before this iteration's fresh PPO update (Algorithm 1, line 16), fixed for all the
        iteration's replay rounds, as PPO's ``pi_old`` is for all its epochs. ``"round_policy"``: ``pi_ref`` =
        the policy backed up at the start of each replay round (Algorithm 1, line 22, the line right before
        the PTR-PPO update of line 23), i.e. the network that scores the round's segments; the ratio starts
        every round at 1. Both policy snapshots are evaluated without gradient on the replayed observations,
        in chunks, as log-probabilities. ``train/replay_ratio_mean`` and ``train/replay_ratio_max`` log this
        ratio; ``train/replay_is_ratio_*`` keep logging ``pi / b``. Default ``"old_policy"``: measured against
        the other two on CartPole-v1 and Acrobot-v1 (5 seeds, docs/algorithms/ptr_ppo.md, "Replay ratio"),
        the difference depends on the environment, so the ratio to a ``theta_old`` snapshot that eq. 22
        writes is kept, and of the two snapshots the one that never collapsed.
    :param target_kl: Early stopping of the fresh-rollout PPO epochs (as SB3 PPO)
    :param collector: Where segments are collected (default "sync"): ``"sync"``, ``"thread"``, ``"process"``,
        ``"ray"`` or a ``Collector`` subclass (see :class:`~sb3_impact.common.segment_loop.SegmentLoopMixin`)
    :param collector_kwargs: The collector's options, e.g. ``queue_size`` (see docs/algorithms/collectors.md)
    :param learner_threads: PyTorch intra-op threads of the learner during ``learn()`` (restored after it; None:
        PyTorch's setting). 1 by default: more threads spin when the cores are busy (see docs/algorithms/collectors.md)
    :param stats_window_size: Window size for the rollout logging (episodes)
    :param tensorboard_log: the log location for tensorboard (if None, no logging)
    :param policy_kwargs: additional arguments to be passed to the policy on creation
    :param verbose: Verbosity level: 0 for no output, 1 for info messages, 2 for debug messages
    :param seed: Seed for the pseudo random generators (also seeds the replay sampling)
    :param device: Device (cpu, cuda, ...) on which the code should be run
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
        learning_rate: float | Schedule = 1e-4,
        n_steps: int = 128,
        batch_size: int = 64,
        n_epochs: int = 2,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        clip_range: float | Schedule = 0.1,
        clip_range_vf: float | Schedule | None = None,
        normalize_advantage: bool = True,
        ent_coef: float = 0.001,
        vf_coef: float = 0.5,
        max_grad_norm: float = 0.5,
        memory_size: int = 256,
        replay_rounds: int = 8,
        replay_batch: int | None = None,
        priority: str = "max",
        priority_alpha: float = 0.6,
        eps_marg: float = 0.2,
        replay_ratio: str = "old_policy",
        target_kl: float | None = None,
        collector: str | type[Collector] = "sync",
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
        if priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {PRIORITIES}, got {priority!r}")
        if replay_ratio not in REPLAY_RATIOS:
            raise ValueError(f"replay_ratio must be one of {REPLAY_RATIOS}, got {replay_ratio!r}")
        if not (0.0 < eps_marg < 1.0):
            raise ValueError(f"eps_marg must be in (0, 1), got {eps_marg}")
        if not (priority_alpha >= 0 and math.isfinite(priority_alpha)):
            raise ValueError(f"priority_alpha must be a finite number >= 0, got {priority_alpha}")
        if replay_rounds < 0:
            raise ValueError(f"replay_rounds must be >= 0, got {replay_rounds}")
        if replay_batch is not None and replay_batch < 1:
            raise ValueError(f"replay_batch must be >= 1 or None, got {replay_batch}")
        if memory_size < 1:
            raise ValueError(f"memory_size must be >= 1, got {memory_size}")
        if memory_size < (replay_batch or 1):
            raise ValueError(f"memory_size ({memory_size}) must be >= replay_batch ({replay_batch})")
        super().__init__(
            policy,
            env,
            learning_rate=learning_rate,
            n_steps=n_steps,
            batch_size=batch_size,
            n_epochs=n_epochs,
            gamma=gamma,
            gae_lambda=gae_lambda,
            clip_range=clip_range,
            clip_range_vf=clip_range_vf,
            normalize_advantage=normalize_advantage,
            ent_coef=ent_coef,
            vf_coef=vf_coef,
            max_grad_norm=max_grad_norm,
            target_kl=target_kl,
            collector=collector,
            collector_kwargs=collector_kwargs,
            learner_threads=learner_threads,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            policy_kwargs=policy_kwargs,
            verbose=verbose,
            seed=seed,
            device=device,
            _init_setup_model=False,
        )
        self.memory_size = memory_size
        self.replay_rounds = replay_rounds
        self.replay_batch = replay_batch
        self.priority = priority
        self.priority_alpha = priority_alpha
        self.eps_marg = eps_marg
        self.replay_ratio = replay_ratio
        if self.env is not None and memory_size < self.effective_replay_batch:
            raise ValueError(
                f"memory_size ({memory_size}) must be >= replay_batch ({self.effective_replay_batch}, "
                f"None means n_envs = {self.n_envs})"
            )
        self.replayed_segments = 0
        self.replay_updates = 0
        self._memory: TrajectoryMemory | None = None
        self._replay_rng: np.random.Generator | None = None
        self._old_policy: ActorCriticPolicy | None = None  # Algorithm 1, line 16 (replay_ratio="old_policy")
        if _init_setup_model:
            self._setup_model()

    @property
    def effective_replay_batch(self) -> int:
        """Segments sampled per replay round (``replay_batch``, or ``n_envs`` when it is None)."""
        return self.replay_batch if self.replay_batch is not None else self.n_envs

    @property
    def replay_memory(self) -> TrajectoryMemory:
        """The priority memory (empty after a load: it is not saved)."""
        assert self._memory is not None, "call _setup_model() first"
        return self._memory

    def _setup_model(self) -> None:
        super()._setup_model()
        self._memory = TrajectoryMemory(self.memory_size, self.priority_alpha, self.device)
        self._replay_rng = np.random.default_rng(self.seed)

    def _excluded_save_params(self) -> list[str]:
        # The memory holds up to memory_size * n_steps observations: it is not written into the zip.
        return [*super()._excluded_save_params(), "_memory", "_replay_rng", "_old_policy"]

    @th.no_grad()
    def _backup_old_policy(self) -> None:
        """Algorithm 1, line 16: ``theta_old <- theta`` before the fresh update (``replay_ratio="old_policy"``)."""
        if self._old_policy is None:
            self._old_policy = self.policy_class(  # type: ignore[assignment]
                self.observation_space, self.action_space, self.lr_schedule, **self.policy_kwargs
            ).to(self.device)
            self._old_policy.set_training_mode(False)
            self._old_policy.requires_grad_(False)
        self._old_policy.load_state_dict(self.policy.state_dict())

    # ---------------------------------------------------------------- scoring

    @th.no_grad()
    def _evaluate(
        self, batch: TrainingBatch, forward: tuple[Distribution, th.Tensor] | None = None
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """
        The current network on ``batch``, in evaluation mode: the values and log-probabilities of the stored actions
        (flat, time-major), in chunks or from ``forward`` (the distribution and values of a forward pass over the whole
        batch that the caller has already: a one-minibatch round's gradient step), and the bootstrap values
        (:meth:`~sb3_impact.common.training_batch.TrainingBatch.bootstrap_values`).
        """
        with evaluation_mode(self.policy):
            if forward is None:
                values, log_probs = values_and_log_probs_in_chunks(self.policy, batch.observations, batch.actions)
            else:
                values, log_probs = forward[1].detach(), forward[0].log_prob(batch.actions).detach()
            return (values, log_probs, *batch.bootstrap_values(self.policy))

    def _score_segments(self, batch: TrainingBatch) -> SegmentScores:
        """``batch`` scored by the current network (:func:`~sb3_impact.ptr_ppo.scoring.score_segments`)."""
        return score_segments(batch, *self._evaluate(batch), gamma=self.gamma, gae_lambda=self.gae_lambda)

    @th.no_grad()
    def _score_round(
        self, batch: TrainingBatch, slots: np.ndarray, forward: tuple[Distribution, th.Tensor] | None
    ) -> tuple[ReplayTargets, np.ndarray]:
        """
        Algorithm 1, line 22: the network at the start of the round scores the segments of ``slots`` (``batch``) once,
        which gives the round's targets (eqs. 16, 18-21) and the segments' new priorities (eqs. 12-14).
        """
        values, log_probs, bootstrap_values, final_values = self._evaluate(batch, forward)
        if self.replay_ratio == "old_policy":
            assert self._old_policy is not None, "train() backs up the old policy before the replay rounds"
            reference_log_probs = values_and_log_probs_in_chunks(self._old_policy, batch.observations, batch.actions)[1]
        elif self.replay_ratio == "round_policy":
            reference_log_probs = log_probs  # this network, before the round's steps (line 22)
        else:
            reference_log_probs = batch.behaviour_log_probs.flatten()
        scores = score_segments(
            batch, values, log_probs, bootstrap_values, final_values, gamma=self.gamma, gae_lambda=self.gae_lambda
        )
        targets = replay_targets(scores, reference_log_probs, batch.behaviour_params, self.eps_marg)
        return targets, self._priorities(slots, scores.advantages)

    def _priorities(self, slots: np.ndarray, advantages: th.Tensor | None) -> np.ndarray:
        """
        The priorities of the segments in ``slots``: eq. 12 or 13 of their GAE ``advantages`` (``[T, len(slots)]``), or
        eq. 14 of their returns (``advantages`` None).
        """
        if self.priority == "reward":
            return self.replay_memory.reward_priorities(slots)
        assert advantages is not None
        return segment_priorities(advantages, self.priority)

    # ---------------------------------------------------------------- training

    def _train_on_segment(self, segment: Segment) -> None:
        """The segment loop's hook, after ``segment`` filled the rollout buffer: :meth:`train` with it."""
        self.train(segment)

    def train(self, segment: Segment | None = None) -> None:
        """
        Algorithm 1, lines 16-25: PPO on the fresh rollout, ``segment`` (that rollout as collected) into the memory
        with its priorities, replay rounds. Without ``segment`` (SB3's ``train()`` after ``collect_rollouts``) the
        rounds replay the memory as it stands.
        """
        if self.replay_ratio == "old_policy" and self.replay_rounds > 0:
            self._backup_old_policy()  # line 16
        fresh_steps = self._fresh_update()  # line 17
        if segment is not None:
            self._insert(segment)  # lines 18-19
        memory = self.replay_memory
        statistics = TrainingStatistics()
        replay_steps = self.replay_updates
        if len(memory) > 0:
            for _ in range(self.replay_rounds):  # lines 20-25
                self._replay_round(statistics)
        replay_steps = self.replay_updates - replay_steps
        statistics.add({"replay_share": replay_steps / max(fresh_steps + replay_steps, 1)})
        filled = memory.filled_slots()
        if len(filled):
            statistics.add(
                {"priority_mean": memory.priorities[filled].mean(), "priority_max": memory.priorities[filled].max()}
            )
        statistics.record(self.logger)
        self.logger.record("train/memory_segments", len(memory))
        self.logger.record("train/replayed_segments", self.replayed_segments)
        self.logger.record("train/replay_updates", self.replay_updates)

    def _fresh_update(self) -> int:
        """Algorithm 1, line 17: SB3's PPO update on the rollout buffer. Returns its gradient steps."""
        steps = 0

        def count_step(*_: Any) -> None:
            nonlocal steps
            steps += 1

        hook = self.policy.optimizer.register_step_post_hook(count_step)
        try:
            super().train()
        finally:
            hook.remove()
        return steps

    def _insert(self, segment: Segment) -> None:
        """Algorithm 1, lines 18-19: the rollout's columns into the memory, prioritised by the network just updated."""
        memory = self.replay_memory
        slots = memory.add_segment(segment)  # the reward statistics see the new returns first (Fig. 3)
        advantages = None
        if self.priority != "reward":  # (with more environments than slots, only the last ones were kept)
            advantages = self._score_segments(TrainingBatch.from_segment(segment, self.device)).advantages
            advantages = advantages[:, segment.n_envs - len(slots) :]
        memory.update_priorities(slots, self._priorities(slots, advantages))

    def _fuses_scoring_forward(self, samples: int) -> bool:
        """
        Whether a round of ``samples`` takes its scores from the forward pass of its gradient step: when the
        round is one minibatch, the network that scores it (Algorithm 1, line 22) is the one its only step
        differentiates, so one forward pass serves both (unless a layer computes differently in evaluation mode).
        """
        return samples <= self.batch_size and not has_mode_dependent_layers(self.policy)

    def _replay_round(self, statistics: TrainingStatistics) -> dict[str, float]:
        """
        Algorithm 1, lines 21-24: sample M segments, score them with the current network, one epoch of PTR-PPO
        minibatch steps, new priorities. Adds the round's statistics to ``statistics`` and returns them.
        """
        assert self._replay_rng is not None
        slots = self.replay_memory.sample(self.effective_replay_batch, self._replay_rng)  # line 21
        batch = self.replay_memory.batch(slots)
        clip_range = self.clip_range(self._current_progress_remaining)  # type: ignore[operator]
        self.policy.set_training_mode(True)
        forward = batch.evaluate(self.policy) if self._fuses_scoring_forward(batch.size) else None
        targets, priorities = self._score_round(batch, slots, forward)  # line 22

        # Line 23: one epoch of minibatch steps. One minibatch: its loss does not depend on the sample order, and the
        # fused forward pass is in batch order.
        permutation = th.as_tensor(self._replay_rng.permutation(batch.size), device=self.device)
        minibatches = [slice(None)] if forward is not None else list(permutation.split(self.batch_size))
        minibatch_statistics = []
        for indices in minibatches:
            minibatch = batch.minibatch(indices)
            distribution, values = forward if forward is not None else batch.evaluate(self.policy, minibatch)
            loss, stats = ptr_ppo_replay_loss(
                distribution,
                values,
                minibatch,
                targets[indices],
                self.action_space,
                clip_range=clip_range,
                ent_coef=self.ent_coef,
                vf_coef=self.vf_coef,
                normalize_advantage=self.normalize_advantage,
            )
            self.policy.optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()
            minibatch_statistics.append(stats)
        self.replay_updates += len(minibatches)
        self.replayed_segments += len(slots)
        round_statistics = statistics.add_minibatches(
            minibatch_statistics, rho_marg_mean=float(targets.rho_marg.mean()), rho_marg_max=float(targets.rho_marg.max())
        )
        self.replay_memory.update_priorities(slots, priorities)  # line 24
        return round_statistics

    def learn(
        self: SelfPTRPPO,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "PTRPPO",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfPTRPPO:
        return self._learn_from_segments(
            total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar
        )
