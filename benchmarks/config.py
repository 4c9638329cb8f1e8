"""What a benchmark name means: the algorithm class and its rl-zoo3 hyperparameters (yml entries,
``algo[key=value]`` variants, constructor defaults), and the environments a run trains and evaluates on."""

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import rl_zoo3.import_envs  # noqa: F401  (rl-zoo3's own tasks: CartPoleNoVel-v1, PendulumNoVel-v1, ...)
import torch as th
import yaml
from rl_zoo3.utils import ALGOS as ZOO_ALGOS
from rl_zoo3.utils import get_wrapper_class
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    SubprocVecEnv,
    VecEnv,
    VecFrameStack,
    VecNormalize,
)

from benchmarks.peers import is_peer, peer_hyperparams_source
from benchmarks.protocol import is_atari
from benchmarks.rllib_run import PEER_ALGOS
from sb3_impact.zoo import ZOO_ALGOS as IMPACT_ALGOS
from sb3_impact.zoo import hyperparams_path

# Pseudo-algorithms: an algorithm with its constructor defaults on one env (what `IMPACT("MlpPolicy", env_id)` does).
# Constructor defaults instead of the yml (V-RACER's are the paper's settings, appendix A).
DEFAULT_VARIANTS = {
    "impact_default": IMPACT_ALGOS["impact"],
    "impala_default": IMPACT_ALGOS["impala"],
    "vracer_default": IMPACT_ALGOS["vracer"],
}


ALGOS = {**ZOO_ALGOS, **IMPACT_ALGOS, **DEFAULT_VARIANTS}


ZOO_ONLY_KEYS = {"n_envs", "n_timesteps", "normalize", "policy", "env_wrapper", "frame_stack"}


# rl-zoo3 tunes MuJoCo on the v4 ids only (PPO, SAC, TD3...); its v4 entry serves the v5 id of the same task.
# The substitution is recorded in the harness' JSON (``hyperparams``) and on the results page.
ZOO_VERSION_FALLBACK = {"-v5": "-v4"}


def _split_top_level(body: str) -> list[str]:
    """Split ``key=value,...`` at the commas outside brackets, so that values may be lists: ``rules=[1,2],x=3``."""
    items, depth, start = [], 0, 0
    for index, char in enumerate(body):
        depth += {"[": 1, "(": 1, "{": 1, "]": -1, ")": -1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(body[start:index])
            start = index + 1
    return [*items, body[start:]]


def split_variant(algo: str) -> tuple[str, dict[str, Any]]:
    """
    ``"ppo_amber[collector=process]"`` -> ``("ppo_amber", {...})``: an algo name may carry
    hyperparameters that replace its yml's (values read as YAML), so that variants run side by side in one
    invocation. A plain name has none.
    """
    if not algo.endswith("]") or "[" not in algo:
        return algo, {}
    base, _, body = algo[:-1].partition("[")
    overrides: dict[str, Any] = {}
    for item in filter(None, _split_top_level(body)):
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise ValueError(f"{algo!r}: variants are written NAME[key=value,...], got item {item!r}")
        overrides[key.strip()] = _variant_value(value)
    return base, overrides


class _VariantLoader(yaml.SafeLoader):
    """YAML's safe loader that also reads ``1e-4`` as a float, as Python and YAML 1.2 do (YAML 1.1 wants a dot),
    inside lists and mappings too; a quoted value stays a string."""


_VariantLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"), list("-+0123456789.")
)


def _variant_value(text: str) -> Any:
    """A variant's value read as YAML (:class:`_VariantLoader`)."""
    return yaml.load(text, Loader=_VariantLoader)  # a SafeLoader


def algo_class(algo: str) -> Any:
    """The algorithm class of a name or variant."""
    return ALGOS[split_variant(algo)[0]]


def zoo_yml_path(algo: str) -> Path:
    """Our yml for sb3-impact algorithms, rl-zoo3's tuned yml for the others."""
    if algo in IMPACT_ALGOS:
        return hyperparams_path(algo)
    import rl_zoo3

    return Path(rl_zoo3.__file__).parent / "hyperparams" / f"{algo}.yml"


def linear_schedule(initial_value: float):
    def schedule(progress_remaining: float) -> float:
        return progress_remaining * initial_value

    return schedule


def zoo_entries(algo: str) -> dict[str, Any]:
    """All entries of ``algo``'s yml (raises ``ValueError`` listing the valid algos for an unknown one)."""
    algo = split_variant(algo)[0]
    if algo not in ALGOS:
        raise ValueError(f"unknown algo {algo!r}; valid names: {', '.join(sorted(ALGOS))}")
    if algo in DEFAULT_VARIANTS:  # (a variant name was split above)
        return {}
    return yaml.safe_load(zoo_yml_path(algo).read_text())


def zoo_entry_key(algo: str, env_id: str, config: dict[str, Any]) -> str:
    """
    The yml entry that serves ``env_id``: its own, ``atari`` for Atari ids, or -- for rl-zoo3's algorithms only --
    the entry of the previous version of the same task (``HalfCheetah-v4`` for ``HalfCheetah-v5``).
    """
    algo = split_variant(algo)[0]
    if env_id in config:
        return env_id
    if is_atari(env_id) and "atari" in config:
        return "atari"
    if algo not in IMPACT_ALGOS:
        for new, old in ZOO_VERSION_FALLBACK.items():
            if env_id.endswith(new) and env_id[: -len(new)] + old in config:
                return env_id[: -len(new)] + old
    raise ValueError(f"{algo}: no hyperparameters for {env_id!r} in {zoo_yml_path(algo)}; valid: {', '.join(config)}")


def hyperparams_source(algo: str, env_id: str) -> str:
    """Where ``algo``'s hyperparameters on ``env_id`` come from, e.g. ``rl_zoo3/hyperparams/ppo.yml: HalfCheetah-v4``."""
    if is_peer(algo):
        return peer_hyperparams_source(algo, env_id)
    base, overrides = split_variant(algo)
    if base in DEFAULT_VARIANTS:
        return "constructor defaults" + (f" with {overrides}" if overrides else "")
    key = zoo_entry_key(algo, env_id, zoo_entries(algo))
    origin = "sb3_impact/hyperparams" if base in IMPACT_ALGOS else "rl_zoo3/hyperparams"
    changed = f" with {overrides}" if overrides else ""
    return f"{origin}/{base}.yml: {key}{changed}"


def load_zoo_hyperparams(algo: str, env_id: str) -> dict[str, Any]:
    """The rl-zoo3 yml entry of ``env_id``, with ``lin_`` schedules and ``policy_kwargs`` strings resolved."""
    config = zoo_entries(algo)
    base, overrides = split_variant(algo)
    if base in DEFAULT_VARIANTS:
        entry: dict[str, Any] = {"policy": "MlpPolicy", "n_envs": 1, "n_timesteps": 100_000}
    else:
        entry = config[zoo_entry_key(algo, env_id, config)]
    params = {**entry, **overrides}
    unsupported = {"callback", "vec_env_wrapper", "env_kwargs"} & set(params)
    if unsupported:
        raise ValueError(f"{algo}/{env_id}: the benchmark does not handle {sorted(unsupported)}")
    for name, value in params.items():
        if isinstance(value, str) and value.startswith("lin_"):
            params[name] = linear_schedule(float(value[len("lin_") :]))
    if isinstance(params.get("policy_kwargs"), str):
        params["policy_kwargs"] = eval(params["policy_kwargs"], {"nn": th.nn, "dict": dict})
    return params


def validate_names(algos: list[str], env_ids: list[str]) -> None:
    """Raise ``ValueError`` listing the valid names if an algo is unknown or an env lacks a yml entry or a gym id."""
    unknown = [algo for algo in algos if split_variant(algo)[0] not in ALGOS and not is_peer(algo)]
    if unknown:
        raise ValueError(f"unknown algos {unknown}; valid names: {', '.join(sorted([*ALGOS, *PEER_ALGOS]))}")
    for env_id in env_ids:
        if env_id not in gym.registry:
            if is_atari(env_id):
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
                load_zoo_hyperparams(algo, env_id)


def split_env_params(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separate the zoo-only keys (env construction, budget, policy) from the algorithm's constructor arguments."""
    env_params = {key: params.pop(key) for key in list(params) if key in ZOO_ONLY_KEYS}
    return env_params, params


def register_atari() -> None:
    """Register the ALE ids with gymnasium (``ale-py`` registers them when imported)."""
    import ale_py

    gym.register_envs(ale_py)


def make_registered_env(env_id: str, **kwargs: Any) -> gym.Env:
    """
    ``gym.make`` after registering the ALE ids. ``SubprocVecEnv`` workers start with a fresh interpreter
    (forkserver/spawn), where the parent's registration is gone: they build Atari envs through this function.
    """
    if is_atari(env_id):
        register_atari()
    return gym.make(env_id, **kwargs)


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
    ``n_envs`` copies of ``env_id`` as rl-zoo3 builds them: its ``env_wrapper`` (e.g. ``AtariWrapper``) around
    each Monitor-wrapped env, ``VecFrameStack`` and ``VecNormalize`` when the yml says so.
    """
    wrapper_class: Callable[[gym.Env], gym.Env] | None = None
    if env_wrapper:
        wrapper_class = get_wrapper_class({"env_wrapper": env_wrapper})
    vec_env_cls = SubprocVecEnv if subproc and n_envs > 1 else DummyVecEnv
    make_env = functools.partial(make_registered_env, env_id)  # picklable, so SubprocVecEnv workers can build it
    env = make_vec_env(make_env, n_envs=n_envs, seed=seed, vec_env_cls=vec_env_cls, wrapper_class=wrapper_class)
    if frame_stack:
        env = VecFrameStack(env, int(frame_stack))
    if normalize:
        kwargs = eval(normalize) if isinstance(normalize, str) else (normalize if isinstance(normalize, dict) else {})
        env = VecNormalize(env, **kwargs)
    return env


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
    ``algo`` (a name or a variant) on a training env of ``env_id`` built as the yml entry says (:func:`make_training_env`),
    with ``hyperparams`` (default: the yml entry with the variant's values, :func:`load_zoo_hyperparams`) updated by
    ``overrides``: the one way the benchmarks build a model.
    """
    if hyperparams is None:
        hyperparams = load_zoo_hyperparams(algo, env_id)
    env_params, kwargs = split_env_params({**hyperparams, **overrides})
    env = make_training_env(
        env_id,
        int(env_params.get("n_envs", 1)),
        seed,
        env_params.get("normalize", False),
        subproc,
        env_wrapper=env_params.get("env_wrapper"),
        frame_stack=env_params.get("frame_stack"),
    )
    return algo_class(algo)(env_params.get("policy", "MlpPolicy"), env, seed=seed, device=device, **kwargs)
