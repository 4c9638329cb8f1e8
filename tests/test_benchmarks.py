"""The benchmark harness: threshold and ratio computation on synthetic curves, output files, a tiny run."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.common import EvalPoint, first_reaching, load_zoo_hyperparams, read_csv, threshold_summary, write_csv

REPO_ROOT = Path(__file__).resolve().parent.parent


def curve(algo, seed, steps_and_returns, seconds_per_step):
    return [EvalPoint(algo, "Env-v0", seed, s, s * seconds_per_step, r, 0.0) for s, r in steps_and_returns]


def test_threshold_and_paired_ratios_on_synthetic_curves():
    points = []
    # Baseline reaches 100 at 2000 steps (seed 0) and 4000 steps (seed 1), at 1 ms per step.
    points += curve("ppo", 0, [(0, 0), (1000, 50), (2000, 100), (3000, 90)], 1e-3)
    points += curve("ppo", 1, [(0, 0), (2000, 50), (4000, 120)], 1e-3)
    # Candidate: 3000 steps (seed 0) at 0.5 ms per step, never (seed 1).
    points += curve("impact", 0, [(0, 0), (3000, 100)], 5e-4)
    points += curve("impact", 1, [(0, 0), (3000, 99)], 5e-4)
    summary = threshold_summary(points, threshold=100, baseline="ppo")
    ppo, impact = summary["algos"]["ppo"], summary["algos"]["impact"]
    assert ppo["steps_to_threshold"] == [2000, 4000] and ppo["median_steps"] == 3000
    assert impact["steps_to_threshold"] == [3000, None]
    assert impact["steps_ratio_vs_baseline"] == {"median": 1.5, "min": 1.5, "max": 1.5, "n": 1}
    assert impact["wall_ratio_vs_baseline"]["median"] == pytest.approx(1.5 / 2.0 * 1.0)
    assert "steps_ratio_vs_baseline" not in ppo


def test_failed_runs_never_reach_and_csv_round_trips(tmp_path):
    failed = EvalPoint("impact", "Env-v0", 0, 0, 0.0, math.nan, math.nan, status="failed", error="boom")
    assert first_reaching([failed], threshold=-1e9) is None
    points = [*curve("ppo", 0, [(0, 1.0), (10, 2.5)], 0.1), failed]
    write_csv(points, tmp_path / "x.csv")
    back = read_csv(tmp_path / "x.csv")
    assert back[:2] == points[:2] and back[2].status == "failed" and back[2].error == "boom"


def test_unknown_algo_and_env_are_rejected_with_the_valid_names():
    with pytest.raises(ValueError, match="valid names"):
        load_zoo_hyperparams("nope", "CartPole-v1")
    with pytest.raises(ValueError, match="no hyperparameters"):
        load_zoo_hyperparams("impact", "NoSuchEnv-v0")


def test_tiny_end_to_end_run_writes_csv_json_and_png(tmp_path):
    command = [sys.executable, "-m", "benchmarks.impact_vs_ppo", "--envs", "CartPole-v1", "--seeds", "1"]
    command += ["--steps", "2048", "--eval-freq", "1024", "--eval-episodes", "2", "--out", str(tmp_path)]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    points = read_csv(tmp_path / "CartPole-v1.csv")
    assert {p.algo for p in points} == {"ppo", "impact"} and all(p.status == "ok" for p in points)
    summary = json.loads((tmp_path / "CartPole-v1.json").read_text())
    assert summary["baseline"] == "ppo" and set(summary["algos"]) == {"ppo", "impact"}
    assert (tmp_path / "CartPole-v1.png").stat().st_size > 10_000
