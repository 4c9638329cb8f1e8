"""
The measurement protocol (docs/guide/benchmarks.md, "Protocol"), enforced here rather than in prose: each run's
own record of its settings (written once, read by ``--summarize``, ``--merge`` and ``tables``); tables that compare
algorithms only across runs of the same machine, software and settings (:func:`comparison_problems`); reporting
seeds from :data:`FIRST_REPORTING_SEED` on; Atari as rl-zoo3 evaluates it (stochastic policy, at least
:data:`ATARI_MIN_EVAL_EPISODES` whole games, human-normalised scores, random play as the untrained return); and
rl-zoo3's published returns (:data:`PUBLISHED_RETURNS`), the second target of the paired time-to-return ratios.
"""

import contextlib
import json
import re
import subprocess
from pathlib import Path
from typing import Any

FIRST_REPORTING_SEED = 100
ATARI_MIN_EVAL_EPISODES = 10

# The settings of a run that must be equal across the runs of a table that compares algorithms.
COMPARED_SETTINGS = ("steps", "max_seconds", "eval_freq", "eval_seconds", "eval_episodes", "eval_policy", "torch_threads")

# The return whose steps and time to reach each table reports, where the env has a customary one.
THRESHOLDS: dict[str, float] = {
    "CartPole-v1": 475.0,
    "Pendulum-v1": -200.0,
    "LunarLander-v3": 200.0,
    "LunarLanderContinuous-v3": 200.0,
}

# rl-zoo3's benchmark (benchmark.md of rl-baselines3-zoo 2.x), mean return at its yml's budget (1M steps for MuJoCo,
# for the -v3/-v4 ids of the tasks the results page runs on -v5; 100k for CartPole-v1 and the NoVel tasks): the
# figure an SB3 user expects the baseline to reach.
PUBLISHED_RETURNS: dict[tuple[str, str], float] = {
    ("ppo", "HalfCheetah-v5"): 5819.0,
    ("ppo", "Hopper-v5"): 2410.0,
    ("ppo", "Walker2d-v5"): 3479.0,
    ("sac", "HalfCheetah-v5"): 9535.0,
    ("ppo", "CartPole-v1"): 500.0,
    ("ppo_lstm", "CartPoleNoVel-v1"): 500.0,
    ("ppo_lstm", "PendulumNoVel-v1"): -217.933,
}

# Random and human scores per game (Mnih et al., 2015, Extended Data Table 2; the table Badia et al., 2020 reuse),
# for human-normalised scores: (score - random) / (human - random).
ATARI_REFERENCE_SCORES: dict[str, tuple[float, float]] = {
    "Atlantis": (12850.0, 29028.1),
    "Bowling": (23.1, 160.7),
    "Breakout": (1.7, 30.5),
    "NameThisGame": (2292.3, 8049.0),
    "Pong": (-20.7, 14.6),
    "Qbert": (163.9, 13455.0),
    "UpNDown": (533.4, 11693.2),
}


# What a peer's stack (a run record's ``stack``; ours has none) installs and pins itself: compared only among that
# stack's runs. Every other package is compared across all the runs of a table wherever both environments have it.
STACK_PACKAGES: dict[str, tuple[str, ...]] = {
    "rllib": ("ray", "gymnasium"),
    "sf": ("sample_factory", "gymnasium", "numpy"),  # sample-factory 2.1.1 pins gymnasium 0.29, numpy 1.x
}


def is_atari(env_id: str) -> bool:
    """rl-zoo3's rule: Atari ids are read from the yml's ``atari`` entry."""
    return "NoFrameskip" in env_id or env_id.startswith("ALE/")


def stacked_frames(env: Any, frames: int, channels_order: str) -> Any:
    """
    ``env`` (one Atari env of ours, single 84x84 frames) giving its last ``frames`` frames stacked as our
    ``VecFrameStack`` stacks one env's (SB3's ``StackedObservations``: zeros before an episode's first frame),
    channel ``first`` (as ``VecTransposeImage`` then gives them, for Sample Factory) or ``last`` (as RLlib's env runner
    passes frames on), in the env itself, so that a peer trains on the frames our policies get. Uses only what SB3 and
    gymnasium 0.29 and 1.x share: it runs in each peer's environment and ours (tests/test_peers.py compares frames).
    """
    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.vec_env.stacked_observations import StackedObservations

    if channels_order not in ("first", "last"):
        raise ValueError(f"channels_order is 'first' or 'last', got {channels_order!r}")

    def oriented(frame: Any) -> Any:  # one frame (height, width, channels) as the stack holds it, for one env
        return (frame.transpose(2, 0, 1) if channels_order == "first" else frame)[None]

    class StackedFrames(gym.Wrapper):
        def __init__(self, env: Any) -> None:
            super().__init__(env)
            space = env.observation_space
            space = gym.spaces.Box(oriented(space.low)[0], oriented(space.high)[0], dtype=space.dtype)
            self.stacked = StackedObservations(1, frames, space, channels_order=channels_order)
            self.observation_space = self.stacked.stacked_observation_space

        def reset(self, **kwargs: Any) -> Any:
            frame, info = self.env.reset(**kwargs)
            return self.stacked.reset(oriented(frame))[0].copy(), info  # a copy: the stack is updated in place

        def step(self, action: Any) -> Any:
            frame, reward, terminated, truncated, info = self.env.step(action)
            stacked, _ = self.stacked.update(oriented(frame), np.zeros(1, bool), [{}])
            return stacked[0].copy(), reward, terminated, truncated, info

    return StackedFrames(env)


class ProtocolError(ValueError):
    """A table or an invocation that breaks the measurement protocol; the message names the difference."""


def eval_policy(env_id: str) -> str:
    """``stochastic`` for Atari (as rl-zoo3 evaluates it: one fixed game otherwise), else ``deterministic``."""
    return "stochastic" if is_atari(env_id) else "deterministic"


def atari_game(env_id: str) -> str:
    """``BreakoutNoFrameskip-v4`` -> ``Breakout``; ``ALE/Breakout-v5`` -> ``Breakout``."""
    name = env_id.split("/")[-1]
    return re.sub(r"(NoFrameskip)?-v\d+$", "", name)


def reference_scores(env_id: str) -> tuple[float, float]:
    """The game's random-play and human scores (:data:`ATARI_REFERENCE_SCORES`); raises for an unknown game."""
    game = atari_game(env_id)
    if game not in ATARI_REFERENCE_SCORES:
        raise ProtocolError(f"no random/human reference scores for {game!r}; known: {', '.join(ATARI_REFERENCE_SCORES)}")
    return ATARI_REFERENCE_SCORES[game]


def random_play_score(env_id: str) -> float:
    """Random play's score of the game (Mnih et al., 2015): on Atari, the return of an untrained policy."""
    return reference_scores(env_id)[0]


def human_normalized(env_id: str, score: float) -> float:
    """``(score - random) / (human - random)`` with :data:`ATARI_REFERENCE_SCORES`; raises for an unknown game."""
    random_score, human_score = reference_scores(env_id)
    return (score - random_score) / (human_score - random_score)


def check_eval_settings(env_ids: list[str], eval_episodes: int) -> None:
    """Atari tables are evaluated on at least :data:`ATARI_MIN_EVAL_EPISODES` whole games."""
    atari = [env for env in env_ids if is_atari(env)]
    if atari and 0 < eval_episodes < ATARI_MIN_EVAL_EPISODES:
        raise ProtocolError(
            f"--eval-episodes {eval_episodes}: Atari ({', '.join(atari)}) is evaluated on at least "
            f"{ATARI_MIN_EVAL_EPISODES} whole games"
        )


RUN_DATA = "docs/benchmarks"  # where the recipes write the runs' data, relative to the repository root


def git_commit(directory: Path | None = None, short: bool = False, only_directory: bool = False) -> str:
    """
    The commit the code in ``directory`` (default: the benchmarks) runs from, ``+dirty`` when the checkout (or, with
    ``only_directory``, that directory) has uncommitted changes; ``unknown`` outside git. The run data under
    ``RUN_DATA`` does not count: runs writing there beside each other leave the code they run unchanged.
    """
    directory = directory or Path(__file__).resolve().parent
    rev_parse = ["git", "rev-parse", *(["--short"] if short else []), "HEAD"]
    status = ["git", "status", "--porcelain", "--", "." if only_directory else ":/", f":(top,exclude){RUN_DATA}"]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(rev_parse, cwd=directory, capture_output=True, text=True, timeout=10)
        changes = subprocess.run(status, cwd=directory, capture_output=True, text=True, timeout=10)
        if commit.returncode == 0:
            return commit.stdout.strip() + ("+dirty" if changes.stdout.strip() else "")
    return "unknown"


def run_file_name(algo: str, seed: int) -> str:
    """The stem of one run's files (its record, its recorders' rows): ``impact_ent_coef_0.01__seed3``."""
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', algo)}_seed{seed}"


def record_path(out: Path, env_id: str, algo: str, seed: int) -> Path:
    return out / "runs" / env_id / f"{run_file_name(algo, seed)}.json"


def write_run_record(out: Path, record: dict[str, Any]) -> Path:
    """Store one run's own settings; a run redone replaces its record (the run itself is replaced too)."""
    path = record_path(out, record["env"], record["algo"], record["seed"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2))
    return path


def read_run_records(folder: Path, env_id: str) -> dict[tuple[str, int], dict[str, Any]]:
    """The run records of ``env_id`` in ``folder``, by (algo, seed)."""
    records: dict[tuple[str, int], dict[str, Any]] = {}
    for path in sorted((folder / "runs" / env_id).glob("*.json")):
        record = json.loads(path.read_text())
        records[(record["algo"], int(record["seed"]))] = record
    return records


def comparison_problems(records: list[dict[str, Any]]) -> list[str]:
    """
    What differs between runs that one table compares: the machine's name and CPU generation, each package version,
    and each of :data:`COMPARED_SETTINGS`. Each difference is named once, with the values and the runs that hold them.

    A peer's runs (a record with a ``stack``, e.g. RLlib's) come from that stack's own environment: a package it pins
    (:data:`STACK_PACKAGES`) or does not have is compared among the runs of the same stack only; the others (Python,
    torch, numpy, MuJoCo, ALE...) across all of them.
    """
    problems: list[str] = []

    def check(label: str, value_of: Any, runs: list[dict[str, Any]] = records) -> None:
        values: dict[str, list[str]] = {}
        for record in runs:
            values.setdefault(json.dumps(value_of(record)), []).append(f"{record['algo']} seed {record['seed']}")
        if len(values) > 1:
            listed = "; ".join(
                f"{value} ({', '.join(runs[:3])}{', ...' if len(runs) > 3 else ''})" for value, runs in values.items()
            )
            problems.append(f"{label} differs: {listed}")

    def version(record: dict[str, Any], package: str) -> str | None:
        return record["machine"].get("software", {}).get(package)

    check("machine", lambda record: record["machine"].get("name"))
    # Records written before 2026-12-06 lack the CPU's generation: compared among the runs that have it.
    known = [record for record in records if record["machine"].get("cpu_generation")]
    check("CPU generation", lambda record: record["machine"]["cpu_generation"], known)
    stacks: dict[str | None, list[dict[str, Any]]] = {}
    for record in records:
        stacks.setdefault(record.get("stack"), []).append(record)
    own = {package for stack in stacks if stack for package in STACK_PACKAGES.get(stack, ())}
    packages = sorted({name for record in records for name in record["machine"].get("software", {})})
    for package in packages:
        peer_lacks = any(record.get("stack") and version(record, package) is None for record in records)
        if len(stacks) > 1 and (package in own or peer_lacks):
            for stack_runs in stacks.values():
                check(package, lambda record, package=package: version(record, package), stack_runs)
        else:
            check(package, lambda record, package=package: version(record, package))
    for setting in COMPARED_SETTINGS:
        check(setting, lambda record, setting=setting: record.get(setting))
    return problems


def check_comparison(records: list[dict[str, Any]], what: str) -> None:
    """Raise :class:`ProtocolError` when ``records`` (the runs of one table) compare algorithms across a difference."""
    if len({record["algo"] for record in records}) < 2:
        return
    problems = comparison_problems(records)
    if problems:
        raise ProtocolError(f"{what} compares algorithms across runs that differ: " + " | ".join(problems))


def check_one_at_a_time(records: list[dict[str, Any]], what: str) -> None:
    """Raise :class:`ProtocolError` naming the runs of a table that compares training times (``what``, alone on the
    machine) that were made with ``--jobs`` above 1: they shared the machine with their invocation's other runs."""
    parallel = sorted({f"{record['algo']} seed {record['seed']}" for record in records if record["jobs"] > 1})
    if parallel:
        raise ProtocolError(
            f"{what} compares training times (alone), but runs shared the machine with others of their invocation "
            f"(--jobs > 1): {', '.join(parallel)}; rerun them one at a time, or mark the table alone: false"
        )


def check_reporting_seeds(seeds: list[int], what: str) -> None:
    """A reporting table's seeds are fresh: none below :data:`FIRST_REPORTING_SEED` (those tune and select)."""
    below = sorted({seed for seed in seeds if seed < FIRST_REPORTING_SEED})
    if below:
        raise ProtocolError(
            f"{what} reports seeds {below}: reporting seeds start at {FIRST_REPORTING_SEED} "
            f"(seeds below {FIRST_REPORTING_SEED} are for tuning and selection)"
        )
