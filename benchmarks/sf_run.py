"""
One Sample Factory run (its APPO, sample-factory 2.1.1) under the benchmarks' protocol, for ``python -m benchmarks
run --algos sf_appo ...``: :func:`benchmarks.peers.run_peer` starts it with the Python of Sample Factory's own
virtual environment (``$SB3_IMPACT_SF_PYTHON``, default ``.venv-sf/bin/python``),

    SF/bin/python -m benchmarks.sf_run SPEC.json RESULT.json | --software

the same contract as :mod:`benchmarks.rllib_run`'s: SPEC.json holds the run (``algo``, ``env_id``, ``seed``,
``steps``, ``max_seconds``, ``eval_freq``, ``eval_seconds``, ``eval_episodes``, ``deterministic``,
``torch_threads``); RESULT.json receives its evaluation points (the fields of :class:`benchmarks.output.EvalPoint`
but ``machine``, which :func:`benchmarks.peers.run_peer` fills in), Sample Factory's own metrics at each point (the
run's diagnostics) and the software it ran with. The settings per algo and env are in ``benchmarks/peers.yml``,
section ``sample_factory`` (:func:`sf_settings`).

Sample Factory pins gymnasium 0.29 (sb3-impact needs gymnasium >= 1), so this module imports nothing from
``sb3_impact`` nor from the rest of ``benchmarks`` (``benchmarks.output`` needs pandas, which SF's environment lacks):
only the standard library and PyYAML at module level, Sample Factory, torch, numpy and gymnasium inside the functions
that run there. :func:`software_versions` repeats ``benchmarks.output.software_versions`` (its package list,
:data:`SOFTWARE`, is checked equal to that one by tests/test_peers.py), plus ``sample_factory``.

How a run is measured (the decision; docs/guide/benchmarks.md, "Peers"). Sample Factory has no per-step callback
into its training loop, and its learner runs in a process of its own, so the policy is not evaluated during training:

- A ``GridObserver`` (SF's ``AlgoObserver``, in the runner's process; :func:`grid_observer`) is called after every
  training iteration. Training time is wall time from the end of SF's first training iteration (its processes
  started, its envs made, one round sampled and trained on: start-up, as the RLlib runner's build, is not counted;
  that first round's steps are) and no evaluation interrupts it. When the time (``eval_seconds``) or SF's env-step
  count (``eval_freq``) passes a grid mark, it asks the learner for a checkpoint (SF's ``save_periodic`` signal) and
  notes the training seconds and SF's metrics of that moment, the point's diagnostics: the runner's running means
  (``sf/reward``, ``sf/len``, ...) and the mean of each learner statistic since the previous point
  (``sf/train/loss``, ``sf/train/kl_divergence``, ...; SF itself writes them only to TensorBoard). SF's own periodic
  saving is off (``save_every_sec`` huge) and every checkpoint is kept, so the n-th checkpoint is the n-th request's.
- At ``max_seconds`` (SF 2.1.1's ``train_for_seconds`` is never counted, so the observer stops training itself) or
  ``steps`` (SF's ``train_for_env_steps``, at most the example's: :func:`train_for_env_steps`), training stops and SF
  saves its last checkpoint: the final point.
- After training, each checkpoint is evaluated with SF's actor-critic as its ``enjoy`` loads it (observation
  normaliser included, in eval mode so frozen), deterministic (the Gaussian's mean, the argmax) where the spec says
  so, for ``eval_episodes`` whole episodes (Atari: whole games, the Monitor's) of the env SF trains on
  (:func:`make_env`) seeded ``seed + 10000`` as our evaluation env. A point's steps are the checkpoint's
  ``env_steps`` (the learner's count when it saved, a little after the request), its seconds the training time at
  the request.
- The env (:func:`make_env`, training and evaluation alike): MuJoCo, the plain ``gym.make(env_id)`` in a Monitor;
  Atari, ours (:func:`atari_env`): SB3's AtariWrapper as the atari yml entries name it (SB3 is installed in SF's
  environment for it), with the frames stacked as our ``VecFrameStack`` stacks them.
- The point at step 0 is an untrained actor-critic built as SF builds it with the run's seed.
"""

import contextlib
import importlib.metadata
import json
import math
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.protocol import is_atari, stacked_frames  # the standard library only
from benchmarks.variants import entry_settings  # and PyYAML

# Sample Factory's settings per algo and env (benchmarks/peers.yml, section sample_factory), read once.
SF_SETTINGS: dict[str, dict[str, dict[str, Any]]] = yaml.safe_load(Path(__file__).with_name("peers.yml").read_text())[
    "sample_factory"
]
SF_ALGOS = tuple(SF_SETTINGS)
EVAL_SEED_OFFSET = 10_000  # as benchmarks.pool's evaluation env
NEVER = 10**9  # seconds: SF's own periodic saves off
# As benchmarks.output.SOFTWARE (tests/test_peers.py checks), then Sample Factory itself.
SOFTWARE = ("torch", "stable_baselines3", "sb3_contrib", "rl_zoo3", "gymnasium", "mujoco", "ale_py", "ray", "numpy")
STACK_SOFTWARE = ("sample_factory",)


def sf_settings(algo: str, env_id: str) -> dict[str, Any]:
    """The settings of ``algo`` (a name or a variant: ``sf_appo[learning_rate=1e-3]``) on ``env_id``
    (benchmarks/peers.yml, section sample_factory; :func:`benchmarks.variants.entry_settings`)."""
    return entry_settings(SF_SETTINGS, algo, env_id, "Sample Factory")


def software_versions() -> dict[str, str | None]:
    """This environment's Python and package versions, as ``benchmarks.output.software_versions``, and SF's."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in SOFTWARE + STACK_SOFTWARE:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def env_name(env_id: str) -> str:
    return f"peer_{env_id}"


def atari_env(env_id: str, frames: int) -> Any:
    """
    One Atari env as our runs get it (rl-zoo3's ``env_wrapper`` and ``frame_stack`` of the atari yml entries):
    ``gym.make`` in SB3's Monitor (whole games' raw scores in ``info["episode"]``, which SF's
    ``use_record_episode_statistics`` reads), SB3's AtariWrapper (no-op starts, 4 skipped frames, FIRE on reset, a
    lost life ends the episode, 84x84 grey frames, rewards clipped to their sign), then the last ``frames``
    frames channel first as our ``VecFrameStack`` and ``VecTransposeImage`` give them
    (:func:`benchmarks.protocol.stacked_frames`).
    """
    import gymnasium as gym
    from ale_py.registration import register_v0_v4_envs  # ale-py's own registration fails with gymnasium 0.29
    from stable_baselines3.common.atari_wrappers import AtariWrapper
    from stable_baselines3.common.monitor import Monitor

    if env_id not in gym.registry:
        register_v0_v4_envs()
    return stacked_frames(AtariWrapper(Monitor(gym.make(env_id))), frames, "first")


def make_env(full_env_name: str, cfg: Any = None, env_config: Any = None, render_mode: str | None = None) -> Any:
    """SF's env factory: Atari as ours (:func:`atari_env`, ``cfg.env_framestack`` frames), others the gymnasium env
    itself (as sf_examples' MuJoCo envs), in SB3's Monitor (whole episodes, for the evaluation)."""
    import gymnasium as gym
    from stable_baselines3.common.monitor import Monitor

    env_id = full_env_name.removeprefix("peer_")
    if is_atari(env_id):
        return atari_env(env_id, cfg.env_framestack)
    return Monitor(gym.make(env_id, render_mode=render_mode))


def train_for_env_steps(spec: dict[str, Any], settings: dict[str, Any]) -> int:
    """
    SF's ``train_for_env_steps``: where it stops and what its ``linear_decay`` learning rate spans (to 0 at it). The
    settings' (the example's 10M) where the run's step budget is larger, as a wall-clock run's 1e8 is, so that the
    learning rate decays as in the example; else the run's steps, a step-based run's budget.
    """
    budget = spec["steps"] or 10**15
    return min(budget, int(settings["config"].get("train_for_env_steps", budget)))


def make_config(spec: dict[str, Any], train_dir: str) -> Any:
    """SF's configuration: its defaults, the settings of peers.yml, then the run's seed, budget and files."""
    from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
    from sample_factory.envs.env_utils import register_env

    register_env(env_name(spec["env_id"]), make_env)
    settings = sf_settings(spec["algo"], spec["env_id"])
    argv = [f"--env={env_name(spec['env_id'])}", "--experiment=run", f"--train_dir={train_dir}"]
    argv += [f"--seed={spec['seed']}", "--device=cpu", f"--save_every_sec={NEVER}", f"--save_best_every_sec={NEVER}"]
    argv += [f"--keep_checkpoints={NEVER}", f"--train_for_env_steps={train_for_env_steps(spec, settings)}"]
    parser, _ = parse_sf_args(argv=argv, evaluation=False)
    parser.set_defaults(**settings["config"])
    return parse_full_cfg(parser, argv)


def grid_observer(spec: dict[str, Any]) -> Any:
    """An SF ``AlgoObserver`` that asks for a checkpoint on the spec's grid and stops at ``max_seconds``."""
    import numpy as np
    from sample_factory.algo.runners.runner import AlgoObserver
    from sample_factory.algo.utils.misc import TRAIN_STATS

    class GridObserver(AlgoObserver):
        def __init__(self) -> None:
            self.start: float | None = None
            self.every = spec["eval_seconds"] or spec["eval_freq"]
            self.next_mark = self.every
            self.requests: list[dict[str, Any]] = []  # one per checkpoint: training seconds and SF's metrics
            self.train_stats: dict[str, list[float]] = {}  # the learner's since the previous point
            self.done = False

        def train_stats_handler(self, runner: Any, msg: dict[str, Any], policy_id: int) -> None:
            for key, value in msg[TRAIN_STATS].items():
                with contextlib.suppress(TypeError, ValueError):
                    if math.isfinite(float(value)):
                        self.train_stats.setdefault(key, []).append(float(value))

        def metrics(self, runner: Any, trained: float) -> dict[str, Any]:
            row: dict[str, Any] = {"sf/env_steps": float(sum(runner.env_steps.values())), "sf/train_seconds": trained}
            for key, per_policy in runner.policy_avg_stats.items():
                values = per_policy[0] if per_policy else []
                with np.errstate(all="ignore"):
                    value = float(np.mean(values)) if len(values) else float("nan")
                if math.isfinite(value):
                    row[f"sf/{key}"] = value
            for key, values in self.train_stats.items():
                row[f"sf/train/{key}"] = float(np.mean(values))
            self.train_stats = {}
            return row

        def on_training_step(self, runner: Any, training_iteration_since_resume: int) -> None:
            if self.done:
                return
            if self.start is None:  # the first training iteration done: the clock starts
                self.start = time.time()
                return
            trained = time.time() - self.start
            steps = sum(runner.env_steps.values())
            over = trained >= (spec["max_seconds"] or math.inf) or steps > runner.cfg.train_for_env_steps
            if over:  # the final point: SF saves its last checkpoint when it stops
                self.done = True
                self.requests.append(self.metrics(runner, trained))
                runner._stop_training()
                return
            if (trained if spec["eval_seconds"] else steps) >= self.next_mark:
                while (trained if spec["eval_seconds"] else steps) >= self.next_mark:
                    self.next_mark += self.every
                self.requests.append(self.metrics(runner, trained))
                runner.save_periodic.emit()

    return GridObserver()


class Evaluator:
    """SF's actor-critic for ``cfg`` (as its ``enjoy`` builds it), evaluated on the env it trains on (:func:`make_env`)."""

    def __init__(self, cfg: Any, spec: dict[str, Any]) -> None:
        import torch
        from sample_factory.algo.utils.env_info import extract_env_info
        from sample_factory.algo.utils.make_env import make_env_func_batched
        from sample_factory.model.actor_critic import create_actor_critic
        from sample_factory.utils.attr_dict import AttrDict

        self.spec, self.cfg = spec, cfg
        env = make_env_func_batched(cfg, env_config=AttrDict(worker_index=0, vector_index=0, env_id=0))
        self.env_info = extract_env_info(env, cfg)
        torch.manual_seed(spec["seed"])  # the untrained policy of step 0: as SF's learner builds it, seeded
        self.actor_critic = create_actor_critic(cfg, env.observation_space, env.action_space)
        self.actor_critic.model_to_device(torch.device("cpu"))
        self.actor_critic.eval()  # the observation normaliser frozen
        env.close()
        self.env = make_env(env_name(spec["env_id"]), cfg)
        self.env.reset(seed=spec["seed"] + EVAL_SEED_OFFSET)

    def load(self, checkpoint: Path) -> int:
        """The checkpoint's weights (and normaliser); its env steps."""
        import torch

        state = torch.load(checkpoint, map_location="cpu", weights_only=False)
        self.actor_critic.load_state_dict(state["model"])
        return int(state["env_steps"])

    def act(self, observation: Any) -> Any:
        import numpy as np
        import torch
        from sample_factory.algo.sampling.batched_sampling import preprocess_actions
        from sample_factory.algo.utils.action_distributions import argmax_actions
        from sample_factory.algo.utils.rl_utils import prepare_and_normalize_obs
        from sample_factory.model.model_utils import get_rnn_size

        with torch.no_grad():
            obs = {"obs": torch.as_tensor(np.asarray(observation, dtype=np.float32)[None])}
            rnn_states = torch.zeros([1, get_rnn_size(self.cfg)], dtype=torch.float32)
            outputs = self.actor_critic(prepare_and_normalize_obs(self.actor_critic, obs), rnn_states)
            actions = outputs["actions"]
            if self.spec["deterministic"]:
                actions = argmax_actions(self.actor_critic.action_distribution())
            if actions.ndim == 1:
                actions = actions.unsqueeze(-1)
            return preprocess_actions(self.env_info, actions)[0]

    def returns(self) -> list[float]:
        """
        ``eval_episodes`` whole episodes' returns, the Monitor's (NaN for 0 episodes: a throughput run): on Atari a
        lost life ends the wrapped episode, the env is reset (FIRE) and the game goes on, as SB3's
        ``evaluate_policy`` counts our runs' games.
        """
        if self.spec["eval_episodes"] <= 0:
            return [float("nan")]
        returns: list[float] = []
        observation, _ = self.env.reset()
        while len(returns) < self.spec["eval_episodes"]:
            observation, _, terminated, truncated, info = self.env.step(self.act(observation))
            if terminated or truncated:
                if "episode" in info:
                    returns.append(float(info["episode"]["r"]))
                observation, _ = self.env.reset()
        return returns


def pair_checkpoints(checkpoints: list[Path], requests: list[dict[str, Any]]) -> list[Path]:
    """
    The checkpoint of each request, in order (``checkpoints`` sorted by name: SF's ``checkpoint_TRAINSTEP_ENVSTEPS``,
    the train step zero-padded). One each where their numbers agree. Two requests the learner served between the same
    two SGD steps got one file (the same name); then each request gets the first checkpoint not before the previous
    request's whose env steps reach the runner's count at the request (``sf/env_steps``, which lags the learner's),
    and says so (``sf/shared_checkpoint``). ``RuntimeError`` where no checkpoint is left to give.
    """
    if len(checkpoints) == len(requests):
        return checkpoints
    if not checkpoints or len(checkpoints) > len(requests):
        raise RuntimeError(f"{len(requests)} checkpoints asked for, {len(checkpoints)} saved")
    steps = [int(path.stem.split("_")[2]) for path in checkpoints]
    paired, index = [], 0
    for request in requests:
        while index < len(checkpoints) - 1 and steps[index] < request["sf/env_steps"]:
            index += 1
        if paired and paired[-1] == checkpoints[index]:
            request["sf/shared_checkpoint"] = 1
        paired.append(checkpoints[index])
    return paired


def run(spec: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Train on the grid (checkpoints), then evaluate each: the points as EvalPoint fields, and SF's metrics."""
    import numpy as np
    import torch
    from sample_factory.algo.utils.misc import TRAIN_STATS, ExperimentStatus
    from sample_factory.train import make_runner

    torch.set_num_threads(spec["torch_threads"])
    with tempfile.TemporaryDirectory(prefix="sf-run-") as train_dir:
        cfg = make_config(spec, train_dir)
        cfg, runner = make_runner(cfg)
        observer = grid_observer(spec)
        runner.register_observer(observer)
        runner.policy_msg_handlers[TRAIN_STATS].append(observer.train_stats_handler)  # the learner's losses, KL...
        status = runner.init()
        if status == ExperimentStatus.SUCCESS:
            status = runner.run()
        if status != ExperimentStatus.SUCCESS:
            raise RuntimeError(f"Sample Factory's training ended with status {status}")
        folder = Path(train_dir) / "run" / "checkpoint_p0"
        checkpoints = pair_checkpoints(sorted(folder.glob("checkpoint_*.pth")), observer.requests)
        evaluator = Evaluator(cfg, spec)
        points: list[dict[str, Any]] = []
        rows: list[dict[str, Any]] = []

        def add_point(steps: int, trained: float, metrics: dict[str, Any]) -> None:
            returns = evaluator.returns()
            key = {"algo": spec["algo"], "seed": spec["seed"], "steps": steps}
            row = {**key, "env": spec["env_id"], "wall_seconds": trained}
            row.update(eval_mean=float(np.mean(returns)), eval_std=float(np.std(returns)))
            points.append({**row, "status": "ok", "error": "", "device": "cpu"})
            rows.append({**key, **metrics})

        add_point(0, 0.0, {})
        for checkpoint, metrics in zip(checkpoints, observer.requests, strict=True):
            add_point(evaluator.load(checkpoint), metrics["sf/train_seconds"], metrics)
        evaluator.env.close()
    return points, rows


def run_command_line(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--software"]:
        print(json.dumps(software_versions()))
        return
    if len(argv) != 2:
        raise SystemExit("usage: python -m benchmarks.sf_run SPEC.json RESULT.json | --software")
    spec = json.loads(Path(argv[0]).read_text())
    points, diagnostics = run(spec)
    Path(argv[1]).write_text(json.dumps({"points": points, "diagnostics": diagnostics, "software": software_versions()}))


if __name__ == "__main__":
    run_command_line()
