"""PPO-AMBER: R' (eq. 10), batch selection, the replay memory, equivalence with SB3 PPO, save/load, bad input."""

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import IdentityEnv, IdentityEnvBox, IdentityEnvMultiBinary, IdentityEnvMultiDiscrete
from stable_baselines3.common.logger import KVWriter, Logger
from stable_baselines3.common.save_util import load_from_zip_file

from sb3_impact import PPOAMBER
from sb3_impact.common.distributions import distribution_from_params
from sb3_impact.ppo_amber.memory import BatchReplayMemory, StoredBatch
from sb3_impact.ppo_amber.ppo_amber import select_active_batches

from .conftest import DictObsEnv

SMALL = dict(n_steps=32, batch_size=16, n_epochs=2, policy_kwargs=dict(net_arch=[16]), device="cpu")


# --- R' and the active set -------------------------------------------------------------------------------


def gaussian_density(action: np.ndarray, mean: np.ndarray, std: np.ndarray) -> float:
    return float(np.prod(np.exp(-0.5 * ((action - mean) / std) ** 2) / (np.sqrt(2 * np.pi) * std)))


def test_replay_ratios_match_a_per_sample_reference_from_the_paper():
    """R'_l (eq. 10) from the raw Gaussian densities pi(a|s) and mu(a|s), one sample at a time."""
    model = PPOAMBER("MlpPolicy", "Pendulum-v1", replay_length=3, seed=0, **SMALL).learn(3 * 32)
    ratios, kls = model.replay_ratios_and_kl()
    assert len(ratios) == 3 and ratios[0] == 1.0
    assert len(kls) == 3 and kls[0] == 0.0 and min(kls[1:]) > 0.0  # the older batches' policies differ from pi
    for index in (1, 2):
        batch = model.replay_memory[index]
        terms = []
        for observation, action, params in zip(batch.observations, batch.actions, batch.behaviour_params, strict=True):
            with th.no_grad():
                distribution = model.policy.get_distribution(th.as_tensor(observation[None]))
            mean = distribution.distribution.mean.numpy()[0]
            std = distribution.distribution.stddev.numpy()[0]
            pi = gaussian_density(action, mean, std)
            mu = gaussian_density(action, params[:1], np.exp(params[1:]))
            terms.append(1 + abs(1 - pi / mu))
        assert ratios[index] == pytest.approx(np.mean(terms), rel=1e-4)
        assert ratios[index] > 1.0


@pytest.mark.parametrize("batch_drop_factor", [0.25, 0.5])
def test_active_set_at_the_threshold_boundary(batch_drop_factor):
    threshold = 1.0 + batch_drop_factor  # exactly representable
    ratios = [1.0, threshold, np.nextafter(threshold, 2.0), threshold - 0.1, 1.0, 3.0]
    assert select_active_batches(ratios, batch_drop_factor) == [0, 1, 3, 4]
    assert select_active_batches(ratios, 0.0) == [0, 4]  # eps_b = 0 keeps only batches with R' = 1
    assert select_active_batches(ratios, batch_drop_factor, adaptive=False) == [0, 1, 2, 3, 4, 5]
    assert select_active_batches([9.0, 9.0], batch_drop_factor) == [0]  # the newest is always active


# --- the memory --------------------------------------------------------------------------------------------


def stored_batch(size: int, tag: float) -> StoredBatch:
    return StoredBatch(
        observations=np.full((size, 2), tag, dtype=np.float32),
        actions=np.arange(size, dtype=np.float32)[:, None],
        values=np.zeros(size, dtype=np.float32),
        log_probs=np.zeros(size, dtype=np.float32),
        advantages=np.full(size, tag, dtype=np.float32),
        returns=np.zeros(size, dtype=np.float32),
        behaviour_params=np.zeros((size, 2), dtype=np.float32),
    )


def test_memory_keeps_the_last_batches_newest_first():
    memory = BatchReplayMemory(3)
    for tag in range(5):
        memory.add(stored_batch(4, float(tag)))
    assert len(memory) == 3 and memory.batches_added == 5
    assert [batch.advantages[0] for batch in memory] == [4.0, 3.0, 2.0]


def test_minibatches_scale_with_the_number_of_batches_and_cover_each_sample_once():
    memory = BatchReplayMemory(4)
    for tag in range(4):
        memory.add(stored_batch(64, float(tag)))
    minibatches = list(memory.minibatches([0, 2, 3], batch_size=16, device=th.device("cpu")))
    assert len(minibatches) == 64 // 16  # gradient steps per epoch as PPO
    assert all(len(minibatch.actions) == 16 * 3 for minibatch in minibatches)
    tags = th.cat([minibatch.advantages for minibatch in minibatches])
    assert sorted(set(tags.tolist())) == [0.0, 1.0, 3.0]  # batch 2 from the newest (tag 1) was inactive
    for tag in (0.0, 1.0, 3.0):  # every sample of every active batch exactly once
        actions = th.cat([minibatch.actions[minibatch.advantages == tag] for minibatch in minibatches])
        assert sorted(actions.flatten().tolist()) == list(range(64))


# --- equivalence with SB3 PPO ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env_id, extra",
    [
        ("CartPole-v1", {}),
        ("Pendulum-v1", {}),
        ("Pendulum-v1", dict(use_sde=True, sde_sample_freq=4, clip_range_vf=0.5, batch_size=24)),
    ],
    ids=["Discrete", "Box", "Box-gSDE-vf-clip-truncated-minibatch"],
)
def test_replay_length_one_is_sb3_ppo(env_id, extra):
    kwargs = dict(SMALL, learning_rate=3e-4, clip_range=0.2, n_epochs=3, seed=5, **extra)
    env = make_vec_env(env_id, n_envs=2, seed=5)
    ppo = PPO("MlpPolicy", env, **kwargs).learn(2 * 32)
    env = make_vec_env(env_id, n_envs=2, seed=5)
    amber = PPOAMBER("MlpPolicy", env, replay_length=1, **kwargs).learn(2 * 32)
    assert amber._n_updates == ppo._n_updates == 3
    ppo_state, amber_state = ppo.policy.state_dict(), amber.policy.state_dict()
    assert ppo_state.keys() == amber_state.keys()
    # Same samples, minibatches and steps; the values are evaluated in one batched pass after collection rather
    # than one step at a time, which changes float32 rounding, hence the tolerance.
    for name in ppo_state:
        th.testing.assert_close(amber_state[name], ppo_state[name], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "env_factory",
    [lambda: IdentityEnv(4), lambda: IdentityEnvMultiDiscrete(3), lambda: IdentityEnvMultiBinary(3), IdentityEnvBox],
    ids=["Discrete", "MultiDiscrete", "MultiBinary", "Box"],
)
def test_stored_behaviour_params_reproduce_the_stored_log_probs(env_factory):
    model = PPOAMBER("MlpPolicy", make_vec_env(env_factory, n_envs=2, seed=0), replay_length=4, seed=0, **SMALL)
    model.learn(3 * 64)
    assert len(model.replay_memory) == 3
    for batch in model.replay_memory:
        behaviour = distribution_from_params(model.action_space, th.as_tensor(batch.behaviour_params))
        actions = th.as_tensor(batch.actions)
        if isinstance(model.action_space, spaces.Discrete):
            actions = actions.long().flatten()
        log_prob = behaviour.log_prob(actions)
        if log_prob.dim() > 1:
            log_prob = log_prob.sum(dim=1)
        th.testing.assert_close(log_prob, th.as_tensor(batch.log_probs), rtol=1e-4, atol=1e-4)


# --- learning runs, logging --------------------------------------------------------------------------------


class CaptureWriter(KVWriter):
    def __init__(self) -> None:
        self.records: list[dict] = []

    def write(self, key_values, key_excluded, step=0) -> None:
        self.records.append(dict(key_values))


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("adaptive", [True, False])
def test_short_learn_uses_the_replay_and_logs(env_id, adaptive):
    writer = CaptureWriter()
    model = PPOAMBER("MlpPolicy", env_id, replay_length=4, adaptive=adaptive, batch_drop_factor=0.5, seed=0, **SMALL)
    model.set_logger(Logger(folder=None, output_formats=[writer]))
    model.learn(6 * 32)
    assert len(model.replay_memory) == 4
    train_records = [record for record in writer.records if "train/active_batches" in record]
    # SB3 dumps an iteration's train/ keys at the start of the next one; the last stay in the logger after learn()
    assert len(train_records) == 5
    train_records.append(dict(model.logger.name_to_value))
    assert train_records[-1]["collector/sampled_steps"] == train_records[-1]["collector/trained_steps"] == 6 * 32
    assert train_records[-1]["collector/dropped_steps"] == 0
    assert [record["train/policy_lag"] for record in train_records[:-1]] == [0.0] * 5  # synchronous: never stale
    for key in ["replay_samples", "replay_ratio_min", "replay_ratio_mean", "replay_ratio_max", "batch_drop_factor"]:
        assert f"train/{key}" in train_records[-1]
    for key in ["policy_gradient_loss", "value_loss", "entropy_loss", "approx_kl", "clip_fraction", "is_ratio_mean"]:
        assert f"train/{key}" in train_records[-1]
    active = [record["train/active_batches"] for record in train_records]
    if adaptive:
        assert all(1 <= count <= 4 for count in active)
    else:  # PPO-MBER: every stored batch
        assert active == [1, 2, 3, 4, 4, 4] and model.active_batches == 4
    assert all(record["train/replay_samples"] == 32 * record["train/active_batches"] for record in train_records)
    assert all(record["train/batch_drop_factor"] == 0.5 for record in train_records)
    assert all(record["train/replay_ratio_min"] >= 1.0 for record in train_records)
    assert all(th.isfinite(parameter).all() for parameter in model.policy.parameters())


def test_default_batch_drop_factor_anneals_linearly_from_a_quarter():
    model = PPOAMBER("MlpPolicy", "Pendulum-v1", **SMALL)
    assert model.batch_drop_factor(1.0) == 0.25 and model.batch_drop_factor(0.0) == 0.0
    assert model.clip_range(1.0) == pytest.approx(0.4) and model.lr_schedule(1.0) == pytest.approx(3e-4)
    assert model.replay_length == 8 and model.adaptive
    assert PPOAMBER("MlpPolicy", "Pendulum-v1", batch_drop_factor="lin_0.3", **SMALL).batch_drop_factor(0.5) == 0.15
    assert PPOAMBER("MlpPolicy", "Pendulum-v1", batch_drop_factor=0.1, **SMALL).batch_drop_factor(0.0) == 0.1


def test_an_aggressive_drop_factor_keeps_only_the_newest_batch():
    model = PPOAMBER("MlpPolicy", "Pendulum-v1", replay_length=4, batch_drop_factor=0.0, seed=0, **SMALL)
    model.learn(4 * 32)
    assert model.active_batches == 1 and len(model.replay_memory) == 4
    assert all(ratio > 1.0 for ratio in model.replay_ratios[1:])


def test_dict_observations():
    model = PPOAMBER("MultiInputPolicy", DictObsEnv(), replay_length=2, n_steps=8, batch_size=8, n_epochs=1, device="cpu")
    model.learn(16)
    assert len(model.replay_memory) == 2 and isinstance(model.replay_memory[0].observations, dict)


# --- save / load -------------------------------------------------------------------------------------------


def test_save_load_round_trip_leaves_the_memory_out(tmp_path):
    model = PPOAMBER("MlpPolicy", "Pendulum-v1", replay_length=3, batch_drop_factor="lin_0.3", seed=0, **SMALL)
    model.learn(3 * 32)
    assert len(model.replay_memory) == 3
    model.save(tmp_path / "amber")
    data, _, _ = load_from_zip_file(tmp_path / "amber.zip")
    assert "replay_memory" not in data and "rollout_buffer" not in data

    loaded = PPOAMBER.load(tmp_path / "amber.zip", env=make_vec_env("Pendulum-v1", n_envs=1), device="cpu")
    assert len(loaded.replay_memory) == 0 and loaded.replay_length == 3
    assert loaded.batch_drop_factor(0.5) == pytest.approx(0.15)
    for name, tensor in model.policy.state_dict().items():
        th.testing.assert_close(loaded.policy.state_dict()[name], tensor)
    before = [parameter.clone() for parameter in loaded.policy.parameters()]
    loaded.learn(2 * 32, reset_num_timesteps=False)
    assert len(loaded.replay_memory) == 2 and 1 <= loaded.active_batches <= 2
    assert any(not th.equal(old, new) for old, new in zip(before, loaded.policy.parameters(), strict=True))


# --- bad input ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, parameter",
    [
        (dict(replay_length=0), "replay_length"),
        (dict(batch_drop_factor=-0.1), "batch_drop_factor"),
        (dict(batch_drop_factor=lambda progress: progress - 0.5), "batch_drop_factor"),
        (dict(batch_drop_factor="linear_0.2"), "batch_drop_factor"),
        (dict(batch_size=65), "batch_size"),
        (dict(use_sde=True, policy_kwargs=dict(squash_output=True)), "squash_output"),
    ],
)
def test_bad_input_names_the_parameter(kwargs, parameter):
    with pytest.raises(ValueError, match=parameter):
        PPOAMBER("MlpPolicy", make_vec_env("Pendulum-v1", n_envs=2), **{**SMALL, **kwargs})


def test_bad_types_are_rejected():
    with pytest.raises(TypeError, match="replay_length"):
        PPOAMBER("MlpPolicy", "Pendulum-v1", replay_length=2.5, **SMALL)
    with pytest.raises(TypeError, match="batch_drop_factor"):
        PPOAMBER("MlpPolicy", "Pendulum-v1", batch_drop_factor=[0.1], **SMALL)
