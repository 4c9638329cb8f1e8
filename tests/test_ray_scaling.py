"""The Ray scaling benchmark's parts: the simulated environment, the learner-ceiling collector, the summary."""

import argparse
import json
import os
import time

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from benchmarks.profiling import ray_scaling
from benchmarks.profiling.simulated_env import SimulatedEnv
from sb3_impact import IMPACT


def test_simulated_env_passes_gymnasium_checks_and_truncates():
    env = SimulatedEnv(step_sleep=0.0, obs_size=5, action_size=2, episode_steps=3)
    check_env(env, skip_render_check=True)
    observation, _ = env.reset(seed=0)
    assert observation.shape == (5,) and observation.dtype == np.float32
    ends = [env.step(np.zeros(2, np.float32))[2:4] for _ in range(3)]
    assert ends == [(False, False), (False, False), (False, True)]
    with pytest.raises(ValueError, match="step_sleep"):
        SimulatedEnv(step_sleep=-1.0)


def test_simulated_env_steps_take_at_least_their_stated_cost():
    env = SimulatedEnv(step_sleep=0.01, step_cpu=0.005)
    env.reset(seed=0)
    start = time.perf_counter()
    for _ in range(5):
        env.step(np.zeros(1, np.float32))
    assert time.perf_counter() - start >= 5 * 0.015  # a lower bound, whatever else runs


def test_replayed_segments_feed_the_learner_without_stepping_again():
    env = SimulatedEnv(step_sleep=0.0)
    model = IMPACT("MlpPolicy", env, collector=ray_scaling.ReplayedSegments, n_steps=16, seed=0, device="cpu")
    model.learn(16 * 12)
    assert model.trained_steps == model.sampled_steps == 16 * 12  # every delivered step is trained
    assert env._step == 16 * 4  # the learner's env stepped only for the 4 recorded segments


def test_summary_gives_efficiency_against_linear_and_learn_against_the_ceiling():
    args = argparse.Namespace(
        modes=["collect", "ceiling", "learn"],
        workers=[1, 2, 4],
        env="SimulatedEnv-v0",
        step_sleep=0.005,
        step_cpu=0.0,
        envs_per_worker=1,
    )
    results = {
        ("collect", 1): [{"steps_per_s": 100.0}, {"steps_per_s": 120.0}, {"steps_per_s": 110.0}],
        ("collect", 2): [{"steps_per_s": 200.0}],
        ("collect", 4): [{"steps_per_s": 330.0, "worker_cpu_ms_per_step": 0.6}],
        ("ceiling", 0): [{"steps_per_s": 300.0, "learner_cpu_ms_per_step": 0.4}],
        ("learn", 4): [{"steps_per_s": 270.0, "learner_cpu_ms_per_step": 0.5}],
    }
    rows = {(row["mode"], row["workers"]): row for row in ray_scaling.summarize(args, results)}
    assert rows[("collect", 1)]["steps_per_s"] == 110.0 and rows[("collect", 1)]["repeats"] == 3  # the median
    assert rows[("collect", 2)]["efficiency"] == round(200 / 220, 3)
    assert rows[("collect", 4)]["efficiency"] == 0.75
    assert rows[("collect", 4)]["env_limit_steps_per_s"] == 800.0
    assert rows[("learn", 4)]["of_ceiling"] == 0.9
    assert rows[("ceiling", 0)]["efficiency"] is None and rows[("ceiling", 0)]["env_limit_steps_per_s"] is None
    # The cores over the CPU a step costs the workers (collect, 4 workers) and the learner (ceiling).
    assert rows[("learn", 4)]["cpu_limit_steps_per_s"] == round(1e3 * (os.cpu_count() or 1) / (0.6 + 0.4), 1)
    assert rows[("learn", 4)]["learner_cpu_ms_per_step"] == 0.5 and rows[("collect", 2)]["cpu_limit_steps_per_s"] is None


def test_process_cpu_seconds_counts_this_process_work():
    before = ray_scaling.process_cpu_seconds(os.getpid())
    if np.isnan(before):
        pytest.skip("no /proc on this system")
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    assert ray_scaling.process_cpu_seconds(os.getpid()) - before >= 0.2  # the clock ticks of 0.3 s of work
    assert np.isnan(ray_scaling.process_cpu_seconds(2**22 + 12345))  # no such process


def test_ray_scaling_end_to_end_writes_its_files(tmp_path):
    pytest.importorskip("ray")
    ray_scaling.main(
        [
            "--workers",
            "1",
            "2",
            "--seconds",
            "1",
            "--learn-steps",
            "512",
            "--step-sleep",
            "0.001",
            "--n-steps",
            "16",
            "--out",
            str(tmp_path),
        ]
    )
    data = json.loads((tmp_path / "ray_scaling.json").read_text())
    modes = sorted((row["mode"], row["workers"]) for row in data["rows"])
    assert modes == [("ceiling", 0), ("collect", 1), ("collect", 2), ("learn", 1), ("learn", 2)]
    assert data["settings"]["num_cpus_per_worker"] == min(1.0, (os.cpu_count() or 1) / 2)  # CPUs over 2 workers
    collect = next(row for row in data["rows"] if row["mode"] == "collect")
    assert collect["bytes_per_segment"] > 16 * 16 * 4 and collect["driver_ms_per_segment"] > 0
    assert collect["worker_cpu_ms_per_step"] > 0 and data["learner_threads"] >= 1
    learn = next(row for row in data["rows"] if row["mode"] == "learn")
    assert learn["learner_cpu_ms_per_step"] > 0 and learn["cpu_limit_steps_per_s"] > 0
    assert (tmp_path / "ray_scaling.png").stat().st_size > 0 and (tmp_path / "ray_scaling.csv").exists()
