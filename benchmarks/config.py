"""
What a benchmark name means: the algorithm class, the rl-zoo3 yml entry it runs with (``algo[key=value]`` variants,
constructor defaults, the v4 entry of a v5 id), and the model and envs built from that entry as
``python -m rl_zoo3.train --algo ALGO --env ENV`` builds them (:class:`ZooExperiment`).
"""

import argparse
from pathlib import Path
from typing import Any

import gymnasium as gym
import rl_zoo3.utils
import yaml
from rl_zoo3.exp_manager import ExperimentManager
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import SubprocVecEnv, VecEnv, VecTransposeImage

import sb3_impact.zoo
from benchmarks.peers import is_peer, peer_hyperparams_source
from benchmarks.protocol import is_atari
from benchmarks.rllib_run import PEER_ALGOS
from benchmarks.sf_run import SF_ALGOS
from benchmarks.variants import split_variant
from sb3_impact.zoo import ZOO_ALGOS as IMPACT_ALGOS
from sb3_impact.zoo import hyperparams_path

sb3_impact.zoo.register()  # our algorithms in rl-zoo3's ALGOS, our yml for its ExperimentManager (idempotent)

# Pseudo-algorithms: an algorithm with its constructor defaults on one env (what `IMPACT("MlpPolicy", env_id)` does),
# not the yml (V-RACER's are the paper's settings, appendix A).
DEFAULT_VARIANTS = {f"{name}_default": IMPACT_ALGOS[name] for name in ("impact", "impala", "vracer")}
ALGOS = {**rl_zoo3.utils.ALGOS, **DEFAULT_VARIANTS}

# The evaluation env's seed is the run's plus this: its episodes are not the training envs' first ones.
EVAL_SEED_OFFSET = 10_000


def algo_class(algo: str) -> Any:
    """The algorithm class of a name or variant."""
    return ALGOS[split_variant(algo)[0]]


def zoo_yml_path(algo: str) -> Path:
    """Our yml for sb3-impact algorithms, rl-zoo3's tuned yml for the others."""
    if algo in IMPACT_ALGOS:
        return hyperparams_path(algo)
    return Path(rl_zoo3.__file__).parent / "hyperparams" / f"{algo}.yml"


def zoo_entry(algo: str, env_id: str) -> tuple[str, dict[str, Any]]:
    """
    The key and the entry of ``algo``'s yml that serves ``env_id``: its own, ``atari`` for Atari ids, or -- for
    rl-zoo3's algorithms only -- the entry of the previous version of the same task (``HalfCheetah-v4`` for
    ``HalfCheetah-v5``). Raises ``ValueError`` listing the valid algos for an unknown one, the valid entries where
    none serves ``env_id``.
    """
    algo = split_variant(algo)[0]
    if algo not in ALGOS:
        raise ValueError(f"unknown algo {algo!r}; valid names: {', '.join(sorted(ALGOS))}")
    config = yaml.safe_load(zoo_yml_path(algo).read_text())
    candidates = [env_id, *(["atari"] if is_atari(env_id) else [])]
    if algo not in IMPACT_ALGOS and env_id.endswith("-v5"):  # rl-zoo3 tunes MuJoCo (PPO, SAC, TD3...) on v4 ids only
        candidates.append(env_id.removesuffix("-v5") + "-v4")  # recorded in the JSON's hyperparams, as the entry used
    for key in candidates:
        if key in config:
            return key, config[key]
    raise ValueError(f"{algo}: no hyperparameters for {env_id!r} in {zoo_yml_path(algo)}; valid: {', '.join(config)}")


def hyperparams_source(algo: str, env_id: str) -> str:
    """Where ``algo``'s hyperparameters on ``env_id`` come from, e.g. ``rl_zoo3/hyperparams/ppo.yml: HalfCheetah-v4``."""
    if is_peer(algo):
        return peer_hyperparams_source(algo, env_id)
    base, overrides = split_variant(algo)
    changed = f" with {overrides}" if overrides else ""
    if base in DEFAULT_VARIANTS:
        return f"constructor defaults{changed}"
    origin = "sb3_impact/hyperparams" if base in IMPACT_ALGOS else "rl_zoo3/hyperparams"
    return f"{origin}/{base}.yml: {zoo_entry(algo, env_id)[0]}{changed}"


def load_zoo_hyperparams(algo: str, env_id: str) -> dict[str, Any]:
    """
    The yml entry that serves ``env_id`` (:func:`zoo_entry`; for a default variant, the policy, one env and a
    100k-step budget) with the variant's values, as written: :class:`ZooExperiment` resolves it as rl-zoo3 does.
    """
    base, overrides = split_variant(algo)
    if base in DEFAULT_VARIANTS:
        entry: dict[str, Any] = {"policy": "MlpPolicy", "n_envs": 1, "n_timesteps": 100_000}
    else:
        entry = zoo_entry(algo, env_id)[1]
    params = {**entry, **overrides}
    unsupported = {"callback", "vec_env_wrapper", "env_kwargs"} & set(params)
    if unsupported:
        raise ValueError(f"{algo}/{env_id}: the benchmark does not handle {sorted(unsupported)}")
    return params


def register_atari() -> None:
    """Register the ALE ids with gymnasium (``ale-py`` registers them when imported)."""
    import ale_py

    gym.register_envs(ale_py)


class ZooExperiment(ExperimentManager):
    """
    rl-zoo3's ``ExperimentManager`` on the harness' entry (``hyperparams``, default :func:`load_zoo_hyperparams`):
    it resolves the entry as ``python -m rl_zoo3.train`` does (``lin_`` schedules, ``policy_kwargs`` and other
    strings, ``normalize``, ``env_wrapper``, ``frame_stack``, action noise) and builds the envs (:meth:`create_envs`)
    and the model (:meth:`model`), writing nothing (no log folder, no Monitor files).

    Where the harness differs: the envs run in a ``SubprocVecEnv`` only with ``subproc`` and more than one env;
    ``VecNormalize`` keeps its default ``gamma`` (0.99, as every run of the results pages had and as the RLlib peers'
    reward scaling copies) where ``rl_zoo3.train`` passes the entry's ``gamma``; the model is built quietly
    (``verbose=0``, no TensorBoard log).
    """

    def __init__(
        self,
        algo: str,
        env_id: str,
        seed: int,
        device: str = "cpu",
        subproc: bool = False,
        hyperparams: dict[str, Any] | None = None,
    ) -> None:
        if is_atari(env_id):  # a fresh worker process has not registered them
            register_atari()
        base = split_variant(algo)[0]
        super().__init__(argparse.Namespace(), base, env_id, log_folder="", seed=seed, device=device, verbose=0)
        entry = load_zoo_hyperparams(algo, env_id) if hyperparams is None else hyperparams
        self.hyperparams, self.env_wrapper, _, self.vec_env_wrapper = self._preprocess_hyperparams({"n_timesteps": 0, **entry})
        self.normalize_kwargs.pop("gamma", None)
        if subproc and self.n_envs > 1:
            self.vec_env_class = SubprocVecEnv
        self.algo_class = algo_class(algo)

    def create_envs(self, n_envs: int, eval_env: bool = False, no_log: bool = True) -> VecEnv:
        """rl-zoo3's envs without Monitor files (``no_log`` is always true)."""
        return super().create_envs(n_envs, eval_env, no_log=True)

    def model(self, env: VecEnv) -> BaseAlgorithm:
        """The model on ``env``, with the entry's action noise (for the env's action space)."""
        hyperparams = self._preprocess_action_noise(dict(self.hyperparams), {}, env)
        return self.algo_class(env=env, seed=self.seed, device=self.device, **hyperparams)


def validate_names(algos: list[str], env_ids: list[str]) -> None:
    """Raise ``ValueError`` listing the valid names if an algo is unknown or an env lacks a yml entry or a gym id."""
    unknown = [algo for algo in algos if split_variant(algo)[0] not in ALGOS and not is_peer(algo)]
    if unknown:
        raise ValueError(f"unknown algos {unknown}; valid names: {', '.join(sorted([*ALGOS, *PEER_ALGOS, *SF_ALGOS]))}")
    for env_id in env_ids:
        if env_id not in gym.registry and is_atari(env_id):
            try:
                register_atari()
            except ImportError as error:
                raise ValueError(f"{env_id!r} needs ale-py: pip install 'sb3-impact[atari]'") from error
        if env_id not in gym.registry:
            raise ValueError(f"unknown env {env_id!r}: not a registered gymnasium id")
        for algo in algos:
            if is_peer(algo):  # its settings in benchmarks/peers.yml, not a zoo yml entry
                peer_hyperparams_source(algo, env_id)
            else:
                ZooExperiment(algo, env_id, seed=0)


def make_training_env(
    env_id: str,
    n_envs: int,
    seed: int,
    normalize: bool | str | dict = False,
    subproc: bool = False,
    env_wrapper: Any = None,
    frame_stack: int | None = None,
) -> VecEnv:
    """
    ``n_envs`` copies of ``env_id`` as rl-zoo3 builds them for an entry with these keys (:class:`ZooExperiment`),
    less the ``VecTransposeImage`` it adds for a CNN (which the model adds otherwise): images stay channel-last, as
    the RLlib peers' frames are.
    """
    entry = {"policy": "MlpPolicy", "n_envs": n_envs, "normalize": normalize, "env_wrapper": env_wrapper}
    experiment = ZooExperiment("ppo", env_id, seed, subproc=subproc, hyperparams={**entry, "frame_stack": frame_stack or None})
    env = experiment.create_envs(n_envs)
    return env.venv if isinstance(env, VecTransposeImage) else env


def build_model(
    algo: str,
    env_id: str,
    seed: int,
    device: str = "cpu",
    subproc: bool = False,
    hyperparams: dict[str, Any] | None = None,
    **overrides: Any,
) -> Any:
    """
    ``algo`` (a name or a variant) on ``env_id`` with ``hyperparams`` (default: its entry with the variant's values,
    :func:`load_zoo_hyperparams`) updated by ``overrides``, built as rl-zoo3 builds it (:class:`ZooExperiment`).
    """
    entry = load_zoo_hyperparams(algo, env_id) if hyperparams is None else hyperparams
    experiment = ZooExperiment(algo, env_id, seed, device, subproc, {**entry, **overrides})
    return experiment.model(experiment.create_envs(experiment.n_envs))
