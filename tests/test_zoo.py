"""rl-zoo3 integration: registration, the shipped yml, and the literal train/enjoy commands."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
import rl_zoo3.import_envs  # noqa: F401  (registers the partially observed tasks: CartPoleNoVel-v1, ...)
import yaml

from sb3_impact import IMPACT, IMPALA
from sb3_impact.zoo import ZOO_ALGOS, hyperparams_path, register
from tests.commands import run_command

REPO_ROOT = Path(__file__).resolve().parent.parent

# The envs each algorithm's shipped yml must cover (the issue that introduced the algorithm lists them).
REQUIRED_ZOO_ENVS = {
    "impact": {"CartPole-v1", "Pendulum-v1", "HalfCheetah-v5", "atari", "CartPoleNoVel-v1", "PendulumNoVel-v1"},
    "impala": {"CartPole-v1", "Pendulum-v1", "HalfCheetah-v5", "atari", "CartPoleNoVel-v1", "PendulumNoVel-v1"},
    "vracer": {"Pendulum-v1", "HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"},
    "ppo_amber": {"Pendulum-v1", "LunarLanderContinuous-v3", "HalfCheetah-v5", "Hopper-v5", "CartPole-v1"},
    "ptr_ppo": {"atari", "CartPole-v1", "LunarLander-v3"},
    "sac_refer": {"Pendulum-v1", "HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"},
    "td3_refer": {"Pendulum-v1", "HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"},
}

# An env with a shipped yml entry per algorithm, for the rl-zoo3 command-line tests.
ZOO_COMMAND_ENVS = [("impact", "CartPole-v1"), ("impala", "CartPole-v1"), ("ppo_amber", "Pendulum-v1"),
                    ("vracer", "Pendulum-v1"), ("ptr_ppo", "CartPole-v1"), ("sac_refer", "Pendulum-v1"),
                    ("impact", "CartPoleNoVel-v1"), ("impala", "PendulumNoVel-v1")]  # fmt: skip


def hook_installed() -> bool:
    return importlib.util.find_spec("_sb3_impact_zoo_hook") is not None and any(
        (Path(path) / "sb3_impact.pth").is_file() for path in sys.path if path
    )


@pytest.mark.parametrize("algo", sorted(ZOO_ALGOS))
def test_shipped_yml_has_the_required_envs_and_valid_parameters(algo):
    config = yaml.safe_load(hyperparams_path(algo).read_text())
    assert REQUIRED_ZOO_ENVS[algo] <= set(config)
    algo_class = ZOO_ALGOS[algo]
    zoo_only = {"n_envs", "n_timesteps", "policy", "normalize", "env_wrapper", "frame_stack", "noise_type", "noise_std"}
    # SACReFER/TD3ReFER pass SAC's/TD3's arguments on as **kwargs: every __init__ up the MRO counts
    accepted = set().union(
        *(
            vars(cls)["__init__"].__code__.co_varnames
            for cls in algo_class.__mro__
            if "__init__" in vars(cls) and hasattr(vars(cls)["__init__"], "__code__")
        )
    )
    for env_id, params in config.items():
        unknown = set(params) - zoo_only - accepted
        assert not unknown, f"{algo}.yml/{env_id}: unknown parameters {unknown}"


def test_register_adds_algorithms_and_points_rl_zoo3_at_our_yml():
    register()
    register()  # idempotent
    import rl_zoo3
    from rl_zoo3.exp_manager import ExperimentManager

    assert rl_zoo3.ALGOS["impact"] is IMPACT and rl_zoo3.ALGOS["impala"] is IMPALA
    assert all(rl_zoo3.ALGOS[name] is algo for name, algo in ZOO_ALGOS.items())
    manager = ExperimentManager(args=None, algo="impact", env_id="CartPole-v1", log_folder="unused")
    assert Path(manager.config) == hyperparams_path("impact")
    manager = ExperimentManager(args=None, algo="ppo", env_id="CartPole-v1", log_folder="unused")
    assert Path(manager.config).name == "ppo.yml" and "rl_zoo3" in manager.config


def run(command: list[str], cwd: Path, timeout: float = 120, **env) -> subprocess.CompletedProcess:
    # One OpenMP thread: with torch's default (one per core) a command that takes 37 s on the quiet 2-core machine
    # took over 300 s beside two benchmark processes (threads spinning against each other). What is tested is
    # that the command works, not how fast.
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", **env}
    return run_command(command, cwd=cwd, env=environment, timeout=timeout)


@pytest.mark.skipif(not hook_installed(), reason="needs the installed startup hook: pip install . (not -e)")
@pytest.mark.timeout(660)  # its two commands' own limits: 2 x 300 s
@pytest.mark.parametrize("algo, env_id", ZOO_COMMAND_ENVS)
def test_rl_zoo3_train_and_enjoy_commands(algo, env_id, tmp_path):
    train_args = ["--algo", algo, "--env", env_id, "-n", "1000", "-f", "logs", "--seed", "0"]
    if algo == "sac_refer":  # SAC's 900 gradient steps from its default learning_starts=100 took 50 s of the test
        train_args += ["-params", "learning_starts:800"]
    train = run([sys.executable, "-m", "rl_zoo3.train", *train_args], cwd=tmp_path, timeout=300)
    assert train.returncode == 0, train.stderr[-3000:]
    assert (tmp_path / "logs" / algo / f"{env_id}_1" / f"{env_id}.zip").is_file()
    config_file = tmp_path / "logs" / algo / f"{env_id}_1" / env_id / "config.yml"
    saved_config = yaml.load(config_file.read_text(), Loader=yaml.UnsafeLoader)  # rl-zoo3 writes an OrderedDict
    shipped = yaml.safe_load(hyperparams_path(algo).read_text())[env_id]
    # read from the shipped yml, without -conf
    assert {key: dict(saved_config).get(key) for key in shipped} == shipped
    # Longer than the env's time limit: an episode ends (and its reward is printed) whatever the policy learnt,
    # even one that balances CartPole for all its steps.
    # rl-zoo3's NoVel tasks keep the time limit inside (CartPole's 500, Pendulum's 200): their spec has none.
    n_enjoy_steps = (gym.spec(env_id).max_episode_steps or 500) + 1
    enjoy_args = ["--algo", algo, "--env", env_id, "-f", "logs/", "-n", str(n_enjoy_steps), "--no-render", "--seed", "0"]
    enjoy = run([sys.executable, "-m", "rl_zoo3.enjoy", *enjoy_args], cwd=tmp_path, timeout=300)
    assert enjoy.returncode == 0, enjoy.stderr[-3000:]
    assert "Mean reward" in enjoy.stdout or "Episode Reward" in enjoy.stdout


@pytest.mark.skipif(not hook_installed(), reason="needs the installed startup hook: pip install . (not -e)")
@pytest.mark.timeout(330)  # its two commands' own limits: 2 x 150 s
def test_optimize_prunes_a_trial_whose_settings_cannot_be_built(tmp_path):
    """
    ``-params n_steps:10`` keeps the yml's batch_size (64) above n_steps * n_envs (10 * 4): PPO-AMBER refuses to be
    built. The trial is pruned with that reason and the study goes on. A first run gives the study a completed trial:
    without one rl-zoo3 cannot name a best trial at the end (it raises, as for any study whose trials were all pruned).
    """
    import optuna

    optimize = [sys.executable, "-m", "rl_zoo3.train", "--algo", "ppo_amber", "--env", "Pendulum-v1", "-optimize"]
    optimize += ["--n-trials", "1", "-n", "64", "--n-evaluations", "1", "--eval-episodes", "1", "-f", "logs"]
    optimize += ["--no-optim-plots", "--storage", "study.log", "--study-name", "amber"]
    completed = run([*optimize, "-params", "n_steps:16", "collector:'sync'"], tmp_path, 150)
    assert completed.returncode == 0, completed.stderr[-3000:]
    pruned = run([*optimize, "-params", "n_steps:10"], tmp_path, 150)
    assert pruned.returncode == 0, pruned.stderr[-3000:]
    reason = "PPOAMBER cannot be built with this trial's settings: batch_size (64) must be <= n_steps * n_envs (10 * 4)"
    assert f"Trial 1 pruned. {reason}" in pruned.stderr
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "study.log")))
    trials = optuna.load_study(study_name="amber", storage=storage).trials
    assert [trial.state for trial in trials] == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED]
    assert trials[1].user_attrs["pruned_reason"] == reason


@pytest.mark.skipif(not hook_installed(), reason="needs the installed startup hook: pip install . (not -e)")
@pytest.mark.timeout(200)
def test_optimize_runs_a_recurrent_entry(tmp_path):
    """``-optimize`` on a recurrent yml entry: the sampled settings build IMPACT with its LSTM policy; a trial completes."""
    optimize = [sys.executable, "-m", "rl_zoo3.train", "--algo", "impact", "--env", "CartPoleNoVel-v1", "-optimize"]
    optimize += ["--n-trials", "1", "-n", "256", "--n-evaluations", "1", "--eval-episodes", "1", "-f", "logs"]
    optimize += ["--no-optim-plots", "-params", "n_envs:2", "collector:'sync'", "--seed", "0"]
    completed = run(optimize, tmp_path, 180)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "Trial 0 finished with value" in completed.stderr
    assert "pruned" not in (completed.stdout + completed.stderr).lower()


@pytest.mark.skipif(not hook_installed(), reason="needs the installed startup hook: pip install . (not -e)")
def test_hook_opt_out_variable():
    code = "import rl_zoo3; print('impact' in rl_zoo3.ALGOS)"
    assert run([sys.executable, "-c", code], cwd=REPO_ROOT).stdout.strip() == "True"
    assert run([sys.executable, "-c", code], cwd=REPO_ROOT, SB3_IMPACT_NO_ZOO_HOOK="1").stdout.strip() == "False"


def test_startup_does_not_import_torch():
    code = "import sys; print('torch' in sys.modules)"
    assert run([sys.executable, "-c", code], cwd=REPO_ROOT).stdout.strip() == "False"


def test_startup_files_point_at_the_hook():
    """``sb3_impact.start`` (PEP 829: ``module:callable``) and the ``.pth`` import line name the same hook."""
    import importlib

    module_name, function_name = (REPO_ROOT / "sb3_impact.start").read_text().strip().split(":")
    assert callable(getattr(importlib.import_module(module_name), function_name))
    pth_line = (REPO_ROOT / "sb3_impact.pth").read_text().strip()
    assert pth_line.startswith("import ") and f"{module_name}.{function_name}()" in pth_line


def test_register_keeps_a_user_config():
    register()
    from rl_zoo3.exp_manager import ExperimentManager

    manager = ExperimentManager(args=None, algo="impact", env_id="CartPole-v1", log_folder="unused", config="mypkg.hparams")
    assert manager.config == "mypkg.hparams"
