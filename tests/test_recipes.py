"""
Each recipe of benchmarks/recipes/ reproduces its table's format: its first line, run at a small budget, writes
the files the results page's table comes from. The budget options are replaced (steps, seeds, seconds, workers)
and a ``run`` line trains on its first environment only (each further one is checked to be registered: every
environment of a ``run`` line goes through the same code); nothing else changes: the algorithms, variants and
recorders are the recipe's.

Lines of the subcommands that only train and time PyTorch/SB3 code (``IN_PROCESS``) run in this process, as
``python -m benchmarks`` would run them (the same ``main``), which spares each a fresh interpreter's imports; the
others keep a process of their own: ``gradient_step_cost`` compiles the loss (inductor's compile workers) and
``ray_scaling`` starts and stops its own Ray.
"""

import fnmatch
import importlib.util
import os
import re
import shlex
import sys
from pathlib import Path

import pytest
import torch as th
import yaml

from benchmarks import run as run_module
from benchmarks.__main__ import main as benchmarks_main
from benchmarks.peers import peer_python
from tests.commands import run_command

REPO_ROOT = Path(__file__).resolve().parents[1]
# A recipe made for one device call of a lent GPU machine runs whole, at its own small size, in a test of its own.
RUN_WHOLE = {"gpu_machine.sh": "tests/test_gpu_machine.py"}
RECIPES = sorted(path for path in (REPO_ROOT / "benchmarks" / "recipes").glob("*.sh") if path.name not in RUN_WHOLE)

# option -> small value; an option given several values (``--workers 1 2 4 8 16``) keeps only the first two. One
# PyTorch thread as in the rest of the suite: the collectors recipe's `--torch-threads 2` took 190 s here beside one
# CPU-bound process (35 s on the idle machine), threads spinning against each other.
SMALL_BUDGET = {
    "run": {"--steps": "1024", "--seeds": "1", "--max-seconds": "4", "--eval-seconds": "2", "--eval-freq": "512",
            "--eval-episodes": "1", "--jobs": "1", "--torch-threads": "1"},
    "iteration_cost": {"--steps": "1024", "--project-steps": "2048"},
    "gradient_step_cost": {"--memory-steps": "2048", "--steps": "5", "--warmup": "2", "--repeats": "1"},
    "ray_scaling": {"--seconds": "2", "--learn-steps": "512", "--repeats": "1", "--workers": "1 2"},
    "step_cost": {"--steps": "64", "--repeats": "1"},
}  # fmt: skip
IN_PROCESS = {"run", "iteration_cost", "step_cost"}
NEEDS = {"HalfCheetah": "mujoco", "Hopper": "mujoco", "Walker2d": "mujoco", "NoFrameskip": "ale_py", "ray_scaling": "ray"}


def recipe_lines(recipe: Path) -> list[str]:
    """The recipe's lines with continuations joined, comments left out."""
    lines = recipe.read_text().replace("\\\n", " ").splitlines()
    return [line for line in lines if not line.lstrip().startswith("#")]


def first_command(recipe: Path) -> list[str]:
    """
    The recipe's first ``python -m benchmarks`` line, as argv after ``-m benchmarks``, with the recipe's bash arrays
    (``WALL=(...)``, used as ``"${WALL[@]}"``) expanded.
    """
    text = "\n".join(recipe_lines(recipe))
    for name, items in re.findall(r"^(\w+)=\((.*)\)$", text, flags=re.MULTILINE):
        text = text.replace(f'"${{{name}[@]}}"', items).replace(f"${{{name}[@]}}", items)
    for line in text.splitlines():
        if re.match(r"\s*(OMP_NUM_THREADS=\d+\s+)?python -m benchmarks ", line):
            return shlex.split(line.split("python -m benchmarks", 1)[1])
    raise AssertionError(f"{recipe.name}: no `python -m benchmarks` line")


def with_small_budget(argv: list[str], out: Path) -> list[str]:
    small = SMALL_BUDGET[argv[0]]
    result, index = [argv[0]], 1
    while index < len(argv):
        option = argv[index]
        values = []
        index += 1
        while index < len(argv) and not argv[index].startswith("--"):
            values.append(argv[index])
            index += 1
        if option == "--out":
            values = [str(out)]
        elif option == "--env" and argv[0] == "run":
            values = values[:1]
        elif option in small:
            values = small[option].split()
        result += [option, *values]
    if argv[0] == "run" and "--steps" not in result and "--max-seconds" not in result:
        result += ["--steps", small["--steps"]]  # not the yml's n_timesteps
    if "--out" not in result:
        result += ["--out", str(out)]
    return result


def assert_registered(ids: list[str]) -> None:
    """Each id is one the runner can make (rl-zoo3's tasks and the ALE's registered as the runner registers them)."""
    import gymnasium as gym

    from benchmarks.config import register_atari
    from benchmarks.protocol import is_atari

    if any(is_atari(env_id) for env_id in ids):
        register_atari()
    for env_id in ids:
        gym.spec(env_id)  # raises gymnasium's NameNotFound / VersionNotFound naming the id


def run_in_this_process(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> str:
    """``python -m benchmarks ARGV`` through its ``main`` here, from the repository root; its stdout. The
    subcommands set PyTorch's threads (``--torch-threads``) and ``sys.argv``: both are restored afterwards."""
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # main sets sys.argv for the subcommand's parser
    threads = th.get_num_threads()
    try:
        benchmarks_main(argv)  # an error exits with its message (SystemExit) and fails the test with it
    finally:
        th.set_num_threads(threads)
    return capsys.readouterr().out


@pytest.mark.timeout(660)  # past the command's own 600 s limit, which reports with its output (run_command)
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda recipe: recipe.stem)
def test_recipe_first_line_runs_at_a_small_budget(recipe, tmp_path, monkeypatch, capsys):
    argv = first_command(recipe)
    line = " ".join(argv)
    for marker, module in NEEDS.items():
        if marker in line and importlib.util.find_spec(module) is None:
            pytest.skip(f"{recipe.name} needs {module}")
    if "rllib_" in line and not Path(peer_python()).is_file():
        pytest.skip(f"{recipe.name} needs RLlib's environment (the recipe makes it; tests/test_peers.py covers the runner)")
    if argv[0] == "run":
        assert_registered(run_module.parse_args(argv[1:]).envs)  # the runner's own reading of the line
    out = tmp_path / "out"
    if argv[0] in IN_PROCESS:
        output = run_in_this_process(with_small_budget(argv, out), monkeypatch, capsys)
    else:
        env = {**os.environ, "OUT": str(tmp_path), "OMP_NUM_THREADS": "1"}
        command = [sys.executable, "-m", "benchmarks", *with_small_budget(argv, out)]
        result = run_command(command, cwd=REPO_ROOT, env=env, timeout=600)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        output = result.stdout
    written = {path.suffix for path in out.rglob("*") if path.is_file()}
    assert {".csv", ".json"} <= written or {".csv", ".png"} <= written, f"{recipe.name} wrote {sorted(written)}"
    if argv[0] == "run":
        assert "failed" not in "".join(path.read_text() for path in out.glob("*.csv")), output[-3000:]


def written_folders(recipe: Path) -> list[str]:
    """The folders a recipe's commands write (``--out``), ``$OUT/`` left off; a shell variable (``$game``) stays."""
    text = "\n".join(recipe_lines(recipe))
    return [out.removeprefix("$OUT/") for out in re.findall(r'--out\s+"?([^"\s]+)', text)]


def test_every_table_and_search_has_the_recipe_line_that_writes_its_data():
    """Each data folder of benchmarks/tables.yml's tables and searches ends with a folder its recipe's lines write
    (``--out "$OUT/NAME"``, copied to docs/benchmarks/KIND/NAME), so that a generated table can be made again."""
    manifest = yaml.safe_load((REPO_ROOT / "benchmarks" / "tables.yml").read_text())
    lacking = []
    for entry in manifest["tables"] + manifest["searches"]:
        outs = written_folders(REPO_ROOT / entry["recipe"])
        patterns = [re.sub(r"\$\w+", "*", out) for out in outs if re.sub(r"\$\w+", "", out).strip("/")]  # not "$OUT"
        for folder in entry["data"] if isinstance(entry["data"], list) else [entry["data"]]:
            if not any(fnmatch.fnmatch(folder, pattern) or fnmatch.fnmatch(folder, f"*/{pattern}") for pattern in patterns):
                lacking.append(f"{entry['name']}: {folder} ({entry['recipe']})")
    assert not lacking, "no recipe line writes " + "; ".join(lacking)
