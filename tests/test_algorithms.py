"""IMPACT and IMPALA end to end (what all seven classes share: the tests by concern over tests/algorithms.py)."""

import csv
import math
import threading
import time

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.callbacks import (
    BaseCallback,
    CheckpointCallback,
    EvalCallback,
    StopTrainingOnRewardThreshold,
)
from stable_baselines3.common.distributions import StateDependentNoiseDistribution
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import IdentityEnv, IdentityEnvBox, IdentityEnvMultiBinary, IdentityEnvMultiDiscrete
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import SubprocVecEnv, VecFrameStack, VecNormalize

from sb3_impact import IMPACT, IMPALA
from sb3_impact.common.collectors.base import CollectorError
from sb3_impact.common.training_batch import TrainingBatch

from .conftest import CrashingEnv, DictObsEnv, ImageEnv

ALGOS = [IMPACT, IMPALA]
SMALL = dict(n_steps=16, policy_kwargs=dict(net_arch=[16]), device="cpu")


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("collector", ["thread", "sync"])
@pytest.mark.parametrize(
    "env_factory",
    [
        lambda: IdentityEnv(4),
        lambda: IdentityEnvMultiDiscrete(3),
        lambda: IdentityEnvMultiBinary(3),
        lambda: IdentityEnvBox(eps=0.5),
    ],
    ids=["Discrete", "MultiDiscrete", "MultiBinary", "Box"],
)
def test_learns_on_every_action_space(algo, collector, env_factory):
    env = make_vec_env(env_factory, n_envs=2, seed=0)
    model = algo("MlpPolicy", env, collector=collector, seed=0, **SMALL).learn(300)
    assert model.num_timesteps >= 300
    assert model.sampled_steps == model.trained_steps + model.dropped_steps
    assert all(th.isfinite(p).all() for p in model.policy.parameters())
    model.learn(100, reset_num_timesteps=False)  # learn() again continues from where it stopped
    assert model.num_timesteps >= 400


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("collector", ["sync", "thread", "process"])
def test_gsde_learns_with_each_collector(algo, collector):
    """gSDE as SB3's PPO offers it: the learner's and the collector's policies explore with a state-dependent noise matrix."""
    model = algo("MlpPolicy", "Pendulum-v1", use_sde=True, sde_sample_freq=4, collector=collector, seed=0, **SMALL)
    assert isinstance(model.policy.action_dist, StateDependentNoiseDistribution)
    model.learn(256)
    assert model.num_timesteps >= 256
    assert model.sampled_steps == model.trained_steps + model.dropped_steps
    assert all(th.isfinite(p).all() for p in model.policy.parameters())


@pytest.mark.parametrize("algo", ALGOS)
def test_gsde_is_saved_and_loaded(algo, tmp_path):
    model = algo("MlpPolicy", "Pendulum-v1", use_sde=True, sde_sample_freq=8, collector="sync", seed=0, **SMALL).learn(64)
    model.save(tmp_path / "model")
    loaded = algo.load(tmp_path / "model", env=make_vec_env("Pendulum-v1", n_envs=1, seed=1), device="cpu")
    assert loaded.use_sde and loaded.sde_sample_freq == 8
    assert isinstance(loaded.policy.action_dist, StateDependentNoiseDistribution)
    observation = np.zeros((1, 3), dtype=np.float32)
    np.testing.assert_array_equal(
        loaded.predict(observation, deterministic=True)[0], model.predict(observation, deterministic=True)[0]
    )
    loaded.learn(32)


@pytest.mark.parametrize("algo", ALGOS)
def test_multi_input_and_cnn_policies(algo):
    algo("MultiInputPolicy", DictObsEnv(), n_steps=8, device="cpu", seed=0).learn(32)
    algo("CnnPolicy", ImageEnv(), n_steps=8, device="cpu", seed=0).learn(32)


@pytest.mark.parametrize("algo", ALGOS)
def test_vec_normalize_and_frame_stack(algo):
    env = VecFrameStack(VecNormalize(make_vec_env("Pendulum-v1", n_envs=2, seed=0)), n_stack=3)
    model = algo("MlpPolicy", env, **SMALL).learn(200)
    assert model.observation_space.shape == (9,)
    assert env.venv.obs_rms.count > 100


@pytest.mark.parametrize("algo", ALGOS)
def test_sync_collection_is_reproducible(algo):
    def train():
        model = algo("MlpPolicy", "CartPole-v1", collector="sync", seed=3, **SMALL)
        return model.learn(400).policy.state_dict()

    first, second = train(), train()
    for name in first:
        th.testing.assert_close(first[name], second[name], rtol=0, atol=0)


class CountingCallback(BaseCallback):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.thread_ids: set[int] = set()

    def _on_step(self) -> bool:
        self.calls += 1
        self.thread_ids.add(threading.get_ident())
        assert len(self.locals["infos"]) == self.training_env.num_envs
        assert self.locals["dones"].shape == (self.training_env.num_envs,)
        return True


@pytest.mark.parametrize("algo", ALGOS)
def test_callbacks_see_every_vector_step_on_the_learner_thread(algo, tmp_path):
    counter = CountingCallback()
    eval_env = make_vec_env("CartPole-v1", n_envs=1)
    callbacks = [
        counter,
        EvalCallback(eval_env, eval_freq=100, n_eval_episodes=2, log_path=str(tmp_path)),
        CheckpointCallback(save_freq=100, save_path=str(tmp_path / "ckpt")),
    ]
    model = algo("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2), **SMALL)
    model.learn(400, callback=callbacks, progress_bar=True)
    assert counter.calls == model.num_timesteps // 2
    assert counter.thread_ids == {threading.get_ident()}
    assert (tmp_path / "evaluations.npz").exists()
    assert any((tmp_path / "ckpt").iterdir())
    assert len(model.ep_info_buffer) > 0


def test_stop_training_on_reward_threshold_stops_and_cleans_up():
    eval_env = make_vec_env("CartPole-v1", n_envs=1)
    stop = StopTrainingOnRewardThreshold(reward_threshold=-1.0)  # any reward is above it
    callback = EvalCallback(eval_env, eval_freq=50, n_eval_episodes=1, callback_on_new_best=stop)
    model = IMPACT("MlpPolicy", "CartPole-v1", **SMALL).learn(10_000, callback=callback)
    assert model.num_timesteps < 1000
    assert model.sampled_steps == model.trained_steps + model.dropped_steps


COLLECTION_MODES = [dict(collector="sync"), dict(collector="thread"), dict(collector="process")]
MODE_IDS = ["sync", "thread", "process"]


def test_process_collector_mirrors_vec_normalize_and_counts_steps():
    env = VecNormalize(make_vec_env("Pendulum-v1", n_envs=2, seed=0))
    model = IMPALA("MlpPolicy", env, collector="process", **SMALL).learn(640)
    assert env.obs_rms.count > 600  # statistics gathered in the child are visible to the parent
    assert model.sampled_steps == model.trained_steps + model.dropped_steps
    assert model._last_obs is None  # the parent's env was not stepped: it is reset before the next learn()
    model.learn(64)


@pytest.mark.parametrize("mode", COLLECTION_MODES, ids=MODE_IDS)
def test_subprocess_worker_crash_leaves_no_processes(mode):
    env = SubprocVecEnv([lambda: CrashingEnv(crash_after=40) for _ in range(2)], start_method="fork")
    model = IMPALA("MlpPolicy", env, **mode, **SMALL)
    start = time.monotonic()
    with pytest.raises(CollectorError):
        model.learn(10_000)
    assert time.monotonic() - start < 15
    assert not any(process.is_alive() for process in env.processes)


def test_logs_train_and_collector_keys(tmp_path):
    model = IMPACT("MlpPolicy", "CartPole-v1", **SMALL)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(500)
    with open(tmp_path / "progress.csv") as file:
        rows = list(csv.DictReader(file))
    keys = set(rows[0])
    for key in [
        "train/policy_gradient_loss",
        "train/value_loss",
        "train/entropy_loss",
        "train/kl_to_target",
        "train/is_ratio_mean",
        "train/is_ratio_max",
        "train/clip_fraction",
        "train/target_updates",
        "train/policy_lag",
        "train/policy_lag_max",
        "train/buffer_batches_released",
        "train/buffer_reuse_mean",
        "collector/sampled_steps",
        "collector/trained_steps",
        "collector/in_flight_steps",
        "rollout/ep_rew_mean",
    ]:
        assert key in keys, key
    # As SB3: learn() ends without a dump; the last values stay in the logger, the counters of the whole call.
    last = model.logger.name_to_value
    assert last["collector/sampled_steps"] == model.sampled_steps
    assert last["collector/dropped_steps"] == model.dropped_steps
    assert {"train/policy_gradient_loss", "train/value_loss", "train/n_updates"} <= set(last)


def test_impact_target_network_updates_every_n_times_k():
    model = IMPACT("MlpPolicy", "CartPole-v1", circular_buffer_size=2, max_batch_reuse=3, collector="sync", **SMALL)
    model.learn(320)
    assert model._n_updates > 0
    assert model.target_updates == model._n_updates // 6


@pytest.mark.parametrize(
    "algo,kwargs",
    [
        (IMPACT, {}),
        (IMPACT, dict(batch_size=8)),
        (IMPACT, dict(target_worker_clip=float("inf"))),  # the clipping off: R_1 = pi / pi_target
        (IMPALA, {}),
        (IMPALA, dict(batch_size=8, n_epochs=2)),
        (IMPALA, dict(n_value_epochs=2, value_batch_size=8)),
    ],
)
def test_loss_stays_finite_with_extreme_ratios(algo, kwargs):
    model = algo("MlpPolicy", "CartPole-v1", collector="sync", **kwargs, **SMALL)
    model.learn(32)
    collector = model.make_collector()
    segment = collector.get_segment()
    segment.behaviour_log_probs = np.where(np.arange(segment.size).reshape(segment.rewards.shape) % 2, -300.0, 50.0)
    model._on_learn_start(collector)
    model._store_segment(segment)  # as the segment loop does, then its train()
    model.train()
    statistics = model._train_statistics.summary()
    assert model._n_updates > 0 and statistics
    assert all(np.isfinite(value) for value in statistics.values())
    assert all(th.isfinite(p).all() for p in model.policy.parameters())


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"target_worker_clip": 0.5}, "target_worker_clip"),
        ({"target_worker_clip": float("nan")}, "target_worker_clip"),
        ({"circular_buffer_size": 0}, "circular_buffer_size"),
        ({"max_batch_reuse": 0}, "max_batch_reuse"),
        ({"n_steps": 0}, "n_steps"),
        ({"clip_range": 0.0}, "clip_range"),
        ({"gamma": 1.5}, "gamma"),
        ({"gamma": -0.1}, "gamma"),
        ({"gae_lambda": 2.0}, "gae_lambda"),
        ({"vtrace_clip_rho_threshold": 0.0}, "vtrace_clip_rho_threshold"),
        ({"broadcast_interval": 0}, "broadcast_interval"),
        ({"target_update_interval": 0}, "target_update_interval"),
        ({"kl_coef": -1.0}, "kl_coef"),
        ({"policy_kwargs": {"use_sde": True}}, "use_sde"),
        ({"policy_kwargs": {"squash_output": True}}, "squash_output"),
        ({"use_sde": True, "sde_sample_freq": 2.5}, "sde_sample_freq"),
    ],
)
def test_invalid_hyperparameters_raise_at_construction(kwargs, name):
    with pytest.raises(ValueError, match=name):
        IMPACT("MlpPolicy", "CartPole-v1", **kwargs)


def test_impala_validates_shared_parameters():
    with pytest.raises(ValueError, match="n_steps"):
        IMPALA("MlpPolicy", "CartPole-v1", n_steps=-3)


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"n_epochs": 0}, "n_epochs"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 2.5}, "batch_size"),
        ({"n_value_epochs": -1}, "n_value_epochs"),
        ({"n_value_epochs": 1.5}, "n_value_epochs"),
        ({"n_value_epochs": True}, "n_value_epochs"),
        ({"value_batch_size": 0}, "value_batch_size"),
        ({"value_batch_size": 8.0}, "value_batch_size"),
    ],
)
def test_impala_validates_its_passes(kwargs, name, tmp_path):
    with pytest.raises(ValueError, match=name):
        IMPALA("MlpPolicy", "CartPole-v1", **kwargs)
    IMPALA("MlpPolicy", "CartPole-v1", **SMALL).save(tmp_path / "model")
    if name != "batch_size":  # also when load() sets them
        with pytest.raises(ValueError, match=name):
            IMPALA.load(tmp_path / "model", **kwargs)


@pytest.mark.filterwarnings("ignore:batch_size=12 does not divide")
@pytest.mark.parametrize("n_epochs,batch_size,steps_per_pass", [(1, None, 1), (3, 8, 4), (2, 12, 3)])
def test_impala_counts_passes_and_minibatch_steps(n_epochs, batch_size, steps_per_pass):
    """The paper's default is one gradient step per segment; n_epochs passes of ceil(32 / batch_size) steps otherwise."""
    env = make_vec_env("CartPole-v1", n_envs=2)
    model = IMPALA("MlpPolicy", env, collector="sync", n_epochs=n_epochs, batch_size=batch_size, **SMALL)
    model.learn(320)
    segments = model.trained_steps // 32
    assert model._n_updates == n_epochs * segments
    assert model.gradient_steps == steps_per_pass * model._n_updates
    assert model.value_gradient_steps == 0
    assert model.sampled_steps == model.trained_steps + model.dropped_steps


@pytest.mark.parametrize("n_value_epochs,value_batch_size,value_steps_per_pass", [(1, None, 1), (2, 8, 8), (3, 12, 9)])
def test_impala_counts_value_passes(n_value_epochs, value_batch_size, value_steps_per_pass):
    """Each pass over a 32-sample batch is followed by n_value_epochs value passes of ceil(32 / value_batch_size) steps."""
    env = make_vec_env("CartPole-v1", n_envs=2)
    model = IMPALA(
        "MlpPolicy", env, collector="sync", n_value_epochs=n_value_epochs, value_batch_size=value_batch_size, **SMALL
    )
    model.learn(320)
    assert model._n_updates == model.trained_steps // 32 > 0
    assert model.gradient_steps == model._n_updates
    assert model.value_gradient_steps == value_steps_per_pass * model._n_updates
    assert np.isfinite(model.logger.name_to_value["train/value_epochs_loss"])


def test_impala_value_passes_fit_the_critic_alone():
    """
    The paper's step, then two value passes, against a reference written out step by step: each pass computes
    the V-trace targets v_s with the current networks, then each shuffled minibatch (SB3's env-major order) takes
    one step on vf_coef (v_s - V(x_s))^2 alone. The actor is left as the paper's step left it.
    """
    model, batch, reference = _impala_trained_on_one_segment(n_value_epochs=2, value_batch_size=8)

    np.random.seed(5)
    values, log_prob, entropy = reference.evaluate_actions(batch.observations, batch.actions)
    vs, pg_advantages = model._vtrace_targets(batch, values.flatten(), log_prob.detach(), reference)
    advantages = pg_advantages.flatten()
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    loss = -(advantages * log_prob).mean() + 0.5 * ((values.flatten() - vs.flatten()) ** 2).mean() - 0.01 * entropy.mean()
    reference.optimizer.zero_grad()
    loss.backward()
    th.nn.utils.clip_grad_norm_(reference.parameters(), model.max_grad_norm)
    reference.optimizer.step()
    actor = {name: p.detach().clone() for name, p in reference.named_parameters() if "value" not in name}
    for _ in range(2):
        with th.no_grad():
            values, log_prob, _ = reference.evaluate_actions(batch.observations, batch.actions)
            vs, _ = model._vtrace_targets(batch, values.flatten(), log_prob, reference)
        vs = vs.flatten()
        env_major = np.random.permutation(32)
        time_major = th.as_tensor((env_major % 16) * 2 + env_major // 16)
        for indices in time_major.split(8):
            values = reference.predict_values(batch.observations[indices]).flatten()
            reference.optimizer.zero_grad()
            (0.5 * ((values - vs[indices]) ** 2).mean()).backward()
            th.nn.utils.clip_grad_norm_(reference.parameters(), model.max_grad_norm)
            reference.optimizer.step()
    for (name, expected), actual in zip(reference.state_dict().items(), model.policy.state_dict().values(), strict=True):
        th.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6, msg=name)
    for name, parameter in model.policy.named_parameters():
        if name in actor:
            th.testing.assert_close(parameter.detach(), actor[name], rtol=0, atol=0, msg=name)


def _impala_trained_on_one_segment(**kwargs):
    """
    A seeded IMPALA (sync collector, normalised advantages, ``kwargs``) after 64 steps, one fresh 32-sample batch,
    and a copy of the policy taken before ``train()`` ran on that batch alone with ``np.random.seed(5)``.
    """
    import copy

    env = make_vec_env("CartPole-v1", n_envs=2, seed=0, env_kwargs=dict(max_episode_steps=10))
    model = IMPALA("MlpPolicy", env, collector="sync", normalize_advantage=True, seed=0, **kwargs, **SMALL)
    model.learn(64)
    collector = model.make_collector()
    segment = collector.get_segment()
    collector.close()
    batch = TrainingBatch.from_segment(segment, model.device)
    reference = copy.deepcopy(model.policy)
    model._on_learn_start(collector)
    model._store_segment(segment)  # as the segment loop does, then its train(): one draw (n_epochs=1)
    np.random.seed(5)
    model.train()
    model._on_learn_end()
    return model, batch, reference


def test_impala_minibatch_pass_uses_targets_from_the_start_of_the_pass():
    """
    One pass in minibatches, against a reference written out step by step: the V-trace targets of the whole
    batch are computed once with the policy at the start of the pass, then each shuffled minibatch of the
    env-major permutation (SB3's order) takes one step on -rho A log pi + vf_coef (v - V)^2 - ent_coef H.
    """
    model, batch, reference = _impala_trained_on_one_segment(batch_size=8, ent_coef=0.01)

    np.random.seed(5)
    with th.no_grad():
        values, log_prob, _ = reference.evaluate_actions(batch.observations, batch.actions)
        vs, pg_advantages = model._vtrace_targets(batch, values.flatten(), log_prob, reference)
    vs, pg_advantages = vs.flatten(), pg_advantages.flatten()
    env_major = np.random.permutation(32)
    time_major = th.as_tensor((env_major % 16) * 2 + env_major // 16)
    for indices in time_major.split(8):
        values, log_prob, entropy = reference.evaluate_actions(batch.observations[indices], batch.actions[indices])
        advantages = pg_advantages[indices]
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        loss = -(advantages * log_prob).mean() + 0.5 * ((values.flatten() - vs[indices]) ** 2).mean() - 0.01 * entropy.mean()
        reference.optimizer.zero_grad()
        loss.backward()
        th.nn.utils.clip_grad_norm_(reference.parameters(), model.max_grad_norm)
        reference.optimizer.step()
    for (name, expected), actual in zip(reference.state_dict().items(), model.policy.state_dict().values(), strict=True):
        th.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6, msg=name)


def test_set_env_with_other_spaces_raises():
    model = IMPACT("MlpPolicy", "CartPole-v1", **SMALL)
    with pytest.raises(ValueError, match=r"[Oo]bservation spaces do not match"):
        model.set_env(make_vec_env("Pendulum-v1"))


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("batch_size", [None, 16, 24])
def test_synchronous_impact_with_one_batch_and_k_passes_is_ppo(env_id, batch_size):
    """
    Paper section 3.2: with N = 1 and the target updated every K draws, IMPACT is PPO with K epochs; each
    draw is a pass in shuffled minibatches, the same ones as PPO's (24 leaves a last minibatch of 16).
    """
    from stable_baselines3 import PPO

    shared = dict(n_steps=32, gamma=0.95, gae_lambda=0.9, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, seed=7)
    shared.update(learning_rate=1e-3, clip_range=0.2, policy_kwargs=dict(net_arch=[16]), device="cpu")
    env_kwargs = dict(max_episode_steps=20)  # time-limit truncations inside the segments
    # Each model is built right before it learns: both draw the same random numbers from the seed.
    np.random.seed(3)  # minibatches are drawn from numpy's global generator, by both
    ppo_env = make_vec_env(env_id, n_envs=2, seed=1, env_kwargs=env_kwargs)
    ppo = PPO("MlpPolicy", ppo_env, n_epochs=4, batch_size=batch_size or 64, **shared)
    ppo.learn(192)
    np.random.seed(3)
    impact = IMPACT(
        "MlpPolicy",
        make_vec_env(env_id, n_envs=2, seed=1, env_kwargs=env_kwargs),
        batch_size=batch_size,
        circular_buffer_size=1,
        max_batch_reuse=4,
        collector="sync",
        vtrace_clip_rho_threshold=1.0,
        vtrace_clip_c_threshold=1.0,
        **shared,
    )
    impact.learn(192)
    assert impact._n_updates == ppo._n_updates == 4 * 3
    assert impact.gradient_steps == 4 * 3 * (1 if batch_size is None else math.ceil(64 / batch_size))
    for (name, expected), actual in zip(ppo.policy.state_dict().items(), impact.policy.state_dict().values(), strict=True):
        th.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5, msg=name)


class FirstActions(BaseCallback):
    def __init__(self) -> None:
        super().__init__()
        self.actions: list[np.ndarray] = []

    def _on_step(self) -> bool:
        if len(self.actions) < 20:
            self.actions.append(np.array(self.locals["actions"]))
        return True


def test_process_collector_draws_new_randomness_at_every_learn():
    model = IMPALA("MlpPolicy", make_vec_env("CartPole-v1", n_envs=2, seed=0), collector="process", learning_rate=0.0, **SMALL)
    first, second = FirstActions(), FirstActions()
    model.learn(64, callback=first)
    model.learn(64, callback=second, reset_num_timesteps=False)
    assert not np.array_equal(np.stack(first.actions), np.stack(second.actions))


def test_adaptive_kl_coefficient_never_underflows():
    model = IMPACT("MlpPolicy", "CartPole-v1", kl_coef=0.2, kl_target=0.01, learning_rate=1e-4, collector="sync", **SMALL)
    model.n_steps = 4
    model.target_update_interval = 1
    model.learn(600)
    assert model._n_updates > 1000 and model.target_updates == model._n_updates
    assert model.use_kl_penalty and model.kl_coef >= 1e-6


def test_kl_coefficient_adapts_once_per_target_update():
    """RLlib's APPO rule: the coefficient moves at target updates only, however many gradient steps lie between."""
    # The KL stays far below half of an unreachable target: each target update halves the coefficient once.
    model = IMPACT("MlpPolicy", "CartPole-v1", kl_coef=1.0, kl_target=100.0, batch_size=8, collector="sync", **SMALL)
    model.learn(512)
    assert model.gradient_steps > 8 * model.target_updates > 0
    assert model.kl_coef == pytest.approx(0.5**model.target_updates)


def test_kl_coefficient_follows_the_kl_towards_its_target():
    """Large steps against a tiny target raise the coefficient; a target the KL never reaches lowers it."""
    kwargs = dict(kl_coef=0.1, learning_rate=3e-2, n_steps=32, batch_size=16, collector="sync", seed=0)
    model = IMPACT("MlpPolicy", "CartPole-v1", kl_target=1e-4, device="cpu", **kwargs)
    model.learn(1024)
    assert model.target_updates >= 3 and model.kl_coef > 0.1
    model = IMPACT("MlpPolicy", "CartPole-v1", kl_target=10.0, device="cpu", **kwargs)
    model.learn(1024)
    assert model.target_updates >= 3 and model.kl_coef < 0.1


def test_adapt_kl_coef_rule():
    model = IMPACT("MlpPolicy", "CartPole-v1", kl_coef=1.0, kl_target=0.01, **SMALL)
    for mean_kl, expected in ((0.03, 1.5), (0.015, 1.5), (0.004, 0.75), (0.0, 0.375)):
        model._kl_sum, model._kl_count = mean_kl * 4, 4
        model._adapt_kl_coef()
        assert model.kl_coef == pytest.approx(expected) and model._kl_count == 0
    model._adapt_kl_coef()  # nothing measured since the last update: unchanged
    assert model.kl_coef == pytest.approx(0.375)
