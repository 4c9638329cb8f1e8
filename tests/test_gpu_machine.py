"""
benchmarks/recipes/gpu_machine.sh, a lent GPU machine's one device call, run whole at its small size on this machine's
CPU (``SIZE=small``), so that it cannot rot: every part runs and writes its data into ``$OUT``'s archive, the data
parse, and the tables command renders them. Without the data, the tables say the measurement is not made yet.
"""

import csv
import importlib.util
import json
import os
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from benchmarks import tables
from benchmarks.output import machine_description
from benchmarks.profiling.tables import gpu_overlap_table
from tests.commands import run_command

REPO_ROOT = Path(__file__).resolve().parents[1]
RECIPE = REPO_ROOT / "benchmarks" / "recipes" / "gpu_machine.sh"
PARTS = ["cuda_tests", "impact", "ppo", "ray", "impala"]


def gpu_machine_entries() -> list[dict]:
    """The manifest's entries for the GPU machine's tables."""
    manifest = tables.load_manifest()
    return [entry for entry in manifest["measurements"] if entry["recipe"] == "benchmarks/recipes/gpu_machine.sh"]


def render(root: Path, entries: list[dict]) -> str:
    """``python -m benchmarks tables`` on a repository at ``root`` whose manifest lists ``entries`` only; the page."""
    manifest = {"tables": [], "readme": [], "measurements": entries}
    (root / "benchmarks").mkdir(parents=True, exist_ok=True)
    (root / "benchmarks" / "tables.yml").write_text(yaml.safe_dump(manifest))
    (root / "README.md").write_text("<!-- generated: readme-results -->\n<!-- end generated: readme-results -->\n")
    blocks = ["results-summary", *(entry["name"] for entry in entries)]
    page = root / "docs" / "results.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text("".join(f"<!-- generated: {name} -->\n<!-- end generated: {name} -->\n" for name in blocks))
    tables.main(["--root", str(root), "--manifest", str(root / "benchmarks" / "tables.yml")])
    tables.main(["--root", str(root), "--manifest", str(root / "benchmarks" / "tables.yml"), "--check"])
    return page.read_text()


def test_without_their_data_the_gpu_machine_tables_say_not_yet_measured(tmp_path):
    entries = gpu_machine_entries()
    assert sorted(entry["kind"] for entry in entries) == ["gpu_overlap", "ray_scaling"]
    page = render(tmp_path, entries)
    assert page.count("Not yet measured. Recipe: [benchmarks/recipes/gpu_machine.sh]") == 2, page


@pytest.mark.timeout(1700)
def test_the_gpu_machine_recipe_runs_whole_at_its_small_size_and_its_tables_render(tmp_path):
    for module in ("ray", "ale_py"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"gpu_machine.sh needs {module}")
    out = tmp_path / "out"
    env = {**os.environ, "SIZE": "small", "OUT": str(out), "PYTHON": sys.executable}
    result = run_command(["bash", str(RECIPE)], cwd=REPO_ROOT, env=env, timeout=1600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert sorted(path.name for path in out.iterdir()) == ["gpu_machine.tar.gz", "logs.tar.gz", "summary.txt"]

    data = tmp_path / "docs" / "benchmarks"
    with tarfile.open(out / "gpu_machine.tar.gz") as archive:
        archive.extractall(data, filter="data")
    folder = data / "gpu_machine"
    with open(folder / "parts.tsv") as file:
        parts = {row["part"]: row for row in csv.DictReader(file, delimiter="\t")}
    assert list(parts) == PARTS and all(row["exit"] == "0" for row in parts.values()), parts
    assert "36 skipped" in (folder / "test_cuda.txt").read_text() or "passed" in (folder / "test_cuda.txt").read_text()
    for algo in ("impact", "impala"):
        name = f"throughput_{algo}[n_envs=2]_BreakoutNoFrameskip-v4_subproc_process.json"
        report = json.loads((folder / "breakout" / name).read_text())
        assert (report["vec_env"], report["collector"], report["device"], report["batch_env_steps"]) == (
            "subproc", "process", "cpu", {"impact": 64, "impala": 40}[algo],
        )  # fmt: skip
        seconds = ("C_collect", "L_learn", "T_async", "T_sync")
        assert all(report[f"{name}_seconds_per_batch"] > 0 for name in seconds), report
    with open(folder / "ppo" / "BreakoutNoFrameskip-v4.csv") as file:
        points = list(csv.DictReader(file))
    assert {point["algo"] for point in points} == {"ppo[n_envs=2]"} and int(points[-1]["steps"]) > 0
    scaling = json.loads((folder / "ray_scaling" / "ray_scaling.json").read_text())
    assert [(row["mode"], row["workers"]) for row in scaling["rows"]] == [("ceiling", 0), ("learn", 1), ("learn", 2)]
    assert all(row["steps_per_s"] > 0 for row in scaling["rows"])

    # The tables command renders them, as the manifest's entries would with the full size's file names.
    entries = gpu_machine_entries()
    for entry in entries:
        entry["data"] = [name.replace("n_envs=14", "n_envs=2") for name in entry["data"]]
    page = render(tmp_path, entries)
    assert "Not yet measured" not in page and "Not measured in this sitting" not in page, page
    for algo in ("impact", "impala"):
        assert f"| {algo}[n_envs=2] | BreakoutNoFrameskip-v4 | subproc | process | cpu |" in page
    assert "SB3 `ppo[n_envs=2]` on BreakoutNoFrameskip-v4, learner on cpu: **" in page
    assert "| ceiling (learner alone) |  |" in page and "| learn | 2 |" in page
    assert page.count("Machine: ") == 2
    summary = (out / "summary.txt").read_text()
    assert "| impact[n_envs=2] |" in summary and "| learn | 2 |" in summary, summary


def test_the_overlap_table_shows_an_interrupted_measurement_and_names_a_missing_file(tmp_path):
    entry = {"name": "x", "page": "docs/results.md", "kind": "gpu_overlap", "recipe": "benchmarks/recipes/gpu_machine.sh"}
    entry["data"] = ["complete.json", "interrupted.json", "missing.json"]
    report = {"algo": "impact", "env": "Env-v0", "vec_env": "subproc", "collector": "process", "device": "cuda",
              "batch_env_steps": 448.0, "C_collect_seconds_per_batch": 0.2, "L_learn_seconds_per_batch": 0.05,
              "T_async_seconds_per_batch": 0.21, "env_steps_per_second_async": 2133.3}  # fmt: skip
    report["machine"] = machine_description()
    (tmp_path / "complete.json").write_text(json.dumps({**report, "T_sync_seconds_per_batch": 0.25}))
    (tmp_path / "interrupted.json").write_text(json.dumps({**report, "interrupted": True}))
    text = gpu_overlap_table(entry, tmp_path)
    row = "| impact | Env-v0 | subproc | process | cuda | 0.200 | 0.050 | 0.210 |"
    # T_sync / T_async = 1.19 of the bound (C + L) / max(C, L) = 1.25: 0.95 of it.
    assert f"{row} 0.250 | 2133 | 1792 | 1.19 | 1.25 | **0.95** |" in text
    assert f"{row} - | 2133 | - | - | 1.25 | - |" in text
    assert "Not measured in this sitting: `missing.json`." in text
