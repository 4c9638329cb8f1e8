"""The benchmark harness: threshold and ratio computation on synthetic curves, output files, a tiny run."""

import contextlib
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch as th
import yaml
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import SubprocVecEnv

from benchmarks import run as run_module
from benchmarks.config import load_zoo_hyperparams, make_training_env, validate_names, zoo_yml_path
from benchmarks.output import EvalPoint, read_csv, write_csv, write_json
from benchmarks.protocol import RUN_DATA, git_commit, is_atari, record_path
from benchmarks.summary import held_crossing, threshold_summary
from tests.commands import run_command

REPO_ROOT = Path(__file__).resolve().parent.parent


def curve(algo, seed, steps_and_returns, seconds_per_step, machine="m1"):
    return [EvalPoint(algo, "Env-v0", seed, s, s * seconds_per_step, r, 0.0, machine=machine) for s, r in steps_and_returns]


def test_threshold_and_paired_ratios_on_synthetic_curves():
    points = []
    # Baseline reaches 100 at 2000 steps (seed 0) and 4000 steps (seed 1), at 1 ms per step.
    points += curve("ppo", 0, [(0, 0), (1000, 50), (2000, 100), (3000, 100)], 1e-3)
    points += curve("ppo", 1, [(0, 0), (2000, 50), (4000, 120)], 1e-3)
    # Candidate: 3000 steps (seed 0) at 0.5 ms per step, never (seed 1).
    points += curve("impact", 0, [(0, 0), (3000, 100)], 5e-4)
    points += curve("impact", 1, [(0, 0), (3000, 99)], 5e-4)
    summary = threshold_summary(points, threshold=100, baseline="ppo", eval_episodes=10)
    ppo, impact = summary["algos"]["ppo"], summary["algos"]["impact"]
    assert ppo["steps_to_threshold"] == [2000, 4000]
    assert impact["steps_to_threshold"] == [3000, None]
    assert impact["steps_ratio_vs_baseline"].items() >= {"median": 1.5, "min": 1.5, "max": 1.5, "n": 1}.items()
    assert impact["wall_ratio_vs_baseline"]["median"] == pytest.approx(1.5 / 2.0 * 1.0)
    assert impact["steps"]["n"] == 1 and ppo["steps"]["n"] == 2  # the seeds that held the threshold
    assert ppo["steps"].items() >= {"median": 3000.0, "min": 2000.0, "max": 4000.0, "n": 2, "iqm": 3000.0}.items()
    assert ppo["final_eval"].items() >= {"median": 110.0, "min": 100.0, "max": 120.0, "n": 2, "iqm": 110.0}.items()
    assert impact["final_return_ratio_vs_baseline"]["median"] == pytest.approx((100 / 100 + 99 / 120) / 2)
    assert "steps_ratio_vs_baseline" not in ppo


def test_runs_from_different_machines_are_never_paired():
    points = curve("ppo", 0, [(0, 0), (1000, 100)], 1e-3, machine="laptop")
    points += curve("impact", 0, [(0, 0), (500, 100)], 1e-3, machine="gpu-box")
    summary = threshold_summary(points, threshold=100, baseline="ppo", eval_episodes=10)
    assert summary["machines"] == ["gpu-box", "laptop"]
    assert summary["algos"]["impact"]["steps_ratio_vs_baseline"]["n"] == 0
    assert summary["algos"]["impact"]["final_return_ratio_vs_baseline"]["n"] == 0
    points += curve("ppo", 0, [(0, 0), (2000, 100)], 1e-3, machine="gpu-box")
    summary = threshold_summary(points, threshold=100, baseline="ppo", eval_episodes=10)
    ratio = summary["algos"]["impact"]["steps_ratio_vs_baseline"]
    assert ratio.items() >= {"median": 0.25, "min": 0.25, "max": 0.25, "n": 1, "iqm": 0.25}.items()


def test_without_a_threshold_only_returns_are_summarized():
    points = curve("ppo", 0, [(0, 0), (1000, 10)], 1e-3) + curve("impact", 0, [(0, 0), (1000, 20)], 1e-3)
    summary = threshold_summary(points, threshold=None, baseline="ppo", eval_episodes=10)
    assert "steps_to_threshold" not in summary["algos"]["ppo"]
    assert summary["algos"]["impact"]["final_return_ratio_vs_baseline"]["median"] == 2.0


def test_json_writer_round_trips(tmp_path):
    summary = threshold_summary(curve("ppo", 3, [(0, 0), (10, 5)], 0.1), threshold=5, baseline="ppo", eval_episodes=10)
    write_json(summary, tmp_path / "deep" / "s.json")
    assert json.loads((tmp_path / "deep" / "s.json").read_text()) == json.loads(json.dumps(summary))


def test_failed_runs_never_reach_and_csv_round_trips(tmp_path):
    failed = EvalPoint("impact", "Env-v0", 0, 0, 0.0, math.nan, math.nan, status="failed", error="boom")
    assert held_crossing([failed], -1e9, eval_episodes=10) is None
    points = [*curve("ppo", 0, [(0, 1.0), (10, 2.5)], 0.1), failed]
    write_csv(points, tmp_path / "x.csv")
    back = read_csv(tmp_path / "x.csv")
    assert back[:2] == points[:2] and back[2].status == "failed" and back[2].error == "boom"


def test_unknown_algo_and_env_are_rejected_with_the_valid_names():
    with pytest.raises(ValueError, match="valid names"):
        load_zoo_hyperparams("nope", "CartPole-v1")
    with pytest.raises(ValueError, match="no hyperparameters"):
        load_zoo_hyperparams("impact", "NoSuchEnv-v0")
    with pytest.raises(ValueError, match=r"valid names: .*impact.*ppo"):
        validate_names(["ppo", "nope"], ["CartPole-v1"])
    with pytest.raises(ValueError, match="unknown env 'NoSuchEnv-v0'"):
        validate_names(["ppo"], ["NoSuchEnv-v0"])
    # The atari entry serves every NoFrameskip id, with rl-zoo3's wrappers.
    params = load_zoo_hyperparams("ppo", "BreakoutNoFrameskip-v4")
    assert params["frame_stack"] == 4 and "AtariWrapper" in str(params["env_wrapper"])


def test_unknown_names_stop_the_harness_before_any_run(tmp_path):
    command = [sys.executable, "-m", "benchmarks.run", "--algos", "ppo", "nope", "--out", str(tmp_path)]
    result = run_command(command, cwd=REPO_ROOT, timeout=120)
    assert result.returncode != 0 and "valid names" in result.stderr and not list(tmp_path.iterdir())


@pytest.mark.timeout(480)  # its commands' own limits: 300 + 120 s
def test_tiny_end_to_end_run_writes_csv_json_and_png(tmp_path):
    command = [sys.executable, "-m", "benchmarks.run", "--algos", "impact", "ppo", "--env", "CartPole-v1", "--seeds", "1"]
    command += ["--steps", "2048", "--eval-freq", "1024", "--eval-episodes", "2", "--out", str(tmp_path)]
    result = run_command(command, cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    points = read_csv(tmp_path / "CartPole-v1.csv")
    assert {p.algo for p in points} == {"ppo", "impact"} and all(p.status == "ok" for p in points)
    summary = json.loads((tmp_path / "CartPole-v1.json").read_text())
    assert summary["baseline"] == "ppo" and set(summary["algos"]) == {"ppo", "impact"}
    assert summary["command"].startswith("python -m benchmarks run --algos ppo impact --env CartPole-v1 --seeds 1")
    assert summary["machine"]["name"] == points[0].machine and points[0].device == "cpu"
    # Each evaluation is also a line of the log, so that a long run's progress can be followed before it finishes.
    for point in points:
        assert f"{point.algo} CartPole-v1 seed 0: {point.steps} steps, " in result.stderr
    assert "s of training, return " in result.stderr and "(std " in result.stderr and ", 2 episodes)" in result.stderr
    software = summary["machine"]["software"]
    assert software["torch"] == th.__version__ and software["python"] == platform.python_version()
    assert (tmp_path / "CartPole-v1.png").stat().st_size > 10_000
    (tmp_path / "CartPole-v1.png").unlink()
    plot = [sys.executable, "-m", "benchmarks.plot", str(tmp_path / "CartPole-v1.csv")]
    result = run_command(plot, cwd=REPO_ROOT, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "CartPole-v1.png").stat().st_size > 10_000


def test_a_failing_run_is_recorded_and_the_others_continue(tmp_path, monkeypatch):
    from benchmarks import config, run

    original = config.ALGOS["impact"]

    class Exploding(original):  # type: ignore[misc, valid-type]
        def learn(self, *args, **kwargs):
            raise RuntimeError("boom")

    monkeypatch.setitem(config.ALGOS, "impact", Exploding)
    arguments = ["--algos", "impact", "ppo", "--env", "CartPole-v1", "--seeds", "1", "--steps", "512", "--eval-freq", "512"]
    run.main([*arguments, "--eval-episodes", "1", "--out", str(tmp_path)])
    points = read_csv(tmp_path / "CartPole-v1.csv")
    assert [p.status for p in points if p.algo == "impact"] == ["failed"]
    assert "boom" in points[0].error and any(p.algo == "ppo" and p.status == "ok" and p.steps > 0 for p in points)
    summary = json.loads((tmp_path / "CartPole-v1.json").read_text())
    assert "boom" in summary["algos"]["impact"]["failed"][0]


def test_a_step_budget_compares_at_the_budget():
    # The baseline's rollouts overshoot the 2000-step budget (a last evaluation at 2048); seed 1 of the candidate
    # stopped short of it (a crashed run has no return at the budget, and no ratio).
    points = curve("ppo", 0, [(0, 0), (1000, 10), (2000, 20), (2048, 40)], 1e-3)
    points += curve("ppo", 1, [(0, 0), (2000, 50), (2048, 5)], 1e-3)
    points += curve("ptr_ppo", 0, [(0, 0), (1000, 30), (2000, 60)], 1e-3)
    points += curve("ptr_ppo", 1, [(0, 0), (1000, 70)], 1e-3)
    summary = threshold_summary(points, threshold=None, baseline="ppo", step_budget=2000, eval_episodes=10)
    ppo, ptr = summary["algos"]["ppo"], summary["algos"]["ptr_ppo"]
    assert ppo["budget_eval_mean"] == [20, 50] and ppo["final_eval_mean"] == [40, 5]
    assert ptr["budget_eval_mean"] == [60, None] and ptr["budget_eval"]["n"] == 1
    assert ptr["budget_return_ratio_vs_baseline"].items() >= {"median": 3.0, "n": 1}.items()  # seed 0 only
    assert ptr["final_return_ratio_vs_baseline"].items() >= {"min": 1.5, "max": 14.0, "n": 2}.items()
    assert (
        "budget_eval_mean" not in threshold_summary(points, threshold=None, baseline="ppo", eval_episodes=10)["algos"]["ppo"]
    )


def test_interquartile_mean_and_its_rliable_interval_against_a_direct_computation():
    from benchmarks.statistics import iqm_with_interval
    from benchmarks.statistics import pooled_iqm as interquartile_mean
    from benchmarks.summary import spread

    values = [5.0, 1.0, 100.0, 3.0, 2.0, 4.0, -50.0, 6.0]
    middle = sorted(values)[2:6]  # 8 runs: the 2 lowest and 2 highest are cut
    assert interquartile_mean(np.array(values)) == pytest.approx(np.mean(middle))
    estimate = iqm_with_interval(values)
    assert estimate["iqm"] == pytest.approx(np.mean(middle))
    low, high = estimate["low"], estimate["high"]
    assert min(values) <= low <= estimate["iqm"] <= high <= max(values)
    assert iqm_with_interval(values) == estimate  # seeded
    # One task: the stratified bootstrap resamples the runs with replacement; the 2.5% and 97.5% percentiles by hand.
    rng = np.random.default_rng(1)
    resampled = [interquartile_mean(rng.choice(values, size=len(values))) for _ in range(4000)]
    assert low == pytest.approx(np.percentile(resampled, 2.5), abs=1.0)
    assert high == pytest.approx(np.percentile(resampled, 97.5), abs=1.0)
    assert spread([7.0, None, math.inf], interval=True)["iqm_ci95"] == [7.0, 7.0] and spread([None])["iqm"] is None


def test_probability_of_improvement_is_rliables_with_its_interval(monkeypatch):
    """The vectorised statistic gives rliable's Mann-Whitney figure, point and bootstrap interval, ties included."""
    from rliable import metrics

    from benchmarks import statistics

    rng = np.random.default_rng(0)
    for runs_x, runs_y, tasks in [(3, 3, 1), (5, 3, 4), (2, 7, 2)]:
        x = rng.integers(0, 5, size=(runs_x, tasks)).astype(float)  # small integers: many ties
        y = rng.integers(0, 5, size=(runs_y, tasks)).astype(float)
        assert statistics.pairwise_improvement(x, y) == pytest.approx(metrics.probability_of_improvement(x, y))
        assert statistics.pairwise_improvement(x, x) == pytest.approx(0.5)
    monkeypatch.setattr(statistics, "IMPROVEMENT_REPS", 200)
    x, y = rng.normal(1.0, 1.0, size=(5, 2)), rng.normal(0.0, 1.0, size=(4, 2))
    ours = statistics.probability_of_improvement(x, y)
    _, rliables = statistics._interval_estimates({"x,y": (x, y)}, metrics.probability_of_improvement, 200)
    assert [ours["low"], ours["high"]] == pytest.approx(list(rliables["x,y"][:, 0]))
    assert ours["p"] == pytest.approx(metrics.probability_of_improvement(x, y))


def test_pooled_iqm_is_rliables_with_its_interval(monkeypatch):
    """The IQM used inside the bootstrap is rliable's aggregate IQM to the last bit, and so is its interval."""
    from rliable import metrics

    from benchmarks import statistics

    rng = np.random.default_rng(0)
    for shape in [(1, 1), (2, 1), (3, 1), (5, 4), (7, 3), (10, 2)]:
        matrix = rng.normal(size=shape) * 100
        matrix[0, 0] = matrix.flat[-1]  # a tie
        assert statistics.pooled_iqm(matrix) == metrics.aggregate_iqm(matrix)
    monkeypatch.setattr(statistics, "BOOTSTRAP_REPS", 200)
    matrix = rng.normal(size=(5, 3))
    ours = statistics.iqm_with_interval(matrix)
    _, rliables = statistics._interval_estimates({"x": matrix}, lambda x: np.array([metrics.aggregate_iqm(x)]), 200)
    assert [ours["low"], ours["high"]] == list(rliables["x"][:, 0])


def test_return_at_wall_checkpoints():
    points = curve("ppo", 0, [(0, 0), (1000, 10), (2000, 20), (3000, 30)], 0.1)  # 100 s per 1000 steps
    summary = threshold_summary(points, None, "ppo", wall_checkpoints=(150.0, 300.0, 400.0), eval_episodes=10)
    at = summary["algos"]["ppo"]["return_at_seconds"]
    assert at["150"]["median"] == 10 and at["300"]["median"] == 30 and at["400"]["n"] == 0  # stopped before 400 s


def test_v5_mujoco_uses_rl_zoo3_v4_entry_and_says_so():
    from benchmarks.config import hyperparams_source

    params = load_zoo_hyperparams("ppo", "HalfCheetah-v5")
    assert params["n_steps"] == yaml.safe_load(zoo_yml_path("ppo").read_text())["HalfCheetah-v4"]["n_steps"]
    assert hyperparams_source("sac", "Hopper-v5") == "rl_zoo3/hyperparams/sac.yml: Hopper-v4"
    assert hyperparams_source("vracer", "Hopper-v5") == "sb3_impact/hyperparams/vracer.yml: Hopper-v5"
    with pytest.raises(ValueError, match="no hyperparameters"):  # our algorithms never borrow another version's entry
        load_zoo_hyperparams("ptr_ppo", "Hopper-v5")


def test_atari_ids_run_in_subprocess_envs():
    """SubprocVecEnv workers start with a fresh interpreter: the ALE ids must be registered there too."""
    pytest.importorskip("ale_py")
    params = load_zoo_hyperparams("ppo", "BreakoutNoFrameskip-v4")
    env = make_training_env("BreakoutNoFrameskip-v4", 2, 0, subproc=True, env_wrapper=params["env_wrapper"], frame_stack=4)
    try:
        assert isinstance(env.venv, SubprocVecEnv) and env.reset().shape == (2, 84, 84, 4)
        model = PPO("CnnPolicy", env, n_steps=32, batch_size=64, n_epochs=1, seed=0)
        model.learn(64)
        assert model.num_timesteps == 64
    finally:
        env.close()


def sequential_and_parallel_rows(tmp_path):
    rows = {}
    for name, jobs in (("sequential", "1"), ("parallel", "2")):
        arguments = ["--algos", "ppo", "ppo_amber", "--env", "CartPole-v1", "--seeds", "2", "--steps", "512"]
        arguments += ["--eval-freq", "256", "--eval-episodes", "2", "--torch-threads", "1", "--jobs", jobs]
        run_module.main([*arguments, "--out", str(tmp_path / name)])
        rows[name] = [
            (p.algo, p.seed, p.steps, p.eval_mean, p.eval_std, p.status) for p in read_csv(tmp_path / name / "CartPole-v1.csv")
        ]
    return rows


def test_jobs_give_the_same_rows_as_a_sequential_run(tmp_path):
    rows = sequential_and_parallel_rows(tmp_path)
    assert rows["parallel"] == rows["sequential"]
    assert [(algo, seed) for algo, seed, *_ in rows["sequential"][::3]] == [
        ("ppo", 0),
        ("ppo_amber", 0),
        ("ppo", 1),
        ("ppo_amber", 1),
    ]
    summary = json.loads((tmp_path / "parallel" / "CartPole-v1.json").read_text())
    assert summary["machine"]["jobs"] == 2 and summary["machine"]["torch_threads"] == 1 and "--jobs 2" in summary["command"]


def test_a_failing_run_in_a_worker_is_recorded_and_the_others_finish():
    from benchmarks.pool import RunSpec, run_in_parallel

    results = {}
    specs = [RunSpec("ppo", "CartPole-v1", 0, steps=256, eval_freq=256, eval_episodes=1), RunSpec("nope", "CartPole-v1", 0)]
    run_in_parallel(specs, 2, 1, results.__setitem__)
    assert results[0][-1].status == "ok" and results[0][-1].steps >= 256
    assert results[1][0].status == "failed" and "nope" in results[1][0].error


def test_benchmarks_entry_point_dispatches_to_the_subcommands(tmp_path):
    result = run_command([sys.executable, "-m", "benchmarks"], cwd=REPO_ROOT, timeout=60)
    assert result.returncode == 0 and "run" in result.stdout and "tables" in result.stdout
    result = run_command([sys.executable, "-m", "benchmarks", "nope"], cwd=REPO_ROOT, timeout=60)
    assert result.returncode != 0 and "unknown subcommand 'nope'" in result.stderr
    points = curve("ppo", 0, [(0, 0), (10, 5)], 0.1)
    write_csv(points, tmp_path / "Env-v0.csv")
    result = run_command(
        [sys.executable, "-m", "benchmarks", "plot", str(tmp_path / "Env-v0.csv")], cwd=REPO_ROOT, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "Env-v0.png").is_file()


def test_every_benchmark_script_is_a_listed_subcommand():
    """Each module of benchmarks/ and benchmarks/profiling/ with a main() is reachable as ``python -m benchmarks NAME``
    and imports; the profilers are found in benchmarks/profiling/."""
    import importlib

    from benchmarks.__main__ import PROFILERS, SUBCOMMANDS, module_name

    def scripts(folder: Path) -> set[str]:
        return {path.stem for path in folder.glob("*.py") if "\ndef main(" in path.read_text()} - {"__main__"}

    assert scripts(REPO_ROOT / "benchmarks" / "profiling") == set(PROFILERS)
    assert scripts(REPO_ROOT / "benchmarks") | set(PROFILERS) == set(SUBCOMMANDS)
    for name in SUBCOMMANDS:
        assert callable(importlib.import_module(module_name(name)).main)


def process_group_leaders(pids: set[int]) -> set[int]:
    """The processes among ``pids`` that lead their own process group."""
    leaders = set()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(pid) == pid:
                leaders.add(pid)
    return leaders


def child_pids(pid: int) -> set[int]:
    """Every live descendant of ``pid``, read from /proc."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def harness_with_sigint(disposition: str) -> list[str]:
    """``python -m benchmarks`` with SIGINT set to ``disposition`` (``signal.default_int_handler`` or
    ``signal.SIG_IGN``) before it starts, whatever this process has: a terminal's foreground process has the
    default, a job started in the background (``cmd &``, nohup) has it ignored, and its children inherit that."""
    start = f"import runpy, signal; signal.signal(signal.SIGINT, {disposition}); "
    start += "runpy.run_module('benchmarks', run_name='__main__')"
    return [sys.executable, "-c", start]


CTRL_C_RUNS = ["run", "--algos", "ppo", "--env", "CartPole-v1", "--seeds", "2", "--eval-seconds", "1", "--eval-episodes", "1"]
CTRL_C_RUNS += ["--jobs", "2"]


@pytest.fixture(scope="module")
def two_finished_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with two short runs (seeds 0 and 1) written by the harness with ``--jobs 2``: made once for the
    Ctrl-C tests, which each stop a second invocation appending to a copy of it."""
    out = tmp_path_factory.mktemp("two_finished_runs")
    short_runs = [sys.executable, "-m", "benchmarks", *CTRL_C_RUNS, "--out", str(out), "--max-seconds", "3"]
    first = run_command(short_runs, cwd=REPO_ROOT, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    return out


@pytest.mark.parametrize(
    "disposition, stop",
    [("signal.default_int_handler", signal.SIGINT), ("signal.SIG_IGN", signal.SIGTERM)],
    ids=["ctrl_c_in_a_terminal", "kill_in_the_background"],
)
@pytest.mark.timeout(560)  # its limits: 300 s (the fixture's short runs) + 120 (start-up) + 60 (stop) + 10 (exit) + 3
def test_ctrl_c_or_kill_with_jobs_keeps_finished_runs_and_leaves_no_processes(tmp_path, two_finished_runs, disposition, stop):
    """
    Two short runs finish, two long ones are running when the harness is stopped: the short ones stay written,
    the long ones are interrupted (their workers catch the parent's SIGINT) and recorded as failed.

    The background case is why this test was once flaky: started from a background job, pytest and the harness
    inherit SIGINT ignored, so a SIGINT to the harness did nothing, and its workers ignored the parent's SIGINT
    too. A background harness is stopped with SIGTERM (kill, timeout), and its workers now always listen.
    """
    shutil.copytree(two_finished_runs, tmp_path, dirs_exist_ok=True)
    args = [*CTRL_C_RUNS, "--out", str(tmp_path)]
    finished = read_csv(tmp_path / "CartPole-v1.csv")
    long_runs = [*harness_with_sigint(disposition), *args, "--first-seed", "2", "--max-seconds", "600", "--append"]
    process = subprocess.Popen(long_runs, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    # Both workers are past their start-up once each leads its own process group (os.setpgrp in the worker):
    # the multiprocessing resource tracker alone, or a worker still importing, does not count.
    while len(process_group_leaders(child_pids(process.pid))) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3)  # the workers are training
    workers = child_pids(process.pid)
    process.send_signal(stop)
    stdout, stderr = process.communicate(timeout=60)
    assert "interrupted" in stdout, stderr[-3000:]
    # multiprocessing's resource tracker leaves on its own once its parent has gone: allow it a few seconds.
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
    kept = read_csv(tmp_path / "CartPole-v1.csv")
    assert [p for p in kept if p.seed in (0, 1)] == finished  # the finished runs are kept
    interrupted = [p for p in kept if p.seed in (2, 3)]
    assert {p.seed for p in interrupted} == {2, 3}  # each interrupted worker answered: it was not killed
    assert all(p.status == "failed" and "KeyboardInterrupt" in p.error for p in interrupted)


def test_machine_differences_name_what_changed_between_sittings():
    from benchmarks.output import machine_description, machine_differences

    current = machine_description()
    assert machine_differences(None, current) == [] and machine_differences(current, current) == []
    older = {**current, "name": "Other CPU x2", "software": {**current["software"], "torch": "2.0.0"}}
    expected = [f"machine 'Other CPU x2' -> {current['name']!r}", f"torch 2.0.0 -> {th.__version__}"]
    assert machine_differences(older, current) == expected
    unrecorded = {key: value for key, value in current.items() if key != "software"}
    assert machine_differences(unrecorded, current) == ["software versions not recorded for the kept runs"]


def test_a_table_spanning_sittings_keeps_each_machine(tmp_path, capsys):
    from benchmarks.output import machine_description, machine_differences, merge_sittings, sittings

    current = machine_description()
    assert merge_sittings(None, current) == current and merge_sittings(current, current) == current
    older = {**current, "name": "Other CPU x2"}
    merged = merge_sittings(older, current)
    assert merged["earlier_sittings"] == [older] and sittings(merged) == [older, current]
    # A third sitting on this machine still sees the first one's machine, and keeps it.
    assert machine_differences(merged, current) == [f"machine 'Other CPU x2' -> {current['name']!r}"]
    assert merge_sittings(merged, current)["earlier_sittings"] == [older]

    # --append: the kept rows' machine is warned about and kept in the JSON's machine; rows about to be rerun
    # are not kept, and a table whose runs are all rerun warns about nothing.
    rows = [EvalPoint("ppo", "CartPole-v1", seed, 0, 0.0, 9.0, 0.0, machine="Other CPU x2") for seed in (0, 1)]
    write_csv(rows, tmp_path / "CartPole-v1.csv")
    write_json({"machine": older}, tmp_path / "CartPole-v1.json")
    argv = ["--algos", "ppo", "--env", "CartPole-v1", "--out", str(tmp_path), "--append", "--first-seed", "1"]
    args = run_module.parse_args([*argv, "--seeds", "1"])
    kept, machines = run_module.kept_points(args, run_module.run_specs(args))
    assert "warning: --append to CartPole-v1's table from another machine" in capsys.readouterr().err
    assert [point.seed for point in kept["CartPole-v1"]] == [0]
    assert machines["CartPole-v1"]["earlier_sittings"] == [older]
    args = run_module.parse_args([*argv, "--seeds", "2", "--first-seed", "0"])
    assert run_module.kept_points(args, run_module.run_specs(args)) == ({"CartPole-v1": []}, {})
    assert "warning" not in capsys.readouterr().err
    # Without the JSON, the rows' machine names are what is known.
    (tmp_path / "CartPole-v1.json").unlink()
    args = run_module.parse_args([*argv, "--seeds", "1"])
    assert run_module.kept_points(args, run_module.run_specs(args))[1]["CartPole-v1"]["earlier_sittings"] == [
        {"name": "Other CPU x2"}
    ]


def test_merge_puts_side_by_side_invocations_into_one_table(tmp_path, capsys):
    from benchmarks.diagnostics import diagnostics_path
    from benchmarks.output import machine_description

    current = machine_description()
    older = {**current, "name": "Other CPU x2"}

    def table(folder: str, rows: list[tuple[str, int, float, str]], machine: dict) -> Path:
        points = [
            EvalPoint(algo, "CartPole-v1", seed, 1000, 1.0, value, 0.0, status=status) for algo, seed, value, status in rows
        ]
        write_csv(points, tmp_path / folder / "CartPole-v1.csv")
        write_json({"machine": machine}, tmp_path / folder / "CartPole-v1.json")
        return tmp_path / folder

    out = table("out", [("ppo", 0, 10.0, "ok"), ("impact", 0, 20.0, "ok"), ("impact", 1, 5.0, "ok")], current)
    # a rerun of impact seed 1 that finished, a run killed before it finished, one that failed where out finished
    side_a = table("a", [("impact", 1, 30.0, "ok"), ("ppo", 1, math.nan, "failed")], current)
    side_b = table("b", [("ppo", 1, 12.0, "ok"), ("impact", 0, math.nan, "failed"), ("a2c", 0, 9.0, "ok")], current)
    # Each kept run's diagnostics come with it: out's own stay, a rerun's replace the run it replaces, a run that
    # stored none leaves none (out's file of ppo seed 1 is a killed run's), and an algo not merged brings none.
    entropies = {(out, "ppo", 0): -1, (out, "impact", 1): -2, (out, "ppo", 1): -3, (side_a, "impact", 1): -4,
                 (side_b, "a2c", 0): -5}  # fmt: skip
    for (folder, algo, seed), entropy in entropies.items():
        path = diagnostics_path(folder, "CartPole-v1", algo, seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"algo,seed,steps,train/entropy_loss\n{algo},{seed},1000,{entropy}\n")
    replaced_record = record_path(out, "CartPole-v1", "impact", 1)  # the rerun kept from side_a has none
    replaced_record.parent.mkdir(parents=True)
    replaced_record.write_text(json.dumps({"algo": "impact", "seed": 1, "env": "CartPole-v1"}))
    argv = ["--algos", "ppo", "impact", "--env", "CartPole-v1", "--seeds", "2", "--steps", "1000", "--out", str(out)]
    run_module.main([*argv, "--merge", str(side_a), str(side_b)])
    stored = {path.name: path.read_text() for path in (out / "records" / "CartPole-v1" / "diagnostics").glob("*.csv")}
    assert stored == {
        "ppo_seed0.csv": "algo,seed,steps,train/entropy_loss\nppo,0,1000,-1\n",
        "impact_seed1.csv": "algo,seed,steps,train/entropy_loss\nimpact,1,1000,-4\n",
    }
    assert not replaced_record.exists()
    rows = {(point.algo, point.seed): (point.eval_mean, point.status) for point in read_csv(out / "CartPole-v1.csv")}
    assert rows == {
        ("ppo", 0): (10.0, "ok"),
        ("impact", 0): (20.0, "ok"),
        ("impact", 1): (30.0, "ok"),
        ("ppo", 1): (12.0, "ok"),
    }  # not a2c's run: it is not one of --algos
    summary = json.loads((out / "CartPole-v1.json").read_text())
    assert summary["seeds"] == [0, 1] and summary["machine"] == current and "warning" not in capsys.readouterr().err
    assert summary["algos"]["impact"]["final_eval"]["median"] == 25.0 and (out / "CartPole-v1.png").is_file()

    # Another machine's folder is refused for a table that compares algorithms, naming the difference, and nothing
    # is written; for a one-algorithm table it is warned about and kept as an earlier sitting.
    other = table("c", [("ppo", 2, 14.0, "ok")], older)
    before = (out / "CartPole-v1.csv").read_text()
    with pytest.raises(SystemExit, match=r"compares algorithms.*another machine or software.*Other CPU x2"):
        run_module.main([*argv, "--merge", str(other)])
    assert (out / "CartPole-v1.csv").read_text() == before
    alone = table("alone", [("ppo", 0, 10.0, "ok")], current)
    run_module.main(["--algos", "ppo", "--env", "CartPole-v1", "--steps", "1000", "--out", str(alone), "--merge", str(other)])
    assert "warning: --merge" in capsys.readouterr().err
    assert json.loads((alone / "CartPole-v1.json").read_text())["machine"]["earlier_sittings"] == [current]
    with pytest.raises(SystemExit, match="does not exist"):
        run_module.main([*argv, "--merge", str(tmp_path / "missing")])


def test_algo_variants_replace_yml_entries_and_reject_bad_items():
    from benchmarks.config import algo_class, hyperparams_source, load_zoo_hyperparams, split_variant, validate_names

    assert split_variant("ppo_amber") == ("ppo_amber", {})
    variant = "ppo_amber[normalize_advantage=False,collector=process,n_steps=128]"
    assert split_variant(variant) == ("ppo_amber", {"normalize_advantage": False, "collector": "process", "n_steps": 128})
    params = load_zoo_hyperparams(variant, "Pendulum-v1")
    assert params["normalize_advantage"] is False and params["n_steps"] == 128
    assert params["batch_size"] == load_zoo_hyperparams("ppo_amber", "Pendulum-v1")["batch_size"]
    assert algo_class(variant).__name__ == "PPOAMBER"
    assert "with {'normalize_advantage': False" in hyperparams_source(variant, "Pendulum-v1")
    validate_names([variant], ["Pendulum-v1"])
    with pytest.raises(ValueError, match="NAME\\[key=value"):
        split_variant("ppo_amber[normalize_advantage]")
    # Values may be lists: the commas inside brackets belong to the value (the ReF-ER ablation's rules).
    assert split_variant("vracer[refer_rules=[1,2],learning_starts=500]") == (
        "vracer",
        {"refer_rules": [1, 2], "learning_starts": 500},
    )
    assert split_variant("vracer[refer_rules=[]]") == ("vracer", {"refer_rules": []})
    # Numbers in scientific notation are floats, as in Python (YAML 1.1 alone reads "1e-4" as a string);
    # a schedule string stays a string.
    assert split_variant("impala[learning_rate=1e-4,ent_coef=2.5E-3,n_epochs=4,x=lin_3e-4]") == (
        "impala",
        {"learning_rate": 1e-4, "ent_coef": 2.5e-3, "n_epochs": 4, "x": "lin_3e-4"},
    )
    # ... inside lists and mappings too; quoting keeps a string.
    assert split_variant("a[x=[1e-4,2],y={b: 1E+3},z='1e-4']") == ("a", {"x": [1e-4, 2], "y": {"b": 1e3}, "z": "1e-4"})
    with pytest.raises(ValueError, match="unknown algos"):
        validate_names(["nope[a=1]"], ["Pendulum-v1"])


def test_default_variants_take_overrides_and_ignore_the_yml():
    from benchmarks.config import algo_class, hyperparams_source, load_zoo_hyperparams

    params = load_zoo_hyperparams("vracer_default[compile_loss=true,learning_starts=500]", "HalfCheetah-v5")
    assert params == {"policy": "MlpPolicy", "n_envs": 1, "n_timesteps": 100_000, "compile_loss": True, "learning_starts": 500}
    assert "learning_rate" in load_zoo_hyperparams("vracer", "HalfCheetah-v5")  # the yml entry is tuned
    assert algo_class("vracer_default[compile_loss=true]").__name__ == "VRACER"
    assert (
        hyperparams_source("vracer_default[compile_loss=true]", "HalfCheetah-v5")
        == "constructor defaults with {'compile_loss': True}"
    )


# One entry per yml of sb3_impact/hyperparams (and rl-zoo3's PPO on a v5 id): schedules, Atari, VecNormalize, noise.
BUILT_ENTRIES = [
    ("impact", "HalfCheetah-v5"),  # normalize, with gamma 0.98; policy_kwargs
    ("impala", "BreakoutNoFrameskip-v4"),  # the atari entry: AtariWrapper, 4 frames, lin_ learning rate
    ("ppo_amber", "CartPole-v1"),  # lin_ learning rate, clip range and batch drop factor
    ("ptr_ppo", "CartPole-v1"),
    ("sac_refer", "Pendulum-v1"),
    ("td3_refer", "Pendulum-v1"),  # rl-zoo3's action noise
    ("vracer", "Pendulum-v1"),
    ("ppo", "HalfCheetah-v5"),  # rl-zoo3's HalfCheetah-v4 entry
]


@pytest.mark.parametrize("algo, env_id", BUILT_ENTRIES)
def test_the_model_is_built_as_its_yml_entry_says(algo, env_id):
    """
    rl-zoo3's ExperimentManager builds the harness' models; each has the hyperparameters its entry gave before it
    did: ``lin_x`` is x times the remaining progress, ``policy_kwargs`` the evaluated string, rl-zoo3's wrappers
    around Monitor-wrapped envs, and ``VecNormalize`` with its default gamma whatever the entry's ``gamma``.
    """
    from stable_baselines3.common.vec_env import VecFrameStack, unwrap_vec_wrapper

    from benchmarks.config import build_model

    if is_atari(env_id):
        pytest.importorskip("ale_py")
    entry = load_zoo_hyperparams(algo, env_id)
    model = build_model(algo, env_id, seed=0)
    for key in {"learning_rate", "clip_range", "batch_drop_factor"} & set(entry):
        schedule = model.lr_schedule if key == "learning_rate" else getattr(model, key)
        lin = str(entry[key]).startswith("lin_")
        for progress in (1.0, 0.5):
            value = float(str(entry[key]).removeprefix("lin_")) * (progress if lin else 1.0)
            assert (schedule(progress) if callable(schedule) else schedule) == pytest.approx(value)
    policy_kwargs = eval(entry.get("policy_kwargs", "dict()"), {"nn": th.nn})
    assert policy_kwargs.items() <= model.policy_kwargs.items() and model.n_envs == entry.get("n_envs", 1)
    for key in {"gamma", "n_steps", "batch_size", "buffer_size", "ent_coef", "train_freq"} & set(entry):
        value = getattr(model, key)
        assert (value.frequency if key == "train_freq" else value) == entry[key]
    normalize = model.get_vec_normalize_env()
    assert (normalize is not None) == bool(entry.get("normalize"))
    if normalize is not None:
        assert normalize.norm_obs and normalize.norm_reward and normalize.gamma == 0.99 and normalize.training
    stacked = unwrap_vec_wrapper(model.env, VecFrameStack)
    assert (stacked.stacked_obs.n_stack if stacked else None) == entry.get("frame_stack")
    wrappers = entry.get("env_wrapper") or ["Monitor"]
    first_wrapper = (wrappers if isinstance(wrappers, list) else [wrappers])[0]
    assert type(model.env.unwrapped.envs[0]).__name__ == first_wrapper.split(".")[-1]
    if "noise_type" in entry:
        assert model.action_noise._sigma == pytest.approx(entry["noise_std"])
    model.env.close()


def test_sigterm_is_a_keyboard_interrupt_inside_the_harness_and_restored_after():
    import signal

    from benchmarks.pool import sigterm_as_keyboard_interrupt

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt, match="signal 15"), sigterm_as_keyboard_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the signal is handled before this returns
    assert signal.getsignal(signal.SIGTERM) is before


def test_iteration_cost_sections_add_up_and_count_sample_gradients(tmp_path, monkeypatch):
    """Every section of PTR-PPO's iteration is timed once (no double counting): the sections sum to learn()."""
    from benchmarks.profiling import iteration_cost

    row = iteration_cost.measure(
        "ptr_ppo[n_steps=32,n_envs=2,batch_size=64,n_epochs=2,replay_rounds=2,replay_batch=2]", "CartPole-v1", 256, 0, 160_000
    )
    assert row["iterations"] == 4 and row["env_steps"] == 256
    assert set(row["ms_per_iteration"]) == set(iteration_cost.SECTIONS)
    assert all(value >= 0 for value in row["ms_per_iteration"].values())
    assert row["ms_per_iteration"]["replay_steps"] > 0 and row["ms_per_iteration"]["scoring"] > 0
    assert math.isclose(sum(row["share"].values()), 1.0, rel_tol=1e-9)
    # 2 fresh epochs of 64 samples and 2 rounds of 2 replayed segments of 32 per iteration, per 64 env steps
    assert math.isclose(row["sample_gradients_per_env_step"], (2 * 64 + 2 * 2 * 32) / 64)
    ppo = iteration_cost.measure("ppo[n_steps=32,n_envs=2,batch_size=64]", "CartPole-v1", 128, 0, 160_000)
    assert ppo["ms_per_iteration"]["epochs"] > 0 and ppo["ms_per_iteration"]["replay_steps"] == 0
    amber = iteration_cost.measure("ppo_amber[n_steps=32,n_envs=2,batch_size=16,n_epochs=2]", "CartPole-v1", 192, 0, 160_000)
    assert amber["ms_per_iteration"]["epochs"] > 0 and amber["ms_per_iteration"]["scoring"] > 0
    assert math.isclose(sum(amber["share"].values()), 1.0, rel_tol=1e-9)
    # each epoch passes over every active batch (1, 2, then up to 3 stored batches of 64 samples)
    assert 2 * 64 <= amber["sample_gradients_per_env_step"] * 64 <= 2 * 64 * 3
    monkeypatch.setattr(sys, "argv", ["iteration_cost", "--algos", "ppo[n_steps=32]", "--env", "CartPole-v1"])
    monkeypatch.setattr(sys, "argv", [*sys.argv, "--steps", "64", "--out", str(tmp_path)])
    iteration_cost.main()
    assert {path.suffix for path in tmp_path.iterdir()} == {".json", ".csv", ".png"}


def test_recorders_write_each_runs_statistics_and_draw_them(tmp_path):
    """--record: V-RACER's ReF-ER statistics at every evaluation (drawn with the diagnostics' beta) and PTR-PPO's
    priorities after every iteration, one CSV per run, one figure per recorder; variants side by side."""
    from benchmarks.recorders import read_records, validate_recorders

    algos = ["vracer_default[learning_starts=200,refer_rules=[1,2]]", "vracer_default[learning_starts=200,refer_rules=[]]"]
    common = ["--seeds", "1", "--steps", "1024", "--eval-freq", "512", "--eval-episodes", "1", "--out", str(tmp_path)]
    run_module.main(["--algos", *algos, "--env", "Pendulum-v1", "--record", "refer", *common])
    ptr_ppo = ["ptr_ppo[priority=max]", "ptr_ppo[priority=mean]"]
    run_module.main(["--algos", *ptr_ppo, "--env", "CartPole-v1", "--record", "priorities", *common])

    refer = read_records(tmp_path, "Pendulum-v1", "refer")
    assert set(refer["algo"]) == set(algos)
    for _, records in refer.groupby("algo"):
        steps = list(records["steps"])  # one row per evaluation point: at 0, about 512, at the end
        assert len(steps) == 3 and steps[0] == 0 and steps[-1] == 1024 and 512 <= steps[1] < 1024
        assert records["far_fraction"].between(0.0, 1.0).all()
        assert records["kl_mu_pi"].iloc[-1] >= 0.0
    diagnostics = read_records(tmp_path, "Pendulum-v1", "diagnostics")
    plain_er = diagnostics[diagnostics["algo"] == algos[1]]
    assert (plain_er["train/beta"].dropna() == 1.0).all() and plain_er["train/beta"].notna().sum() == 2  # no rule 2
    priorities = read_records(tmp_path, "CartPole-v1", "priorities")
    assert set(priorities["algo"]) == set(ptr_ppo)
    for _, records in priorities.groupby("algo"):
        assert (records["priority"] >= 0.0).all()
        # one row per memory slot and iteration: the memory fills up as iterations go by
        counts = list(records.groupby("steps", sort=False).size())
        assert counts == sorted(counts) and len(counts) > 1
        assert list(records["position"]) == [position for count in counts for position in range(count)]
    for figure in ["Pendulum-v1_refer.png", "CartPole-v1_priorities.png"]:
        assert (tmp_path / figure).stat().st_size > 10_000
    assert "--record priorities" in (tmp_path / "CartPole-v1.json").read_text()

    with pytest.raises(ValueError, match="unknown recorder 'nope'"):
        validate_recorders(["nope"], ["vracer"])
    with pytest.raises(ValueError, match="unknown recorder 'active_batches'"):  # a diagnostic now
        validate_recorders(["active_batches"], ["ppo_amber"])
    with pytest.raises(ValueError, match="records ptr_ppo runs"):
        validate_recorders(["priorities"], ["ppo", "vracer"])


def test_busy_processes_run_beside_the_block_and_none_is_left_after_it():
    from benchmarks.profiling.timing import busy_processes, cpu_seconds

    with pytest.raises(RuntimeError, match="inside"), busy_processes(2) as processes:
        assert len(processes) == 2 and all(process.poll() is None for process in processes)
        time.sleep(0.5)
        with open(f"/proc/{processes[0].pid}/stat") as stat:  # it burns CPU: user time past 0.1 s
            assert int(stat.read().rsplit(")", 1)[1].split()[11]) > 0.1 * os.sysconf("SC_CLK_TCK")
        raise RuntimeError("inside")
    assert all(process.returncode is not None for process in processes)
    assert not any(Path(f"/proc/{process.pid}").exists() for process in processes)
    assert cpu_seconds() > 0


def test_the_recorded_commit_is_dirty_for_changed_code_not_for_the_run_data_beside_it(tmp_path):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    code = tmp_path / "benchmarks"
    code.mkdir()
    (code / "run.py").write_text("x = 1\n")
    (tmp_path / RUN_DATA).mkdir(parents=True)
    (tmp_path / RUN_DATA / "Env-v0.csv").write_text("algo\n")
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    clean = git_commit(code)
    assert clean != "unknown" and not clean.endswith("+dirty")
    (tmp_path / RUN_DATA / "Env-v0.csv").write_text("algo\nppo\n")  # a run beside this one wrote its rows
    (tmp_path / RUN_DATA / "runs").mkdir()
    (tmp_path / RUN_DATA / "runs" / "ppo_seed0.json").write_text("{}")
    assert git_commit(code) == clean
    (tmp_path / "README.md").write_text("changed\n")  # anything else changed: the code may differ
    assert git_commit(code) == clean + "+dirty"
