"""
The protocol the benchmark runner and the tables command enforce (docs/guide/benchmarks.md, "Protocol"): the pages'
generated tables match the data (the drift test), each refusal names its cause, ratios are paired by seed against the
baseline's own steps and time to the same return, censored where a run never gets there.
"""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from benchmarks import run as run_module
from benchmarks import statistics, tables
from benchmarks.output import EvalPoint, machine_description, read_csv, write_csv
from benchmarks.protocol import (
    ProtocolError,
    check_comparison,
    check_eval_settings,
    check_reporting_seeds,
    eval_policy,
    human_normalized,
    write_run_record,
)
from benchmarks.summary import paired_to_return, threshold_summary

REPO_ROOT = Path(__file__).resolve().parents[1]


def record(algo: str, env: str, seed: int, **changes) -> dict:
    base = {
        "algo": algo,
        "env": env,
        "seed": seed,
        "status": "ok",
        "error": "",
        "steps": 4000,
        "max_seconds": None,
        "eval_freq": 1000,
        "eval_seconds": None,
        "eval_episodes": 10,
        "eval_policy": eval_policy(env),
        "torch_threads": 1,
        "jobs": 1,
        "device": "cpu",
        "hyperparams": "test",
        "commit": "0123456789abcdef",
        "machine": machine_description(),
        "command": f"python -m benchmarks run --algos {algo} --env {env} --seeds 1 --first-seed {seed}",
        "finished": "2026-11-26T00:00:00+0000",
    }
    return {**base, **changes}


def write_table(folder: Path, env: str, curves: dict[tuple[str, int], list[float]], changes: dict | None = None) -> None:
    """Runs evaluated at 0, 1000, ... steps (1 s of training per 1000 steps) with their records (``changes``: per
    (algo, seed), the record's fields that differ)."""
    changes = changes or {}
    points = [
        EvalPoint(algo, env, seed, 1000 * index, float(index), value, 0.0, machine="m")
        for (algo, seed), values in curves.items()
        for index, value in enumerate(values)
    ]
    write_csv(points, folder / f"{env}.csv")
    for algo, seed in curves:
        write_run_record(folder, record(algo, env, seed, **changes.get((algo, seed), {})))


def repository(tmp_path: Path, entries: list[dict], readme_rows: list[dict], labels: dict | None = None) -> Path:
    """A repository root with a manifest, the pages with their empty blocks, and the data folders' parents."""
    manifest = {"tables": entries, "readme": readme_rows, **({"labels": labels} if labels else {})}
    (tmp_path / "benchmarks").mkdir(parents=True, exist_ok=True)
    (tmp_path / "benchmarks" / "tables.yml").write_text(yaml.safe_dump(manifest))
    blocks = {"README.md": ["readme-results"], "docs/results.md": ["results-summary"]}
    for entry in entries:
        blocks.setdefault(entry["page"], []).append(entry["name"])
    for page, names in blocks.items():
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        text = "".join(f"## {name}\n\n<!-- generated: {name} -->\n<!-- end generated: {name} -->\n\n" for name in names)
        (tmp_path / page).write_text(text)
    return tmp_path


def entry(name: str, envs: list[str], **extra) -> dict:
    return {"name": name, "page": "docs/results.md", "data": f"data/{name}", "envs": envs, "baseline": "ppo",
            "recipe": "benchmarks/recipes/protocol.sh", **extra}  # fmt: skip


def tables_main(root: Path, *options: str) -> None:
    tables.main(["--root", str(root), "--manifest", str(root / "benchmarks" / "tables.yml"), *options])


@pytest.mark.timeout(600)
def test_the_pages_match_what_the_tables_command_writes():
    """The drift test: README.md's and docs/results.md's generated blocks are exactly what the data give."""
    tables.main(["--check"])


def test_a_hand_edited_block_fails_the_check_and_the_command_restores_it(tmp_path):
    root = repository(tmp_path, [entry("x", ["Env-v0"])], [{"algorithm": "X", "env": "Env-v0", "budget": "4k steps",
                                                           "table": "x", "algo": "impact", "against": "PPO"}])  # fmt: skip
    curves = {("ppo", 100): [0, 5, 10, 20, 30], ("impact", 100): [0, 20, 30, 40, 50]}
    write_table(root / "data" / "x", "Env-v0", curves)
    tables_main(root)
    # One seed of the protocol's three: the README row waits, the results page shows the seed.
    assert (
        "| X | Env-v0 | 4k steps | not yet re-measured under the protocol: 1 of 3 seeds so far | PPO | - | - | 1 |"
        in (root / "README.md").read_text()
    )
    curves = {(algo, seed): values for (algo, _), values in curves.items() for seed in (100, 101, 102)}
    write_table(root / "data" / "x", "Env-v0", curves)
    tables_main(root)
    tables_main(root, "--check")
    readme = (root / "README.md").read_text()
    assert "| X | Env-v0 | 4k steps | 50.0 [50.0, 50.0] | PPO 30.0 [30.0, 30.0] |" in readme
    (root / "README.md").write_text(readme.replace("| 50.0 [50.0, 50.0] |", "| 55.0 [50.0, 50.0] |"))
    with pytest.raises(SystemExit, match="differ from what"):
        tables_main(root, "--check")
    tables_main(root)
    assert (root / "README.md").read_text() == readme


def test_a_comparison_table_pairs_by_seed_and_shows_censored_runs(tmp_path):
    root = repository(tmp_path, [entry("x", ["Env-v0"], published=45.0)], [])
    curves = {
        ("ppo", 100): [0, 5, 10, 20, 30],  # the baseline's returns at the budget: 30, 40, 20 -> median 30
        ("ppo", 101): [0, 10, 30, 35, 40],
        ("ppo", 102): [0, 5, 10, 15, 20],
        ("impact", 100): [0, 30, 30, 30, 30],  # 30 at 1000 steps, the baseline's seed 100 at 4000: 0.25
        ("impact", 101): [0, 10, 20, 25, 28],  # never 30: censored at its 4000 steps, over the baseline's 2000: 2.0
        ("impact", 102): [0, 31, 50, 50, 50],  # 1000 steps, the baseline never (censored at 4000): 0.25
    }
    write_table(root / "data" / "x", "Env-v0", curves)
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    assert "| `impact` | 3 | 30.0 [28.0, 50.0] |" in page
    assert "0.25 [0.25, 2.00] (ours censored in 1; baseline censored in 1)" in page  # steps to ppo's median 30
    assert "published 45.0" in page and "seeds 100, 101, 102" in page
    assert "101: 4000c / 2000 steps" in page and "102: 1000 / 4000c steps" in page


def test_an_equal_time_table_with_a_peer_gives_each_sides_steps_per_second_and_the_peers_environment(tmp_path):
    """A peers table: the peer is the baseline, steps per second of training beside the returns (wall-clock)."""
    root = repository(tmp_path, [entry("p", ["Env-v0"], baseline="rllib_appo")], [])
    curves = {(algo, seed): [0, 10, 20, 30, 40] for algo in ("impact", "rllib_appo") for seed in (100, 101, 102)}
    peer_machine = machine_description()
    peer_machine["software"] = {**peer_machine["software"], "gymnasium": "1.2.2", "ray": "2.60.0"}
    changes = {key: {"max_seconds": 4.0, "steps": 100000000} for key in curves}
    for seed in (100, 101, 102):
        changes[("rllib_appo", seed)].update(stack="rllib", machine=peer_machine)
    write_table(root / "data" / "p", "Env-v0", curves, changes)
    points = read_csv(root / "data" / "p" / "Env-v0.csv")
    for point in points:  # the peer's seed 101 collects slower: 750 steps per second of training
        if (point.algo, point.seed) == ("rllib_appo", 101):
            point.steps = 750 * int(point.wall_seconds)
    write_csv(points, root / "data" / "p" / "Env-v0.csv")
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    assert "env steps per second of training |" in page
    assert "| `impact` | 3 | 40.0 [40.0, 40.0] |" in page and page.count("| 1000 [1000, 1000] |") == 1
    assert "| 1000 [750, 1000] |" in page  # the peer: 1000, 750, 1000 steps per second
    assert "rllib's own environment: ray 2.60.0, gymnasium 1.2.2" in page


def test_a_table_whose_runs_shared_the_machine_reports_no_time_ratio(tmp_path):
    """Step-based runs may share the machine (the protocol), so their training times do not compare: no time
    column, no seconds per seed, and a README row that asks for their time ratio is refused. ``alone: true`` (runs
    of a step budget that had the machine to themselves) keeps them."""
    curves = {(algo, seed): [0, 10, 20, 30, 40] for algo in ("ppo", "impact") for seed in (100, 101, 102)}
    row = {"algorithm": "X", "env": "Env-v0", "budget": "4k steps", "table": "x", "algo": "impact", "against": "PPO"}
    root = repository(tmp_path / "shared", [entry("x", ["Env-v0"])], [{**row, "measure": "steps"}])
    write_table(root / "data" / "x", "Env-v0", curves)
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    assert "steps to ppo's median 40.0: ratio |" in page and "time to" not in page
    assert "100: 4000 / 4000 steps," in page and " s," not in page and "so no time ratio" in page
    root = repository(tmp_path / "refused", [entry("x", ["Env-v0"])], [{**row, "measure": "wall"}])
    write_table(root / "data" / "x", "Env-v0", curves)
    with pytest.raises(SystemExit, match="a time ratio from table x, whose runs shared the machine"):
        tables_main(root)
    root = repository(tmp_path / "alone", [entry("x", ["Env-v0"], alone=True)], [{**row, "measure": "wall"}])
    write_table(root / "data" / "x", "Env-v0", curves)
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    assert "time to ppo's median 40.0: ratio |" in page and "100: 4000 / 4000 steps, 4 / 4 s" in page
    assert "(alone)" in page and "| 1.00 [1.00, 1.00] the time to 40.0 |" in page


def test_a_long_algo_spec_is_shown_by_its_label_and_the_table_says_what_it_stands_for(tmp_path):
    """An algo with its settings in brackets reads as the manifest's label, in the headers, rows and per-seed
    lines; a line below the table gives the spec, and the run commands keep it. Two algos may not share a label."""
    spec = "ppo[n_steps=2048,batch_size=64]"
    curves = {(algo, seed): [0, 10, 20, 30, 40] for algo in (spec, "impact") for seed in (100, 101, 102)}
    labels = {spec: "ppo (defaults)"}
    root = repository(tmp_path / "labelled", [entry("x", ["Env-v0"], baseline=spec)], [], labels)
    write_table(root / "data" / "x", "Env-v0", curves)
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    assert "P(better than ppo (defaults)) [95% CI] | steps to ppo (defaults)'s median 40.0: ratio |" in page
    assert "| `ppo (defaults)` | 3 |" in page and "Per seed: `ppo (defaults)` 100: 40.0," in page
    assert f"Labels: `ppo (defaults)` is `{spec}`." in page
    assert not [line for line in page.splitlines() if spec in line and line.startswith(("|", "Per seed"))]
    assert f"--algos {spec} --env Env-v0" in page  # the runs' commands keep the spec
    root = repository(tmp_path / "shared", [entry("x", ["Env-v0"], baseline=spec)], [], {spec: "ppo", "ppo": "ppo"})
    write_table(root / "data" / "x", "Env-v0", curves)
    with pytest.raises(SystemExit, match=r"labels given to more than one algo: \['ppo'\]"):
        tables_main(root)


def test_a_median_the_censored_seeds_leave_undetermined_is_given_as_the_bound_it_is():
    """Ours censored: the ratio is at least its value; the baseline censored: at most; both: anything."""
    from benchmarks.cells import ratio_cell, ratio_median
    from benchmarks.summary import median_bounds

    def seeds(*entries):
        return [
            {"r": ratio, "censored": ours, "baseline_censored": base, "both_at_first_evaluation": False}
            for ratio, ours, base in entries
        ]

    exact = seeds((0.3, False, False), (0.5, False, False), (0.4, False, False))
    assert median_bounds(exact, "r") == [0.4, 0.4] and ratio_median(0.4, [0.4, 0.4]) == "0.40"
    moved_nowhere = seeds((0.3, False, False), (2.0, True, False), (0.1, False, True))  # 0.3 whatever they hide
    assert median_bounds(moved_nowhere, "r") == [0.3, 0.3]
    ours_never = seeds((0.08, True, False), (0.09, True, False), (0.12, False, False))
    assert median_bounds(ours_never, "r") == [0.09, None] and ratio_median(0.09, [0.09, None]) == (
        "not reached in the budget, >= 0.09"  # a bound under parity: the budget ended before the baseline's time
    )
    assert ratio_median(1.61, [1.61, None]) == ">= 1.61"
    baseline_never = seeds((0.27, False, True), (0.45, False, True), (0.44, False, False))
    assert median_bounds(baseline_never, "r") == [0.0, 0.44] and ratio_median(0.44, [0.0, 0.44]) == "<= 0.44"
    one_each_way = seeds((0.27, False, False), (0.45, False, True), (0.44, False, False))
    assert median_bounds(one_each_way, "r") == [0.27, 0.44] and ratio_median(0.44, [0.27, 0.44]) == "0.27 to 0.44"
    assert median_bounds(seeds((1.0, True, True)), "r") == [0.0, None] and median_bounds([], "r") is None
    neither = seeds((2.9, True, True), (3.2, True, True), (3.0, True, True))  # e.g. a published figure no run reached
    assert median_bounds(neither, "r") == [0.0, None] and ratio_median(3.0, [0.0, None]) == "undetermined"
    paired = {"r": {"n": 3, "median": 3.0, "min": 2.9, "max": 3.2}, "r_median_bounds": [0.0, None], "censored": 3,
              "baseline_censored": 3, "both_at_first_evaluation": 0}  # fmt: skip
    assert ratio_cell(paired, "r") == "undetermined (ours censored in 3; baseline censored in 3)"


def test_every_figure_is_written_by_the_one_formatter_of_its_kind_of_cell():
    from benchmarks.cells import estimate, interval, median_range, number

    assert number(123.456) == "123" and number(-12.345) == "-12.3" and number(0.4567, ".2f") == "0.46"
    assert number(None) == "-" and number(float("nan"), ".2f") == "-"
    assert median_range([3.0, None, 1.0, float("inf"), 2.0]) == "2.0 [1.0, 3.0]" and median_range([5.0]) == "5.0"
    assert median_range([]) == "-" and median_range([1500.0, 900.0], ".0f") == "1200 [900, 1500]"
    assert interval("<= 0.44", 0.27, 0.5, ".2f") == "<= 0.44 [0.27, 0.50]" and interval(None, 1.0, 2.0) == "-"
    assert estimate({"p": 0.5, "low": 0.25, "high": 0.75}, "p", ".2f") == "0.50 [0.25, 0.75]" and estimate(None, "p") == "-"


def test_paired_ratios_are_against_the_baselines_own_steps_to_the_same_return():
    by_run = {
        ("ppo", 100, "m"): [EvalPoint("ppo", "E", 100, s, s / 1000, r, 0) for s, r in [(0, 0), (1000, 5), (2000, 10)]],
        ("x", 100, "m"): [EvalPoint("x", "E", 100, s, s / 500, r, 0) for s, r in [(0, 0), (1000, 10), (2000, 12)]],
    }
    paired = paired_to_return(by_run, "x", "ppo", 10.0, step_budget=2000, eval_episodes=10)
    assert paired["per_seed"][0]["steps_ratio"] == 0.5 and paired["per_seed"][0]["wall_ratio"] == 1.0
    assert paired["censored"] == 0 and paired["baseline_censored"] == 0
    # Not the ratio to the baseline's budget: the summary reports no such figure.
    points = [point for run in by_run.values() for point in run]
    summary = threshold_summary(points, None, "ppo", step_budget=2000, published=11.0, eval_episodes=10)
    assert summary["targets"] == {"baseline_median": 10.0, "published": 11.0}
    published = summary["algos"]["x"]["to_return"]["published"]["per_seed"][0]
    assert published["steps"] == 2000 and not published["censored"] and published["baseline_censored"]
    assert summary["algos"]["x"]["improvement_vs_baseline"]["p"] == 1.0


def test_tables_refuse_old_seeds_missing_records_and_runs_that_differ(tmp_path):
    curves = {("ppo", 100): [0, 1], ("impact", 100): [0, 2]}
    root = repository(tmp_path / "seeds", [entry("x", ["Env-v0"])], [])
    write_table(root / "data" / "x", "Env-v0", {("ppo", 1): [0, 1], ("impact", 1): [0, 2]})
    with pytest.raises(SystemExit, match=r"reports seeds \[1\]: reporting seeds start at 100"):
        tables_main(root)
    root = repository(tmp_path / "records", [entry("x", ["Env-v0"])], [])
    write_table(root / "data" / "x", "Env-v0", curves)
    (root / "data" / "x" / "runs" / "Env-v0" / "impact_seed100.json").unlink()
    with pytest.raises(SystemExit, match=r"runs without their record.*\('impact', 100\)"):
        tables_main(root)
    for change, cause in [
        ({"eval_episodes": 5}, "eval_episodes differs"),
        ({"eval_freq": 2000}, "eval_freq differs"),
        ({"machine": {**machine_description(), "name": "Other CPU x2"}}, "machine differs"),
        ({"machine": {**machine_description(), "software": {"torch": "2.0.0"}}}, "torch differs"),
    ]:
        root = repository(tmp_path / cause.split()[0], [entry("x", ["Env-v0"])], [])
        write_table(root / "data" / "x", "Env-v0", curves, {("impact", 100): change})
        with pytest.raises(SystemExit, match=cause):
            tables_main(root)


def test_the_protocol_checks_name_their_cause():
    check_reporting_seeds([100, 101], "t")
    with pytest.raises(ProtocolError, match=r"seeds \[0, 99\]"):
        check_reporting_seeds([0, 99, 100], "t")
    one_algo = [record("ppo", "E", 100), record("ppo", "E", 101, eval_episodes=3)]
    check_comparison(one_algo, "t")  # nothing compared
    # One model name covers several CPU generations; a record written before they were stored has none to compare.
    zen4, zen5, older = (
        {**machine_description(), "cpu_generation": generation}
        for generation in ("family 25 model 17", "family 26 model 2", None)
    )
    check_comparison([record("ppo", "E", 100, machine=zen4), record("sac", "E", 100, machine=older)], "t")
    with pytest.raises(ProtocolError, match=r"CPU generation differs: \"family 25 model 17\" \(ppo seed 100\)"):
        check_comparison([record("ppo", "E", 100, machine=zen4), record("sac", "E", 100, machine=zen5)], "t")
    with pytest.raises(ProtocolError, match="eval_episodes differs: 10 \\(ppo seed 100\\); 3 \\(sac seed 101\\)"):
        check_comparison([record("ppo", "E", 100), record("sac", "E", 101, eval_episodes=3)], "t")
    assert eval_policy("BreakoutNoFrameskip-v4") == "stochastic" and eval_policy("Hopper-v5") == "deterministic"
    check_eval_settings(["BreakoutNoFrameskip-v4"], 10)
    check_eval_settings(["BreakoutNoFrameskip-v4"], 0)  # throughput runs evaluate nothing
    with pytest.raises(ProtocolError, match="at least 10 whole games"):
        check_eval_settings(["Hopper-v5", "BreakoutNoFrameskip-v4"], 5)
    assert human_normalized("QbertNoFrameskip-v4", 163.9) == 0.0
    assert human_normalized("ALE/Breakout-v5", 30.5) == pytest.approx(1.0)
    with pytest.raises(ProtocolError, match="no random/human reference scores for 'Tennis'"):
        human_normalized("TennisNoFrameskip-v4", 1.0)


def test_the_runner_evaluates_atari_stochastically_and_refuses_few_games(tmp_path):
    pytest.importorskip("ale_py")
    args = run_module.parse_args(["--algos", "ppo", "--env", "BreakoutNoFrameskip-v4", "Pendulum-v1", "--out", str(tmp_path)])
    assert [spec.deterministic for spec in run_module.run_specs(args)][::3] == [False, True]
    with pytest.raises(SystemExit, match="at least 10 whole games"):
        run_module.main(["--algos", "ppo", "--env", "BreakoutNoFrameskip-v4", "--eval-episodes", "3", "--out", str(tmp_path)])


def test_append_refuses_a_comparison_whose_kept_runs_differ_and_records_survive_summarize(tmp_path):
    write_table(tmp_path, "CartPole-v1", {("ppo", 100): [0, 1], ("impact", 100): [0, 2]})
    argv = ["--algos", "ppo", "--env", "CartPole-v1", "--first-seed", "101", "--seeds", "1", "--out", str(tmp_path)]
    with pytest.raises(SystemExit, match=r"--append to CartPole-v1's table compares algorithms.*eval_episodes differs"):
        run_module.main([*argv, "--append", "--steps", "4000", "--eval-freq", "1000", "--eval-episodes", "5"])
    before = {path.name: path.read_text() for path in (tmp_path / "runs" / "CartPole-v1").iterdir()}
    run_module.main(["--algos", "ppo", "impact", "--env", "CartPole-v1", "--summarize", "--eval-episodes", "3",
                     "--eval-freq", "7", "--out", str(tmp_path)])  # fmt: skip
    summary = json.loads((tmp_path / "CartPole-v1.json").read_text())
    assert summary["eval_episodes"] == 10 and summary["eval_freq"] == 1000 and "--eval-episodes 10" in summary["command"]
    assert {path.name: path.read_text() for path in (tmp_path / "runs" / "CartPole-v1").iterdir()} == before
    assert len(summary["runs"]) == 2


def test_an_atari_table_gives_human_normalised_scores_an_iqm_and_a_profile(tmp_path, monkeypatch):
    monkeypatch.setattr(statistics, "BOOTSTRAP_REPS", 100)  # the page's format is tested, not the intervals' precision
    games = ["QbertNoFrameskip-v4", "BreakoutNoFrameskip-v4"]
    root = repository(tmp_path, [entry("atari", games, kind="atari")], [
        {"algorithm": "PTR-PPO", "env": "Qbert, Breakout", "budget": "4k steps", "table": "atari", "algo": "ptr_ppo",
         "against": "PPO"}])  # fmt: skip
    rng = np.random.default_rng(0)
    for game, scale in zip(games, (500.0, 10.0), strict=True):
        curves = {(algo, seed): [0, *(rng.uniform(0, scale) * (2 if algo == "ptr_ppo" else 1) for _ in range(4))]
                  for algo in ("ppo", "ptr_ppo") for seed in (100, 101, 102)}  # fmt: skip
        write_table(root / "data" / "atari", game, curves)
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    assert "| Qbert |" in page and "| Breakout |" in page and "IQM of human-normalised scores" in page
    assert "stochastic evaluation episodes" in page and (root / "data" / "atari" / "profile.png").is_file()
    assert "IQM human-normalised" in (root / "README.md").read_text()


def test_the_readme_atari_row_waits_for_every_game(tmp_path, monkeypatch):
    monkeypatch.setattr(statistics, "BOOTSTRAP_REPS", 100)
    games = ["QbertNoFrameskip-v4", "BreakoutNoFrameskip-v4"]
    root = repository(tmp_path, [entry("atari", games, kind="atari")], [
        {"algorithm": "PTR-PPO", "env": "Qbert, Breakout", "budget": "4k steps", "table": "atari", "algo": "ptr_ppo",
         "against": "PPO"}])  # fmt: skip
    curves = {(algo, seed): [0, 1, 2, 3, 4] for algo in ("ppo", "ptr_ppo") for seed in (100, 101, 102)}
    write_table(root / "data" / "atari", "BreakoutNoFrameskip-v4", curves)  # Qbert has not run yet
    tables_main(root)
    # Over Breakout, named; 3 runs of 1 game: the quarter cut off each end is no run, so the "IQM" is the mean.
    assert (
        "mean of human-normalised scores over the games with 3 seeds or more (Breakout), on the 3 seeds every algo has"
        in (root / "docs" / "results.md").read_text()
    )
    readme = (root / "README.md").read_text()
    assert "not yet re-measured under the protocol: 1 of 2 games so far" in readme and "IQM human-normalised" not in readme


def test_an_atari_game_still_filling_says_which_algo_has_which_seeds_and_is_not_aggregated(tmp_path):
    root = repository(tmp_path, [entry("atari", ["BreakoutNoFrameskip-v4"], kind="atari")], [])
    curves = {("ppo", seed): [0, 1, 2, 3, 4] for seed in (100, 101, 102)}
    curves[("ptr_ppo", 100)] = [0, 1, 2, 3, 5]
    write_table(root / "data" / "atari", "BreakoutNoFrameskip-v4", curves)
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    assert "`ppo` 100, 101, 102; `ptr_ppo` 100 |" in page
    assert "No game has 3 seeds of every algorithm yet" in page and "of human-normalised scores" not in page


def test_the_atari_aggregate_compares_the_same_seeds_on_every_side(tmp_path):
    """A seed one algo has and another not yet (a table filling over sittings) weighs on neither side; the runs are
    seeds, not each game's scores sorted and cut (which dropped a game's best run where it had one seed more)."""
    games = ["QbertNoFrameskip-v4", "BreakoutNoFrameskip-v4"]
    root = repository(tmp_path, [entry("atari", games, kind="atari")], [])
    breakout = {(algo, seed): [0, 0, 0, 0, 10 + seed - 100] for algo in ("ppo", "ptr_ppo") for seed in (100, 101, 102)}
    breakout[("ppo", 103)] = [0, 0, 0, 0, 1.0]  # PPO's fourth seed; PTR-PPO's is still to run
    qbert = {
        (algo, seed): [0, 0, 0, 0, 1000 + 100 * (seed - 100)] for algo in ("ppo", "ptr_ppo") for seed in (100, 101, 102, 103)
    }
    qbert[("ptr_ppo", 103)] = [0, 0, 0, 0, 5000]  # a seed every algo has on Qbert but not on Breakout
    write_table(root / "data" / "atari", "BreakoutNoFrameskip-v4", breakout)
    write_table(root / "data" / "atari", "QbertNoFrameskip-v4", qbert)
    table = tables.Table(entry("atari", games, kind="atari"), root, {})
    complete, matrices = table.atari_matrices()
    assert complete == games
    for algo in ("ppo", "ptr_ppo"):
        expected = [[human_normalized(games[0], 1000 + 100 * run), human_normalized(games[1], 10 + run)] for run in range(3)]
        np.testing.assert_allclose(matrices[algo], expected)


def test_an_atari_table_whose_only_run_was_interrupted_has_no_aggregate(tmp_path):
    root = repository(tmp_path, [entry("atari", ["BreakoutNoFrameskip-v4"], kind="atari")], [])
    folder = root / "data" / "atari"
    failed = EvalPoint("ppo", "BreakoutNoFrameskip-v4", 100, 0, 0.0, 0.0, 0.0, status="failed", error="KeyboardInterrupt()")
    write_csv([failed], folder / "BreakoutNoFrameskip-v4.csv")
    write_run_record(folder, record("ppo", "BreakoutNoFrameskip-v4", 100, status="failed", error="KeyboardInterrupt()"))
    tables_main(root)
    assert "No game has 3 seeds of every algorithm yet" in (root / "docs" / "results.md").read_text()


def test_a_table_with_no_run_yet_names_its_recipe_whatever_its_kind(tmp_path):
    root = repository(tmp_path, [entry("atari", ["BreakoutNoFrameskip-v4"], kind="atari"), entry("mujoco", ["Hopper-v5"])], [])
    tables_main(root)  # neither data folder exists yet
    page = (root / "docs" / "results.md").read_text()
    assert page.count("Not yet re-measured under the protocol: the recipe is") == 2
    assert "| game |" not in page  # no table whose rows have more cells than its header


def test_a_manifest_table_without_its_block_is_refused(tmp_path):
    root = repository(tmp_path, [entry("x", ["Env-v0"])], [])
    text = (root / "docs" / "results.md").read_text()
    (root / "docs" / "results.md").write_text(text.replace("<!-- generated: x -->\n<!-- end generated: x -->\n", ""))
    with pytest.raises(SystemExit, match=r"has no block for \['x'\]"):
        tables_main(root)
    shutil.rmtree(root / "docs")


def test_an_algorithm_page_gets_that_algorithms_readme_rows_and_must_have_their_block(tmp_path):
    rows = [
        {"algorithm": "IMPACT", "env": "Env-v0", "budget": "4k steps", "table": "x", "algo": "impact", "against": "PPO"},
        {"algorithm": "IMPACT (MlpLstmPolicy)", "env": "Env-v1", "budget": "1k steps", "against": "PPO"},
        {"algorithm": "IMPALA", "env": "Env-v0", "budget": "2k steps", "against": "PPO"},
    ]
    root = repository(tmp_path, [entry("x", ["Env-v0"])], rows)
    manifest = yaml.safe_load((root / "benchmarks" / "tables.yml").read_text())
    manifest["algorithm_pages"] = {"docs/impact.md": "IMPACT"}
    (root / "benchmarks" / "tables.yml").write_text(yaml.safe_dump(manifest))
    page = root / "docs" / "impact.md"
    block = "<!-- generated: results-rows -->\n<!-- end generated: results-rows -->\n"
    page.write_text(f"# IMPACT\n\n{block}")
    curves = {("ppo", seed): [0, 5, 10, 20, 30] for seed in (100, 101, 102)}
    curves.update({("impact", seed): [0, 20, 30, 40, 50] for seed in (100, 101, 102)})
    write_table(root / "data" / "x", "Env-v0", curves)
    tables_main(root)
    text = page.read_text()
    assert "| IMPACT | Env-v0 | 4k steps | 50.0 [50.0, 50.0] | PPO 30.0 [30.0, 30.0] |" in text
    assert "| IMPACT (MlpLstmPolicy) | Env-v1 | 1k steps | not yet re-measured" in text and "IMPALA" not in text
    assert "| IMPALA | Env-v0 | 2k steps |" in (root / "README.md").read_text()
    page.write_text("# IMPACT\n")
    with pytest.raises(SystemExit, match=r"docs/impact.md has no block for \['results-rows'\]"):
        tables_main(root)


def evaluations(returns: list[float], stds: list[float] | None = None) -> list[EvalPoint]:
    """One run evaluated at 0, 1000, ... steps (1 s of training per 1000 steps)."""
    stds = stds or [0.0] * len(returns)
    return [
        EvalPoint("a", "Env-v0", 100, 1000 * i, float(i), value, std)
        for i, (value, std) in enumerate(zip(returns, stds, strict=True))
    ]


def test_a_crossing_counts_only_where_the_next_two_evaluations_hold_it_within_their_noise():
    """The rule: at or above the target, and each of the next two evaluations at or above the target less its standard
    error (eval_std / sqrt(episodes)); near the end every evaluation left must hold, and the last counts as it is."""
    from benchmarks.summary import held_crossing, time_to_return

    def crossing(returns, stds=None, step_budget=None):
        hit = held_crossing(evaluations(returns, stds), 10.0, eval_episodes=4, step_budget=step_budget)
        return hit and hit.steps

    assert crossing([0, 10, 3, 10, 10, 10]) == 3000  # a spike: the evaluation after it falls back
    assert crossing([0, 10, 10, 3, 10, 10]) == 4000  # held for one evaluation only: not held
    assert crossing([0, 10, 9, 9, 0, 0], [0, 0, 2, 2, 0, 0]) == 1000  # 9 >= 10 - 2 / sqrt(4): within the noise
    assert crossing([0, 10, 9, 9, 0, 0], [0, 0, 1.9, 2, 0, 0]) is None  # 9 < 10 - 0.95: beyond it
    assert crossing([12, 5, 5, 5, 5]) is None  # the untrained policy's evaluation (step 0) never counts
    # The end of the run: the evaluations left must hold; the last one, with none after it, counts as it is.
    assert crossing([0, 5, 5, 10, 10]) == 3000 and crossing([0, 5, 5, 10, 9]) is None
    assert crossing([0, 5, 5, 5, 10]) == 4000
    assert crossing([0, 5, 10, 10, 3, 12], step_budget=4000) is None  # evaluations past the step budget are not seen
    assert time_to_return(evaluations([0, 10, 3, 5, 4]), 10.0, eval_episodes=4) == (4000, 4.0, True, False)  # censored
    assert time_to_return(evaluations([0, 10, 10, 10]), 10.0, eval_episodes=4) == (1000, 1.0, False, True)


def test_a_table_pairs_held_crossings_on_both_sides(tmp_path):
    """Ours spikes to the baseline's median once and falls back: censored (a bound), not a ratio of 0.25. The
    baseline's own time to its median return is its held crossing too."""
    root = repository(tmp_path, [entry("x", ["Env-v0"])], [])
    curves = {}
    for seed in (100, 101, 102):
        curves[("ppo", seed)] = [0, 30, 5, 10, 20, 30]  # a spike at 1000 steps; held at the budget, 5000
        curves[("impact", seed)] = [0, 30, 10, 10, 30, 30] if seed == 100 else [0, 5, 30, 10, 10, 20]
    write_table(root / "data" / "x", "Env-v0", curves, {key: {"steps": 5000} for key in curves})
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    impact = "| `impact` | 3 | 20.0 [20.0, 30.0] | 23.3 [20.0, 30.0] | 0.17 [0.00, 0.50] |"
    assert impact + " >= 1.00 [0.80, 1.00] (ours censored in 2) |" in page  # first crossings: 2.00 [1.00, 2.00]
    assert "100: 4000 / 5000 steps, 101: 5000c / 5000 steps, 102: 5000c / 5000 steps" in page


def test_no_ratio_where_the_baseline_ends_at_an_untrained_or_random_return_or_both_hold_it_from_the_start(tmp_path):
    row = {"algorithm": "X", "env": "Env-v0", "budget": "4k steps", "table": "x", "algo": "impact", "against": "PPO",
           "measure": "steps"}  # fmt: skip
    untrained = {(algo, seed): [50, 10, 20, 30, 40] if algo == "ppo" else [0, 60, 70, 80, 90]
                 for algo in ("ppo", "impact") for seed in (100, 101, 102)}  # fmt: skip
    from_the_start = {(algo, seed): [0, 10, 10, 10, 10] if algo == "ppo" else [0, 20, 20, 20, 20]
                      for algo in ("ppo", "impact") for seed in (100, 101, 102)}  # fmt: skip
    for name, env, curves, reason in [
        ("untrained", "Env-v0", untrained, "the baseline's untrained policy already scores it (50.0 at step 0)"),
        ("random", "BreakoutNoFrameskip-v4", {key: [value / 40 for value in values] for key, values in untrained.items()},
         "random play already scores it (1.7)"),  # the baseline ends at 1.0, random play scores 1.7 (Mnih et al.)
        ("first", "Env-v0", from_the_start, "both sides hold it from the first evaluation"),
    ]:  # fmt: skip
        root = repository(tmp_path / name, [entry("x", [env])], [{**row, "env": env}])
        write_table(root / "data" / "x", env, curves)
        tables_main(root)
        assert f"| no ratio: {reason} |" in (root / "docs" / "results.md").read_text()
        target = {"untrained": "40.0", "random": "1.0", "first": "10.0"}[name]
        assert f"| no ratio to {target}: {reason} | 3 |" in (root / "README.md").read_text()


def test_a_seed_where_both_hold_the_return_from_the_first_evaluation_bounds_nothing():
    """Both times are only known to be at most the grid's first point: that seed's ratio may be anything."""
    from benchmarks.cells import ratio_cell
    from benchmarks.summary import median_bounds

    def seed(ratio, both_first):
        return {"r": ratio, "censored": False, "baseline_censored": False, "both_at_first_evaluation": both_first}

    per_seed = [seed(1.0, True), seed(0.5, False), seed(0.6, False)]
    assert median_bounds(per_seed, "r") == [0.5, 0.6]
    paired = {"r": {"n": 3, "median": 0.6, "min": 0.5, "max": 1.0}, "r_median_bounds": [0.5, 0.6], "censored": 0,
              "baseline_censored": 0, "both_at_first_evaluation": 1, "no_ratio": None}  # fmt: skip
    assert ratio_cell(paired, "r") == "0.50 to 0.60 [0.50, 1.00] (both at the first evaluation in 1)"


def test_an_iqm_over_fewer_than_4_runs_is_named_the_mean_and_the_readme_gives_p_better(tmp_path):
    from benchmarks.statistics import central_name

    assert central_name([3, 3]) == "mean" and central_name([4, 12]) == "IQM"
    assert central_name([3, 5]) == "IQM (mean under 4 runs)"
    row = {"algorithm": "X", "env": "Env-v0", "budget": "4k steps", "table": "x", "algo": "impact", "against": "PPO",
           "measure": "steps"}  # fmt: skip
    for seeds, name in [((100, 101, 102), "mean"), ((100, 101, 102, 103), "IQM")]:
        root = repository(tmp_path / name, [entry("x", ["Env-v0"])], [row])
        curves = {("ppo", seed): [0, 5, 10, 20, 30] for seed in seeds}
        curves.update({("impact", seed): [0, 20, 30, 40, 50 + seed - 100] for seed in seeds})
        write_table(root / "data" / "x", "Env-v0", curves)
        tables_main(root)
        header = f"| algo | seeds | return at the budget | {name} [95% CI] | P(better than ppo) [95% CI] |"
        assert header in (root / "docs" / "results.md").read_text()
    readme = (root / "README.md").read_text()
    assert "| paired ratio (median [min, max] over seeds) | seeds | P(better than its ablation) |" in readme
    row = "| X | Env-v0 | 4k steps | 51.5 [50.0, 53.0] | PPO 30.0 [30.0, 30.0] | 1.00 [1.00, 1.00] |"
    assert row + " 0.50 [0.50, 0.50] the steps to 30.0 | 4 | - |" in readme


def test_the_readme_gives_p_better_than_the_ablation_once_it_ran_in_the_rows_table(tmp_path, monkeypatch):
    monkeypatch.setattr(statistics, "BOOTSTRAP_REPS", 100)
    row = {"algorithm": "X", "env": "Env-v0", "budget": "4k steps", "table": "x", "algo": "impact", "against": "PPO",
           "measure": "steps", "ablation": "impact[collector=sync]"}  # fmt: skip
    seeds = (100, 101, 102)
    curves = {("ppo", seed): [0, 5, 10, 20, 30] for seed in seeds}
    curves.update({("impact", seed): [0, 20, 30, 40, 50 + seed - 100] for seed in seeds})
    root = repository(tmp_path / "before", [entry("x", ["Env-v0"])], [row])
    write_table(root / "data" / "x", "Env-v0", curves)
    tables_main(root)
    assert "the steps to 30.0 | 3 | not yet run (impact[collector=sync]) |" in (root / "README.md").read_text()
    # Ours ends at 50, 51, 52; the ablation at 40, 45, 60: ours is above in 6 of the 9 pairs of runs.
    curves.update(
        {("impact[collector=sync]", seed): [0, 10, 20, 30, value] for seed, value in zip(seeds, (40, 45, 60), strict=True)}
    )
    root = repository(tmp_path / "after", [entry("x", ["Env-v0"])], [row])
    write_table(root / "data" / "x", "Env-v0", curves)
    tables_main(root)
    readme = (root / "README.md").read_text()
    assert "the steps to 30.0 | 3 | 0.67 [" in readme and "] (impact[collector=sync]) |" in readme


def test_an_unchanged_rows_ablation_on_fresh_seeds_is_read_from_its_own_table_once_it_has_3_seeds(tmp_path, monkeypatch):
    """The row keeps its table (seeds 100-102); its ``ablation_table`` has the method beside its ablation on seeds
    200-202: the cell compares those two on the seeds both have, names them, and waits for the protocol's 3."""
    monkeypatch.setattr(statistics, "BOOTSTRAP_REPS", 100)
    row = {"algorithm": "X", "env": "Env-v0", "budget": "4k steps", "table": "x", "algo": "impact", "against": "PPO",
           "measure": "steps", "ablation": "impact[collector=sync]", "ablation_table": "x_200"}  # fmt: skip
    claim = {("ppo", seed): [0, 5, 10, 20, 30] for seed in (100, 101, 102)}
    claim.update({("impact", seed): [0, 20, 30, 40, 50] for seed in (100, 101, 102)})
    # Seeds 200-202: ours ends at 50, 51, 52, the ablation at 40, 45, 60 (ours above in 6 of 9 pairs); the
    # ablation's seed 203, which ours lacks, is left out.
    fresh = {("impact", seed): [0, 20, 30, 40, 50 + seed - 200] for seed in (200, 201, 202)}
    fresh.update({("impact[collector=sync]", seed): [0, 10, 20, 30, end] for seed, end in
                  zip((200, 201, 202, 203), (40, 45, 60, 0), strict=True)})  # fmt: skip
    fresh.update({("ppo", seed): [0, 5, 10, 20, 30] for seed in (200, 201, 202, 203)})  # the baseline beside them
    for name, seeds, expected in [
        ("two", (200, 201), "| 3 | 2 of 3 seeds so far (impact[collector=sync]; seeds 200-201) |"),
        ("three", (200, 201, 202, 203), "| 3 | 0.67 ["),
    ]:
        root = repository(tmp_path / name, [entry("x", ["Env-v0"]), entry("x_200", ["Env-v0"])], [row])
        write_table(root / "data" / "x", "Env-v0", claim)
        write_table(root / "data" / "x_200", "Env-v0", {key: curve for key, curve in fresh.items() if key[1] in seeds})
        tables_main(root)
        readme = (root / "README.md").read_text()
        assert "| X | Env-v0 | 4k steps | 50.0 [50.0, 50.0] | PPO 30.0 [30.0, 30.0] |" in readme  # the row's own seeds
        assert expected in readme, readme
    assert "] (impact[collector=sync]; seeds 200-202) |" in readme
    root = repository(tmp_path / "typo", [entry("x", ["Env-v0"])], [{**row, "ablation_table": "x_2000"}])
    write_table(root / "data" / "x", "Env-v0", claim)
    with pytest.raises(SystemExit, match="no table 'x_2000'"):
        tables_main(root)


def test_a_table_of_some_of_a_folders_algos_sets_a_method_against_a_second_ablation(tmp_path, monkeypatch):
    """``algos`` keeps only those algos of the data folder: the method against an ablation that is not the README's,
    with the ablation as the baseline; a name the folder has no runs of is refused."""
    monkeypatch.setattr(statistics, "BOOTSTRAP_REPS", 100)
    pair = ["impact", "impact[clip=inf]"]
    root = repository(tmp_path, [entry("x", ["Env-v0"]), entry("x_clip", ["Env-v0"], data="data/x", algos=pair,
                                                                 baseline="impact[clip=inf]")], [])  # fmt: skip
    curves = {("ppo", seed): [0, 5, 10, 20, 30] for seed in (100, 101, 102)}
    curves.update({("impact", seed): [0, 20, 30, 40, 50] for seed in (100, 101, 102)})
    curves.update({("impact[clip=inf]", seed): [0, 20, 30, 35, 40 + seed - 100] for seed in (100, 101, 102)})
    write_table(root / "data" / "x", "Env-v0", curves)
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    whole, pair_block = page.split("<!-- generated: x_clip -->")
    assert "| `ppo` | 3 |" in whole and "P(better than ppo)" in whole
    assert "| `ppo` |" not in pair_block and "P(better than impact[clip=inf])" in pair_block
    assert "| `impact` | 3 | 50.0 [50.0, 50.0] |" in pair_block and "| 1.00 [1.00, 1.00] |" in pair_block
    manifest = yaml.safe_load((root / "benchmarks" / "tables.yml").read_text())
    manifest["tables"][1]["algos"] = ["impact", "impact[clip=0]"]
    (root / "benchmarks" / "tables.yml").write_text(yaml.safe_dump(manifest))
    with pytest.raises(SystemExit, match=r"no runs of \['impact\[clip=0\]'\]"):
        tables_main(root)


def declared_search(**fields) -> dict:
    """A search ``s`` of ``impact`` and ``impact[ent_coef=0.01]`` on ``Env-v0`` (data/s), with ``fields`` (budget,
    criterion, seeds...) added or replaced."""
    return {"name": "s", "page": "docs/results.md", "envs": ["Env-v0"], "data": ["data/s"],
            "candidates": ["impact", "impact[ent_coef=0.01]"], "recipe": "benchmarks/recipes/tuning.sh", **fields}  # fmt: skip


def search_repository(tmp_path: Path, search: dict) -> Path:
    """A repository root whose manifest declares ``search`` alone, its table's block on the results page."""
    root = repository(tmp_path, [], [])
    manifest = yaml.safe_load((root / "benchmarks" / "tables.yml").read_text())
    (root / "benchmarks" / "tables.yml").write_text(yaml.safe_dump({**manifest, "searches": [search]}))
    with (root / "docs" / "results.md").open("a") as page:
        page.write(f"<!-- generated: {search['name']} -->\n<!-- end generated: {search['name']} -->\n")
    return root


def test_a_search_is_read_by_its_declared_criterion_and_says_which_runs_it_lacks(tmp_path):
    search = declared_search(budget=4000, last=2, drop=10, seeds=[0, 1])
    root = search_repository(tmp_path, search)
    # Evaluated at 0, 1000, ..., 5000 steps (std 0 in every evaluation); 5000 is past the budget and not counted.
    write_table(root / "data" / "s", "Env-v0", {("impact", 0): [0, 50, 60, 30, 40, 999],
                                                ("impact", 1): [0, 10, 20, 30, 40, 999],
                                                ("impact[ent_coef=0.01]", 0): [0, 10, 20, 30, 50, 999]})  # fmt: skip
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    # Seed 0: the last 2 evaluations up to 4000 steps are 30 and 40 (mean 35); one drop of 30 after 2000 steps.
    assert "| `impact` | Env-v0 | 0 | 35.0 (3k-4k steps) | 1 | 4 | 35.0 (2 runs) |" in page
    assert "| `impact` | Env-v0 | 1 | 35.0 (3k-4k steps) | 0 | 4 |  |" in page
    assert "| `impact[ent_coef=0.01]` | Env-v0 | 0 | 40.0 (3k-4k steps) | 0 | 4 | 40.0 (1 run) |" in page
    assert "3 of the 4 declared runs so far; still needed: `impact[ent_coef=0.01]` Env-v0 1." in page
    assert "Data: data/s. Recipe: [benchmarks/recipes/tuning.sh](../benchmarks/recipes/tuning.sh)." in page
    # A search is for tuning seeds: a reporting seed in its data is refused.
    write_table(root / "data" / "s", "Env-v0", {("impact", 100): [0, 1, 2, 3, 4, 5]})
    with pytest.raises(SystemExit, match=r"seeds \[100\] are reporting seeds"):
        tables_main(root)


def test_a_search_counts_the_evaluation_due_at_its_budget_though_it_lands_past_it(tmp_path):
    """A peer evaluates at the end of the iteration that passes each mark of its grid (RLlib's: a few hundred steps
    later), so the evaluation due at the budget lands past it; its place on the grid (every ``eval_freq``) counts."""
    search = declared_search(budget=4000, last=2, drop=10, seeds=[0], candidates=["impact"], through_budget=True)
    root = search_repository(tmp_path, search)
    folder = root / "data" / "s"
    steps, returns = [0, 1080, 2050, 3010, 4120, 5030], [0, 10, 20, 30, 40, 999]
    write_csv([EvalPoint("impact", "Env-v0", 0, step, float(index), value, 1.0, machine="m")
               for index, (step, value) in enumerate(zip(steps, returns, strict=True))], folder / "Env-v0.csv")  # fmt: skip
    write_run_record(folder, record("impact", "Env-v0", 0))  # every 1000 steps
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    assert "| `impact` | Env-v0 | 0 | 35.0 (3k-4k steps) | 0 | 0 | 35.0 (1 run) |" in page
    # The searches declared before the rule were decided on the evaluations at or below the budget in steps.
    (root / "benchmarks" / "tables.yml").write_text(yaml.safe_dump({"tables": [], "readme": [], "searches": [
        {**search, "through_budget": False}]}))  # fmt: skip
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    assert "| `impact` | Env-v0 | 0 | 25.0 (2k-3k steps) | 0 | 0 | 25.0 (1 run) |" in page


def test_a_search_with_a_target_is_read_by_the_held_steps_to_it(tmp_path):
    """``target``: the criterion is the median over seeds of each run's held steps to the return (std 0 here, so a
    held crossing needs the next two evaluations at or above it); a run that never holds it counts at the budget."""
    search = declared_search(budget=5000, target=50, seeds=[0, 1, 2])
    root = search_repository(tmp_path, search)
    write_table(root / "data" / "s", "Env-v0", {("impact", 0): [0, 50, 10, 50, 50, 50],  # 1000 not held: 3000
                                                ("impact", 1): [0, 10, 50, 50, 50, 50],  # 2000
                                                ("impact", 2): [0, 10, 20, 30, 40, 45],  # never: the budget
                                                ("impact[ent_coef=0.01]", 0): [0, 50, 50, 50, 40, 60]})  # fmt: skip
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    assert "| candidate | env | seed | steps to 50.0, held | drops > 1000, second half |" in page
    assert "| `impact` | Env-v0 | 0 | 3k | 0 | 5 | 3k steps (3 runs) |" in page
    assert "| `impact` | Env-v0 | 1 | 2k | 0 | 5 |  |" in page
    assert "| `impact` | Env-v0 | 2 | not held by 5k | 0 | 5 |  |" in page
    # 1000 is followed by 50, 50: held, though 40 comes later.
    assert "| `impact[ent_coef=0.01]` | Env-v0 | 0 | 1k | 0 | 5 | 1k steps (1 run) |" in page


def test_a_wall_clock_search_is_read_on_its_time_grid(tmp_path):
    """``seconds: [from, to]``: the criterion is the mean of the evaluations whose place on the time grid (every
    ``--eval-seconds``; each evaluation starts a little after its time) lies in the window; the budget is in seconds."""
    search = declared_search(budget=5, seconds=[2, 4], drop=15, seeds=[0], recipe="benchmarks/recipes/peers.sh")
    root = search_repository(tmp_path, search)
    late = [0.0, 1.3, 2.4, 3.1, 4.45, 5.2, 6.3]  # the evaluations due at 0, 1, ..., 6 s; 6 s is past the budget
    curves = {"impact": [0, 10, 20, 30, 40, 20, 99], "impact[ent_coef=0.01]": [0, 30, 20, 40, 45, 50, 99]}
    folder = root / "data" / "s"
    write_csv([EvalPoint(algo, "Env-v0", 0, 700 * index, late[index], value, 1.0, machine="m")
               for algo, values in curves.items() for index, value in enumerate(values)], folder / "Env-v0.csv")  # fmt: skip
    for algo in curves:
        write_run_record(folder, record(algo, "Env-v0", 0, steps=10**8, max_seconds=6, eval_freq=None, eval_seconds=1))
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    assert "| candidate | env | seed | mean of the evaluations at 2-4 s | drops > 15, second half |" in page
    # impact: 20, 30, 40 at 2-4 s (mean 30); the drop from 40 to 20 comes at 5 s, in the budget's second half.
    assert "| `impact` | Env-v0 | 0 | 30.0 (3 evaluations) | 1 | 0 | 30.0 (1 run) |" in page
    assert "| `impact[ent_coef=0.01]` | Env-v0 | 0 | 35.0 (3 evaluations) | 0 | 0 | 35.0 (1 run) |" in page
    assert "2 of the 2 declared runs so far." in page
    # A run made from a working tree whose spec differed is named by the variant it ran; one from a clean commit is not.
    other = root / "data" / "t"
    write_csv([replace(point, algo="impact") for point in read_csv(folder / "Env-v0.csv") if point.algo != "impact"],
              other / "Env-v0.csv")  # fmt: skip
    dirty = record("impact", "Env-v0", 0, steps=10**8, max_seconds=6, eval_freq=None, eval_seconds=1, commit="0a+dirty")
    write_run_record(other, dirty)
    write_csv([point for point in read_csv(folder / "Env-v0.csv") if point.algo == "impact"], folder / "Env-v0.csv")
    search |= {"data": ["data/s", "data/t"], "renamed": {"data/t": {"impact": "impact[ent_coef=0.01]"}}}
    (root / "benchmarks" / "tables.yml").write_text(yaml.safe_dump({"tables": [], "readme": [], "searches": [search]}))
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    assert "| `impact[ent_coef=0.01]` | Env-v0 | 0 | 35.0 (3 evaluations) | 0 | 0 | 35.0 (1 run) |" in page
    write_run_record(other, {**dirty, "commit": "0a"})
    with pytest.raises(SystemExit, match=r"impact seed 0 in data/t ran from a clean commit"):
        tables_main(root)


def test_a_search_whose_criterion_puts_out_a_policy_that_plays_one_way_says_so_and_needs_no_more_of_its_runs(tmp_path):
    search = declared_search(budget=4000, last=2, seeds=[0, 1], std_0_out=True)
    root = search_repository(tmp_path, search)
    write_table(root / "data" / "s", "Env-v0", {("impact", 0): [0, 50, 60, 30, 40]})

    def with_std(stds: list[float]) -> None:
        points = [replace(point, eval_std=std) for point, std in zip(read_csv(folder / "Env-v0.csv"), stds, strict=True)]
        write_csv(points, folder / "Env-v0.csv")

    folder = root / "data" / "s"
    with_std([0.0, 1.0, 1.0, 1.0, 1.0])  # std 0 only at step 0: in
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    assert "| `impact` | Env-v0 | 0 | 35.0 (3k-4k steps) | 0 | 0 | 35.0 (1 run) |" in page
    assert "still needed: `impact` Env-v0 1, `impact[ent_coef=0.01]` Env-v0 0, `impact[ent_coef=0.01]` Env-v0 1." in page
    with_std([0.0, 1.0, 1.0, 0.0, 1.0])  # one evaluation with std 0 after step 0: out
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    assert "| `impact` | Env-v0 | 0 | 35.0 (3k-4k steps) | 0 | 1 | out: an evaluation with std 0 (35.0 (1 run)) |" in page
    assert "still needed: `impact[ent_coef=0.01]` Env-v0 0, `impact[ent_coef=0.01]` Env-v0 1; not needed" in page
    assert "the candidate being out: 1 run of `impact`." in page


def test_the_settings_line_names_every_jobs_and_a_table_that_times_refuses_runs_made_two_at_a_time(tmp_path):
    """A step-based table filled over sittings may mix ``--jobs 2`` and ``--jobs 1``: its settings line says both. A
    table whose training times compare (alone) refuses a run that shared the machine with its invocation's others."""
    curves = {(algo, seed): [0, 10, 20, 30, 40] for algo in ("ppo", "impact") for seed in (100, 101, 102)}
    row = {"algorithm": "X", "env": "Env-v0", "budget": "4k steps", "table": "x", "algo": "impact", "against": "PPO"}
    root = repository(tmp_path / "steps", [entry("x", ["Env-v0"])], [row])
    two = "python -m benchmarks run --algos ppo --env Env-v0 --seeds 1 --first-seed 102 --jobs 2"
    write_table(
        root / "data" / "x", "Env-v0", curves, {("ppo", 102): {"jobs": 2, "command": two}, ("impact", 102): {"jobs": 2}}
    )
    tables_main(root)
    page = (root / "docs" / "results.md").read_text()
    assert "torch threads 1 per run, 1 or 2 run(s) at a time per invocation (step-based" in page
    assert "--jobs" not in page  # each run's command is listed once, its runs at once being said above
    root = repository(tmp_path / "alone", [entry("x", ["Env-v0"], alone=True)], [row])
    write_table(root / "data" / "x", "Env-v0", curves, {("impact", 101): {"jobs": 2}})
    with pytest.raises(SystemExit, match=r"compares training times \(alone\), but runs shared .*: impact seed 101;"):
        tables_main(root)
