"""
One RLlib run (APPO or IMPALA, Ray 2.60) under the benchmarks' protocol, for ``python -m benchmarks run --algos
rllib_appo ...``: :func:`benchmarks.peers.run_peer` starts it with the Python of RLlib's own virtual environment,

    PEER/bin/python -m benchmarks.rllib_run SPEC.json RESULT.json

SPEC.json holds the run (``algo``, ``env_id``, ``seed``, ``steps``, ``max_seconds``, ``eval_freq``, ``eval_seconds``,
``eval_episodes``, ``deterministic``, ``torch_threads``); RESULT.json receives its evaluation points (the fields of
:class:`benchmarks.output.EvalPoint`), RLlib's metrics at each point (:class:`PointMetrics`, the run's diagnostics)
and the software it ran with. The settings per algo and env are in ``benchmarks/peers.yml`` (:func:`peer_settings`).

A run is measured as ours (:class:`benchmarks.pool.TimedEvalCallback`; docs/guide/benchmarks.md, "Peers"): an
evaluation before training, then one at the end of the first training iteration (about a second) past each mark of
the ``eval_freq`` steps grid (or ``eval_seconds`` of training time), with SB3's ``evaluate_policy`` on the evaluation
env of our runs (:func:`evaluation_env`); training time runs from the built algorithm (Ray started, its env runner
and learner made) to ``max_seconds`` or ``steps``, evaluation excluded. ``python -m benchmarks.rllib_run
--cross-check ALGO ENV SECONDS EPISODES`` evaluates the same weights with this evaluation and RLlib's own.

Only the standard library and PyYAML (which Ray needs too) are imported at module level: :mod:`benchmarks.peers`
reads the settings in the package's own environment.
"""

import contextlib
import functools
import json
import math
import operator
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from benchmarks.protocol import is_atari, stacked_frames
from benchmarks.variants import entry_settings, split_variant

# The peers' placement, the RLlib metrics kept at each point and the settings per algo and env (their comments say
# what each is), read once.
PEERS = yaml.safe_load(Path(__file__).with_name("peers.yml").read_text())
TWO_CORES: dict[str, dict[str, Any]] = PEERS["placement"]
RESULT_KEYS: dict[str, str] = PEERS["result_keys"]  # key in RLlib's result dict -> "last" or "mean" since the last point
PEER_SETTINGS: dict[str, dict[str, dict[str, Any]]] = PEERS["peers"]  # algo -> env -> settings
PEER_ALGOS = tuple(PEER_SETTINGS)
EVAL_SEED_OFFSET = 10_000  # as benchmarks.pool's evaluation env
MIN_TIME_S_PER_ITERATION = 1.0  # short iterations: a point lands within about a second of its grid mark
STACKED_FRAMES = 4  # Atari: as the atari yml entries' frame_stack and RLlib's examples
MONITOR_RETURN = "monitor_episode_return_mean"  # the Monitor's episode return (the game's score on Atari)


def peer_settings(algo: str, env_id: str) -> dict[str, Any]:
    """The settings of ``algo`` (a name or a variant: ``rllib_appo[entropy_coeff=0.0]``) on ``env_id``
    (benchmarks/peers.yml; :func:`benchmarks.variants.entry_settings`)."""
    return entry_settings(PEER_SETTINGS, algo, env_id, "RLlib")


def result_value(result: dict[str, Any], key: str) -> Any:
    """The value at ``key``, a ``/``-joined path, in RLlib's nested result dict (``KeyError`` where there is none)."""
    return functools.reduce(operator.getitem, key.split("/"), result)


class PointMetrics:
    """
    A run's diagnostics row at each evaluation point: the :data:`RESULT_KEYS` of each training iteration's result
    (:meth:`add`), reduced over the iterations since the previous point, and, given an APPO ``algo``, what RLlib
    2.60's result dict gets wrong or leaves out, counted in its learner (in the driver: ``num_learners=0``):
    ``counted/num_target_updates`` (its target refreshes; the reported count falls far behind), ``counted/batches``
    (put into its circular buffer), ``counted/draws`` (trained on) and ``counted/dropped_draws`` (lost when a new
    batch pushed a batch out before its K draws; RLlib counts drops only for Prometheus, and only one of K). IMPALA's
    learner queue blocks instead of dropping.
    """

    def __init__(self, algo: Any = None) -> None:
        self.values: dict[str, list[float]] = {key: [] for key in RESULT_KEYS}
        self.target_updates = self.batches = self.draws = 0
        self.buffer = None
        if algo is not None:
            self.count_learner(algo.learner_group._learner)

    def count_learner(self, learner: Any) -> None:
        from ray.rllib.algorithms.appo import appo_learner
        from ray.rllib.core import DEFAULT_MODULE_ID

        buffer = getattr(learner, "_learner_thread_in_queue", None)
        if not isinstance(learner, appo_learner.APPOLearner) or not hasattr(buffer, "iterations_per_batch"):
            return
        self.buffer = buffer
        first_target = learner.module[DEFAULT_MODULE_ID].unwrapped().get_target_network_pairs()[0][1]
        update, put, get = appo_learner.update_target_network, buffer.put, buffer.get

        def counted_update(*, main_net: Any, target_net: Any, tau: float) -> None:
            self.target_updates += target_net is first_target  # one pair per refresh
            update(main_net=main_net, target_net=target_net, tau=tau)

        def counted_put(item: Any, block: bool = True, timeout: float | None = None) -> int:
            self.batches += 1
            return put(item, block, timeout)

        def counted_get(block: bool = True, timeout: float | None = None) -> Any:
            batch = get(block, timeout)
            self.draws += 1
            return batch

        appo_learner.update_target_network = counted_update
        buffer.put, buffer.get = counted_put, counted_get

    def add(self, result: dict[str, Any]) -> None:
        for key in RESULT_KEYS:
            try:
                value = float(result_value(result, key))
            except (KeyError, TypeError, ValueError):  # not reported, or not a number
                continue
            if math.isfinite(value):
                self.values[key].append(value)

    def row(self) -> dict[str, float]:
        """The values since the previous row (a key without any is left out; then starts afresh), and the counts."""
        row: dict[str, float] = {}
        for key, how in RESULT_KEYS.items():
            values, self.values[key] = self.values[key], []
            if values:
                row[key] = values[-1] if how == "last" else sum(values) / len(values)
        if self.buffer is not None:
            dropped = self.batches * self.buffer.iterations_per_batch - self.draws - len(self.buffer)  # neither drawn nor left
            row.update({"counted/num_target_updates": self.target_updates, "counted/batches": self.batches})
            row.update({"counted/draws": self.draws, "counted/dropped_draws": dropped})
        return row


def rllib_atari_env(env: Any, settings: dict[str, Any], evaluation: bool) -> Any:
    """
    RLlib's own Atari preprocessing around ``env``, the steps of its ``wrap_atari_for_new_api_stack`` (Ray 2.60):
    108k-frame cap, 64x64 grey frames, max over 4 skipped frames, up to 30 no-op starts, one life per episode (in
    training, as RLlib's examples; whole games in evaluation), fire on reset, 4 stacked frames unless the connectors
    stack them. Rewards are clipped by the algorithm's ``clip_rewards``, not here, so evaluation returns are scores.
    """
    import gymnasium as gym
    from ray.rllib.env.wrappers import atari_wrappers as wrappers

    env = gym.wrappers.TimeLimit(env, max_episode_steps=108_000)
    env = wrappers.NormalizedImageEnv(wrappers.WarpFrame(env, dim=64, grayscale=True))
    env = wrappers.NoopResetEnv(wrappers.MaxAndSkipEnv(env, skip=4), noop_max=30)
    if not evaluation:
        env = wrappers.EpisodicLifeEnv(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = wrappers.FireResetEnv(env)
    return wrappers.FrameStack(env, k=STACKED_FRAMES) if settings["frame_stack"] == "wrapper" else env


def peer_env(env_id: str, settings: dict[str, Any], evaluation: bool = False) -> Any:
    """
    One env of the run, built alike for training (RLlib's env runner) and, with ``evaluation``, for SB3's
    ``evaluate_policy`` (:func:`evaluation_env`), which counts the Monitor's episodes (whole games, raw scores).
    ``env: sb3``: one of ours, as :func:`benchmarks.config.make_training_env` builds it (Monitor, then SB3's
    AtariWrapper on Atari); in training, Atari frames scaled to [0, 1] as SB3's CnnPolicy scales them; with
    ``frame_stack: wrapper``, 4 frames stacked in the env as VecFrameStack stacks them (the entries let RLlib's
    connectors stack them); with ``normalize_reward``, rewards scaled and clipped as VecNormalize's defaults do.
    ``env: rllib``: the env of RLlib's examples (Atari: :func:`rllib_atari_env`). docs/guide/benchmarks.md, "Peers",
    says what each side gets.
    """
    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.atari_wrappers import AtariWrapper
    from stable_baselines3.common.monitor import Monitor

    if is_atari(env_id):
        import ale_py

        gym.register_envs(ale_py)
    env = gym.make(env_id)
    if settings["env"] == "rllib":
        env = rllib_atari_env(env, settings, evaluation) if is_atari(env_id) else env
        return Monitor(env) if evaluation else env
    env = Monitor(env)
    if is_atari(env_id):
        env = AtariWrapper(env)
        if not evaluation:  # uint8 frames as float32 in [0, 1]
            space = gym.spaces.Box(0.0, 1.0, env.observation_space.shape, np.float32)
            env = gym.wrappers.TransformObservation(env, lambda frame: frame.astype(np.float32) / 255.0, space)
        if settings.get("frame_stack") == "wrapper":  # stacked in the env, as VecFrameStack stacks them
            env = stacked_frames(env, STACKED_FRAMES, "last")
    if settings.get("normalize_reward") and not evaluation:
        env = gym.wrappers.ClipReward(gym.wrappers.NormalizeReward(env, gamma=0.99, epsilon=1e-8), -10.0, 10.0)
    return env


def evaluation_env(env_id: str, settings: dict[str, Any], seed: int) -> Any:
    """
    The env the run is evaluated on: :func:`peer_env`'s, in a vec env seeded ``seed`` (``env: sb3``: the one our runs
    are evaluated on, as ``make_vec_env`` builds it), 4 frames stacked by VecFrameStack where RLlib's connectors stack
    them in training.
    """
    from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

    env = DummyVecEnv([lambda: peer_env(env_id, settings, evaluation=True)])
    env.seed(seed)
    return VecFrameStack(env, STACKED_FRAMES) if settings.get("frame_stack") == "connector" else env


def log_monitor_return(*, episode: Any, metrics_logger: Any, **kwargs: Any) -> None:
    """RLlib callback: the Monitor's return of an episode that ends the Monitor's (a whole game on Atari)."""
    info = episode.get_infos(-1)
    if isinstance(info, dict) and "episode" in info:
        metrics_logger.log_value(MONITOR_RETURN, float(info["episode"]["r"]), window=100)


def build_algorithm(spec: dict[str, Any], evaluation_episodes: int = 0) -> Any:
    """
    The RLlib algorithm of ``spec`` with its settings (:func:`peer_settings`) and the 2-core placement; with
    ``evaluation_episodes``, RLlib's own evaluation too (one evaluation env runner with one env, the policy of
    ``spec``'s ``deterministic``), for :func:`cross_check`.
    """
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.algorithms.impala import IMPALAConfig
    from ray.rllib.connectors.env_to_module import MeanStdFilter
    from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
    from ray.rllib.connectors.learner.frame_stacking import FrameStackingLearner
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.registry import register_env

    settings = peer_settings(spec["algo"], spec["env_id"])
    env_name = f"peer-{spec['env_id']}"
    # RLlib's own evaluation (the cross-check) gets the env of our evaluation: raw rewards, not the scaled ones.
    register_env(env_name, lambda env_config: peer_env(spec["env_id"], settings, env_config.get("evaluation", False)))
    config = (APPOConfig if split_variant(spec["algo"])[0].startswith("rllib_appo") else IMPALAConfig)()
    config = config.environment(env_name)
    if settings.get("frame_stack") == "connector":  # single frames travel, the connectors stack
        config = config.env_runners(env_to_module_connector=lambda *_: FrameStackingEnvToModule(num_frames=STACKED_FRAMES))
        config = config.training(learner_connector=lambda *_: FrameStackingLearner(num_frames=STACKED_FRAMES))
    elif settings.get("observation_filter"):
        config = config.env_runners(env_to_module_connector=lambda *_: MeanStdFilter())
    if settings["env"] == "sb3":
        config = config.callbacks(on_episode_end=log_monitor_return)
    config = config.debugging(seed=spec["seed"])
    config = config.reporting(min_time_s_per_iteration=MIN_TIME_S_PER_ITERATION, min_sample_timesteps_per_iteration=0)
    for method, kwargs in [*TWO_CORES.items(), *settings["config"].items()]:
        if method == "rl_module":
            kwargs = {**kwargs, "model_config": DefaultModelConfig(**kwargs["model_config"])}
        config = getattr(config, method)(**kwargs)
    if evaluation_episodes:
        evaluation_config = {
            "explore": not spec["deterministic"],
            # One env: with several, the episodes that end first are counted first, biased to short ones.
            "num_envs_per_env_runner": 1,
            "env_config": {"evaluation": True},
        }
        if settings.get("observation_filter"):  # frozen: :func:`cross_check` gives it the training runner's statistics
            # (the attribute env_runners() sets: update_from_dict sets any key silently, a public name to no effect)
            evaluation_config["_env_to_module_connector"] = lambda *_: MeanStdFilter(update_stats=False)
        config = config.evaluation(
            evaluation_num_env_runners=1,
            evaluation_duration=evaluation_episodes,
            evaluation_duration_unit="episodes",
            evaluation_config=evaluation_config,
        )
    return config.build_algo()


@contextlib.contextmanager
def running_algorithm(spec: dict[str, Any], evaluation_episodes: int = 0) -> Iterator[Any]:
    """Ray started on this machine's CPUs and :func:`build_algorithm`'s algorithm; both stopped on leaving."""
    import ray

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        algo = build_algorithm(spec, evaluation_episodes)
        yield algo
        algo.stop()
    finally:
        ray.shutdown()


class ModulePolicy:
    """
    The learner's current weights in ``algo``'s RLlib module, as the model of SB3's ``evaluate_policy``: RLlib's
    inference forward pass and its action distribution (``deterministic``: the distribution's mode) on the observation
    as RLlib's env runner passes it on (Atari frames scaled to [0, 1] where :func:`peer_env` scales them in training,
    the MeanStdFilter connector's running mean and std, frozen, where there is one), actions unsquashed to the action
    space as the env runner does (``normalize_actions``, on by default).
    """

    def __init__(self, algo: Any, spec: dict[str, Any], action_space: Any) -> None:
        from ray.rllib.core import DEFAULT_MODULE_ID

        settings = peer_settings(spec["algo"], spec["env_id"])
        self.module, self.action_space = algo.get_module(), action_space
        self.module.set_state(algo.learner_group.get_weights()[DEFAULT_MODULE_ID])
        self.scale = 1 / 255 if settings["env"] == "sb3" and is_atari(spec["env_id"]) else 1.0  # as peer_env's frames
        self.observation_filter = observation_filter(algo) if settings.get("observation_filter") else None
        self.distribution_class = self.module.get_inference_action_dist_cls()

    def predict(
        self, observation: Any, state: Any = None, episode_start: Any = None, deterministic: bool = False
    ) -> tuple[Any, None]:
        import gymnasium as gym
        import numpy as np
        import torch
        from ray.rllib.core import Columns
        from ray.rllib.utils.spaces.space_utils import unsquash_action

        model_input = np.asarray(observation, dtype=np.float32) * self.scale
        if self.observation_filter is not None:
            model_input = self.observation_filter(model_input, update=False)
        with torch.no_grad():
            batch = {Columns.OBS: torch.as_tensor(model_input, dtype=torch.float32)}
            inputs = self.module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS]
        distribution = self.distribution_class.from_logits(inputs)
        actions = (distribution.to_deterministic() if deterministic else distribution).sample().numpy()
        if isinstance(self.action_space, gym.spaces.Box):
            actions = np.stack([unsquash_action(action, self.action_space) for action in actions])
        return actions, None


def connector_state(runners: Any) -> dict[str, Any]:
    """The env-to-module connector state (the MeanStdFilter's statistics) of the one remote env runner of ``runners``."""
    (state,) = runners.foreach_env_runner(
        lambda runner: runner.get_state(components="env_to_module_connector"), local_env_runner=False
    )
    return state


def filter_pushes(state: dict[str, Any]) -> int:
    """How many observations the MeanStdFilter's statistics in a connector state (:func:`connector_state`) have seen."""
    (agent,) = state["env_to_module_connector"]["MeanStdFilter"].values()
    (stats,) = agent["running_stats"]
    return int(stats["num_pushes"])


def observation_filter(algo: Any) -> Any:
    """The env runner's MeanStdFilter as RLlib's ``Filter`` (call it with ``update=False``); KeyError where there is none."""
    from ray.rllib.utils.filter import MeanStdFilter, RunningStat

    state = connector_state(algo.env_runner_group)
    (agent,) = state["env_to_module_connector"]["MeanStdFilter"].values()
    filter_ = MeanStdFilter(
        agent["shape"], demean=agent["de_mean_to_zero"], destd=agent["de_std_to_one"], clip=agent["clip_by_value"]
    )
    (stats,) = agent["running_stats"]
    filter_.running_stats = RunningStat.from_state(stats)
    return filter_


def evaluate(algo: Any, spec: dict[str, Any], env: Any) -> list[float]:
    """Returns of ``spec``'s ``eval_episodes`` whole episodes of the learner's current weights on ``env``
    (:func:`evaluation_env`), with SB3's ``evaluate_policy`` and the policy of ``spec``'s ``deterministic``."""
    from stable_baselines3.common.evaluation import evaluate_policy

    policy = ModulePolicy(algo, spec, env.action_space)
    returns, _ = evaluate_policy(
        policy, env, spec["eval_episodes"], deterministic=spec["deterministic"], return_episode_rewards=True
    )
    return [float(value) for value in returns]


def run(spec: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """
    Train and evaluate one run: its points as :class:`benchmarks.output.EvalPoint` fields, and a row of RLlib's
    metrics (:class:`PointMetrics`) per point, keyed by algo, seed and steps as the diagnostics of our runs.
    """
    import numpy as np
    import torch

    from benchmarks.output import machine_id

    torch.set_num_threads(spec["torch_threads"])
    eval_env = evaluation_env(spec["env_id"], peer_settings(spec["algo"], spec["env_id"]), spec["seed"] + EVAL_SEED_OFFSET)
    points: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    steps, trained = 0, 0.0
    with contextlib.closing(eval_env), running_algorithm(spec) as algo:  # the env closed after Ray's shutdown
        metrics = PointMetrics(algo)

        def add_point() -> None:
            returns = evaluate(algo, spec, eval_env) if spec["eval_episodes"] > 0 else [float("nan")]
            key = {"algo": spec["algo"], "seed": spec["seed"], "steps": steps}
            row = {**key, "env": spec["env_id"], "wall_seconds": trained}
            row.update(eval_mean=float(np.mean(returns)), eval_std=float(np.std(returns)))
            points.append({**row, "status": "ok", "error": "", "device": "cpu", "machine": machine_id("cpu")})
            rows.append({**key, **metrics.row()})

        add_point()
        every = spec["eval_seconds"] or spec["eval_freq"]  # a grid of training seconds, else of env steps
        next_mark = every
        max_seconds, max_steps = spec["max_seconds"] or float("inf"), spec["steps"] or float("inf")
        while trained < max_seconds and steps < max_steps:
            start = time.perf_counter()
            result = algo.train()
            trained += time.perf_counter() - start
            metrics.add(result)
            steps = int(result.get("num_env_steps_sampled_lifetime", steps))
            due = (trained if spec["eval_seconds"] else steps) >= next_mark
            if due and trained < max_seconds and steps < max_steps:
                next_mark += every
                add_point()  # outside ``trained``: evaluation time is excluded
        add_point()
    return points, rows


def same_weights(weights: dict[str, Any], other: dict[str, Any]) -> bool:
    import numpy as np

    return all(np.array_equal(np.asarray(weights[name]), np.asarray(other[name])) for name in weights)


def settled_weights(algo: Any, timeout: float = 60.0) -> Any:
    """The learner's weights once its thread has worked through what it was given (two reads a second apart agree)."""
    from ray.rllib.core import DEFAULT_MODULE_ID

    def read() -> dict[str, Any]:
        return algo.learner_group.get_weights()[DEFAULT_MODULE_ID]

    deadline, weights = time.monotonic() + timeout, read()
    while time.monotonic() < deadline:
        time.sleep(1.0)
        again = read()
        if same_weights(weights, again):
            return again
        weights = again
    raise RuntimeError(f"the learner's weights still change {timeout:g} s after training stopped")


def cross_check(algo_name: str, env_id: str, seconds: float, episodes: int, seed: int = 0) -> dict[str, Any]:
    """
    ``algo_name`` trained for ``seconds`` on ``env_id`` (not Atari: RLlib evaluates on its training env, where a life
    is an episode), then the same weights evaluated with the deterministic policy on ``episodes`` episodes by
    :func:`evaluate` and by RLlib: ``algo.evaluate()`` (its mean, min and max), and its evaluation env runner's
    ``sample(num_episodes=...)`` for single episodes' returns. ``agree``: the means of the two sets of single
    episodes differ by less than 3 standard errors of their difference. RLlib's evaluation env gets raw rewards, as
    ours, and, with an observation filter, the training env runner's MeanStdFilter statistics, frozen: RLlib 2.60
    syncs none to its evaluation env runner, whose filter would otherwise start from nothing and learn its statistics
    from the evaluation episodes (``RuntimeError`` if the statistics it evaluated with are not the training runner's).
    """
    import numpy as np

    if is_atari(env_id):
        raise ValueError("the cross-check runs on non-Atari envs: RLlib evaluates on its training env (one life)")
    spec = {"algo": algo_name, "env_id": env_id, "seed": seed, "deterministic": True, "eval_episodes": episodes}
    with running_algorithm(spec, evaluation_episodes=episodes) as algo:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            result = algo.train()
        weights = settled_weights(algo)
        settings = peer_settings(algo_name, env_id)
        ours = evaluate(algo, spec, evaluation_env(env_id, settings, seed + EVAL_SEED_OFFSET))
        if settings.get("observation_filter"):
            training_filter = connector_state(algo.env_runner_group)
            algo.eval_env_runner_group.foreach_env_runner(lambda runner: runner.set_state(training_filter))
        summary = algo.evaluate()  # also gives its evaluation env runner the learner's weights
        (theirs,) = algo.eval_env_runner_group.foreach_env_runner(
            lambda runner: [float(episode.get_return()) for episode in runner.sample(num_episodes=episodes, explore=False)],
            local_env_runner=False,
        )
        if not same_weights(weights, settled_weights(algo)):
            raise RuntimeError("the learner's weights changed between the evaluations")
        evaluated_with = connector_state(algo.eval_env_runner_group) if settings.get("observation_filter") else None
        if evaluated_with is not None and filter_pushes(evaluated_with) != filter_pushes(training_filter):
            raise RuntimeError("RLlib's evaluation env runner did not evaluate with the training runner's filter")
    standard_error = math.sqrt((np.var(ours, ddof=1) + np.var(theirs, ddof=1)) / episodes)
    difference = float(np.mean(ours) - np.mean(theirs))

    def described(returns: list[float]) -> dict[str, Any]:
        return {"mean": float(np.mean(returns)), "std": float(np.std(returns, ddof=1)), "episodes": len(returns)}

    return {
        "algo": algo_name,
        "env": env_id,
        "seconds": seconds,
        "sampled_steps": int(result["num_env_steps_sampled_lifetime"]),
        "harness": described(ours),
        "rllib_sample": described(theirs),
        "rllib_evaluate": {
            **{name: float(result_value(summary, f"env_runners/episode_return_{name}")) for name in ("mean", "min", "max")},
            "episodes": int(result_value(summary, "env_runners/num_episodes")),
        },
        "difference": difference,
        "standard_error": standard_error,
        "agree": abs(difference) <= 3 * standard_error,
    }


def run_command_line(argv: list[str] | None = None) -> None:
    from benchmarks.output import software_versions  # this environment's, as for our runs

    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--software"]:
        print(json.dumps(software_versions()))
        return
    if argv[:1] == ["--cross-check"] and len(argv) in (5, 6):
        seed = int(argv[5]) if len(argv) == 6 else 0
        print(json.dumps(cross_check(argv[1], argv[2], float(argv[3]), int(argv[4]), seed)))
        return
    if len(argv) != 2:
        raise SystemExit(
            "usage: python -m benchmarks.rllib_run SPEC.json RESULT.json | --software | --cross-check ALGO ENV "
            "SECONDS EPISODES [SEED]"
        )
    spec = json.loads(Path(argv[0]).read_text())
    points, diagnostics = run(spec)
    Path(argv[1]).write_text(json.dumps({"points": points, "diagnostics": diagnostics, "software": software_versions()}))


if __name__ == "__main__":
    run_command_line()
