"""
A stand-in for ``benchmarks.rllib_run`` in RLlib's environment (tests/test_peers.py): the same command line and
files, with a made-up learning curve, the software of a separate environment (RLlib's gymnasium, no SB3), and the
failures and hangs the runner must handle (``PEER_STAND_IN=fail|hang``).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.output import machine_id, software_versions


def software() -> dict:
    versions = software_versions()
    versions.update(gymnasium="1.2.2", stable_baselines3=None, sb3_contrib=None, rl_zoo3=None)
    return versions


def main(argv: list[str]) -> None:
    if argv == ["--software"]:
        print(json.dumps(software()))
        return
    mode = os.environ.get("PEER_STAND_IN", "")
    if mode == "fail":
        print("RuntimeError: boom in the peer", file=sys.stderr)
        sys.exit(3)
    if mode == "hang":  # a child of its own, as Ray's processes are, then no answer
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        Path(os.environ["PEER_STAND_IN_PIDS"]).write_text(f"{os.getpid()} {child.pid}")
        time.sleep(600)
    spec = json.loads(Path(argv[0]).read_text())
    points = []
    for index, steps in enumerate(range(0, spec["steps"] + 1, spec["eval_freq"])):
        point = {"algo": spec["algo"], "env": spec["env_id"], "seed": spec["seed"], "steps": steps}
        point.update(wall_seconds=float(index), eval_mean=10.0 * index, eval_std=1.0, status="ok", error="")
        points.append({**point, "device": "cpu", "machine": machine_id("cpu")})
    Path(argv[1]).write_text(json.dumps({"points": points, "software": software(), "spec": spec}))


if __name__ == "__main__":
    main(sys.argv[1:])
