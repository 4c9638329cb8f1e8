"""PPO-AMBER: PPO with adaptive multi-batch experience replay (Han & Sung, 2017)."""

from collections.abc import Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.distributions import Distribution
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule
from stable_baselines3.common.utils import FloatSchedule, LinearSchedule, explained_variance

from sb3_impact.common.collectors import Collector, collector_class
from sb3_impact.common.distributions import kl_from_params
from sb3_impact.common.estimators import batch_average_is_weight, clamp_log_ratio
from sb3_impact.common.policy_evaluation import evaluate_in_chunks
from sb3_impact.common.segment_ppo import SegmentPPO
from sb3_impact.ppo_amber.loss import AmberTargets, amber_loss
from sb3_impact.ppo_amber.memory import BatchReplayMemory, StoredBatch
from sb3_impact.ppo_amber.policies import CnnPolicy, MlpPolicy, MultiInputPolicy

SelfPPOAMBER = TypeVar("SelfPPOAMBER", bound="PPOAMBER")

# The paper's defaults (table 2, section 7.3), each annealed linearly to 0 over training.
PAPER_LEARNING_RATE = LinearSchedule(3e-4, 0.0, 1.0)
PAPER_CLIP_RANGE = LinearSchedule(0.4, 0.0, 1.0)
PAPER_BATCH_DROP_FACTOR = LinearSchedule(0.25, 0.0, 1.0)


def select_active_batches(replay_ratios: Sequence[float], batch_drop_factor: float, adaptive: bool = True) -> list[int]:
    """
    Indices (newest first) of the batches to train on (Algorithm 1, lines 8-19): batch ``l`` is active
    iff ``R'_l <= 1 + batch_drop_factor``; the newest batch (index 0, collected by the current policy) is
    always active. Without ``adaptive`` (PPO-MBER) every stored batch is active.
    """
    if not adaptive:
        return list(range(len(replay_ratios)))
    return [0] + [index for index in range(1, len(replay_ratios)) if replay_ratios[index] <= 1.0 + batch_drop_factor]


def _non_negative_schedule(name: str, value: float | str | Schedule) -> FloatSchedule:
    """A float (constant), a ``"lin_<x>"`` string (linear from ``x`` to 0) or a schedule, checked to be >= 0."""
    if isinstance(value, str):
        try:
            if not value.startswith("lin_"):
                raise ValueError
            value = LinearSchedule(float(value[len("lin_") :]), 0.0, 1.0)
        except ValueError:
            raise ValueError(f"{name} must be a float, a schedule or a 'lin_<float>' string, got {value!r}") from None
    if isinstance(value, (int, float)):
        if not value >= 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    elif not callable(value):
        raise TypeError(f"{name} must be a float or a schedule (a callable of the remaining progress), got {value!r}")
    schedule = FloatSchedule(value)
    for progress in (1.0, 0.0):
        if not schedule(progress) >= 0:
            raise ValueError(f"{name} must be >= 0, but its schedule gives {schedule(progress)} at progress {progress}")
    return schedule


class PPOAMBER(SegmentPPO):
    """
    PPO with Adaptive Multi-Batch Experience Replay (PPO-AMBER); PPO-MBER with ``adaptive=False``.

    Paper: https://arxiv.org/abs/1710.04423 (Algorithm 1). Collection comes from a collector
    (:class:`~sb3_impact.common.segment_ppo.SegmentPPO`: synchronous by default, which is SB3 PPO's;
    asynchronous with ``collector="thread"``, ``"process"`` or ``"ray"``); GAE and the rollout buffer are SB3 PPO's.
    After each collection the batch is copied, with its advantages, value targets and behaviour
    distribution, into a memory of the last ``replay_length`` (L) batches. Once per iteration, before the
    epochs, the batch-average IS weight ``R'_l`` (eq. 10) of every stored batch is computed with the
    current policy; batch ``l`` is active iff ``R'_l <= 1 + batch_drop_factor`` (the newest always is).
    Each epoch takes ``ceil(n_steps * n_envs / batch_size)`` gradient steps, as PPO, on minibatches of
    ``batch_size * active batches`` samples drawn uniformly from the active batches; the PPO ratio is taken
    against each sample's stored behaviour probability. With ``replay_length=1`` this is SB3's PPO.

    Defaults are the paper's (table 2, section 7.3): L = 8, clip range 0.4 and learning rate 3e-4, both
    annealed linearly to 0 over training, batch drop factor annealed linearly from 0.25 to 0, n_steps 2048,
    batch_size 64, 10 epochs, gamma 0.99, lambda 0.95.

    :param policy: The policy model to use (MlpPolicy, CnnPolicy, MultiInputPolicy, or an ActorCriticPolicy subclass)
    :param env: The environment to learn from (if registered in Gym, can be str)
    :param learning_rate: The learning rate, a constant or a schedule of the remaining progress (1 to 0)
    :param n_steps: Vector steps per iteration; one batch is ``n_steps * n_envs`` samples (N)
    :param batch_size: Base minibatch size (M_PPO); the minibatch is ``batch_size`` times the active batches
    :param n_epochs: Number of epochs over the active batches per iteration
    :param replay_length: L, the number of batches kept (the newest included); 1 is PPO
    :param adaptive: Drop batches whose R' exceeds ``1 + batch_drop_factor`` (False: PPO-MBER, all L used)
    :param batch_drop_factor: eps_b, a constant, a schedule of the remaining progress, or ``"lin_<x>"``
        (linear from x to 0)
    :param gamma: Discount factor
    :param gae_lambda: Factor for trade-off of bias vs variance for Generalized Advantage Estimator
    :param clip_range: PPO clipping parameter epsilon, a constant or a schedule
    :param clip_range_vf: Clipping of the value function around the stored (collection-time) values; None: off
    :param normalize_advantage: Whether to normalize the advantages of each minibatch
    :param ent_coef: Entropy coefficient
    :param vf_coef: Value function coefficient
    :param max_grad_norm: The maximum value for the gradient clipping
    :param use_sde: Whether to use generalized State Dependent Exploration (gSDE); supported without
        ``squash_output``, where the behaviour policy is the per-state Gaussian SB3's PPO also uses
    :param sde_sample_freq: Sample a new noise matrix every n steps when using gSDE (-1: only at rollout start)
    :param rollout_buffer_class: Rollout buffer class to use, a behaviour-recording one (None: selected automatically)
    :param rollout_buffer_kwargs: Keyword arguments to pass to the rollout buffer on creation
    :param target_kl: Stop an iteration's epochs early when the approximate KL to the behaviour policy
        exceeds ``1.5 * target_kl`` (None: no limit)
    :param collector: Where segments are collected (default "sync"): ``"sync"``, ``"thread"``, ``"process"``,
        ``"ray"`` or a ``Collector`` subclass (see :class:`~sb3_impact.common.segment_loop.SegmentLoopMixin`)
    :param collector_kwargs: The collector's options, e.g. ``queue_size`` (see docs/algorithms/collectors.md)
    :param learner_threads: PyTorch intra-op threads of the learner during ``learn()`` (restored after it; None:
        PyTorch's setting). 1 by default: more threads spin when the cores are busy (see docs/algorithms/collectors.md)
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

    def __init__(
        self,
        policy: str | type[ActorCriticPolicy],
        env: GymEnv | str,
        learning_rate: float | Schedule = PAPER_LEARNING_RATE,
        n_steps: int = 2048,
        batch_size: int = 64,
        n_epochs: int = 10,
        replay_length: int = 8,
        adaptive: bool = True,
        batch_drop_factor: float | str | Schedule = PAPER_BATCH_DROP_FACTOR,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        clip_range: float | Schedule = PAPER_CLIP_RANGE,
        clip_range_vf: float | Schedule | None = None,
        normalize_advantage: bool = True,
        ent_coef: float = 0.0,
        vf_coef: float = 0.5,
        max_grad_norm: float = 0.5,
        use_sde: bool = False,
        sde_sample_freq: int = -1,
        rollout_buffer_class: type[RolloutBuffer] | None = None,
        rollout_buffer_kwargs: dict[str, Any] | None = None,
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
        if isinstance(replay_length, bool) or not isinstance(replay_length, (int, np.integer)):
            raise TypeError(f"replay_length must be an integer, got {replay_length!r}")
        if replay_length < 1:
            raise ValueError(f"replay_length must be >= 1, got {replay_length}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        batch_drop_factor = _non_negative_schedule("batch_drop_factor", batch_drop_factor)
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
            use_sde=use_sde,
            sde_sample_freq=sde_sample_freq,
            rollout_buffer_class=rollout_buffer_class,
            rollout_buffer_kwargs=rollout_buffer_kwargs,
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
        if self.env is not None and batch_size > self.n_steps * self.env.num_envs:
            raise ValueError(f"batch_size ({batch_size}) must be <= n_steps * n_envs ({self.n_steps} * {self.env.num_envs})")
        self.replay_length = int(replay_length)
        self.adaptive = adaptive
        self.batch_drop_factor = batch_drop_factor
        self.replay_memory: BatchReplayMemory | None = None
        # Results of the last iteration's batch selection (newest first), for callbacks and benchmarks.
        self.replay_ratios: list[float] = []
        self.active_batches = 0
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        super()._setup_model()
        # load(path, batch_drop_factor=...) sets the attribute without the constructor: convert it as the constructor does
        self.batch_drop_factor = _non_negative_schedule("batch_drop_factor", self.batch_drop_factor)
        self.replay_memory = BatchReplayMemory(self.replay_length)
        if getattr(self.policy.action_dist, "bijector", None) is not None:
            raise ValueError("use_sde with squash_output=True is not supported: its behaviour policy is not stored")

    def _excluded_save_params(self) -> list[str]:
        # The replay memory is not saved, like SB3's replay_buffer: a loaded model starts with an empty one.
        return [*super()._excluded_save_params(), "replay_memory"]

    def set_env(self, env: GymEnv, force_reset: bool = True) -> None:
        super().set_env(env, force_reset=force_reset)
        if self.replay_memory is not None:  # batches of another environment must not be replayed
            self.replay_memory.clear()

    def _store_rollout(self) -> None:
        """Copy the rollout buffer, with the behaviour distribution that collected it, into the replay memory."""
        assert self.replay_memory is not None
        self.replay_memory.add(StoredBatch.from_rollout_buffer(self.rollout_buffer))

    def replay_ratios_and_kl(self) -> tuple[list[float], list[float]]:
        """
        R' (eq. 10) and mean KL(mu_l || pi) of every stored batch with the current policy, newest first: what
        ``train()`` selects the active batches by (``replay_ratios`` keeps its R').
        """
        assert self.replay_memory is not None
        batches = list(self.replay_memory)
        # Synchronously, the newest batch was collected by the current policy: pi = mu exactly.
        ratios, kls = ([1.0], [0.0]) if collector_class(self.collector).in_learner_thread else ([], [])
        for batch in batches[len(ratios) :]:
            actions = th.as_tensor(batch.actions, device=self.device)
            if isinstance(self.action_space, spaces.Discrete):
                actions = actions.long().flatten()
            params = th.as_tensor(batch.behaviour_params, device=self.device)

            def evaluate(chunk: slice, distribution: Distribution, _: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
                kl = kl_from_params(self.action_space, params[chunk], distribution)  # noqa: B023
                return distribution.log_prob(actions[chunk]), kl  # noqa: B023

            results = evaluate_in_chunks(self.policy, batch.observations, batch.size, evaluate)
            log_probs = th.cat([log_prob for log_prob, _ in results])
            behaviour_log_prob = th.as_tensor(batch.log_probs, device=self.device)
            ratios.append(batch_average_is_weight(log_probs, behaviour_log_prob))
            kls.append(float(th.cat([kl for _, kl in results]).mean()))
        return ratios, kls

    def train(self) -> None:
        """Store the new batch, select the active batches, then run PPO's epochs over them."""
        assert self.replay_memory is not None
        self.policy.set_training_mode(False)
        self._store_rollout()
        self.replay_ratios, replay_kls = self.replay_ratios_and_kl()
        batch_drop_factor = self.batch_drop_factor(self._current_progress_remaining)  # type: ignore[operator]
        active = select_active_batches(self.replay_ratios, batch_drop_factor, self.adaptive)
        self.active_batches = len(active)
        replay_samples = sum(self.replay_memory[index].size for index in active)

        # From here on, SB3's PPO.train() with the replay memory in place of the rollout buffer.
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        clip_range = self.clip_range(self._current_progress_remaining)  # type: ignore[operator]
        clip_range_vf = None
        if self.clip_range_vf is not None:
            clip_range_vf = self.clip_range_vf(self._current_progress_remaining)  # type: ignore[operator]

        entropy_losses = []
        pg_losses, value_losses = [], []
        is_ratio_means, is_ratio_max = [], 0.0
        clip_fractions = []

        continue_training = True
        for epoch in range(self.n_epochs):
            approx_kl_divs = []
            for rollout_data in self.replay_memory.minibatches(active, self.batch_size, self.device):
                actions = rollout_data.actions
                if isinstance(self.action_space, spaces.Discrete):
                    actions = rollout_data.actions.long().flatten()

                values, log_prob, entropy = self.policy.evaluate_actions(rollout_data.observations, actions)
                loss, terms = amber_loss(
                    log_prob,
                    entropy,
                    values.flatten(),
                    rollout_data.old_log_prob,
                    AmberTargets.from_samples(rollout_data),
                    clip_range=clip_range,
                    clip_range_vf=clip_range_vf,
                    ent_coef=self.ent_coef,
                    vf_coef=self.vf_coef,
                    normalize_advantage=self.normalize_advantage,
                )
                ratio = terms["ratio"]
                pg_losses.append(terms["policy_gradient_loss"].item())
                is_ratio_means.append(ratio.mean().item())
                is_ratio_max = max(is_ratio_max, ratio.max().item())
                clip_fraction = th.mean((th.abs(ratio - 1) > clip_range).float()).item()
                clip_fractions.append(clip_fraction)
                value_losses.append(terms["value_loss"].item())
                entropy_losses.append(terms["entropy_loss"].item())

                # SB3's approximate KL to the behaviour policy, for the early stop at target_kl.
                log_ratio = log_prob - rollout_data.old_log_prob
                with th.no_grad():
                    approx_kl_div = th.mean((ratio - 1) - clamp_log_ratio(log_ratio)).cpu().numpy()
                    approx_kl_divs.append(approx_kl_div)

                if self.target_kl is not None and approx_kl_div > 1.5 * self.target_kl:
                    continue_training = False
                    if self.verbose >= 1:
                        print(f"Early stopping at step {epoch} due to reaching max kl: {approx_kl_div:.2f}")
                    break

                self.policy.optimizer.zero_grad()
                loss.backward()
                th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                self.policy.optimizer.step()

            self._n_updates += 1
            if not continue_training:
                break

        explained_var = explained_variance(self.rollout_buffer.values.flatten(), self.rollout_buffer.returns.flatten())

        self.logger.record("train/entropy_loss", np.mean(entropy_losses))
        self.logger.record("train/policy_gradient_loss", np.mean(pg_losses))
        self.logger.record("train/value_loss", np.mean(value_losses))
        self.logger.record("train/approx_kl", np.mean(approx_kl_divs))
        self.logger.record("train/is_ratio_mean", float(np.mean(is_ratio_means)))
        self.logger.record("train/is_ratio_max", is_ratio_max)
        self.logger.record("train/clip_fraction", np.mean(clip_fractions))
        self.logger.record("train/loss", loss.item())
        self.logger.record("train/explained_variance", explained_var)
        if hasattr(self.policy, "log_std"):
            self.logger.record("train/std", th.exp(self.policy.log_std).mean().item())
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", clip_range)
        if self.clip_range_vf is not None:
            self.logger.record("train/clip_range_vf", clip_range_vf)

        past_ratios = self.replay_ratios[1:] or [1.0]
        self.logger.record("train/active_batches", self.active_batches)
        self.logger.record("train/stored_batches", len(self.replay_memory))
        self.logger.record("train/replay_samples", replay_samples)
        self.logger.record("train/replay_ratio_min", min(past_ratios))
        self.logger.record("train/replay_ratio_mean", float(np.mean(past_ratios)))
        self.logger.record("train/replay_ratio_max", max(past_ratios))
        self.logger.record("train/replay_kl_max", max(replay_kls))
        self.logger.record("train/batch_drop_factor", batch_drop_factor)

    def learn(
        self: SelfPPOAMBER,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "PPOAMBER",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfPPOAMBER:
        return self._learn_from_segments(
            total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar
        )
