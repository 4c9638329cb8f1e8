"""
The peers (RLlib's APPO and IMPALA) through the benchmark runner: their runs go to RLlib's own environment and come
back as rows, records and diagnostics of the same tables; the protocol compares them with ours on the machine, the
settings and the packages both environments have; their settings carry our entries' adaptations over, and their env
is ours. RLlib itself runs only where its environment exists (benchmarks/recipes/peers.sh); elsewhere a stand-in
with the same command line (tests/peer_stand_in.py) plays it.
"""

import csv
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks import peers
from benchmarks import run as run_module
from benchmarks.config import ZooExperiment, load_zoo_hyperparams, make_training_env
from benchmarks.diagnostics import diagnostics_path
from benchmarks.output import machine_description, read_csv
from benchmarks.pool import RunSpec
from benchmarks.protocol import STACK_PACKAGES, ProtocolError, check_comparison, is_atari, read_run_records
from benchmarks.rllib_run import (
    MONITOR_RETURN,
    PEER_SETTINGS,
    RESULT_KEYS,
    STACKED_FRAMES,
    PointMetrics,
    evaluation_env,
    peer_env,
    peer_settings,
)
from benchmarks.sf_run import env_name as sf_env_name
from benchmarks.sf_run import make_env as sf_make_env
from benchmarks.sf_run import sf_settings
from benchmarks.variants import with_variant
from tests.test_tables import record

HAS_RLLIB = Path(peers.peer_python()).is_file()
needs_rllib = pytest.mark.skipif(not HAS_RLLIB, reason="needs RLlib's environment: benchmarks/recipes/peers.sh")
HAS_SF = bool(os.environ.get("SB3_IMPACT_SF_PYTHON")) and Path(peers.peer_python(algo="sf_appo")).is_file()
needs_sf = pytest.mark.skipif(not HAS_SF, reason="needs SB3_IMPACT_SF_PYTHON: the Python of Sample Factory's environment")


def stand_in_python(tmp_path: Path) -> str:
    """An executable that answers ``python -m benchmarks.rllib_run ...`` as the stand-in does."""
    path = tmp_path / "peer-python"
    path.write_text(f'#!/bin/sh\nshift 2\nexec "{sys.executable}" -m tests.peer_stand_in "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def peer_record(seed: int, **software) -> dict:
    machine = machine_description()
    machine["software"] = {**machine["software"], "gymnasium": "1.2.2", "stable_baselines3": None, **software}
    return record("rllib_appo", "E", seed, stack="rllib", machine=machine)


def test_a_peer_is_compared_on_the_machine_the_settings_and_the_packages_both_environments_have():
    ours = record("impact", "E", 100)
    check_comparison([ours, peer_record(100), peer_record(101)], "t")  # its own gymnasium, no SB3: compared
    with pytest.raises(ProtocolError, match="torch differs"):
        check_comparison([ours, peer_record(100, torch="0.0")], "t")
    with pytest.raises(ProtocolError, match=r'gymnasium differs: "1.2.2" \(rllib_appo seed 100\); "1.0.0"'):
        check_comparison([ours, peer_record(100), peer_record(101, gymnasium="1.0.0")], "t")
    with pytest.raises(ProtocolError, match="eval_episodes differs"):
        check_comparison([ours, {**peer_record(100), "eval_episodes": 3}], "t")
    with pytest.raises(ProtocolError, match="machine differs"):
        check_comparison([ours, {**peer_record(100), "machine": {**peer_record(100)["machine"], "name": "other"}}], "t")


def test_every_peer_setting_names_its_source_and_only_config_sections():
    """
    The default specs carry our entries over on our env; each earlier table's RLlib example stays as ``*_example``
    (benchmarks/peers.yml). Only RLlib's Atari examples clip rewards in the algorithm (SB3's AtariWrapper clips ours).
    """
    sections = {"environment", "env_runners", "learners", "training", "rl_module"}
    assert peers.PEER_ALGOS == ("rllib_appo", "rllib_impala", "rllib_appo_example", "rllib_impala_example")
    for algo, envs in PEER_SETTINGS.items():
        for env_id in envs:
            settings = peer_settings(algo, env_id)
            assert set(settings["config"]) <= sections, (algo, env_id)
            clips = settings["config"].get("environment", {}).get("clip_rewards", False)
            assert clips == (settings["env"] == "rllib" and is_atari(env_id)), (algo, env_id)
            if algo.endswith("_example"):
                assert "rllib/tuned_examples/" in settings["source"] and settings["env"] == "rllib", (algo, env_id)
                assert env_id in PEER_SETTINGS[algo.removesuffix("_example")], (algo, env_id)
            else:
                assert "sb3_impact/hyperparams/" in settings["source"] and settings["env"] == "sb3", (algo, env_id)
                assert settings.get("frame_stack", "connector") == "connector", (algo, env_id)  # VecFrameStack's


def learning_rate(params: dict) -> float:
    rate = params["learning_rate"]
    return float(rate.removeprefix("lin_")) if isinstance(rate, str) else rate


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "BreakoutNoFrameskip-v4"])
def test_rllib_appo_carries_impacts_entry_over(env_id):
    """Batch, minibatch, N, K, target refresh, discount, clipping, rates, no KL term, networks: IMPACT's entry's."""
    ours = load_zoo_hyperparams("impact", env_id)
    settings = peer_settings("rllib_appo", env_id)
    runners, training = settings["config"]["env_runners"], settings["config"]["training"]
    model = settings["config"]["rl_module"]["model_config"]
    batch = ours["n_envs"] * ours["n_steps"]
    assert runners["num_envs_per_env_runner"] * runners["rollout_fragment_length"] == batch
    assert training["train_batch_size_per_learner"] == batch
    # On Breakout each side runs the winner of its own settings in the search before the tables (docs/results.md,
    # search-peers-breakout): APPO's took no minibatches (one step per draw) and no entropy bonus, IMPACT's both.
    searched = {"minibatch_size": None, "entropy_coeff": 0.0} if env_id == "BreakoutNoFrameskip-v4" else {}
    # The one setting not carried over on HalfCheetah: an entropy bonus without IMPACT's advantage normalisation
    # widens RLlib's policy without bound (benchmarks/peers.yml), so there RLlib gets none.
    searched |= {"entropy_coeff": 0.0} if env_id == "HalfCheetah-v5" else {}
    assert training.get("minibatch_size") == searched.get("minibatch_size", ours.get("batch_size"))  # None: whole batch
    assert training["circular_buffer_num_batches"] == ours["circular_buffer_size"]
    assert training["circular_buffer_iterations_per_batch"] == ours["max_batch_reuse"]
    # RLlib refreshes the target after freq x N x K x batch trained samples; IMPACT after N x K draws of a batch.
    refresh = training["target_network_update_freq"] * batch * ours["circular_buffer_size"] * ours["max_batch_reuse"]
    assert refresh == ours["circular_buffer_size"] * ours["max_batch_reuse"] * batch
    assert training["clip_param"] == ours["clip_range"] and training["gamma"] == ours["gamma"]
    assert training["lr"] == learning_rate(ours) and training["grad_clip"] == ours["max_grad_norm"]
    assert training["grad_clip_by"] == "global_norm" and training["target_worker_clipping"] == ours["target_worker_clip"]
    assert training["vf_loss_coeff"] == ours["vf_coef"]
    assert training["entropy_coeff"] == searched.get("entropy_coeff", ours["ent_coef"])
    assert training["use_kl_loss"] is False and ours.get("kl_coef", 0.0) == 0.0
    assert settings.get("observation_filter", False) == settings.get("normalize_reward", False) == ours.get("normalize", False)
    if "policy_kwargs" in ours:  # separate 256x256 ReLU policy and value networks
        arch = ZooExperiment("impact", env_id, 0).hyperparams["policy_kwargs"]["net_arch"]
        assert model["vf_share_layers"] is False and model["fcnet_hiddens"] == arch["pi"] == arch["vf"]
        assert model["fcnet_activation"] == "relu"
    else:  # the CnnPolicy's NatureCNN, shared
        assert model["vf_share_layers"] is True and model["conv_filters"][0] == [32, 8, 4, "valid"]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "BreakoutNoFrameskip-v4"])
def test_rllib_impala_carries_impalas_entry_over(env_id):
    ours = load_zoo_hyperparams("impala", env_id)
    settings = peer_settings("rllib_impala", env_id)
    runners, training = settings["config"]["env_runners"], settings["config"]["training"]
    batch = ours["n_envs"] * ours["n_steps"]
    assert runners["num_envs_per_env_runner"] * runners["rollout_fragment_length"] == batch
    assert training["train_batch_size_per_learner"] == batch and training["gamma"] == ours["gamma"]
    # The declared Breakout search (benchmarks/peers.yml, docs/results.md) chose RLlib's Atari example's
    # lr 0.007 for RLlib on tuning seed 0; everything else stays our entry's.
    searched = {"lr": 0.007} if env_id == "BreakoutNoFrameskip-v4" else {}
    assert training["lr"] == searched.get("lr", learning_rate(ours)) and training["grad_clip"] == ours["max_grad_norm"]
    assert training["vf_loss_coeff"] == ours.get("vf_coef", 0.5) and training["entropy_coeff"] == ours["ent_coef"]
    assert not settings.get("observation_filter") and not ours.get("normalize", False)


def test_rllib_result_keys_are_kept_per_evaluation_point():
    """The latest lifetime counters and coefficients, the mean of the rest; NaN (no learner results) skipped."""
    assert f"env_runners/{MONITOR_RETURN}" in RESULT_KEYS  # the callback's metric is kept
    log = PointMetrics()
    nan = float("nan")
    log.add({"env_runners": {"episode_return_mean": 10.0}, "num_env_steps_sampled_lifetime": 100, "time_total_s": 1.0})
    log.add({
        "env_runners": {"episode_return_mean": 20.0},
        "num_env_steps_sampled_lifetime": np.int64(200),
        "learners": {"default_policy": {"curr_kl_coeff": 0.5, "num_target_updates": 3.0, "entropy": 1.0}},
        "time_total_s": 2.0,
    })  # fmt: skip
    log.add({"learners": {"default_policy": {"curr_kl_coeff": nan, "entropy": nan}}, "config": {"lr": 1.0}})
    row = log.row()
    assert row == {
        "env_runners/episode_return_mean": 15.0,
        "num_env_steps_sampled_lifetime": 200.0,
        "learners/default_policy/num_target_updates": 3.0,
        "learners/default_policy/curr_kl_coeff": 0.5,
        "learners/default_policy/entropy": 1.0,
        "time_total_s": 2.0,
    }
    assert set(row) <= set(RESULT_KEYS) and log.row() == {}  # the next point starts afresh
    log.add({"learners": {"default_policy": {"entropy": 3.0}}})
    assert log.row() == {"learners/default_policy/entropy": 3.0}


def read_rows(path: Path) -> list[dict]:
    with open(path) as file:
        return list(csv.DictReader(file))


def short_peer_run(
    tmp_path: Path, algo: str, env: str, max_seconds: int, eval_seconds: int, eval_episodes: int, steps: int = 0
) -> list:
    """
    One seed (100) of ``algo`` on ``env`` through ``python -m benchmarks run``; its points, every one finished. With
    ``steps``, the run ends at that many sampled steps, ``max_seconds`` only catching a run that does not get there:
    a peer's first iterations may sample nothing while its processes start (a cold start, a busy machine), so a
    test that needs steps asks for them rather than for seconds.
    """
    budget = ["--max-seconds", str(max_seconds), "--eval-seconds", str(eval_seconds), "--eval-episodes", str(eval_episodes)]
    budget += ["--steps", str(steps)] if steps else []
    run_module.main(["--algos", algo, "--env", env, "--seeds", "1", "--first-seed", "100", *budget, "--out", str(tmp_path)])
    points = read_csv(tmp_path / f"{env}.csv")
    assert all(point.status == "ok" for point in points), points[-1].error
    return points


def step_together(ours, theirs, steps: int, seed: int) -> None:
    """Step two vec envs with the same random actions; their observations, rewards and dones must agree."""
    rng = np.random.default_rng(seed)
    assert np.array_equal(ours.reset(), theirs.reset())
    for _ in range(steps):
        action = rng.integers(ours.action_space.n, size=1)
        a, b = ours.step(action), theirs.step(action)
        for x, y in zip(a[:3], b[:3], strict=True):
            assert np.array_equal(x, y)


@pytest.mark.parametrize("frame_stack", ["connector", "wrapper"])
def test_rllib_trains_and_is_evaluated_on_the_env_our_runs_get(frame_stack):
    """
    Breakout: the peer's evaluation env is ours (rl-zoo3's AtariWrapper as the atari yml entries name it, 4 frames
    stacked), and one env of its training is one of ours (the same 84x84 frames, scaled to [0, 1], the same rewards,
    a lost life ends the episode, FIRE on every reset): single frames where RLlib's connectors stack them, the 4
    frames VecFrameStack gives where the env stacks them (``frame_stack: wrapper``).
    """
    env_id, seed = "BreakoutNoFrameskip-v4", 7
    for algo in ("impact", "impala"):
        params = load_zoo_hyperparams(algo, env_id)
        assert params["env_wrapper"] == ["stable_baselines3.common.atari_wrappers.AtariWrapper"]  # peer_env's
        assert params["frame_stack"] == STACKED_FRAMES
    wrapper = load_zoo_hyperparams("impact", env_id)["env_wrapper"]
    settings = peer_settings(f"rllib_appo[frame_stack={frame_stack}]", env_id)
    ours = make_training_env(env_id, 1, seed, env_wrapper=wrapper, frame_stack=STACKED_FRAMES)
    step_together(ours, evaluation_env(env_id, settings, seed), 400, seed)
    training_stack = STACKED_FRAMES if frame_stack == "wrapper" else None
    ours = make_training_env(env_id, 1, seed, env_wrapper=wrapper, frame_stack=training_stack)
    theirs = peer_env(env_id, settings)
    frame, _ = theirs.reset(seed=seed)
    assert frame.shape == (84, 84, training_stack or 1)
    assert frame.dtype == np.float32 and np.array_equal(np.round(frame * 255).astype(np.uint8), ours.reset()[0])
    rng, lives_lost = np.random.default_rng(seed), 0
    for _ in range(400):
        action = int(rng.integers(4))
        frame, reward, terminated, truncated, _ = theirs.step(action)
        observation, rewards, dones, infos = ours.step(np.array([action]))
        assert reward == rewards[0] and (terminated or truncated) == dones[0]
        if dones[0]:  # a lost life ends the episode; both reset with FIRE, and the game goes on
            lives_lost += 1
            assert np.array_equal(np.round(frame * 255).astype(np.uint8), infos[0]["terminal_observation"])
            frame, _ = theirs.reset()
        assert np.array_equal(np.round(frame * 255).astype(np.uint8), observation[0])
    assert lives_lost >= 2


def test_sample_factory_trains_and_is_evaluated_on_the_env_our_runs_get():
    """
    Breakout: SF's env (benchmarks.sf_run.make_env, the same for its training and its evaluation) gives our frames
    as our CnnPolicy gets them (84x84, 4 stacked channel first, zeros after each reset), our rewards and our episode
    ends (a lost life), and the Monitor's whole-game score; its settings stack the frames our entries stack.
    """
    env_id, seed = "BreakoutNoFrameskip-v4", 7
    config = sf_settings("sf_appo", env_id)["config"]
    assert config["env_framestack"] == STACKED_FRAMES and not config["summaries_use_frameskip"]
    wrapper = load_zoo_hyperparams("impact", env_id)["env_wrapper"]
    ours = make_training_env(env_id, 1, seed, env_wrapper=wrapper, frame_stack=STACKED_FRAMES)
    theirs = sf_make_env(sf_env_name(env_id), SimpleNamespace(env_framestack=config["env_framestack"]))
    assert theirs.observation_space.shape == (STACKED_FRAMES, 84, 84)

    def channel_first(frames):
        return frames.transpose(2, 0, 1)

    frames, _ = theirs.reset(seed=seed)
    assert np.array_equal(frames, channel_first(ours.reset()[0]))
    rng, lives_lost, games = np.random.default_rng(seed), 0, []
    for _ in range(1500):
        action = int(rng.integers(4))
        frames, reward, terminated, truncated, info = theirs.step(action)
        observation, rewards, dones, infos = ours.step(np.array([action]))
        assert reward == rewards[0] and (terminated or truncated) == dones[0]
        if dones[0]:
            lives_lost += 1
            assert np.array_equal(frames, channel_first(infos[0]["terminal_observation"]))
            assert ("episode" in info) == ("episode" in infos[0])
            if "episode" in info:
                games.append(info["episode"]["r"])
                assert info["episode"]["r"] == infos[0]["episode"]["r"]
            frames, _ = theirs.reset()
        assert np.array_equal(frames, channel_first(observation[0]))
    assert lives_lost >= 5 and games


@pytest.mark.timeout(300)
def test_peer_runs_come_back_as_rows_and_records_of_the_same_table(tmp_path):
    """Our IMPALA and the peer in one invocation: one table, the peer's record naming its stack and software."""
    python = stand_in_python(tmp_path)
    common = ["--env", "CartPole-v1", "--seeds", "1", "--first-seed", "100", "--steps", "2000", "--eval-freq", "1000"]
    run_module.main(["--algos", "impala", "rllib_impala", *common, "--eval-episodes", "2", "--peer-python", python,
                     "--out", str(tmp_path / "out")])  # fmt: skip
    points = read_csv(tmp_path / "out" / "CartPole-v1.csv")
    assert {point.algo for point in points} == {"impala", "rllib_impala"}
    assert [point.eval_mean for point in points if point.algo == "rllib_impala"] == [0.0, 10.0, 20.0]
    # RLlib's metrics at each point: one diagnostics row per point, as ours, and the same --plot-diagnostics.
    rows = read_rows(diagnostics_path(tmp_path / "out", "CartPole-v1", "rllib_impala", 100))
    assert [int(row["steps"]) for row in rows] == [point.steps for point in points if point.algo == "rllib_impala"]
    assert [row["env_runners/episode_return_mean"] for row in rows] == ["", "9.0", "18.0"]
    assert [row["learners/default_policy/num_target_updates"] for row in rows] == ["", "1", "2"]
    run_module.main(["--algos", "impala", "rllib_impala", *common, "--eval-episodes", "2", "--summarize",
                     "--peer-python", python, "--plot-diagnostics", "episode_return_mean", "entropy_loss",
                     "--out", str(tmp_path / "out")])  # fmt: skip
    assert (tmp_path / "out" / "CartPole-v1_diagnostics.png").stat().st_size > 10_000
    records = read_run_records(tmp_path / "out", "CartPole-v1")
    peer = records[("rllib_impala", 100)]
    assert peer["stack"] == "rllib" and "impala.yml" in peer["hyperparams"] and "stack" not in records[("impala", 100)]
    assert peer["machine"]["software"]["gymnasium"] == "1.2.2" and peer["machine"]["software"]["stable_baselines3"] is None
    summary = json.loads((tmp_path / "out" / "CartPole-v1.json").read_text())
    assert set(summary["algos"]) == {"impala", "rllib_impala"} and not summary["algos"]["rllib_impala"]["failed"]
    assert summary["machine"]["software"]["gymnasium"] != "1.2.2"  # the table's machine is ours, not the peer's
    # The next sitting appends a seed to the same table (the same machine and software on both sides).
    run_module.main(["--algos", "impala", "rllib_impala", *common, "--first-seed", "101", "--eval-episodes", "2",
                     "--peer-python", python, "--append", "--out", str(tmp_path / "out")])  # fmt: skip
    summary = json.loads((tmp_path / "out" / "CartPole-v1.json").read_text())
    assert summary["seeds"] == [100, 101] and summary["algos"]["rllib_impala"]["seeds"] == [100, 101]


def test_a_peer_variant_changes_its_named_settings_and_says_so():
    """
    ``rllib_appo[entropy_coeff=0.01,training.lr=6e-4]``, as our algorithms' variants: the named settings change (by
    the last part of their path where it names one, else by the path), nothing else does, the entry itself stays,
    and the source records the change; a key that names no setting or several is refused, naming the valid ones.
    """
    env_id = "BreakoutNoFrameskip-v4"
    entry = peer_settings("rllib_appo", env_id)
    changed = peer_settings("rllib_appo[entropy_coeff=0.01,training.lr=6e-4,frame_stack=wrapper]", env_id)
    assert changed["config"]["training"] == {**entry["config"]["training"], "entropy_coeff": 0.01, "lr": 6e-4}
    assert changed["frame_stack"] == "wrapper" and entry["frame_stack"] == "connector"
    assert entry["config"]["training"]["entropy_coeff"] == 0.0  # the yml's entry is not changed
    assert changed["source"] == entry["source"] + "; variant: entropy_coeff=0.01, training.lr=0.0006, frame_stack=wrapper"
    assert {key: value for key, value in changed.items() if key not in ("config", "source", "frame_stack")} == {
        key: value for key, value in entry.items() if key not in ("config", "source", "frame_stack")
    }
    nested = peer_settings("rllib_appo[rl_module.model_config.head_fcnet_hiddens=[256]]", env_id)
    assert nested["config"]["rl_module"]["model_config"]["head_fcnet_hiddens"] == [256]
    # A dotted path in an existing section adds a setting the entry leaves at RLlib's default; a bare name does not.
    assert "minibatch_size" not in entry["config"]["training"]
    added = peer_settings("rllib_appo[training.minibatch_size=128]", env_id)
    assert added["config"]["training"] == {**entry["config"]["training"], "minibatch_size": 128}
    for misspelt in ("minibatch_size", "trainin.minibatch_size"):
        with pytest.raises(ValueError, match=f"'{misspelt}' names no setting"):
            peer_settings(f"rllib_appo[{misspelt}=128]", env_id)
    sf = sf_settings("sf_appo[learning_rate=1e-3]", "HalfCheetah-v4")
    assert sf["config"]["learning_rate"] == 1e-3 and "variant: learning_rate=0.001" in sf["source"]
    with pytest.raises(
        ValueError, match=r"'entropy_coef' names no setting of the entry; write one of: .*training\.entropy_coeff"
    ):
        peer_settings("rllib_appo[entropy_coef=0.0]", env_id)
    with pytest.raises(ValueError, match="'num_envs_per_env_runner' names several settings"):
        with_variant({"source": "s", "config": {"a": {"num_envs_per_env_runner": 1}, "b": {"num_envs_per_env_runner": 2}}},
                     {"num_envs_per_env_runner": 4}, "x[num_envs_per_env_runner=4]")  # fmt: skip
    assert peers.is_peer("rllib_appo[lr=1e-3]") and peers.peer_stack("sf_appo[learning_rate=1e-3]") == peers.SF_STACK


def test_a_peer_variant_runs_beside_its_entry_in_one_table(tmp_path):
    """The variant's runs go to the peer's runner under the variant's name; its record carries the changed source."""
    python = stand_in_python(tmp_path)
    algos = ["rllib_impala", "rllib_impala[entropy_coeff=0.0]"]
    run_module.main(["--algos", *algos, "--env", "CartPole-v1", "--seeds", "1", "--first-seed", "100",
                     "--steps", "1000", "--eval-freq", "1000", "--eval-episodes", "2", "--peer-python", python,
                     "--out", str(tmp_path)])  # fmt: skip
    assert {point.algo for point in read_csv(tmp_path / "CartPole-v1.csv")} == set(algos)
    records = read_run_records(tmp_path, "CartPole-v1")
    assert records[(algos[1], 100)]["hyperparams"] == records[(algos[0], 100)]["hyperparams"] + "; variant: entropy_coeff=0.0"


def test_a_failing_peer_is_recorded_with_its_output(tmp_path, monkeypatch):
    monkeypatch.setenv("PEER_STAND_IN", "fail")
    python = stand_in_python(tmp_path)
    run_module.main(["--algos", "rllib_impala", "--env", "CartPole-v1", "--seeds", "1", "--first-seed", "100",
                     "--steps", "1000", "--peer-python", python, "--out", str(tmp_path)])  # fmt: skip
    (point,) = read_csv(tmp_path / "CartPole-v1.csv")
    assert point.status == "failed" and "exited with code 3" in point.error and "boom in the peer" in point.error


def test_a_peer_without_its_environment_or_settings_is_refused_before_any_run(tmp_path):
    with pytest.raises(SystemExit, match=r"peers\.sh"):
        run_module.main(["--algos", "rllib_appo", "--env", "HalfCheetah-v5", "--peer-python", str(tmp_path / "none"),
                         "--out", str(tmp_path)])  # fmt: skip
    with pytest.raises(SystemExit, match="no RLlib settings for rllib_appo on Pendulum-v1; there are: rllib_appo on"):
        run_module.main(["--algos", "rllib_appo", "--env", "Pendulum-v1", "--out", str(tmp_path)])
    assert not list(tmp_path.iterdir())


def test_ctrl_c_stops_a_peer_and_everything_it_started(tmp_path, monkeypatch, request):
    """Ctrl-C while the peer runs: its process group (Ray's processes included) is stopped, the interrupt goes on."""
    pids_file = tmp_path / "pids"
    monkeypatch.setenv("PEER_STAND_IN", "hang")
    monkeypatch.setenv("PEER_STAND_IN_PIDS", str(pids_file))
    monkeypatch.setattr(peers, "STOP_GRACE_SECONDS", 2.0)
    spec = RunSpec("rllib_impala", "CartPole-v1", 100, 1000, peer_python=stand_in_python(tmp_path))
    # A suite started in the background (``cmd &``) inherits SIGINT ignored; Ctrl-C in a terminal raises.
    previous_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous_handler))

    def interrupt_once_started() -> None:  # Ctrl-C once the stand-in and its child run
        deadline = time.monotonic() + 120
        while not pids_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_started, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        peers.run_peer(spec, spec.peer_python, 1)
    pids = list(map(int, pids_file.read_text().split()))
    assert len(pids) == 2
    for pid in pids:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and process_alive(pid):
            time.sleep(0.1)
        assert not process_alive(pid), pid


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split()[2] == "Z")  # a zombie has exited


@needs_rllib
@pytest.mark.timeout(300)
def test_rllib_impala_runs_under_the_protocol(tmp_path):
    """
    The real peer, where its environment exists: a short IMPALA run on CartPole-v1 gives its grid of points, and
    RLlib's metrics at each of them.
    """
    points = short_peer_run(tmp_path, "rllib_impala", "CartPole-v1", 240, eval_seconds=2, eval_episodes=2, steps=4000)
    assert points[0].steps == 0 and points[-1].steps >= 4000 and points[-1].wall_seconds < 240 and len(points) >= 3
    assert all(point.wall_seconds >= 2 * index for index, point in enumerate(points[:-1]))  # the grid: every 2 s
    rows = read_rows(diagnostics_path(tmp_path, "CartPole-v1", "rllib_impala", 100))
    assert [int(row["steps"]) for row in rows] == [point.steps for point in points]
    last = rows[-1]
    assert float(last["num_env_steps_sampled_lifetime"]) == points[-1].steps > 0
    assert float(last["learners/__all_modules__/num_env_steps_trained_lifetime"]) > 0
    assert float(last["env_runners/monitor_episode_return_mean"]) == float(last["env_runners/episode_return_mean"])
    assert 0 < float(last["time_total_s"]) <= points[-1].wall_seconds + 1


@needs_rllib
@pytest.mark.timeout(300)
def test_rllib_appo_refreshes_its_target_and_is_evaluated_through_its_observation_filter(tmp_path):
    """APPO's HalfCheetah-v5 settings run: target refreshes counted, the MeanStdFilter's statistics in evaluation."""
    points = short_peer_run(tmp_path, "rllib_appo", "HalfCheetah-v5", 240, eval_seconds=240, eval_episodes=1, steps=30000)
    assert points[-1].steps >= 30000 and points[-1].wall_seconds < 240  # 58 batches of 512 sampled
    last = read_rows(diagnostics_path(tmp_path, "HalfCheetah-v5", "rllib_appo", 100))[-1]
    assert int(last["counted/num_target_updates"]) >= 1 and int(last["counted/dropped_draws"]) >= 0
    assert int(last["counted/draws"]) > int(last["counted/batches"]) > 0  # a batch is drawn up to K = 10 times
    assert float(last["learners/__all_modules__/num_env_steps_trained_lifetime"]) > 0
    assert np.isfinite(points[-1].eval_mean)


@needs_rllib
@pytest.mark.timeout(400)
@pytest.mark.parametrize("algo, env_id", [("rllib_impala", "CartPole-v1"), ("rllib_appo", "HalfCheetah-v5")])
def test_the_harness_and_rllib_evaluate_the_same_weights_alike(algo, env_id):
    """
    The cross-check of docs/guide/benchmarks.md ("Peers"), small: the two evaluations' means agree within noise,
    on HalfCheetah-v5 through the observation filter (RLlib's evaluation runner given the training runner's, frozen)
    and on the raw rewards both sides report.
    """
    command = [peers.peer_python(), "-m", "benchmarks.rllib_run", "--cross-check", algo, env_id, "20", "20"]
    completed = subprocess.run(command, cwd=peers.REPO_ROOT, capture_output=True, text=True, timeout=380)
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["sampled_steps"] > 0
    assert result["harness"]["episodes"] == result["rllib_sample"]["episodes"] == result["rllib_evaluate"]["episodes"] == 20
    assert result["agree"], result


def test_sf_run_reports_the_software_list_of_our_runs():
    """benchmarks.sf_run cannot import benchmarks.output (pandas) in SF's environment: its copy of the list agrees."""
    from benchmarks import output, sf_run

    assert sf_run.SOFTWARE == output.SOFTWARE and sf_run.EVAL_SEED_OFFSET == 10_000
    assert "sample_factory" in sf_run.STACK_SOFTWARE and "sample_factory" in STACK_PACKAGES["sf"]


def test_sf_checkpoints_are_paired_with_the_requests_for_them():
    """One each; where two requests got one file (the same SGD step), the first checkpoint that reaches each's steps."""
    from benchmarks.sf_run import pair_checkpoints

    files = [Path(f"checkpoint_{step:09d}_{env_steps}.pth") for step, env_steps in [(8, 4096), (40, 20480), (72, 36864)]]
    requests = [{"sf/env_steps": value} for value in (0.0, 16384.0, 16384.0, 32768.0)]
    assert pair_checkpoints(files, requests[:3]) == files
    assert pair_checkpoints(files, requests) == [files[0], files[1], files[1], files[2]]
    assert [request.get("sf/shared_checkpoint") for request in requests] == [None, None, 1, None]
    with pytest.raises(RuntimeError, match="2 checkpoints asked for, 3 saved"):
        pair_checkpoints(files, requests[:2])


@pytest.mark.parametrize("env_id", ["HalfCheetah-v4", "BreakoutNoFrameskip-v4"])
def test_sf_learning_rate_decays_over_the_examples_span_unless_the_budget_is_smaller(env_id):
    """A wall-clock run's 1e8-step budget does not stretch SF's linear decay: it spans the example's 10M steps."""
    from benchmarks.sf_run import sf_settings, train_for_env_steps

    settings = sf_settings("sf_appo", env_id)
    assert settings["config"]["lr_schedule"] == "linear_decay"
    assert train_for_env_steps({"steps": 100_000_000}, settings) == 10_000_000
    assert train_for_env_steps({"steps": 200_000}, settings) == 200_000
    assert train_for_env_steps({"steps": None}, {"config": {}}) == 10**15


def test_an_sf_algo_goes_to_sample_factorys_runner_with_its_python(tmp_path, monkeypatch):
    """
    sf_appo runs ``benchmarks.sf_run`` with $SB3_IMPACT_SF_PYTHON (RLlib's ``--peer-python`` is not its Python); its
    points, diagnostics and record come back as RLlib's do, the record naming the ``sf`` stack.
    """
    called = tmp_path / "called"
    python = tmp_path / "sf-python"
    python.write_text(f'#!/bin/sh\necho "$0 $2" >> "{called}"\nshift 2\nexec "{sys.executable}" -m tests.peer_stand_in "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("SB3_IMPACT_SF_PYTHON", str(python))
    assert peers.peer_python(str(tmp_path / "rllib"), "sf_appo") == str(python)
    assert peers.peer_python(str(tmp_path / "rllib"), "rllib_appo") == str(tmp_path / "rllib")
    run_module.main(["--algos", "sf_appo", "--env", "HalfCheetah-v4", "--seeds", "1", "--first-seed", "100",
                     "--steps", "2000", "--eval-freq", "1000", "--eval-episodes", "2",
                     "--peer-python", str(tmp_path / "rllib"), "--out", str(tmp_path / "out")])  # fmt: skip
    assert set(called.read_text().splitlines()) == {f"{python} benchmarks.sf_run"}  # --software, then the run
    points = read_csv(tmp_path / "out" / "HalfCheetah-v4.csv")
    assert [point.eval_mean for point in points] == [0.0, 10.0, 20.0]
    assert {point.machine for point in points} == {machine_description()["name"]}
    rows = read_rows(diagnostics_path(tmp_path / "out", "HalfCheetah-v4", "sf_appo", 100))
    assert [int(row["steps"]) for row in rows] == [point.steps for point in points]
    record = read_run_records(tmp_path / "out", "HalfCheetah-v4")[("sf_appo", 100)]
    assert record["stack"] == "sf" and "sf_examples/mujoco" in record["hyperparams"]


def test_an_sf_algo_without_its_environment_or_settings_is_refused_before_any_run(tmp_path, monkeypatch):
    monkeypatch.setenv("SB3_IMPACT_SF_PYTHON", str(tmp_path / "none"))
    with pytest.raises(SystemExit, match=r"Sample Factory's own environment.*SB3_IMPACT_SF_PYTHON"):
        run_module.main(["--algos", "sf_appo", "--env", "HalfCheetah-v4", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="no Sample Factory settings for sf_appo on CartPole-v1; there are: sf_appo on"):
        run_module.main(["--algos", "sf_appo", "--env", "CartPole-v1", "--out", str(tmp_path)])
    assert not list(tmp_path.iterdir())


def test_sf_peers_are_compared_among_themselves_on_the_packages_sf_pins():
    machine = machine_description()
    machine["software"] = {**machine["software"], "gymnasium": "0.29.1", "numpy": "1.26.4", "sample_factory": "2.1.1"}
    ours, sf = record("impact", "E", 100), record("sf_appo", "E", 100, stack="sf", machine=machine)
    check_comparison([ours, sf], "t")  # its own gymnasium and numpy: compared
    other = {**machine, "software": {**machine["software"], "sample_factory": "2.0.0"}}
    with pytest.raises(ProtocolError, match="sample_factory differs"):
        check_comparison([ours, sf, record("sf_appo", "E", 101, stack="sf", machine=other)], "t")


@needs_sf
@pytest.mark.timeout(400)
def test_sf_appo_runs_under_the_protocol(tmp_path):
    """The real Sample Factory, where $SB3_IMPACT_SF_PYTHON names its environment: 20 s of APPO on HalfCheetah-v4."""
    points = short_peer_run(tmp_path, "sf_appo", "HalfCheetah-v4", max_seconds=20, eval_seconds=10, eval_episodes=1)
    assert points[0].steps == 0 and len(points) >= 3 and points[-1].wall_seconds >= 20
    assert all(np.isfinite(point.eval_mean) for point in points)
    assert [point.steps for point in points] == sorted(point.steps for point in points) and points[-1].steps > 0
    last = read_rows(diagnostics_path(tmp_path, "HalfCheetah-v4", "sf_appo", 100))[-1]
    assert float(last["sf/train/loss"]) == float(last["sf/train/loss"]) and float(last["sf/env_steps"]) > 0
    record = read_run_records(tmp_path, "HalfCheetah-v4")[("sf_appo", 100)]
    assert record["stack"] == "sf" and record["machine"]["software"]["sample_factory"] == "2.1.1"
