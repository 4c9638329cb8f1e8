"""IMPACT: importance-weighted asynchronous PPO with a clipped target network (Luo et al., ICLR 2020)."""

from typing import Any, ClassVar, TypeVar

import torch as th
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule
from stable_baselines3.common.utils import FloatSchedule

from sb3_impact.common.collectors import Collector
from sb3_impact.common.distributions import behaviour_params
from sb3_impact.common.segment_loop import frozen_policy_copy
from sb3_impact.common.training_batch import TrainingBatch
from sb3_impact.common.vtrace_actor_critic import VTraceActorCritic
from sb3_impact.impact.loss import ImpactTargets, impact_loss
from sb3_impact.impact.policies import (
    CnnLstmPolicy,
    CnnPolicy,
    MlpLstmPolicy,
    MlpPolicy,
    MultiInputLstmPolicy,
    MultiInputPolicy,
)

SelfIMPACT = TypeVar("SelfIMPACT", bound="IMPACT")


def _check_clip_range(clip_range: Any) -> None:
    if isinstance(clip_range, (float, int)) and clip_range <= 0:
        raise ValueError(f"clip_range must be > 0, got {clip_range}")


class IMPACT(VTraceActorCritic):
    """
    IMPACT (Importance Weighted Asynchronous Architectures with Clipped Target Networks).

    Paper: https://arxiv.org/abs/1912.00167 (Algorithm 1). An asynchronous collector steps the
    environments with a slightly stale copy of the policy; the learner keeps a circular buffer of
    ``circular_buffer_size`` (N) batches, each used ``max_batch_reuse`` (K) times, and optimises the
    PPO-clipped surrogate with the target-worker clipped ratio
    ``pi_theta / max(pi_target, pi_worker / target_worker_clip)`` (section 3.1) and V-trace GAE-lambda
    advantages computed with the target policy (section 3). The target network is refreshed every
    ``target_update_interval`` batch draws (default N * K).

    Each draw of a batch is one pass over it in shuffled minibatches of ``batch_size`` samples, one
    gradient step each, as PPO's epochs (RLlib's APPO does the same). With N = 1 and K = ``n_epochs``,
    synchronous IMPACT is SB3's PPO with that ``batch_size``. ``train/n_updates`` counts batch draws,
    as PPO's counts epochs; ``train/gradient_steps`` counts minibatch steps.

    With ``kl_coef > 0`` and a ``kl_target``, the KL coefficient adapts once per target-network update,
    from the mean KL(pi_target || pi) measured since the previous one (as RLlib's APPO): x1.5 above twice
    the target, x0.5 below half of it.

    :param policy: The policy model to use (MlpPolicy, CnnPolicy, MultiInputPolicy, their recurrent MlpLstmPolicy,
        CnnLstmPolicy, MultiInputLstmPolicy, or an ActorCriticPolicy subclass)
    :param env: The environment to learn from (if registered in Gym, can be str)
    :param learning_rate: The learning rate, a constant or a schedule of the remaining progress (1 to 0)
    :param n_steps: Vector steps per collected segment; one batch is ``n_steps * n_envs`` samples
    :param batch_size: Minibatch size of the gradient steps in each pass over a batch (None: the whole
        batch, one gradient step per draw, as in the paper)
    :param circular_buffer_size: N, the number of batches the learner cycles through
    :param max_batch_reuse: K, how many times (draws) each batch is used before it is replaced
    :param target_worker_clip: rho >= 1 of the target-worker clipping (beta = 1 / rho in the paper); ``inf``
        turns the clipping off, the paper's ablation R_1 = pi_theta / pi_target (figure 3a)
    :param clip_range: PPO clipping parameter epsilon, applied on top of the IMPACT ratio (appendix E)
    :param target_update_interval: batch draws between target-network updates (None: N * K)
    :param broadcast_interval: batch draws between weight broadcasts to the collector (which also gets the
        weights after every segment's training)
    :param gamma: Discount factor
    :param gae_lambda: lambda of the V-trace GAE-lambda advantages
    :param vtrace_clip_rho_threshold: rho_bar of V-trace
    :param vtrace_clip_c_threshold: c_bar of V-trace
    :param normalize_advantage: Whether to normalize the advantages of each minibatch
    :param ent_coef: Entropy coefficient
    :param vf_coef: Value function coefficient
    :param kl_coef: Initial coefficient eta of the KL(pi_target || pi) penalty (0 disables it)
    :param kl_target: KL target of the adaptive penalty (None: eta stays constant)
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
        learning_rate: float | Schedule = 1e-3,
        n_steps: int = 128,
        batch_size: int | None = None,
        circular_buffer_size: int = 4,
        max_batch_reuse: int = 10,
        target_worker_clip: float = 2.0,
        clip_range: float | Schedule = 0.2,
        target_update_interval: int | None = None,
        broadcast_interval: int = 1,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        vtrace_clip_rho_threshold: float = 1.0,
        vtrace_clip_c_threshold: float = 1.0,
        normalize_advantage: bool = True,
        ent_coef: float = 0.0,
        vf_coef: float = 0.5,
        kl_coef: float = 0.0,
        kl_target: float | None = 0.01,
        max_grad_norm: float = 0.5,
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
        if not target_worker_clip >= 1:  # NaN fails too
            raise ValueError(
                f"target_worker_clip must be a number >= 1 (inf: no target-worker clipping), got {target_worker_clip}"
            )
        _check_clip_range(clip_range)
        if target_update_interval is not None and target_update_interval < 1:
            raise ValueError(f"target_update_interval must be >= 1 or None, got {target_update_interval}")
        if kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
        if kl_target is not None and kl_target <= 0:
            raise ValueError(f"kl_target must be > 0 or None, got {kl_target}")
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
            circular_buffer_size=circular_buffer_size,
            max_batch_reuse=max_batch_reuse,
            vtrace_clip_rho_threshold=vtrace_clip_rho_threshold,
            vtrace_clip_c_threshold=vtrace_clip_c_threshold,
            vtrace_clip_pg_rho_threshold=1.0,  # IMPACT's V-GAE advantages do not use the pg-weighted advantage
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
            _init_setup_model=False,
        )
        self.target_worker_clip = target_worker_clip
        self.clip_range = clip_range
        self.target_update_interval = target_update_interval
        self.kl_coef = kl_coef
        self.kl_target = kl_target
        self.use_kl_penalty = kl_coef > 0
        self.target_updates = 0
        # KL(pi_target || pi) summed over the gradient steps since the last target update (adaptive KL).
        self._kl_sum = 0.0
        self._kl_count = 0
        self._target_policy: ActorCriticPolicy | None = None
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        super()._setup_model()
        _check_clip_range(self.clip_range)  # also when load(path, clip_range=...) set it without the constructor
        self.clip_range = FloatSchedule(self.clip_range)

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_target_policy"]

    @property
    def effective_target_update_interval(self) -> int:
        if self.target_update_interval is not None:
            return self.target_update_interval
        return self.circular_buffer_size * self.max_batch_reuse

    def _on_learn_start(self, collector: Collector) -> None:
        super()._on_learn_start(collector)
        # Algorithm 1, line 2: the target network starts as a copy of the learner.
        self._target_policy = frozen_policy_copy(self.policy, self.device)  # type: ignore[assignment]
        self._kl_sum, self._kl_count = 0.0, 0

    def train(self) -> None:
        """
        Algorithm 1, lines 6-12: batch draws from the circular buffer until the slot under the cursor needs a new
        batch; each draw is one pass over the batch in shuffled minibatches of ``batch_size``, one step each.
        """
        buffer = self._active_circular_buffer()
        self.policy.set_training_mode(True)  # callbacks (evaluation) may have switched it off
        while not buffer.needs_batch():
            batch = buffer.next_batch()  # line 6
            if batch.targets is None:  # line 7: the first draw evaluates the batch on the target network
                batch.targets = self._evaluate_on_target(batch)
            self._update_learning_rate(self.policy.optimizer)
            clip_range = self.clip_range(self._current_progress_remaining)
            # Without the penalty the KL is only logged, and only measured in a batch's last draw.
            measure_kl = self.use_kl_penalty or batch.last_use
            minibatch_stats = []
            for indices in batch.minibatch_indices(self.batch_size):  # lines 8-9, one step per minibatch
                minibatch = batch.minibatch(indices)
                distribution, values = batch.evaluate(self.policy, minibatch)
                loss, stats = impact_loss(
                    distribution,
                    values,
                    minibatch,
                    batch.targets[indices],
                    self.action_space,
                    clip_range=clip_range,
                    target_worker_clip=self.target_worker_clip,
                    ent_coef=self.ent_coef,
                    vf_coef=self.vf_coef,
                    kl_coef=self.kl_coef if self.use_kl_penalty else None,
                    measure_kl=measure_kl,
                    normalize_advantage=self.normalize_advantage,
                )
                self.policy.optimizer.zero_grad()
                loss.backward()
                th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                self.policy.optimizer.step()
                minibatch_stats.append(stats)
            self.gradient_steps += len(minibatch_stats)
            self._n_updates += 1
            stats = self._train_statistics.add_minibatches(minibatch_stats, kl_coef=self.kl_coef, clip_range=clip_range)
            if self.use_kl_penalty:
                self._kl_sum += stats["kl_to_target"] * len(minibatch_stats)
                self._kl_count += len(minibatch_stats)
            if self._n_updates % self.effective_target_update_interval == 0:  # line 11
                assert self._target_policy is not None
                self._target_policy.load_state_dict(self.policy.state_dict())
                self.target_updates += 1
                self._adapt_kl_coef()
            if self._n_updates % self.broadcast_interval == 0:  # line 12
                self._broadcast_weights()

    @th.no_grad()
    def _evaluate_on_target(self, batch: TrainingBatch) -> ImpactTargets:
        """
        Algorithm 1, line 7: the batch on the target network (theta', w'), with its V-trace GAE-lambda advantages and
        value targets (section 3, "V-GAE", with pi_target in the role of pi), kept for all K draws as PPO keeps its GAE.
        """
        assert self._target_policy is not None and not self._target_policy.training  # frozen_policy_copy
        # One pass (one replay of a recurrent batch) gives the values and the bootstrap values.
        distribution, values, *bootstrap = batch.evaluate_with_bootstrap(self._target_policy)
        log_probs = distribution.log_prob(batch.actions)
        value_targets, _ = self._vtrace_targets(batch, values, log_probs, self._target_policy, tuple(bootstrap))
        # V-GAE: A_t = sum_i (lambda gamma)^(i-t) (prod_j c_j) delta_i V = v_t - V(x_t); equals GAE on-policy.
        return ImpactTargets(log_probs, behaviour_params(distribution), value_targets, value_targets - values)

    def _adapt_kl_coef(self) -> None:
        """
        Adaptive KL coefficient (PPO's adaptive-KL rule, applied per target update as RLlib's APPO does):
        the mean KL(pi_target || pi) since the last target update against ``kl_target``. Kept within
        [1e-6, 1e6] so that a long run of small KLs cannot underflow it to 0.
        """
        if self.use_kl_penalty and self.kl_target is not None and self._kl_count > 0:
            mean_kl = self._kl_sum / self._kl_count
            if mean_kl > 2.0 * self.kl_target:
                self.kl_coef = min(self.kl_coef * 1.5, 1e6)
            elif mean_kl < 0.5 * self.kl_target:
                self.kl_coef = max(self.kl_coef * 0.5, 1e-6)
        self._kl_sum, self._kl_count = 0.0, 0

    def dump_logs(self, iteration: int = 0) -> None:
        self.logger.record("train/target_updates", self.target_updates)
        super().dump_logs(iteration)

    def learn(
        self: SelfIMPACT,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "IMPACT",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfIMPACT:
        return self._learn_from_segments(
            total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar
        )
