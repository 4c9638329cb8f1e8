"""V-RACER with Remember-and-Forget Experience Replay (Novati & Koumoutsakos, ICML 2019)."""

import io
import pathlib
import warnings
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.save_util import load_from_pkl
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule, TrainFrequencyUnit
from stable_baselines3.common.utils import obs_as_tensor

from sb3_impact.common.collectors import Collector
from sb3_impact.common.modes import evaluation_mode, has_mode_dependent_layers
from sb3_impact.common.observations import (
    Observation,
    check_observation_space,
    stack_observations,
)
from sb3_impact.common.policy_evaluation import final_observation_values, segment_values
from sb3_impact.common.recurrent import refuse_recurrent_policy
from sb3_impact.common.refer import annealed_c_max, annealed_lr_factor, check_refer_parameters, update_beta
from sb3_impact.common.segment_loop import SegmentLoopMixin
from sb3_impact.common.segments import Segment, SegmentValues
from sb3_impact.vracer.loss import LOSS_STATISTICS, fused_refer_vracer_loss
from sb3_impact.vracer.memory import EpisodeReplayMemory
from sb3_impact.vracer.policies import CnnPolicy, MlpPolicy, MultiInputPolicy, VRACERPolicy

SelfVRACER = TypeVar("SelfVRACER", bound="VRACER")

REWARD_SCALE_EPSILON = 1e-7  # appendix B
KL_DIRECTIONS = ("mu_pi", "pi_mu")
OBSERVATION_STATISTICS_INTERVAL = 1000  # gradient steps between two updates of the state mean/std (smarties)


def segment_steps(train_freq: Any) -> int:
    """
    The vector steps of one collected segment: ``train_freq`` (an int, a ``(n, "step")`` tuple or SB3's
    ``TrainFreq``). ValueError naming ``train_freq`` otherwise: a collector cuts the stream into fixed-length
    segments, so episode units are not supported.
    """
    frequency, unit = train_freq if isinstance(train_freq, tuple) and len(train_freq) == 2 else (train_freq, "step")
    try:
        is_step = TrainFrequencyUnit(unit) is TrainFrequencyUnit.STEP
    except ValueError:
        is_step = False
    if not is_step:
        raise ValueError(
            f"train_freq must count steps (an int or (n, 'step')), got {train_freq!r}: the collector delivers "
            "segments of train_freq vector steps"
        )
    if isinstance(frequency, bool) or not isinstance(frequency, (int, np.integer)) or frequency < 1:
        raise ValueError(f"train_freq must be a positive number of steps, got {train_freq!r}")
    return int(frequency)


class VRACER(SegmentLoopMixin, OffPolicyAlgorithm):
    """
    V-RACER (off-policy actor-critic with Retrace / V-tbc) trained with ReF-ER.

    Paper: https://arxiv.org/abs/1807.05827 (section 2, section 3, appendices A-C). One network outputs
    ``V(s)`` and a Gaussian policy. Whole episodes are kept in a replay memory of ``buffer_size`` steps
    (FIFO by episode); every gradient step samples ``batch_size`` steps uniformly and follows Algorithm 3:
    the off-policy gradient ``rho (Q_ret - V) grad log pi`` (eq. 5) and the V-tbc value loss (eqs. 7, 9),
    skipped for far-policy samples (rule 1: ``|log rho| >= log c_max``), weighted by ``beta`` against the
    penalty ``grad KL(mu || pi)`` on every sample (rule 2, eqs. 10-12). ``c_max`` and the learning rate
    are annealed with the environment step (eq. 13).

    Data comes from a ``collector`` through the one segment loop (see :meth:`learn`): ``"sync"`` (default)
    collects ``train_freq`` vector steps with the current policy, then trains; ``"thread"``, ``"process"`` and
    ``"ray"`` step the environments with a copy of the policy while the learner trains. Every segment enters the
    memory (each environment's steps staged until its episode ends; Ray segments say which worker's environments
    they come from, ``Segment.env_ids``), then ``gradient_steps`` gradient steps run and the new weights are
    broadcast.

    :param policy: The policy model to use (MlpPolicy, CnnPolicy, MultiInputPolicy, or a VRACERPolicy subclass)
    :param env: The environment to learn from (if registered in Gym, can be str, or a factory returning a
        ``gymnasium.Env``); Box action spaces only
    :param learning_rate: eta, a constant or a schedule of the remaining progress (1 to 0); the effective rate is
        ``learning_rate(progress) / (1 + refer_a * t)`` (eq. 13)
    :param buffer_size: N, the number of steps the replay memory holds (paper: 2^18)
    :param learning_starts: N_start, environment steps collected before the first gradient step; the state
        statistics of appendix B are computed from them. Unlike SAC/TD3 these steps follow the policy
        (V-RACER needs the behaviour mu of every stored action)
    :param batch_size: B, steps per gradient step (paper: 256)
    :param gamma: Discount factor (paper: 0.995)
    :param train_freq: Update the model every ``train_freq`` vector steps (an int or ``(n, "step")``): the length
        of each collected segment, with every collector. Episode units are refused (``ValueError``): a collector
        cuts the stream into fixed-length segments
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
    :param observation_statistics_rate: 0 (the paper): the state mean/std stay those of the warm-up; above 0 (the
        authors' code, smarties), every 1000 gradient steps they move toward the memory's by this fraction
    :param scale_rewards: divide rewards by ``sqrt(E[r^2])`` over the replay memory (appendix B)
    :param kl_direction: the rule-2 penalty: ``"mu_pi"`` is ``D_KL(mu || pi)`` (eq. 11), ``"pi_mu"`` is
        ``D_KL(pi || mu)`` (smarties); ``train/kl_mu_pi`` logs ``D_KL(mu || pi)`` either way
    :param compile_loss: ``torch.compile`` the network's forward pass and the loss (and so their backward pass)
        on the first gradient step (it takes seconds and a C++ compiler on CPU); see docs/algorithms/vracer.md
        ("Cost of a gradient step") for what it saves
    :param collector: Where segments are collected (default "sync"): ``"sync"``, ``"thread"``, ``"process"``,
        ``"ray"`` or a ``Collector`` subclass (see docs/algorithms/collectors.md)
    :param collector_kwargs: The collector's options (``queue_size``; ``limit_learner_threads`` for ``"thread"``;
        ``num_workers``, ``envs_per_worker``, ``address``, ``num_cpus_per_worker`` for ``"ray"``)
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
    policy: VRACERPolicy
    replay_buffer: EpisodeReplayMemory  # type: ignore[assignment]
    # One gradient step per env step: with all cores the learner's intra-op threads starve the collector thread
    # (2-core machine, thread collector, 3000 steps of the Pendulum yml: 34-117 s uncapped, 13-15 s capped).
    default_collector_kwargs: ClassVar[dict[str, dict[str, Any]]] = {"thread": {"limit_learner_threads": True}}

    def __init__(
        self,
        policy: str | type[VRACERPolicy],
        env: GymEnv | str | Callable[[], gym.Env],
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
        observation_statistics_rate: float = 0.0,
        scale_rewards: bool = True,
        kl_direction: str = "mu_pi",
        compile_loss: bool = False,
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
        self.refer_rules = check_refer_parameters(refer_c, refer_a, refer_d, refer_rules)
        refuse_recurrent_policy(policy, "VRACER")
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
        if not 0.0 <= observation_statistics_rate <= 1.0:
            raise ValueError(f"observation_statistics_rate must be in [0, 1], got {observation_statistics_rate}")
        if kl_direction not in KL_DIRECTIONS:
            raise ValueError(f"kl_direction must be one of {KL_DIRECTIONS}, got {kl_direction!r}")
        env = self._init_collection(env, collector, collector_kwargs, learner_threads)
        segment_steps(train_freq)
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
        if env is not None:
            check_observation_space(self.observation_space)
        if env is not None and not isinstance(self.action_space, spaces.Box):
            raise ValueError(
                f"Unsupported action space {self.action_space}: V-RACER needs a Box action space "
                "(its policy is a diagonal Gaussian over the flattened action)"
            )
        self.refer_c = refer_c
        self.refer_a = refer_a
        self.refer_d = refer_d
        self.retrace_interval = retrace_interval
        self.standardize_states = standardize_states
        self.observation_statistics_rate = observation_statistics_rate
        self.scale_rewards = scale_rewards
        self.kl_direction = kl_direction
        self.compile_loss = compile_loss
        self._compiled_batch_loss: Callable[..., tuple[th.Tensor, ...]] | None = None
        self._compile_failed = False
        self.beta = 1.0
        self.reward_scale = 1.0
        self.skipped_gradient_steps = 0
        self._memory_estimates_stale = True
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        self._migrate_saved_collection_parameters()
        # A list after a JSON round trip; load(path, refer_c=...) sets them without the constructor: check again.
        self.refer_rules = check_refer_parameters(self.refer_c, self.refer_a, self.refer_d, self.refer_rules)
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        if self.replay_buffer is None:
            self.replay_buffer = EpisodeReplayMemory(
                self.buffer_size, self.observation_space, self.action_space, self.n_envs, self.gamma, device=self.device
            )
        self.policy = self.policy_class(self.observation_space, self.action_space, self.lr_schedule, **self.policy_kwargs)
        self.policy = self.policy.to(self.device)
        self._convert_train_freq()

    def _excluded_save_params(self) -> list[str]:
        return [
            *super()._excluded_save_params(),
            *self._collection_excluded_save_params(),
            "_compiled_batch_loss",
            "_compile_failed",
        ]

    @property
    def c_max(self) -> float:
        """``c_max(t) = 1 + C / (1 + A t)`` at the current environment step (eq. 13)."""
        return annealed_c_max(self.refer_c, self.refer_a, self.num_timesteps)

    def current_learning_rate(self) -> float:
        """``eta(t) = learning_rate(progress) / (1 + A t)`` (eq. 13)."""
        return self.lr_schedule(self._current_progress_remaining) * annealed_lr_factor(self.refer_a, self.num_timesteps)

    # --- collection -------------------------------------------------------------------------------

    def _batch_values(self, observations: Observation) -> np.ndarray:
        """``V`` of a batch of observations (stacked along the first axis) under the learner's policy."""
        obs_tensor, _ = self.policy.obs_to_tensor(observations)
        with th.no_grad(), evaluation_mode(self.policy):  # targets in evaluation mode (BatchNorm, Dropout), as SB3
            return self.policy.predict_values(obs_tensor).cpu().numpy().reshape(-1)

    def _values_of(self, observations: list[Observation]) -> np.ndarray:
        return self._batch_values(stack_observations(observations))

    def _store_segment(self, segment: Segment) -> None:
        """
        Add a collected segment to the memory (:meth:`EpisodeReplayMemory.add_segment`): an ended episode enters it
        with ``V(s_T)`` if it was truncated, the steps of running episodes are staged.

        ``V(s_t)`` of the whole segment and ``V(s_T)`` of its truncated episodes come from the learner's current
        policy, in batched forward passes (:func:`~sb3_impact.common.policy_evaluation.segment_values`); when the
        segment was sampled with those very weights (no update since), ``V(s_t)`` is the one the sampler recorded
        with each action, so that a one-step segment costs one forward pass, as a SAC step. The
        stored observations are the ones the policy acted on (with a VecNormalize wrapper, the normalised ones;
        V-RACER standardises states itself, so one is not needed); the rewards are the original ones where the
        sampler recorded them (a VecNormalize on the sampler's env), else those the sampler saw.
        """
        if segment.envs_reset:  # a new (or replacement) Ray worker: its environments' open episodes ended unfinished
            self.replay_buffer.close_staged_episodes(self._values_of, segment.column_env_ids)
        self._episode_num += int(segment.dones.sum())
        behaviour_values = segment.extras.get("behaviour_values")
        if behaviour_values is not None and segment.policy_version == self._n_updates:
            # Sampled with the learner's present weights: V(s_t) came with the actions, one forward pass per step.
            values, final_values = behaviour_values, final_observation_values(segment, self._batch_values)
        else:
            values, _, final_values = segment_values(segment, self._batch_values)
        self.replay_buffer.add_segment(segment, SegmentValues(values, final_values))
        for _ in range(segment.n_steps):  # SB3's hook after each environment step
            self._on_step()

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
        memory.device = self.device  # the model's, as SB3's load_replay_buffer gives its buffers
        self.replay_buffer = memory
        self._memory_estimates_stale = True

    # --- training -------------------------------------------------------------------------------------

    def _initialize_statistics(self) -> None:
        """Appendix B: state mean/std from the memory, once, before the first gradient step."""
        if self.standardize_states and not self.policy.obs_standardizer.active:
            self.policy.obs_standardizer.set_statistics(self.replay_buffer.observation_statistics())
            # The stored V(s_T) were computed before standardisation: refresh them with Q_ret
            self._memory_estimates_stale = True

    def _adapt_observation_statistics(self) -> None:
        """smarties' rule: the state mean and std move toward the memory's by ``observation_statistics_rate``."""
        rate = self.observation_statistics_rate
        standardizer = self.policy.obs_standardizer
        current = standardizer.statistics()
        target = self.replay_buffer.observation_statistics()
        standardizer.set_statistics(
            {
                key: tuple(
                    (1.0 - rate) * now.cpu().numpy() + rate * goal for now, goal in zip(current[key], target[key], strict=True)
                )
                for key in current
            }
        )

    def _update_memory_estimates(self) -> None:
        """
        Reward scale (eq. 16), V(s_T) of truncated episodes, every Q_ret from the stored V and rho (eq. 8), and the
        count of far-policy steps against the current c_max (eq. 12; between two calls the memory updates it from
        the sampled steps, with the c_max of their gradient step).
        """
        memory = self.replay_buffer
        if self.scale_rewards:
            self.reward_scale = memory.root_mean_square_reward() + REWARD_SCALE_EPSILON
        memory.reward_scale = self.reward_scale
        last_slots, final_observations = memory.truncated_episode_ends()
        if len(last_slots):
            memory.set_last_values(last_slots, self._values_of(final_observations))
        memory.recompute_q_ret()
        memory.count_far_policy(self.c_max)
        self._memory_estimates_stale = False

    def _batch_loss(
        self,
        observations: th.Tensor | dict[str, th.Tensor],
        actions: th.Tensor,
        behaviour: th.Tensor,
        q_ret: th.Tensor,
        c_max: float | th.Tensor,
        beta: float | th.Tensor,
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """One forward pass and the ReF-ER V-RACER loss: ``(loss, log rho [B], V(s) [B] detached, statistics)``."""
        mean, log_std, values = self.policy.forward_parts(observations)
        behaviour_mean, behaviour_log_std = behaviour.chunk(2, dim=1)
        loss, log_rhos, statistics = fused_refer_vracer_loss(
            mean,
            log_std,
            values,
            actions,
            behaviour_mean,
            behaviour_log_std,
            q_ret,
            c_max,
            beta,
            self.refer_rules,
            self.kl_direction,
        )
        return loss, log_rhos, values.detach(), statistics

    def _batch_loss_function(self) -> Callable[..., tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]]:
        """
        :meth:`_batch_loss`, compiled when ``compile_loss`` (c_max and beta then go in as 0-d tensors). If the
        compiler cannot build it (no C++ compiler, say), a RuntimeWarning says why and training goes on uncompiled.
        """
        if not self.compile_loss or self._compile_failed:
            return self._batch_loss
        from torch._dynamo.exc import BackendCompilerFailed  # imported only when compiling

        if self._compiled_batch_loss is None:
            self._compiled_batch_loss = th.compile(self._batch_loss)
        compiled = self._compiled_batch_loss

        def batch_loss(
            observations: th.Tensor | dict[str, th.Tensor],
            actions: th.Tensor,
            behaviour: th.Tensor,
            q_ret: th.Tensor,
            c_max: float,
            beta: float,
        ) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
            if self._compile_failed:
                return self._batch_loss(observations, actions, behaviour, q_ret, c_max, beta)
            try:  # c_max and beta as 0-d tensors: their new values each step do not recompile
                return compiled(observations, actions, behaviour, q_ret, th.tensor(c_max), th.tensor(beta))
            except BackendCompilerFailed as error:
                self._compile_failed = True
                warnings.warn(
                    f"compile_loss=True: torch.compile could not build the loss ({str(error).splitlines()[0]}); "
                    "training goes on without it",
                    RuntimeWarning,
                    stacklevel=2,
                )
                return self._batch_loss(observations, actions, behaviour, q_ret, c_max, beta)

        return batch_loss

    def train(self, gradient_steps: int, batch_size: int = 256) -> None:
        memory = self.replay_buffer
        if len(memory) < batch_size:  # no complete episodes yet: nothing to learn from
            self.skipped_gradient_steps += gradient_steps
            self.logger.record("train/skipped_gradient_steps", self.skipped_gradient_steps)
            return
        self.policy.set_training_mode(True)
        self._initialize_statistics()
        mode_dependent = has_mode_dependent_layers(self.policy)
        optimizer = self.policy.optimizer
        batch_loss = self._batch_loss_function()
        adapt_statistics = self.standardize_states and self.observation_statistics_rate > 0
        statistics_sum = th.zeros(len(LOSS_STATISTICS), device=self.device)
        far_fraction_sum = 0.0
        for _ in range(gradient_steps):
            if self._memory_estimates_stale or self._n_updates % self.retrace_interval == 0:
                self._update_memory_estimates()
            if adapt_statistics and self._n_updates % OBSERVATION_STATISTICS_INTERVAL == 0 and self._n_updates > 0:
                self._adapt_observation_statistics()
            c_max, learning_rate = self.c_max, self.current_learning_rate()
            for group in optimizer.param_groups:
                group["lr"] = learning_rate

            slots = memory.sample_slots(batch_size)
            observations = obs_as_tensor(memory.observations_at(slots), self.device)
            actions, behaviour, q_ret = (
                th.as_tensor(array[slots], device=self.device)
                for array in (memory.actions, memory.behaviour_params, memory.q_ret)
            )
            loss, log_rhos, values, statistics = batch_loss(observations, actions, behaviour, q_ret, c_max, self.beta)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

            # Algorithm 3: store the current V and rho of the sampled steps, update Q_ret one step back
            stored_values = values
            if mode_dependent:  # Q_ret's V in evaluation mode (BatchNorm, Dropout), as SB3 computes its targets
                with th.no_grad(), evaluation_mode(self.policy):
                    stored_values = self.policy.predict_values(observations)
            memory.refresh(slots, stored_values.cpu().numpy(), log_rhos.cpu().numpy(), c_max)
            far = memory.far_fraction()
            if 2 in self.refer_rules:
                self.beta = update_beta(self.beta, far, self.refer_d, learning_rate)  # eq. 12
            self._n_updates += 1
            statistics_sum += statistics
            far_fraction_sum += far

        for key, value in zip(LOSS_STATISTICS, (statistics_sum / gradient_steps).tolist(), strict=True):
            self.logger.record(f"train/{key}", value)
        self.logger.record("train/far_fraction", far_fraction_sum / gradient_steps)
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
        """
        The one segment loop (:class:`~sb3_impact.common.segment_loop.SegmentLoopMixin`), whatever the collector:
        segments of ``train_freq`` vector steps go through the callbacks and into the memory, then (once
        ``learning_starts`` steps were collected) ``gradient_steps`` gradient steps run (-1: one per environment
        step of the segment) and the weights are broadcast to the collector. Logs are dumped every
        ``log_interval`` segments.
        """
        return self._learn_from_segments(
            total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar
        )

    def _segment_steps(self) -> int:
        return segment_steps(self.train_freq)

    def _on_learn_start(self, collector: Collector) -> None:
        if not collector.continues_episodes:  # the collector resets its copy of the environments
            self.replay_buffer.close_staged_episodes(self._values_of)
        if collector.num_envs != self.replay_buffer.n_envs:  # Ray: one staging list per worker environment
            self.replay_buffer.set_n_envs(collector.num_envs)

    def _on_learn_end(self) -> None:
        # The collector's environments went on past the last stored step (segments in flight, dropped) or
        # will be reset: end the running episodes as truncated, so that no episode gets a gap.
        if self._last_obs is None or self.sampled_steps > self.trained_steps:
            self.replay_buffer.close_staged_episodes(self._values_of)

    def _train_on_segment(self, segment: Segment) -> None:
        if self.num_timesteps > self.learning_starts:  # SB3's off-policy rule
            gradient_steps = self.gradient_steps if self.gradient_steps >= 0 else segment.size
            if gradient_steps > 0:
                self.train(gradient_steps=gradient_steps, batch_size=self.batch_size)

    def dump_logs(self, iteration: int = 0) -> None:  # type: ignore[override]
        """SB3's off-policy logs, with the collection's (the loop counts segments, not episodes, for ``log_interval``)."""
        SegmentLoopMixin.dump_logs(self)

    def collect_rollouts(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "VRACER collects through its collector inside learn() (the one segment loop): SB3's off-policy "
            "collect_rollouts is not used; call learn()"
        )
