"""
Any sb3-impact algorithm against any SB3 / sb3-contrib algorithm, with rl-zoo3's tuned hyperparameters.

    python -m benchmarks.run --algos impact ppo --env CartPole-v1 --seeds 3 --steps 100000

The baseline is ``ppo`` when it is among ``--algos``, else the first algo (``--baseline`` overrides).
Hyperparameters come from rl-zoo3's yml for SB3/sb3-contrib algorithms and from
``sb3_impact/hyperparams/ALGO.yml`` for ours (``impact_default``/``impala_default``: constructor
defaults). Every ``--eval-freq`` environment steps the deterministic policy is evaluated for
``--eval-episodes`` episodes on a separate env; the wall time of each point excludes evaluation.

Writes, per env, into ``--out`` (after every finished run, so Ctrl-C keeps what finished):
- ``ENV.csv``: algo, seed, env steps, wall seconds, eval mean, eval std, status, error, device, machine;
- ``ENV.json``: steps and wall seconds to the threshold per algo and seed, final returns, medians with
  min/max, and ratios against the baseline paired by seed and machine;
- ``ENV.png``: return against env steps and against wall seconds (median and min/max band over seeds).
A failed run is recorded as failed (with its error) and the others continue.
"""

import argparse
import shlex
from pathlib import Path

import torch as th
from tqdm.auto import tqdm

from benchmarks.common import (
    THRESHOLDS,
    EvalPoint,
    machine_description,
    plot_curves,
    read_csv,
    threshold_summary,
    train_and_evaluate,
    validate_names,
    write_csv,
    write_json,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=["ppo", "impact"])
    parser.add_argument("--env", "--envs", dest="envs", nargs="+", default=["CartPole-v1"])
    parser.add_argument("--seeds", type=int, default=3, help="number of seeds (first-seed, first-seed + 1, ...)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None, help="env steps per run (default: the yml's n_timesteps)")
    parser.add_argument("--eval-freq", type=int, default=5000, help="environment steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--threshold", type=float, default=None, help="return to reach (default: known per env)")
    parser.add_argument("--baseline", default=None, help="algo the ratios are taken against (default: ppo or the first)")
    parser.add_argument("--order", choices=["interleaved", "sequential"], default="interleaved",
                        help="interleaved: seed by seed, every algo; sequential: algo by algo, every seed")  # fmt: skip
    parser.add_argument("--device", default="cpu", help="learner device (collectors always run on CPU)")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="torch.set_num_threads for each run (default: torch's choice), recorded")  # fmt: skip
    parser.add_argument("--subproc", nargs="*", default=[], help="algos whose envs run in a SubprocVecEnv")
    parser.add_argument("--append", action="store_true", help="keep the runs already in --out/ENV.csv (same machine)")
    parser.add_argument("--out", type=Path, default=Path("results"))
    return parser.parse_args(argv)


def reproduce_command(args: argparse.Namespace, env_id: str, algos: list[str], seeds: list[int]) -> str:
    command = ["python", "-m", "benchmarks.run", "--algos", *algos, "--env", env_id, "--seeds", str(len(seeds))]
    if seeds and seeds[0] != 0:
        command += ["--first-seed", str(seeds[0])]
    if args.steps:
        command += ["--steps", str(args.steps)]
    command += ["--eval-freq", str(args.eval_freq), "--eval-episodes", str(args.eval_episodes)]
    if args.threshold is not None:
        command += ["--threshold", str(args.threshold)]
    if args.device != "cpu":
        command += ["--device", args.device]
    if args.torch_threads:
        command += ["--torch-threads", str(args.torch_threads)]
    if args.subproc:
        command += ["--subproc", *args.subproc]
    return shlex.join(command)


def write_results(args: argparse.Namespace, env_id: str, points: list[EvalPoint], baseline: str) -> dict:
    """Write ENV.csv, ENV.json and ENV.png for the points gathered so far; return the summary."""
    threshold = args.threshold if args.threshold is not None else THRESHOLDS.get(env_id)
    write_csv(points, args.out / f"{env_id}.csv")
    summary = threshold_summary(points, threshold, baseline=baseline)
    algos = sorted({point.algo for point in points}, key=lambda algo: (algo != baseline, algo))
    seeds = sorted({point.seed for point in points})
    summary.update(
        env=env_id,
        seeds=seeds,
        steps=args.steps,
        eval_freq=args.eval_freq,
        eval_episodes=args.eval_episodes,
        machine=machine_description(args.device),
        command=reproduce_command(args, env_id, algos, seeds),
    )
    write_json(summary, args.out / f"{env_id}.json")
    plot_curves(points, args.out / f"{env_id}.png", threshold)
    return summary


def print_summary(summary: dict) -> None:
    print(f"\n{summary['env']} (threshold {summary['threshold']}, baseline {summary['baseline']}):")
    for algo, entry in summary["algos"].items():
        line = f"  {algo:14s} final {entry['final_eval']['median']}"
        if "steps_to_threshold" in entry:
            line += f" | steps {entry['steps_to_threshold']} wall {entry['wall_seconds_to_threshold']}"
        if entry.get("steps_ratio_vs_baseline"):
            ratio_steps, ratio_wall = entry["steps_ratio_vs_baseline"], entry["wall_ratio_vs_baseline"]
            line += f" | ratio steps {ratio_steps['median']} wall {ratio_wall['median']}"
        if entry["failed"]:
            line += f" | FAILED {entry['failed']}"
        print(line)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        validate_names(args.algos, args.envs)
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    baseline = args.baseline or ("ppo" if "ppo" in args.algos else args.algos[0])
    if args.torch_threads:
        th.set_num_threads(args.torch_threads)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    if args.order == "interleaved":
        runs = [(env, seed, algo) for env in args.envs for seed in seeds for algo in args.algos]
    else:
        runs = [(env, seed, algo) for env in args.envs for algo in args.algos for seed in seeds]

    points_by_env: dict[str, list[EvalPoint]] = {env: [] for env in args.envs}
    if args.append:
        for env in args.envs:
            if (args.out / f"{env}.csv").is_file():
                rerun = {(algo, seed) for run_env, seed, algo in runs if run_env == env}
                kept = read_csv(args.out / f"{env}.csv")
                points_by_env[env] = [p for p in kept if (p.algo, p.seed) not in rerun]
    progress = tqdm(runs, desc="runs")
    try:
        for env, seed, algo in progress:
            progress.set_postfix_str(f"{algo} {env} seed {seed}")
            points_by_env[env] += train_and_evaluate(
                algo, env, seed, args.steps, args.eval_freq, args.eval_episodes, args.device, algo in args.subproc
            )
            write_results(args, env, points_by_env[env], baseline)
    except KeyboardInterrupt:
        print("\ninterrupted: the runs that finished are written")
    finally:
        progress.close()
    for env, points in points_by_env.items():
        if points:
            print_summary(write_results(args, env, points, baseline))


if __name__ == "__main__":
    main()
