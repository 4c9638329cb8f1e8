"""
Milliseconds per gradient step of off-policy learners side by side, in one run on one machine, against the
arithmetic floor of each step.

    python -m benchmarks gradient_step_cost --algos vracer_default "vracer_default[compile_loss=True]" sac sac_refer \\
        --env HalfCheetah-v5 --memory-steps 262144 --out results/gradient_step_cost

For each algo (``algo[key=value]`` variants as in ``run``), with its yml hyperparameters: the replay memory is
filled with ``--memory-steps`` environment steps of the untrained policy (``learning_starts`` set to that
number, so no gradient step runs while it fills); then ``train()`` runs ``--warmup`` gradient steps and
``--repeats`` timed blocks of ``--steps`` gradient steps, at the yml's batch size. One PyTorch thread by
default (``--torch-threads``), and numpy's BLAS limited to the same number.

The floor is the step's floating-point work at this core's dense matrix-product rate: FLOPs per gradient step
counted by ``torch.utils.flop_counter.FlopCounterMode`` over ``--steps`` eager steps (V-RACER's periodic
memory refresh included), divided by the GFLOP/s of a 1024x1024 float32 matrix product on the same threads.

Writes ``gradient_step_cost-ENV.json`` (per algo: ms per step of each block, median, FLOPs, floor, the ratio
to the floor and to the first algo), ``.csv`` and ``.png`` into ``--out``; prints a markdown table.
"""

import argparse
import contextlib
import csv
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.config import (
    build_model,
    load_zoo_hyperparams,
    split_variant,
    validate_names,
)
from benchmarks.output import machine_description, write_json
from benchmarks.profiling.timing import SectionTimer

OPTIONS = ("memory_steps", "steps", "warmup", "repeats", "seed", "torch_threads")


def matmul_gflops(size: int = 1024, repeats: int = 20) -> float:
    """The dense float32 matrix-product rate of this process's threads, GFLOP/s."""
    a, b = th.randn(size, size), th.randn(size, size)
    for _ in range(3):
        a @ b
    with SectionTimer().section("matmul") as products:
        for _ in range(repeats):
            a @ b
    return 2 * size**3 * repeats / products.wall / 1e9


def blas_threads(threads: int) -> contextlib.AbstractContextManager:
    """numpy's BLAS limited to ``threads`` (threadpoolctl, when installed): its idle threads spin beside the learner."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=threads, user_api="blas")


def build_filled_model(algo: str, env_id: str, memory_steps: int, seed: int) -> Any:
    """The algo with its yml hyperparameters, its replay memory filled with ``memory_steps`` steps and no update."""
    params = load_zoo_hyperparams(algo, env_id)
    overrides: dict[str, Any] = {"learning_starts": memory_steps}
    if "buffer_size" in params:
        overrides["buffer_size"] = max(int(params["buffer_size"]), memory_steps)
    model = build_model(algo, env_id, seed, hyperparams=params, **overrides)
    model.learn(memory_steps)
    return model


def flops_per_step(model: Any, steps: int) -> float:
    """FLOPs of one gradient step, counted over ``steps`` eager steps (a compiled loss is counted uncompiled)."""
    compiled = getattr(model, "compile_loss", False)
    if compiled:  # FlopCounterMode counts eager operations
        model.compile_loss = False
    try:
        with FlopCounterMode(display=False) as counter:
            model.train(gradient_steps=steps, batch_size=model.batch_size)
    finally:
        if compiled:
            model.compile_loss = True
    return counter.get_total_flops() / steps


def measure(algo: str, env_id: str, args: argparse.Namespace, peak_gflops: float) -> dict[str, Any]:
    model = build_filled_model(algo, env_id, args.memory_steps, args.seed)
    flops = flops_per_step(model, args.steps)
    model.train(gradient_steps=args.warmup, batch_size=model.batch_size)  # and compiles, if asked
    blocks = []
    timer = SectionTimer()
    for _ in range(args.repeats):
        with timer.section("train") as block:
            model.train(gradient_steps=args.steps, batch_size=model.batch_size)
        blocks.append(block.wall / args.steps * 1e3)
    median = float(np.median(blocks))
    floor = flops / (peak_gflops * 1e9) * 1e3
    model.env.close()
    return {
        "algo": algo,
        "batch_size": model.batch_size,
        "memory_steps": args.memory_steps,
        "ms_per_step": blocks,
        "ms_per_step_median": median,
        "mflops_per_step": flops / 1e6,
        "floor_ms": floor,
        "ratio_to_floor": median / floor if floor else None,
    }


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(1.6 * len(rows) + 2, 3.5))
    positions = np.arange(len(rows))
    medians = [row["ms_per_step_median"] for row in rows]
    spreads = np.array(
        [
            [row["ms_per_step_median"] - min(row["ms_per_step"]), max(row["ms_per_step"]) - row["ms_per_step_median"]]
            for row in rows
        ]
    ).T
    axis.bar(positions, medians, yerr=spreads, capsize=4, label="measured (median, min-max)")
    axis.scatter(
        positions, [row["floor_ms"] for row in rows], color="black", marker="_", s=400, label="arithmetic floor", zorder=3
    )
    axis.set_xticks(positions, [row["algo"] for row in rows], rotation=15)
    axis.set_ylabel("ms per gradient step")
    axis.set_title(title, fontsize=9)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=["vracer", "sac", "sac_refer"])
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--memory-steps", type=int, default=2**18, help="environment steps in the replay memory")
    parser.add_argument("--steps", type=int, default=1000, help="gradient steps per timed block")
    parser.add_argument("--warmup", type=int, default=200, help="gradient steps before timing")
    parser.add_argument("--repeats", type=int, default=3, help="timed blocks per algo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("results/gradient_step_cost"))
    args = parser.parse_args()
    validate_names([split_variant(algo)[0] for algo in args.algos], [args.env])
    for value, name in ((args.memory_steps, "--memory-steps"), (args.steps, "--steps"), (args.repeats, "--repeats")):
        if value < 1:
            parser.error(f"{name} must be positive")
    th.set_num_threads(args.torch_threads)
    args.out.mkdir(parents=True, exist_ok=True)
    with blas_threads(args.torch_threads):
        peak = matmul_gflops()
        rows = [measure(algo, args.env, args, peak) for algo in args.algos]
    for row in rows:
        row["ratio_to_first"] = row["ms_per_step_median"] / rows[0]["ms_per_step_median"]

    stem = args.out / f"gradient_step_cost-{args.env}"
    write_json(
        {
            "command": shlex.join(
                ["python", "-m", "benchmarks", "gradient_step_cost", "--algos", *args.algos, "--env", args.env]
                + [f"--{name.replace('_', '-')}={getattr(args, name)}" for name in OPTIONS]
            ),
            "env": args.env,
            "torch_threads": args.torch_threads,
            "matmul_gflops": peak,
            "machine": machine_description(),
            "torch": th.__version__,
            "rows": rows,
        },
        stem.with_suffix(".json"),
    )
    fields = [
        "algo",
        "batch_size",
        "memory_steps",
        "ms_per_step_median",
        "mflops_per_step",
        "floor_ms",
        "ratio_to_floor",
        "ratio_to_first",
    ]
    with open(stem.with_suffix(".csv"), "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    plot(
        rows,
        stem.with_suffix(".png"),
        f"{args.env}, memory {args.memory_steps} steps, {args.torch_threads} thread(s), {peak:.0f} GFLOP/s peak",
    )
    print(f"{args.env}: matmul peak {peak:.0f} GFLOP/s on {args.torch_threads} thread(s)\n")
    print("| algo | batch | ms per gradient step (median [min, max]) | MFLOP per step | floor (ms) | x floor | x first |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        blocks = row["ms_per_step"]
        measured = f"{row['ms_per_step_median']:.2f} [{min(blocks):.2f}, {max(blocks):.2f}]"
        print(
            f"| {row['algo']} | {row['batch_size']} | {measured} | {row['mflops_per_step']:.1f} | {row['floor_ms']:.3f} "
            f"| {row['ratio_to_floor']:.1f} | {row['ratio_to_first']:.2f} |"
        )


if __name__ == "__main__":
    main()
