"""
A Ray collector that started Ray itself leaves no Ray process behind. In a module of its own: the module-scoped
``local_ray`` fixture of test_ray_collector.py is torn down before this module runs.
"""

import contextlib
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from stable_baselines3.common.callbacks import BaseCallback

from benchmarks.profiling.timing import busy_processes
from sb3_impact import IMPACT

SMALL = dict(n_steps=16, policy_kwargs=dict(net_arch=[16]), device="cpu")


RAY_MARK = "SB3_IMPACT_RAY_CLEANUP_TEST"


def ray_processes(token: str) -> list[str]:
    """
    Command lines of the Ray processes on this machine (Linux /proc) whose environment holds ``RAY_MARK=token``: the
    ones this test's Ray started (they inherit the driver's environment), not those of another Ray on the machine
    (a benchmark's RLlib run beside the suite).
    """
    mark = f"{RAY_MARK}={token}".encode()
    found = []
    for process in Path("/proc").glob("[0-9]*"):
        try:
            text = (process / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if any(part in text for part in ("raylet", "gcs_server", "ray::", "default_worker.py")):
                if mark in (process / "environ").read_bytes().split(b"\0"):
                    found.append(text[:120])
        except OSError:  # the process ended, or is another user's
            continue
    return found


class BusyProcessesFromTrainingStart(BaseCallback):
    """
    Starts ``count`` CPU-bound processes when training starts: Ray is up by then (the collector starts it before the
    callbacks' training start), so the cores are taken while it collects and shuts down, which is what is checked.
    Taken during Ray's start as well, the test spent 95 s starting Ray.
    """

    def __init__(self, count: int, token: str) -> None:
        super().__init__()
        self.count, self.token = count, token
        self.processes: list[subprocess.Popen] = []
        self.ray_processes_in_training: list[str] = []
        self._busy = contextlib.ExitStack()

    def _on_training_start(self) -> None:
        self.ray_processes_in_training = ray_processes(self.token)  # the mark reaches this test's Ray processes
        self.processes = self._busy.enter_context(busy_processes(self.count))

    def _on_step(self) -> bool:
        return True

    def stop(self) -> None:
        self._busy.close()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process table from /proc")
@pytest.mark.parametrize("busy_processes", [0, 2], ids=["idle", "two-busy-processes"])
def test_a_collector_that_started_ray_leaves_no_ray_process(busy_processes, monkeypatch):
    """No Ray process 10 s after learn(), also with two CPU-bound processes taking the cores (CI, a busy machine)."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("Ray is already running in this process")
    token = uuid.uuid4().hex
    monkeypatch.setenv(RAY_MARK, token)  # inherited by the Ray processes the collector starts, and only by them
    busy = BusyProcessesFromTrainingStart(busy_processes, token)
    try:
        model = IMPACT("MlpPolicy", "CartPole-v1", collector="ray", collector_kwargs=dict(num_workers=1), seed=0, **SMALL)
        model.learn(200, callback=busy)
        assert len(busy.processes) == busy_processes and all(process.poll() is None for process in busy.processes)
        assert model.sampled_steps == model.trained_steps + model.dropped_steps
        assert not ray.is_initialized()  # the collector started Ray, so it shut it down
        assert any("raylet" in text for text in busy.ray_processes_in_training)  # what is looked for was there
        deadline = time.monotonic() + 10.0
        while ray_processes(token) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ray_processes(token) == []
    finally:
        busy.stop()
