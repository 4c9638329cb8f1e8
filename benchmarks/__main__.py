"""
One entry point for the benchmark scripts: ``python -m benchmarks SUBCOMMAND [ARGS]``.

    python -m benchmarks run --algos ppo impact --env CartPole-v1 --seeds 3
    python -m benchmarks throughput --algos impact --env HalfCheetah-v5
    python -m benchmarks plot results/CartPole-v1.csv
    python -m benchmarks tables --check

Each subcommand is the module of the same name: ``benchmarks/NAME.py``, or ``benchmarks/profiling/NAME.py`` for
the profilers (:data:`PROFILERS`); ``python -m benchmarks.run`` and ``python -m benchmarks.profiling.throughput``
work too. ``SUBCOMMAND -h`` prints its options.
"""

import importlib
import sys

SUBCOMMANDS = {
    "run": "learning curves of any algorithms and variants against a baseline (rl-zoo3 yml), with recorders",
    "throughput": "collection, learning and asynchronous time per batch (T / max(C, L))",
    "plot": "learning curves from the CSV files of run",
    "tables": "every results table, the results summary and the README's results table, from the data (tables.yml)",
    "ray_scaling": "the Ray collector against its number of workers: collector alone, learn(), learner ceiling",
    "gradient_step_cost": "ms per gradient step of V-RACER, SAC, SACReFER... side by side, with the arithmetic floor",
    "iteration_cost": "where an on-policy iteration's time goes (collection, epochs, PTR-PPO's replay), per iteration",
    "ppo_amber_cost": "PPO-AMBER's train() profiled against the number of active batches",
    "step_cost": "ms per env step outside training (collection, storage, callbacks) of V-RACER, SAC... side by side",
}
# The subcommands that live in benchmarks/profiling/: they time the package's parts through its public hooks.
PROFILERS = ("throughput", "ray_scaling", "gradient_step_cost", "iteration_cost", "ppo_amber_cost", "step_cost")


def module_name(subcommand: str) -> str:
    """The module that runs ``subcommand``."""
    return f"benchmarks.profiling.{subcommand}" if subcommand in PROFILERS else f"benchmarks.{subcommand}"


def usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = [f"  {name:{width}s}  {text}" for name, text in SUBCOMMANDS.items()]
    header = "usage: python -m benchmarks SUBCOMMAND [ARGS]  (SUBCOMMAND -h for its options)"
    return header + "\n\nsubcommands:\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return
    name, *rest = argv
    if name not in SUBCOMMANDS:
        raise SystemExit(f"error: unknown subcommand {name!r}\n\n{usage()}")
    sys.argv = [f"python -m benchmarks {name}", *rest]
    importlib.import_module(module_name(name)).main()  # each parses sys.argv


if __name__ == "__main__":
    main()
