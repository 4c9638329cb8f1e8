"""
Startup hook of sb3-impact, run from ``sb3_impact.pth`` (or ``sb3_impact.start`` on Pythons that use those).

It registers the algorithms with rl-zoo3 right after ``rl_zoo3`` is imported, their yml when
``rl_zoo3.exp_manager`` is, and their hyperparameter samplers when ``rl_zoo3.hyperparams_opt`` is.
It is a top-level module so that start-up imports nothing heavy (no torch), it never raises, and
``SB3_IMPACT_NO_ZOO_HOOK=1`` disables it.
"""

import importlib.abc
import importlib.machinery
import os
import sys
import warnings
from collections.abc import Callable

OPT_OUT_VARIABLE = "SB3_IMPACT_NO_ZOO_HOOK"


def _after_rl_zoo3() -> None:
    from sb3_impact.zoo import register_algos

    register_algos()


def _after_hyperparams_opt() -> None:
    from sb3_impact.zoo import register_samplers

    register_samplers()


def _after_exp_manager() -> None:
    from sb3_impact.zoo import patch_experiment_manager

    patch_experiment_manager()


_HOOKS: dict[str, Callable[[], None]] = {
    "rl_zoo3": _after_rl_zoo3,
    "rl_zoo3.hyperparams_opt": _after_hyperparams_opt,
    "rl_zoo3.exp_manager": _after_exp_manager,
}


def _run_hook(name: str) -> None:
    try:
        _HOOKS[name]()
    except Exception as error:  # a broken hook must never break rl_zoo3 itself
        warnings.warn(f"sb3_impact could not register with rl_zoo3 ({error!r}); call sb3_impact.zoo.register()", stacklevel=2)


class _LoaderWrapper(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:  # type: ignore[no-untyped-def]
        self._loader.exec_module(module)
        _run_hook(self._name)

    def __getattr__(self, attribute: str):  # type: ignore[no-untyped-def]
        return getattr(self._loader, attribute)


class _ZooFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname not in _HOOKS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _LoaderWrapper(spec.loader, fullname)
        return spec


def install() -> None:
    """Install the import hook (idempotent); modules already imported are registered at once."""
    if os.environ.get(OPT_OUT_VARIABLE, "").strip() not in ("", "0"):
        return
    try:
        if not any(isinstance(finder, _ZooFinder) for finder in sys.meta_path):
            sys.meta_path.insert(0, _ZooFinder())
        for name in _HOOKS:
            if name in sys.modules:
                _run_hook(name)
    except Exception:  # never break interpreter start-up
        pass
