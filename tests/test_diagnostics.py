"""Every benchmark run stores its diagnostics at each evaluation point (benchmarks/diagnostics.py)."""

import csv
import warnings

import numpy as np
import pandas as pd
import pytest
import torch as th
from stable_baselines3 import PPO, SAC, TD3

from benchmarks import run as run_module
from benchmarks.diagnostics import action_log_std, action_mean_abs, diagnostics_path, logged_key, plot_diagnostics
from benchmarks.output import EvalPoint, read_csv, write_rows
from sb3_impact import VRACER


def read_rows(path):
    with open(path) as file:
        return list(csv.DictReader(file))


def test_every_run_stores_the_logged_values_and_the_action_mean_at_each_evaluation(tmp_path):
    algos = ["ppo[n_envs=2,n_steps=64,batch_size=32,n_epochs=2]", "impact_default[n_steps=32]"]
    common = ["--seeds", "1", "--steps", "768", "--eval-freq", "256", "--eval-episodes", "1", "--out", str(tmp_path)]
    run_module.main(
        ["--algos", *algos, "--env", "Pendulum-v1", *common, "--plot-diagnostics", "entropy_loss", "action_mean_abs"]
    )
    points = read_csv(tmp_path / "Pendulum-v1.csv")
    for algo in algos:
        rows = read_rows(next((tmp_path / "records" / "Pendulum-v1" / "diagnostics").glob(f"{algo[:3]}*_seed0.csv")))
        # one row per evaluation point, at the same steps as the returns
        assert [int(row["steps"]) for row in rows] == [p.steps for p in points if p.algo == algo]
        assert all(float(row["action_mean_abs"]) >= 0.0 for row in rows)
        assert all(np.isfinite(float(row["action_log_std"])) for row in rows)
        trained = rows[1:]  # the point at step 0 precedes any training
        for key in ["train/entropy_loss", "train/approx_kl", "train/learning_rate", "train/value_loss"]:
            assert all(np.isfinite(float(row[key])) for row in trained), key
        assert all(float(row["train/approx_kl"]) >= 0.0 for row in trained)
    impact_rows = read_rows(diagnostics_path(tmp_path, "Pendulum-v1", algos[1], 0))
    assert all(float(row["collector/sampled_steps"]) > 0 for row in impact_rows[1:])
    assert (tmp_path / "Pendulum-v1_diagnostics.png").stat().st_size > 10_000


def test_evaluated_at_every_iteration_each_row_holds_that_iterations_logged_values(tmp_path):
    """PPO-AMBER's active batches over training (the AMBER paper's Figure 5), once a recorder of their own: one
    row per iteration, each value counted once (the values recorded before an evaluation, dumped after it, are not
    counted again at the next one)."""
    algo = "ppo_amber[n_envs=2,n_steps=64,batch_size=64,n_epochs=2]"  # 128 steps and 2 updates an iteration
    common = ["--seeds", "1", "--steps", "1024", "--eval-freq", "128", "--eval-episodes", "1", "--out", str(tmp_path)]
    run_module.main(["--algos", algo, "--env", "Pendulum-v1", *common, "--plot-diagnostics", "active_batches"])
    rows = read_rows(diagnostics_path(tmp_path, "Pendulum-v1", algo, 0))
    assert [int(row["steps"]) for row in rows] == list(range(0, 1025, 128))
    trained = rows[2:]  # the points at 0 and 128 steps precede any training; each later one follows one more
    assert [float(row["train/n_updates"]) for row in trained] == [2.0 * iteration for iteration in range(1, 8)]
    active = [float(row["train/active_batches"]) for row in trained]
    assert all(value == int(value) >= 1 for value in active)
    assert all(a <= float(row["train/stored_batches"]) for a, row in zip(active, trained, strict=True))
    assert (tmp_path / "Pendulum-v1_diagnostics.png").stat().st_size > 10_000


def test_the_action_mean_is_the_unclipped_gaussian_mean_of_each_kind_of_policy():
    observations = np.zeros((8, 3), dtype=np.float32)
    ppo = PPO("MlpPolicy", "Pendulum-v1", seed=0)
    with th.no_grad():
        ppo.policy.action_net.bias.fill_(12.0)  # far outside the box [-2, 2]: what clipped actions would hide
        ppo.policy.action_net.weight.zero_()
    assert action_mean_abs(ppo.policy, observations) == pytest.approx(12.0)
    sac = SAC("MlpPolicy", "Pendulum-v1", seed=0)
    with th.no_grad():
        sac.policy.actor.mu.bias.fill_(-5.0)  # before tanh
        sac.policy.actor.mu.weight.zero_()
    assert action_mean_abs(sac.policy, observations) == pytest.approx(5.0)
    td3 = TD3("MlpPolicy", "Pendulum-v1", seed=0)
    assert 0.0 <= action_mean_abs(td3.policy, observations) <= 1.0  # tanh-squashed, in [-1, 1]
    vracer = VRACER("MlpPolicy", "Pendulum-v1", seed=0)
    mean = vracer.policy.forward_parts(th.zeros(8, 3))[0]
    assert action_mean_abs(vracer.policy, observations) == pytest.approx(mean.abs().mean().item())


def test_the_action_log_std_is_the_gaussian_width_of_each_kind_of_policy():
    observations = np.zeros((8, 3), dtype=np.float32)
    ppo = PPO("MlpPolicy", "Pendulum-v1", seed=0)
    with th.no_grad():
        ppo.policy.log_std.fill_(-1.5)
    assert action_log_std(ppo.policy, observations) == pytest.approx(-1.5)
    sac = SAC("MlpPolicy", "Pendulum-v1", seed=0)
    with th.no_grad():
        sac.policy.actor.log_std.bias.fill_(0.7)
        sac.policy.actor.log_std.weight.zero_()
    assert action_log_std(sac.policy, observations) == pytest.approx(0.7)
    assert np.isnan(action_log_std(TD3("MlpPolicy", "Pendulum-v1", seed=0).policy, observations))  # deterministic
    vracer = VRACER("MlpPolicy", "Pendulum-v1", seed=0)
    log_std = vracer.policy.forward_parts(th.zeros(8, 3))[1]
    assert action_log_std(vracer.policy, observations) == pytest.approx(log_std.mean().item())


def test_a_diagnostic_is_named_by_its_key_or_its_last_part(tmp_path):
    keys = ["algo", "seed", "steps", "train/entropy_loss", "train/value_loss", "rollout/value_loss"]
    rows = pd.DataFrame([["a", 0, 0, -1.0, 2.0, 3.0]], columns=keys)
    assert logged_key(rows, "entropy_loss") == "train/entropy_loss"
    assert logged_key(rows, "train/value_loss") == "train/value_loss"
    with pytest.raises(ValueError, match="ambiguous"):
        logged_key(rows, "value_loss")
    with pytest.raises(ValueError, match="'clip_fraction': none; the runs logged"):
        logged_key(rows, "clip_fraction")
    assert plot_diagnostics(tmp_path, "Env-v0", [], ["entropy_loss"]) is None  # no stored diagnostics: no figure


def test_a_diagnostic_that_only_some_runs_log_warns_and_keeps_the_invocation_going(tmp_path):
    """SAC's run ends first and logs no ``beta``: the figure warns and draws what is logged; SACReFER's run adds it."""

    def finish(algo, logged):
        rows = [
            dict(algo=algo, seed=100, steps=steps, **{k: v[n] for k, v in logged.items()}) for n, steps in enumerate((0, 10))
        ]
        write_rows(diagnostics_path(tmp_path, "Env-v0", algo, 100), rows)
        return [EvalPoint(algo, "Env-v0", 100, steps, 0.0, -1.0, 0.0) for steps in (0, 10)]

    points = finish("sac", {"train/ent_coef": [0.5, 0.2]})
    with pytest.warns(UserWarning, match="no panel for diagnostic 'beta': none; the runs logged .*train/ent_coef"):
        path = plot_diagnostics(tmp_path, "Env-v0", points, ["beta", "ent_coef"])
    assert path == tmp_path / "Env-v0_diagnostics.png" and path.is_file()  # ent_coef's panel
    path.unlink()
    with pytest.warns(UserWarning, match="'beta'"):
        assert plot_diagnostics(tmp_path, "Env-v0", points, ["beta"]) is None  # no panel at all: no figure
    assert not path.exists()
    points += finish("sac_refer", {"train/ent_coef": [0.5, 0.3], "train/beta": [1.0, 0.9]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plot_diagnostics(tmp_path, "Env-v0", points, ["beta", "ent_coef"]) == path and path.is_file()
