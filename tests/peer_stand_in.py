"""
A stand-in for ``benchmarks.rllib_run`` in RLlib's environment (tests/test_peers.py): the same command line and
files, with a made-up learning curve and RLlib's metrics at each point (a few of its keys), the software of a
separate environment (RLlib's gymnasium, no SB3), and the failures and hangs the runner must handle
(``PEER_STAND_IN=fail|hang``).
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
    points, diagnostics = [], []
    for index, steps in enumerate(range(0, spec["steps"] + 1, spec["eval_freq"])):
        key = {"algo": spec["algo"], "seed": spec["seed"], "steps": steps}
        point = {**key, "env": spec["env_id"], "wall_seconds": float(index), "eval_mean": 10.0 * index, "eval_std": 1.0}
        points.append({**point, "status": "ok", "error": "", "device": "cpu", "machine": machine_id("cpu")})
        learned = {"env_runners/episode_return_mean": 9.0 * index, "learners/default_policy/num_target_updates": index}
        diagnostics.append({**key, **(learned if index else {})})
    result = {"points": points, "diagnostics": diagnostics, "software": software(), "spec": spec}
    Path(argv[1]).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
