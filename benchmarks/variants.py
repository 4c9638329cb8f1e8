"""
Names that carry changed settings, ``algo[key=value,...]``: our algorithms' (values that replace their rl-zoo3 yml
entry's hyperparameters, :mod:`benchmarks.config`) and the peers' (values that replace their ``benchmarks/peers.yml``
settings, :func:`with_variant`), so that the settings a tuning compares run side by side in one invocation. Only the
standard library and PyYAML: the peers' runners import it in their own environments.
"""

import copy
import functools
import operator
import re
from collections.abc import Iterator
from typing import Any

import yaml


def _split_top_level(body: str) -> list[str]:
    """Split ``key=value,...`` at the commas outside brackets, so that values may be lists: ``rules=[1,2],x=3``."""
    items, depth, start = [], 0, 0
    for index, char in enumerate(body):
        depth += {"[": 1, "(": 1, "{": 1, "]": -1, ")": -1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(body[start:index])
            start = index + 1
    return [*items, body[start:]]


class _VariantLoader(yaml.SafeLoader):
    """YAML's safe loader that also reads ``1e-4`` as a float, as Python and YAML 1.2 do (YAML 1.1 wants a dot),
    inside lists and mappings too; a quoted value stays a string."""


_VariantLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"), list("-+0123456789.")
)


def split_variant(algo: str) -> tuple[str, dict[str, Any]]:
    """
    ``"ppo_amber[collector=process]"`` -> ``("ppo_amber", {...})``: an algo name may carry settings that replace
    its entry's (values read as YAML, :class:`_VariantLoader`). A plain name has none.
    """
    if not algo.endswith("]") or "[" not in algo:
        return algo, {}
    base, _, body = algo[:-1].partition("[")
    overrides: dict[str, Any] = {}
    for item in filter(None, _split_top_level(body)):
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise ValueError(f"{algo!r}: variants are written NAME[key=value,...], got item {item!r}")
        overrides[key.strip()] = yaml.load(value, Loader=_VariantLoader)  # a SafeLoader
    return base, overrides


def _setting_paths(settings: dict[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of each setting (a value that is not a mapping) in a peer's settings, ``source`` aside."""
    for key, value in settings.items():
        if isinstance(value, dict):
            yield from _setting_paths(value, (*prefix, key))
        elif (*prefix, key) != ("source",):
            yield (*prefix, key)


def with_variant(settings: dict[str, Any], overrides: dict[str, Any], algo: str) -> dict[str, Any]:
    """
    A copy of a peer's ``settings`` (its benchmarks/peers.yml entry) with a variant's ``overrides``, its ``source``
    ending with them. A key names a setting by its path below ``config``, dot-separated (RLlib's
    ``training.entropy_coeff``, Sample Factory's ``learning_rate``), by its last part where only one path ends with
    it (``entropy_coeff``), or beside ``config`` (``observation_filter``); a dotted path whose section exists may add a
    setting the entry leaves at the library's default (``training.minibatch_size``: RLlib's config method takes or
    refuses it). ``ValueError`` for a key that names no setting or several: a misspelt key never runs silently.
    """
    changed = copy.deepcopy(settings)
    paths = {path[1:] if path[0] == "config" else path: path for path in _setting_paths(settings)}
    sections = {path[1:-1] for path in paths.values() if path[0] == "config" and len(path) > 2}
    for key, value in overrides.items():
        named = tuple(key.split("."))
        matches = [paths[named]] if named in paths else [path for name, path in paths.items() if name[-1] == key]
        if not matches and len(named) > 1 and named[:-1] in sections:
            matches = [("config", *named)]
        if len(matches) != 1:
            valid = ", ".join(".".join(name) for name in paths)
            reason = "names several settings" if matches else "names no setting"
            raise ValueError(f"{algo!r}: {key!r} {reason} of the entry; write one of: {valid}")
        *parents, leaf = matches[0]
        functools.reduce(operator.getitem, parents, changed)[leaf] = value
    listed = ", ".join(f"{key}={value}" for key, value in overrides.items())
    changed["source"] = f"{settings['source']}; variant: {listed}"
    return changed


def entry_settings(entries: dict[str, dict[str, Any]], algo: str, env_id: str, library: str) -> dict[str, Any]:
    """
    A peer's settings on ``env_id`` from ``entries`` (algo -> env -> settings, a section of benchmarks/peers.yml),
    with a variant's values (:func:`with_variant`); ``ValueError`` naming the pairs there are for any other.
    """
    base, overrides = split_variant(algo)
    if env_id not in entries.get(base, {}):
        pairs = ", ".join(f"{name} on {env}" for name, envs in entries.items() for env in envs)
        raise ValueError(f"no {library} settings for {base} on {env_id}; there are: {pairs}")
    settings = entries[base][env_id]
    return with_variant(settings, overrides, algo) if overrides else settings
