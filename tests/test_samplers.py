"""rl-zoo3 hyperparameter optimisation: every sampler gives arguments its algorithm builds and learns with."""

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import optuna
import pytest
from stable_baselines3.common.env_util import make_vec_env

from sb3_impact.zoo import ZOO_ALGOS, register
from sb3_impact.zoo.samplers import CONVERTERS, SAMPLERS
from tests.commands import run_command
from tests.test_zoo import hook_installed

REPO_ROOT = Path(__file__).resolve().parent.parent
# The literal -optimize command for one algorithm of each kind of trial rl-zoo3 runs: a PPO subclass (PPO-AMBER),
# an off-policy replay (V-RACER) and a recurrent entry (IMPALA's LSTM; IMPACT's: test_zoo.py). Every algorithm's
# sampler and converter are the ones rl-zoo3 calls (test_register_adds_the_samplers_to_rl_zoo3) and each builds
# and learns from its trials (test_sampled_arguments_build_and_learn): one command per algorithm would test rl-zoo3's
# objective eight times for about 90 s of the suite's 2-core time.
OPTIMIZE_COMMAND_ENVS = [("ppo_amber", "Pendulum-v1"), ("vracer", "Pendulum-v1"), ("impala", "PendulumNoVel-v1")]
# An env per algorithm, with the action space its sampler is tried on (V-RACER needs Box actions).
SAMPLER_ENVS = [
    ("sac_refer", "Pendulum-v1"),
    ("td3_refer", "Pendulum-v1"),
    ("impact", "CartPole-v1"),
    ("impact", "Pendulum-v1"),
    ("impala", "CartPole-v1"),
    ("impala", "Pendulum-v1"),
    ("ppo_amber", "Pendulum-v1"),
    ("ppo_amber", "CartPole-v1"),
    ("ptr_ppo", "CartPole-v1"),
    ("ptr_ppo", "Pendulum-v1"),
    ("vracer", "Pendulum-v1"),
]


def n_actions(env_id: str) -> int:
    """What rl-zoo3 passes to a sampler: the action dimension for Box, 0 otherwise."""
    space = gym.make(env_id).action_space
    return space.shape[0] if isinstance(space, gym.spaces.Box) else 0


def test_every_algorithm_has_a_sampler_and_a_converter():
    assert set(SAMPLERS) == set(CONVERTERS) == set(ZOO_ALGOS)


def test_register_adds_the_samplers_to_rl_zoo3():
    register()
    from rl_zoo3.exp_manager import HYPERPARAMS_CONVERTER, HYPERPARAMS_SAMPLER  # the tables the optimiser reads

    for name in ZOO_ALGOS:
        assert HYPERPARAMS_SAMPLER[name] is SAMPLERS[name] and HYPERPARAMS_CONVERTER[name] is CONVERTERS[name]


@pytest.mark.parametrize("algo, env_id", SAMPLER_ENVS)
def test_sampled_arguments_build_and_learn(algo, env_id):
    """Trials from a seeded random sampler: each builds its algorithm and learns a few hundred steps."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(2):
        trial = study.ask()
        params = SAMPLERS[algo](trial, n_actions(env_id), 2, {"using_her_replay_buffer": False})
        # rl-zoo3 rebuilds a stored trial (``--trial-id``) with the converter from trial.params alone.
        converted = CONVERTERS[algo](trial.params)
        if "action_noise" in params:  # the converter leaves the noise for rl-zoo3 to build, as rl-zoo3's TD3's does
            assert converted.pop("noise_type") == "normal"
            np.testing.assert_allclose(converted.pop("noise_std"), params["action_noise"]._sigma)
            converted["action_noise"] = params["action_noise"]
        assert converted == params
        assert not any(key.endswith("_pow") or key.startswith("one_minus") for key in params)
        if n_actions(env_id) == 0:
            assert "log_std_init" not in params.get("policy_kwargs", {})
        # Smaller rollouts and fewer epochs than the largest sampled ones, to keep the test short.
        if algo == "ppo_amber":  # AMBER's own three; PPO's come from the yml entry (small ones here)
            assert set(params) == {"clip_range", "replay_length", "batch_drop_factor"}
            params.update(n_steps=64, batch_size=64, n_epochs=2)
        elif algo in ("vracer", "sac_refer", "td3_refer"):
            params.update(learning_starts=100, batch_size=min(params["batch_size"], 256))
            if "gradient_steps" in params:  # SAC's and TD3's (a memory of 1e6 alone takes seconds to allocate)
                params.update(gradient_steps=min(params["gradient_steps"], 2))
            params["buffer_size"] = min(params.get("buffer_size", 10_000), 10_000)
        else:
            params["n_steps"] = min(params["n_steps"], 128)
        if algo == "ptr_ppo":
            params.update(batch_size=min(params["batch_size"], params["n_steps"]), n_epochs=min(params["n_epochs"], 2))
        model = ZOO_ALGOS[algo]("MlpPolicy", make_vec_env(env_id, n_envs=2), seed=0, **params)
        model.learn(300)
        assert model.num_timesteps >= 300
        model.env.close()
        study.tell(trial, 0.0)


@pytest.mark.parametrize("algo", ["impact", "impala"])
def test_recurrent_trials_draw_whole_segments(algo):
    """An entry with an LSTM policy: minibatches of whole segments (at most n_envs), the LSTM's size searched."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    n_envs = 4
    for _ in range(3):
        trial = study.ask()
        trial.set_user_attr("recurrent_policy", True)  # what the optimiser records for an MlpLstmPolicy entry
        params = SAMPLERS[algo](trial, 0, n_envs, {"using_her_replay_buffer": False})
        assert params == CONVERTERS[algo](trial.params)
        segments, remainder = divmod(params["batch_size"], params["n_steps"])
        assert remainder == 0 and 1 <= segments <= n_envs
        if algo == "impala":
            assert params["value_batch_size"] == params["batch_size"]
        assert {"lstm_hidden_size", "enable_critic_lstm"} <= set(params["policy_kwargs"])
        # Shorter segments than the largest sampled ones, the same number per minibatch, to keep the test short.
        params["n_steps"] = min(params["n_steps"], 32)
        params["batch_size"] = params["n_steps"] * segments
        if algo == "impala":
            params.update(value_batch_size=params["batch_size"], n_epochs=1, n_value_epochs=min(params["n_value_epochs"], 1))
        env = make_vec_env("CartPole-v1", n_envs=n_envs)
        model = ZOO_ALGOS[algo]("MlpLstmPolicy", env, seed=0, collector="sync", **params)
        model.learn(200)
        assert model.num_timesteps >= 200
        model.env.close()
        study.tell(trial, 0.0)
    plain = study.ask()  # no attribute: an MLP entry keeps the batch_size search
    params = SAMPLERS[algo](plain, 0, n_envs, {"using_her_replay_buffer": False})
    assert {"batch_size_pow", "batch_size"} & set(plain.params) and "minibatch_segments_pow" not in plain.params
    assert "lstm_hidden_size" not in params["policy_kwargs"]


def test_size_rules_hold_at_the_edges_of_the_search_space():
    """IMPACT's batch_size <= n_steps, PTR-PPO's memory holds a replay batch, V-RACER's buffer holds a batch."""
    fixed = {"one_minus_gamma": 0.01, "one_minus_gae_lambda": 0.05, "learning_rate": 1e-3, "ent_coef": 0.0}
    fixed.update(max_grad_norm=0.5, net_arch="tiny", activation_fn="tanh", ortho_init=True)
    impact = {**fixed, "n_steps_pow": 6, "batch_size_pow": 10, "circular_buffer_size": 4, "max_batch_reuse": 2}
    impact.update(target_worker_clip=2.0, clip_range=0.2, kl_coef=0.0, vf_coef=0.5)
    converted = CONVERTERS["impact"](impact)
    assert converted["batch_size"] == converted["n_steps"] == 64
    ptr = {**fixed, "n_steps_pow": 5, "batch_size_pow": 5, "n_epochs": 1, "clip_range": 0.2, "priority": "max"}
    ptr.update(priority_alpha=0.6, replay_rounds=2, replay_batch_pow=6, memory_size_pow=4, eps_marg=0.2)
    converted = CONVERTERS["ptr_ppo"](ptr)
    assert converted["replay_batch"] == 64 and converted["memory_size"] == 64
    vracer = {"one_minus_gamma": 0.01, "learning_rate": 1e-4, "batch_size_pow": 10, "buffer_size_pow": 9}
    vracer.update(refer_c=4.0, refer_d=0.1, refer_a=5e-7, net_arch="medium", activation_fn="softsign")
    converted = CONVERTERS["vracer"](vracer)
    assert converted["buffer_size"] == converted["batch_size"] == 1024
    assert converted["gamma"] == pytest.approx(0.99) and converted["policy_kwargs"]["net_arch"] == [128, 128]


@pytest.mark.skipif(not hook_installed(), reason="needs the installed startup hook: pip install .")
@pytest.mark.timeout(660)  # past the command's own 600 s limit, which reports with its output (run_command)
@pytest.mark.parametrize("algo, env_id", OPTIMIZE_COMMAND_ENVS)
def test_rl_zoo3_optimize_command_finishes(algo, env_id, tmp_path):
    """The literal ``python -m rl_zoo3.train --algo ALGO --env ENV -optimize`` with two trials."""
    command = [sys.executable, "-m", "rl_zoo3.train", "--algo", algo, "--env", env_id, "-optimize", "--n-trials", "2"]
    command += ["--n-jobs", "1", "--sampler", "tpe", "--pruner", "median", "-n", "1000", "--n-evaluations", "1"]
    command += ["--eval-episodes", "2", "--seed", "3", "-f", "logs", "-params", "n_envs:1"]  # one env: short rollouts
    result = run_command(command, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Number of finished trials:  2" in result.stdout, result.stdout[-3000:]
    reports = list((tmp_path / "logs" / algo).glob("report_*.csv"))
    assert len(reports) == 1 and len(reports[0].read_text().splitlines()) == 3  # header + 2 trials
