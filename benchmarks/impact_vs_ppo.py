"""
SB3 PPO (rl-zoo3 tuned yml) against IMPACT (our yml), side by side on one machine.

    python -m benchmarks.impact_vs_ppo --envs CartPole-v1 Pendulum-v1 --seeds 3 --out results

Writes, per env, ``results/ENV.csv`` (algo, seed, env steps, wall seconds, eval mean, eval std),
``results/ENV.json`` (steps and wall seconds to the threshold per algo, medians, and ratios against PPO
paired by seed: median, min, max) and ``results/ENV.png`` (return against steps and against wall time).
Runs go one after another (seed by seed, algorithms interleaved); Ctrl-C keeps what finished.
"""

import argparse
from pathlib import Path

from tqdm.auto import tqdm

from benchmarks.common import (
    ALGOS,
    THRESHOLDS,
    machine_description,
    plot_curves,
    read_csv,
    threshold_summary,
    train_and_evaluate,
    write_csv,
    write_json,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1", "Pendulum-v1"])
    parser.add_argument("--algos", nargs="+", default=["ppo", "impact"], help="the first one is the baseline")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument(
        "--summarize", nargs="+", type=Path, default=None, help="only summarize and plot these CSV files (merged)"
    )
    parser.add_argument("--steps", type=int, default=None, help="override the yml's n_timesteps")
    parser.add_argument("--eval-freq", type=int, default=5000, help="environment steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--subproc", nargs="*", default=[], help="algos whose envs run in a SubprocVecEnv")
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args()
    unknown = [algo for algo in args.algos if algo not in ALGOS]
    if unknown:
        parser.error(f"unknown algos {unknown}; valid names: {', '.join(sorted(ALGOS))}")
    unknown_envs = [env for env in args.envs if env not in THRESHOLDS]
    if unknown_envs:
        parser.error(f"no threshold for {unknown_envs}; known envs: {', '.join(THRESHOLDS)}")

    if args.summarize:
        points = [point for path in args.summarize for point in read_csv(path)]
        args.envs = sorted({point.env for point in points})
        points_by_env = {env: [point for point in points if point.env == env] for env in args.envs}
        runs = []
    else:
        seeds = range(args.first_seed, args.first_seed + args.seeds)
        runs = [(env, seed, algo) for env in args.envs for seed in seeds for algo in args.algos]
        points_by_env = {env: [] for env in args.envs}
    try:
        for env, seed, algo in tqdm(runs, desc="runs", disable=not runs):
            points_by_env[env] += train_and_evaluate(
                algo, env, seed, args.steps, args.eval_freq, args.eval_episodes, args.device, algo in args.subproc
            )
    except KeyboardInterrupt:
        print("interrupted: writing the runs that finished")
    for env, points in points_by_env.items():
        if not points:
            continue
        write_csv(points, args.out / f"{env}.csv")
        summary = threshold_summary(points, THRESHOLDS[env], baseline=args.algos[0])
        seeds = sorted({point.seed for point in points})
        algos = " ".join(sorted({point.algo for point in points}, key=lambda a: a != args.algos[0]))
        command = f"python -m benchmarks.impact_vs_ppo --envs {env} --algos {algos} --seeds {len(seeds)}"
        command += f" --eval-freq {args.eval_freq} --eval-episodes {args.eval_episodes}"
        if args.subproc:
            command += f" --subproc {' '.join(args.subproc)}"
        summary.update(env=env, seeds=seeds, machine=machine_description(), command=command)
        write_json(summary, args.out / f"{env}.json")
        plot_curves(points, args.out / f"{env}.png", THRESHOLDS[env])
        print(f"\n{env} (threshold {THRESHOLDS[env]}):")
        for algo, entry in summary["algos"].items():
            line = f"  {algo:8s} steps {entry['steps_to_threshold']} wall {entry['wall_seconds_to_threshold']}"
            if "steps_ratio_vs_baseline" in entry:
                line += f" | ratio steps {entry['steps_ratio_vs_baseline']} wall {entry['wall_ratio_vs_baseline']}"
            print(line)


if __name__ == "__main__":
    main()
