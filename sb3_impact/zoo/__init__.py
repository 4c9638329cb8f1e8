"""
rl-zoo3 integration: ``python -m rl_zoo3.train --algo impact --env CartPole-v1`` with the shipped yml.

rl-zoo3 has no plugin entry point, so :func:`register` adds the algorithms to ``rl_zoo3.utils.ALGOS``
and points rl-zoo3's ``ExperimentManager`` at the yml files in ``sb3_impact/hyperparams`` for them (an
explicit ``-conf`` still wins). The package installs a startup hook (``sb3_impact.pth`` and, for
Pythons that use them, ``sb3_impact.start``) that calls it when ``rl_zoo3`` is first imported; set
``SB3_IMPACT_NO_ZOO_HOOK=1`` to turn the hook off. :func:`register` also adds a hyperparameter sampler per
algorithm to rl-zoo3's optimiser (``-optimize``), see :mod:`sb3_impact.zoo.samplers`, and makes the optimiser
prune a trial of these algorithms whose settings (sampled, from the yml or ``-params``) they refuse to build.
"""

from pathlib import Path
from types import TracebackType
from typing import Any

from sb3_impact import IMPACT, IMPALA, PPOAMBER, PTRPPO, VRACER, SACReFER, TD3ReFER
from sb3_impact.common.recurrent import RECURRENT_POLICY_NAMES, is_recurrent

ZOO_ALGOS = {
    "impact": IMPACT,
    "impala": IMPALA,
    "ppo_amber": PPOAMBER,
    "ptr_ppo": PTRPPO,
    "vracer": VRACER,
    "sac_refer": SACReFER,
    "td3_refer": TD3ReFER,
}
HYPERPARAMS_DIR = Path(__file__).resolve().parent.parent / "hyperparams"


def hyperparams_path(algo: str) -> Path:
    """The shipped rl-zoo3 yml of ``algo``."""
    return HYPERPARAMS_DIR / f"{algo}.yml"


def register_algos() -> None:
    """Add the sb3-impact algorithms to ``rl_zoo3.utils.ALGOS`` (idempotent)."""
    import rl_zoo3.utils

    for name, algo in ZOO_ALGOS.items():
        rl_zoo3.utils.ALGOS.setdefault(name, algo)


def patch_experiment_manager() -> None:
    """
    Make ``ExperimentManager`` read our yml for our algorithms unless ``-conf`` names another, and prune the
    optimiser's trials whose model cannot be built (idempotent).
    """
    from rl_zoo3.exp_manager import ExperimentManager

    _patch_config_path(ExperimentManager)
    _patch_objective(ExperimentManager)


def _patch_config_path(manager_class: type) -> None:
    original_init = manager_class.__init__
    if getattr(original_init, "_sb3_impact_patched", False):
        return

    def __init__(self, *args, **kwargs) -> None:
        original_init(self, *args, **kwargs)
        # Only rl-zoo3's default path (hyperparams/ALGO.yml inside rl_zoo3, absent for our algorithms) is
        # replaced: a -conf file or Python module given by the user stays.
        default_suffix = str(Path("hyperparams") / f"{self.algo}.yml")
        if self.algo in ZOO_ALGOS and self.config.endswith(default_suffix) and not Path(self.config).is_file():
            self.config = str(hyperparams_path(self.algo))

    __init__._sb3_impact_patched = True  # type: ignore[attr-defined]
    manager_class.__init__ = __init__  # type: ignore[misc]


def _patch_objective(manager_class: type) -> None:
    """
    Record whether the entry's policy is recurrent in the trial's ``recurrent_policy`` user attribute (the samplers
    read it).
    rl-zoo3's ``objective`` prunes a trial whose ``learn()`` raises, but a model that refuses its settings when it is
    built (``batch_size`` above ``n_steps * n_envs`` after ``-params n_steps:10``, say) ends the whole study. For our
    algorithms such a trial is pruned instead (``optuna.TrialPruned`` with the reason, also kept in the trial's
    ``pruned_reason`` user attribute, a column of rl-zoo3's report).
    """
    original_objective = manager_class.objective
    if getattr(original_objective, "_sb3_impact_patched", False):
        return

    def objective(self, trial: Any) -> float:
        if self.algo in ZOO_ALGOS:
            # The samplers see the trial, not the entry: they read here whether its policy is recurrent (such
            # entries draw whole segments per minibatch, sb3_impact.zoo.samplers).
            policy = self._hyperparams.get("policy")
            trial.set_user_attr("recurrent_policy", policy in RECURRENT_POLICY_NAMES or is_recurrent(policy))
        try:
            return original_objective(self, trial)
        except (ValueError, TypeError) as error:
            algo_class = ZOO_ALGOS.get(self.algo)
            if algo_class is None or not _raised_in_constructor(error.__traceback__, algo_class):
                raise
            import optuna

            reason = f"{algo_class.__name__} cannot be built with this trial's settings: {error}"
            trial.set_user_attr("pruned_reason", reason)
            raise optuna.TrialPruned(reason) from error

    objective._sb3_impact_patched = True  # type: ignore[attr-defined]
    manager_class.objective = objective  # type: ignore[attr-defined]


def _raised_in_constructor(traceback: TracebackType | None, algo_class: type) -> bool:
    """Whether the traceback passes through the ``__init__`` of an ``algo_class`` instance (the model being built)."""
    while traceback is not None:
        frame = traceback.tb_frame
        if frame.f_code.co_name == "__init__" and isinstance(frame.f_locals.get("self"), algo_class):
            return True
        traceback = traceback.tb_next
    return False


def register_samplers() -> None:
    """Add the samplers of every algorithm to rl-zoo3's ``-optimize`` tables (idempotent)."""
    from sb3_impact.zoo.samplers import register_samplers as register_all

    register_all()


def register() -> None:
    """
    Register every sb3-impact algorithm with rl-zoo3 (``--algo impact|impala|ppo_amber|vracer|ptr_ppo``, and
    ``sac_refer|td3_refer``), its yml, and its hyperparameter sampler (``-optimize``).
    """
    register_algos()
    patch_experiment_manager()
    register_samplers()
