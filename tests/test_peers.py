"""
The peers (RLlib's APPO and IMPALA) through the benchmark runner: their runs go to RLlib's own environment and come
back as rows and records of the same tables; the protocol compares them with ours on the machine, the settings and
the packages both environments have. RLlib itself runs only where its environment exists (benchmarks/recipes/
peers.sh); elsewhere a stand-in with the same command line (tests/peer_stand_in.py) plays it.
"""

import json
import os
import signal
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from benchmarks import peers
from benchmarks import run as run_module
from benchmarks.output import machine_description, read_csv
from benchmarks.pool import RunSpec
from benchmarks.protocol import ProtocolError, check_comparison, read_run_records
from benchmarks.rllib_run import PEER_SETTINGS
from tests.test_tables import record


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
    sections = {"env_runners", "learners", "training", "rl_module"}
    for (algo, env_id), settings in PEER_SETTINGS.items():
        assert algo in peers.PEER_ALGOS and "rllib/tuned_examples/" in settings["source"], (algo, env_id)
        assert set(settings["config"]) <= sections, (algo, env_id)


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
    records = read_run_records(tmp_path / "out", "CartPole-v1")
    peer = records[("rllib_impala", 100)]
    assert peer["stack"] == "rllib" and "cartpole_impala.py" in peer["hyperparams"] and "stack" not in records[("impala", 100)]
    assert peer["machine"]["software"]["gymnasium"] == "1.2.2" and peer["machine"]["software"]["stable_baselines3"] is None
    summary = json.loads((tmp_path / "out" / "CartPole-v1.json").read_text())
    assert set(summary["algos"]) == {"impala", "rllib_impala"} and not summary["algos"]["rllib_impala"]["failed"]
    assert summary["machine"]["software"]["gymnasium"] != "1.2.2"  # the table's machine is ours, not the peer's
    # The next sitting appends a seed to the same table (the same machine and software on both sides).
    run_module.main(["--algos", "impala", "rllib_impala", *common, "--first-seed", "101", "--eval-episodes", "2",
                     "--peer-python", python, "--append", "--out", str(tmp_path / "out")])  # fmt: skip
    summary = json.loads((tmp_path / "out" / "CartPole-v1.json").read_text())
    assert summary["seeds"] == [100, 101] and summary["algos"]["rllib_impala"]["seeds"] == [100, 101]


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


@pytest.mark.skipif(not Path(peers.peer_python()).is_file(), reason="needs RLlib's environment: benchmarks/recipes/peers.sh")
@pytest.mark.timeout(300)
def test_rllib_impala_runs_under_the_protocol(tmp_path):
    """The real peer, where its environment exists: a short IMPALA run on CartPole-v1 gives its grid of points."""
    budget = ["--max-seconds", "10", "--eval-seconds", "5", "--eval-episodes", "2"]
    run_module.main(["--algos", "rllib_impala", "--env", "CartPole-v1", "--seeds", "1", "--first-seed", "100", *budget,
                     "--out", str(tmp_path)])  # fmt: skip
    points = read_csv(tmp_path / "CartPole-v1.csv")
    assert all(point.status == "ok" for point in points), points[-1].error
    assert points[0].steps == 0 and points[-1].wall_seconds >= 10 and len(points) >= 3
