"""
Any sb3-impact algorithm against any SB3 / sb3-contrib algorithm, with rl-zoo3's tuned hyperparameters.

    python -m benchmarks run --algos impact ppo --env CartPole-v1 --seeds 3 --steps 100000
    python -m benchmarks run --algos ppo sac impact --env HalfCheetah-v5 Hopper-v5 --seeds 3 --jobs 14

(``python -m benchmarks.run ...`` is the same command.) Per env, into ``--out``, after every finished run (Ctrl-C
keeps what finished): ``ENV.csv`` (the evaluation points of every run), ``ENV.json`` (steps and seconds to the
threshold, returns, ratios to the baseline: ``ppo`` when it is among ``--algos``, else the first), ``ENV.png``, each
run's record (``runs/``) and diagnostics (``records/``). docs/guide/benchmarks.md ("What run does") describes the
hyperparameters, variants, evaluation grid, recorders, ``--jobs``, ``--append``, ``--summarize`` and ``--merge``.
"""

import argparse
import json
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import torch as th
from tqdm.auto import tqdm

from benchmarks.config import hyperparams_source, validate_names
from benchmarks.diagnostics import plot_diagnostics
from benchmarks.output import (
    EvalPoint,
    machine_description,
    machine_differences,
    merge_sittings,
    read_csv,
    write_csv,
    write_json,
)
from benchmarks.peers import check_peer, is_peer, peer_python, peer_software, peer_stack
from benchmarks.plot import plot_curves
from benchmarks.pool import RunSpec, failed_point, run_benchmark, run_in_parallel, sigterm_as_keyboard_interrupt
from benchmarks.protocol import (
    THRESHOLDS,
    ProtocolError,
    check_comparison,
    check_eval_settings,
    eval_policy,
    git_commit,
    read_run_records,
    record_path,
    write_run_record,
)
from benchmarks.recorders import RECORDERS, copy_run_records, plot_records, validate_recorders
from benchmarks.summary import threshold_summary


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=["ppo", "impact"])
    parser.add_argument("--env", "--envs", dest="envs", nargs="+", default=["CartPole-v1"])
    parser.add_argument("--seeds", type=int, default=3, help="number of seeds (first-seed, first-seed + 1, ...)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None, help="env steps per run (default: the yml's n_timesteps)")
    parser.add_argument("--eval-freq", type=int, default=5000, help="environment steps between evaluations")
    parser.add_argument("--eval-seconds", type=float, default=None,
                        help="evaluate every so many seconds of training wall time, not every --eval-freq steps")  # fmt: skip
    parser.add_argument("--eval-episodes", type=int, default=10, help="0: no evaluation (throughput runs)")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="training wall-time budget per run (evaluation excluded); ends a run before --steps")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1, help="runs at once, each in its own process (default 1: in this one)")
    parser.add_argument("--threshold", type=float, default=None, help="return to reach (default: known per env)")
    parser.add_argument("--baseline", default=None, help="algo the ratios are taken against (default: ppo or the first)")
    parser.add_argument("--order", choices=["interleaved", "sequential"], default="interleaved",
                        help="interleaved: seed by seed, every algo; sequential: algo by algo, every seed")  # fmt: skip
    parser.add_argument("--device", default="cpu", help="learner device (collectors always run on CPU)")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="threads of each run (default: 1 with --jobs > 1, else torch default), recorded")  # fmt: skip
    parser.add_argument("--subproc", nargs="*", default=[], help="algos whose envs run in a SubprocVecEnv")
    recorders = ", ".join(f"{name} ({recorder.algo})" for name, recorder in RECORDERS.items())
    parser.add_argument("--record", nargs="+", default=[], metavar="NAME",
                        help=f"also record model statistics: {recorders} (OUT/records/, OUT/ENV_NAME.png)")  # fmt: skip
    parser.add_argument("--plot-diagnostics", nargs="+", default=[], metavar="KEY",
                        help="draw OUT/ENV_diagnostics.png: the return curve with a panel per logged diagnostic under "
                        "it (a key of OUT/records/ENV/diagnostics/*.csv or its last part: entropy_loss, approx_kl, "
                        "clip_fraction, action_mean_abs, ...)")  # fmt: skip
    parser.add_argument("--append", action="store_true", help="keep the runs already in --out/ENV.csv (same machine)")
    parser.add_argument("--summarize", action="store_true",
                        help="run nothing: rewrite ENV.json and ENV.png from the rows in --out/ENV.csv")  # fmt: skip
    parser.add_argument("--merge", nargs="+", type=Path, default=[], metavar="DIR",
                        help="run nothing: add the --algos' runs in DIR/ENV.csv (side-by-side invocations' --out) "
                        "to --out/ENV.csv, then rewrite ENV.json and ENV.png as --summarize does")  # fmt: skip
    parser.add_argument("--peer-python", default=None,
                        help="Python of RLlib's environment for the peers rllib_appo/rllib_impala (default: "
                        "$SB3_IMPACT_PEER_PYTHON or .venv-rllib/bin/python; made by benchmarks/recipes/peers.sh); Sample "
                        "Factory's sf_appo runs with $SB3_IMPACT_SF_PYTHON or .venv-sf/bin/python")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("results"))
    return parser.parse_args(argv)


def reproduce_command(args: argparse.Namespace, env_id: str, algos: list[str], seeds: list[int]) -> str:
    """The command that makes these runs again: ``args``' options that are not their default."""
    options = {
        "--first-seed": seeds[0] if seeds and seeds[0] != 0 else None,
        "--steps": args.steps or None,
        "--max-seconds": f"{args.max_seconds:g}" if args.max_seconds else None,
        "--eval-seconds": f"{args.eval_seconds:g}" if args.eval_seconds else None,
        "--eval-freq": None if args.eval_seconds else args.eval_freq,
        "--eval-episodes": args.eval_episodes,
        "--threshold": args.threshold,
        "--device": None if args.device == "cpu" else args.device,
        "--torch-threads": args.torch_threads or None,
        "--subproc": args.subproc or None,
        "--record": args.record or None,
        "--jobs": args.jobs if args.jobs > 1 else None,
    }
    command = ["python", "-m", "benchmarks", "run", "--algos", *algos, "--env", env_id, "--seeds", str(len(seeds))]
    for option, value in options.items():
        if value is not None:
            command += [option, *map(str, value if isinstance(value, list) else [value])]
    return shlex.join(command)


def wall_checkpoints(args: argparse.Namespace) -> tuple[float, ...]:
    """With a wall-time budget: the returns after a third, two thirds and all of it are summarised."""
    return tuple(args.max_seconds * fraction for fraction in (1 / 3, 2 / 3, 1)) if args.max_seconds else ()


RECORDED_SETTINGS = ("steps", "max_seconds", "eval_freq", "eval_seconds", "eval_episodes", "torch_threads", "jobs", "device")


def measurement(args: argparse.Namespace) -> dict:
    """The budget and evaluation grid of ``args``, as a run record and ENV.json store them."""
    return {
        "steps": args.steps,
        "max_seconds": args.max_seconds,
        "eval_freq": None if args.eval_seconds else args.eval_freq,
        "eval_seconds": args.eval_seconds,
        "eval_episodes": args.eval_episodes,
    }


def run_record(args: argparse.Namespace, spec: RunSpec, points: list[EvalPoint]) -> dict:
    """One run's own settings, stored beside the table (``OUT/runs/ENV/ALGO_seedN.json``) and never rewritten."""
    failed = next((point for point in points if point.status == "failed"), None)
    machine = this_machine(args)
    stack = {}
    if is_peer(spec.algo):  # its own environment's packages (benchmarks.peers)
        machine["software"] = peer_software(spec.peer_python, peer_stack(spec.algo))
        stack = {"stack": peer_stack(spec.algo)}
    return {
        **stack,
        "algo": spec.algo,
        "env": spec.env_id,
        "seed": spec.seed,
        "status": "failed" if failed else "ok",
        "error": failed.error if failed else "",
        **measurement(args),
        "eval_policy": eval_policy(spec.env_id),
        "torch_threads": torch_threads(args),
        "jobs": args.jobs,
        "device": args.device,
        "hyperparams": hyperparams_source(spec.algo, spec.env_id),
        "commit": COMMIT,
        "machine": machine,
        "command": reproduce_command(args, spec.env_id, [spec.algo], [spec.seed]),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def recorded_args(args: argparse.Namespace, records: list[dict]) -> argparse.Namespace:
    """``args`` with the settings the runs were made with (their records'), so that ``--summarize`` and ``--merge``
    describe the runs, not the rewriting command. Without records (runs from before them), ``args`` itself."""
    if not records:
        return args
    settings = {name: records[0].get(name) for name in RECORDED_SETTINGS}
    settings["eval_freq"] = settings["eval_freq"] or args.eval_freq
    return argparse.Namespace(**{**vars(args), **settings})


def write_results(
    args: argparse.Namespace,
    env_id: str,
    points: list[EvalPoint],
    baseline: str,
    machine: dict | None = None,
    records: dict[tuple[str, int], dict] | None = None,
) -> dict:
    """
    Write ENV.csv, ENV.json and ENV.png for the points gathered so far; return the summary. ``machine`` is the
    description of the machine that ran them (default: this one); ``records`` the runs' own settings (default: the
    run records in ``--out``), which the JSON's settings and command come from. Raises :class:`ProtocolError`,
    writing nothing, where the table would compare algorithms across runs whose settings or machines differ.
    """
    records = read_run_records(args.out, env_id) if records is None else records
    keys = sorted({(point.algo, point.seed) for point in points})
    table_records = [records[key] for key in keys if key in records]
    check_comparison(table_records, f"{env_id}'s table")
    made_with = recorded_args(args, table_records)
    threshold = args.threshold if args.threshold is not None else THRESHOLDS.get(env_id)
    write_csv(points, args.out / f"{env_id}.csv")
    step_budget = None if made_with.max_seconds else made_with.steps
    summary = threshold_summary(
        points,
        threshold,
        baseline=baseline,
        wall_checkpoints=wall_checkpoints(made_with),
        step_budget=step_budget,
        eval_episodes=made_with.eval_episodes,
    )
    algos = sorted({point.algo for point in points}, key=lambda algo: (algo != baseline, algo))
    seeds = sorted({point.seed for point in points})
    summary.update(
        env=env_id,
        seeds=seeds,
        **measurement(made_with),
        eval_policy=table_records[0]["eval_policy"] if table_records else None,
        hyperparams={algo: hyperparams_source(algo, env_id) for algo in algos},
        machine=machine or table_machine(table_records) or this_machine(args),
        command=reproduce_command(made_with, env_id, algos, seeds),
        runs=table_records,
    )
    write_json(summary, args.out / f"{env_id}.json")
    plot_curves(points, args.out / f"{env_id}.png", threshold)
    plot_records(args.out, env_id, points, args.record)
    plot_diagnostics(args.out, env_id, points, args.plot_diagnostics)
    return summary


def table_machine(records: list[dict]) -> dict | None:
    """The machine a table's JSON records: its last run's, ours rather than a peer's (whose packages are its own)."""
    ours = [record for record in records if not record.get("stack")]
    return (ours or records)[-1]["machine"] if records else None


def print_summary(summary: dict) -> None:
    print(f"\n{summary['env']} (threshold {summary['threshold']}, baseline {summary['baseline']}):")
    for algo, entry in summary["algos"].items():
        line = f"  {algo:14s} final {entry['final_eval']['median']}"
        if "budget_eval" in entry:
            line += f" | at {summary['steps']} steps {entry['budget_eval']['median']}"
        if "steps_to_threshold" in entry:
            line += f" | steps {entry['steps_to_threshold']} wall {entry['wall_seconds_to_threshold']}"
        if entry.get("steps_ratio_vs_baseline"):
            ratio_steps, ratio_wall = entry["steps_ratio_vs_baseline"], entry["wall_ratio_vs_baseline"]
            line += f" | ratio steps {ratio_steps['median']} wall {ratio_wall['median']}"
        if entry["failed"]:
            line += f" | FAILED {entry['failed']}"
        print(line)


COMMIT = git_commit()


def this_machine(args: argparse.Namespace) -> dict:
    """This machine's description, with the threads and parallel runs of this invocation."""
    return {**machine_description(args.device), "torch_threads": torch_threads(args), "jobs": args.jobs}


def torch_threads(args: argparse.Namespace) -> int:
    """PyTorch threads of each run: ``--torch-threads``, else 1 per parallel run, else this process' default."""
    return args.torch_threads or (1 if args.jobs > 1 else th.get_num_threads())


def run_specs(args: argparse.Namespace) -> list[RunSpec]:
    """Every run, in the order of ``--order``; this order is also the order of the rows in the CSV files."""
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    if args.order == "interleaved":
        keys = [(env, seed, algo) for env in args.envs for seed in seeds for algo in args.algos]
    else:
        keys = [(env, seed, algo) for env in args.envs for algo in args.algos for seed in seeds]
    options = {"eval_freq": args.eval_freq, "eval_episodes": args.eval_episodes, "device": args.device}
    options.update(eval_seconds=args.eval_seconds, max_seconds=args.max_seconds)
    options.update(records=tuple(args.record), record_dir=str(args.out))
    return [
        RunSpec(algo, env, seed, args.steps, subproc=algo in args.subproc, deterministic=deterministic, **run_options)
        for env, seed, algo in keys
        for deterministic in [eval_policy(env) == "deterministic"]
        for run_options in [{**options, "peer_python": peer_python(args.peer_python, algo)}]
    ]


def joined_sittings(previous: dict | None, current: dict, action: str, compares: bool) -> dict:
    """
    The ``machine`` of a table whose runs from ``previous`` are joined by runs from ``current``
    (:func:`merge_sittings`). Where their machine or software differ, a table that compares algorithms
    (``compares``) is refused with :class:`ProtocolError` naming ``action`` and each difference; a one-algorithm
    table is warned about.
    """
    differences = machine_differences(previous, current)
    if differences and compares:
        raise ProtocolError(
            f"{action}: the table compares algorithms, and the runs come from another machine or software "
            f"({'; '.join(differences)}); run the comparison again here, or write a new table"
        )
    if differences:
        print(f"warning: {action} from another machine or software ({'; '.join(differences)}): say so under the table,"
              " or start a new one", file=sys.stderr)  # fmt: skip
    return merge_sittings(previous, current)


def json_machine(folder: Path, env: str) -> dict | None:
    """The ``machine`` of ``folder``'s ENV.json: the machine its runs were made on (None without the JSON)."""
    path = folder / f"{env}.json"
    return json.loads(path.read_text()).get("machine") if path.is_file() else None


def kept_points(args: argparse.Namespace, specs: list[RunSpec]) -> tuple[dict[str, list[EvalPoint]], dict[str, dict]]:
    """
    With ``--append``: per env, the rows already in ENV.csv, less the runs about to be redone, and the ``machine``
    the env's JSON will record (this one, with the kept runs' sittings where their machine or software differ).
    Raises :class:`ProtocolError` before anything runs where the table compares algorithms and the kept runs'
    machine, software or settings differ from this invocation's.
    """
    kept: dict[str, list[EvalPoint]] = {env: [] for env in args.envs}
    machines: dict[str, dict] = {}
    for env in args.envs if args.append else []:
        path = args.out / f"{env}.csv"
        env_specs = [spec for spec in specs if spec.env_id == env]
        rerun = {(spec.algo, spec.seed) for spec in env_specs}
        kept[env] = [point for point in read_csv(path) if (point.algo, point.seed) not in rerun] if path.is_file() else []
        if not kept[env]:
            continue
        kept_records = [record for key, record in read_run_records(args.out, env).items() if key not in rerun]
        check_comparison(kept_records + [run_record(args, spec, []) for spec in env_specs], f"--append to {env}'s table")
        names = sorted({point.machine for point in kept[env]})  # without the JSON, the rows' machine names
        previous = json_machine(args.out, env) or {"name": names[-1], "earlier_sittings": [{"name": n} for n in names[:-1]]}
        compares = len({point.algo for point in kept[env]} | {spec.algo for spec in env_specs}) > 1
        machines[env] = joined_sittings(previous, this_machine(args), f"--append to {env}'s table", compares)
    return kept, machines


def merged_points(args: argparse.Namespace, env: str) -> tuple[list[EvalPoint], dict | None, dict, dict]:
    """
    ``--merge``: the runs of ``--out``'s ENV.csv, then those of ``--algos`` in each ``--merge`` folder's (a folder
    may hold other algorithms' runs, such as a baseline table's other variants), one run per (algo, seed): a later
    folder's run replaces an earlier one unless it failed where the earlier one finished. ``--summarize`` is the
    merge of ``--out`` alone. Returns the rows, the machine the JSON will record (each folder's JSON ``machine`` as
    a sitting), the kept runs' records and the folder each kept run comes from. Raises :class:`ProtocolError` where
    the merged table compares algorithms across machines, software or settings.
    """
    tables, records, machines = [], [], []
    for folder in [args.out, *args.merge]:
        path = folder / f"{env}.csv"
        if not path.is_file():
            if folder == args.out and args.merge:
                continue
            raise ValueError(f"{path} does not exist")
        table = pd.DataFrame(map(asdict, read_csv(path)), columns=list(EvalPoint.__annotations__))
        tables.append(table if folder == args.out else table[table.algo.isin(args.algos)])
        records.append(read_run_records(folder, env))
        machines.append((folder, json_machine(folder, env)))
    rows = pd.concat(tables, keys=range(len(tables)), names=["folder", None]).reset_index("folder")
    rows["finished"] = rows.groupby(["algo", "seed", "folder"]).status.transform(lambda status: (status != "failed").all())
    # One run per (algo, seed): the last folder's that finished, else the last folder's.
    chosen = rows.sort_values(["finished", "folder"], kind="stable").groupby(["algo", "seed"]).folder.last()
    rows = rows[rows.folder == rows.set_index(["algo", "seed"]).index.map(chosen)]
    kept_records = {key: records[folder][key] for key, folder in chosen.items() if key in records[folder]}
    compares = len(chosen.index.unique("algo")) > 1
    machine: dict | None = None
    for folder, folder_machine in machines:
        if folder_machine:
            machine = joined_sittings(machine, folder_machine, f"--merge {folder} into {env}'s table", compares)
    check_comparison(list(kept_records.values()), f"--merge into {env}'s table")
    points = [EvalPoint(**row) for row in rows[list(EvalPoint.__annotations__)].to_dict("records")]
    return points, machine, kept_records, {key: machines[folder][0] for key, folder in chosen.items()}


def rewrite_tables(args: argparse.Namespace, baseline: str) -> None:
    """
    ``--summarize`` and ``--merge``: run nothing, rewrite each env's CSV, JSON and PNG from the rows there are. The
    runs' records are read, never rewritten (``--merge`` copies the merged runs' records, and their recorders'
    rows with the diagnostics, into ``--out``).
    """
    tables = {env: merged_points(args, env) for env in args.envs}  # every table is checked before one is written
    for env, (points, machine, records, sources) in tables.items():
        for record in records.values() if args.merge else []:
            write_run_record(args.out, record)
        for (algo, seed), folder in sources.items() if args.merge else []:
            if folder.resolve() != args.out.resolve():
                copy_run_records(folder, args.out, env, algo, seed)
                if (algo, seed) not in records:  # a run kept without a record: none of the run it replaced stays
                    record_path(args.out, env, algo, seed).unlink(missing_ok=True)
        print_summary(write_results(args, env, points, baseline, machine, records))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        if args.jobs < 1:
            raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
        validate_names(args.algos, args.envs)
        for algo, env in [(algo, env) for algo in args.algos if is_peer(algo) for env in args.envs]:
            check_peer(algo, env, peer_python(args.peer_python, algo))
        validate_recorders(args.record, args.algos)
        check_eval_settings(args.envs, args.eval_episodes)
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    baseline = args.baseline or ("ppo" if "ppo" in args.algos else args.algos[0])
    if args.torch_threads:
        th.set_num_threads(args.torch_threads)
    specs = run_specs(args)
    try:
        if args.merge or args.summarize:
            rewrite_tables(args, baseline)
            return
        kept_by_env, machine_by_env = kept_points(args, specs)
    except ValueError as error:  # ProtocolError included: nothing was written
        raise SystemExit(f"error: {error}") from None
    finished: dict[int, list[EvalPoint]] = {}

    def env_points(env: str) -> list[EvalPoint]:
        """The kept rows, then the finished runs in run order (whatever order they finished in)."""
        return kept_by_env[env] + [p for index in sorted(finished) if specs[index].env_id == env for p in finished[index]]

    progress = tqdm(total=len(specs), desc="runs")

    def record(index: int, points: list[EvalPoint]) -> None:
        finished[index] = points
        write_run_record(args.out, run_record(args, specs[index], points))
        env = specs[index].env_id
        write_results(args, env, env_points(env), baseline, machine_by_env.get(env))
        progress.update()

    try:
        with sigterm_as_keyboard_interrupt():  # kill/timeout clean up as Ctrl-C does
            if args.jobs == 1:
                for index, spec in enumerate(specs):
                    progress.set_postfix_str(f"{spec.algo} {spec.env_id} seed {spec.seed}")
                    try:
                        points = run_benchmark(spec)
                    except KeyboardInterrupt as interrupt:  # recorded as failed, as the --jobs workers record theirs
                        record(index, [failed_point(spec, interrupt)])
                        raise
                    record(index, points)
            else:
                progress.set_postfix_str(f"{args.jobs} at once, {torch_threads(args)} torch thread(s) each")
                run_in_parallel(specs, args.jobs, torch_threads(args), record)
    except KeyboardInterrupt:
        print("\ninterrupted: the runs that finished are written, the interrupted ones as failed")
    finally:
        progress.close()
    for env in args.envs:
        points = env_points(env)
        if points:
            print_summary(write_results(args, env, points, baseline, machine_by_env.get(env)))


if __name__ == "__main__":
    main()
