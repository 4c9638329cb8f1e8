"""
IMPACT with its rollout workers on two Ray nodes, both started on this machine as separate processes.

    python examples/ray_two_nodes.py [--port 6390] [--steps 20000]

What it does, as on a real cluster (where the second ``ray start`` runs on another machine):

    ray start --head --node-ip-address 127.0.0.1 --num-cpus 1 --port 6390        # node 1: the head
    ray start --node-ip-address 127.0.0.1 --address 127.0.0.1:6390 --num-cpus 1  # node 2 joins it
    IMPACT(..., collector="ray", collector_kwargs=dict(address="127.0.0.1:6390", num_workers=2)).learn(...)
    ray stop --force                                  # stops every Ray process on this machine

Each node offers one CPU and each worker takes one, so the two workers must land on different nodes;
the script checks that they did and exits with an error otherwise. Note that ``ray stop`` ends every
Ray process on the machine, not just these two nodes.
"""

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

REPO_ROOT = Path(__file__).resolve().parents[1]


class RecordWorkerNodes(BaseCallback):
    """Reads where the collector's workers were placed, once they have started."""

    def __init__(self) -> None:
        super().__init__()
        self.worker_nodes: list[str] = []
        self.cluster_nodes: list[str] = []

    def _on_training_start(self) -> None:
        import ray

        self.worker_nodes = list(self.model._collector.worker_nodes)
        self.cluster_nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]

    def _on_step(self) -> bool:
        return True


def ray_cli(*arguments: str) -> None:
    ray_executable = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    print("$ ray", " ".join(arguments), flush=True)
    result = subprocess.run([ray_executable, *arguments], capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout, result.stderr, sep="\n", file=sys.stderr)
        raise RuntimeError(f"ray {arguments[0]} failed with exit code {result.returncode}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=6390)
    parser.add_argument("--steps", type=int, default=20_000)
    args = parser.parse_args()
    address = f"127.0.0.1:{args.port}"
    # Workers started by the nodes import sb3_impact from this checkout (an installed package works too).
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, str(REPO_ROOT))

    from sb3_impact import IMPACT

    try:
        local = ("--node-ip-address", "127.0.0.1")  # on a real cluster: each machine's own address
        ray_cli("start", "--head", *local, "--num-cpus", "1", "--port", str(args.port), "--include-dashboard=false")
        if (Path.home() / ".ray" / "auth_token").exists():
            # Ray >= 2.5x secures clusters with the token the head wrote; the clients must be told to send it.
            os.environ.setdefault("RAY_AUTH_MODE", "token")
        ray_cli("start", *local, "--address", address, "--num-cpus", "1")
        start = time.perf_counter()
        model = IMPACT(
            "MlpPolicy",
            "CartPole-v1",
            collector="ray",
            collector_kwargs=dict(address=address, num_workers=2, envs_per_worker=4),
            n_steps=32,
            gamma=0.98,
            gae_lambda=0.8,
            seed=0,
            device="cpu",
        )
        nodes = RecordWorkerNodes()
        model.learn(args.steps, callback=nodes)
        seconds = time.perf_counter() - start
    finally:
        ray_cli("stop", "--force")

    mean_return = np.mean([info["r"] for info in model.ep_info_buffer])
    print(f"cluster nodes: {nodes.cluster_nodes}")
    print(f"worker nodes:  {nodes.worker_nodes}")
    print(
        f"learned {model.num_timesteps} steps in {seconds:.1f}s, mean return of the last {len(model.ep_info_buffer)} "
        f"episodes {mean_return:.1f}; collector: {model.collector_stats}"
    )
    if len(set(nodes.cluster_nodes)) != 2 or set(nodes.worker_nodes) != set(nodes.cluster_nodes):
        sys.exit("FAILED: the workers did not run on both nodes")
    print("OK: the two workers ran on two different Ray nodes")


if __name__ == "__main__":
    main()
