"""The thread policy: every algorithm learns with ``learner_threads`` PyTorch threads and restores the process's setting."""

import os

import pytest
import torch as th
from stable_baselines3.common.callbacks import BaseCallback

from sb3_impact import IMPACT, VRACER, SACReFER, TD3ReFER

from .algorithms import ALGO_IDS, ALGOS, COLLECTING, small


class TorchThreadsDuringTraining(BaseCallback):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set[int] = set()

    def _on_step(self) -> bool:
        self.seen.add(th.get_num_threads())
        return True


@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
@pytest.mark.parametrize("threads", [None, 1, 2])
def test_learn_runs_with_learner_threads_and_restores_pytorchs_setting(algo, threads):
    previous = th.get_num_threads()
    th.set_num_threads(3)
    try:
        kwargs = {} if threads is None else {"learner_threads": threads}
        if algo in COLLECTING:  # in the learner's thread: no collector caps the learner's threads (process, Ray do)
            kwargs["collector"] = "sync"
        env = "Pendulum-v1" if algo in (VRACER, SACReFER, TD3ReFER) else "CartPole-v1"
        model = algo("MlpPolicy", env, **small(algo, **kwargs))
        callback = TorchThreadsDuringTraining()
        model.learn(64, callback=callback)
        assert callback.seen == {1 if threads is None else threads}  # the default is 1
        assert th.get_num_threads() == 3
    finally:
        th.set_num_threads(previous)


@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
@pytest.mark.parametrize("threads", [0, -1, 1.5, True, "2"])
def test_invalid_learner_threads_are_refused_at_construction(algo, threads):
    env = "Pendulum-v1" if algo in (VRACER, SACReFER, TD3ReFER) else "CartPole-v1"
    with pytest.raises(ValueError, match="learner_threads must be an integer >= 1 or None"):
        algo("MlpPolicy", env, learner_threads=threads, **small(algo))


def test_the_process_collector_caps_a_larger_learner_threads_at_the_cores_its_child_leaves():
    previous = th.get_num_threads()
    try:
        callback = TorchThreadsDuringTraining()
        model = IMPACT("MlpPolicy", "CartPole-v1", collector="process", learner_threads=8, **small(IMPACT))
        model.learn(64, callback=callback)
        assert callback.seen == {max(1, min(8, (os.cpu_count() or 1) - 1))}
        assert th.get_num_threads() == previous
    finally:
        th.set_num_threads(previous)


def test_learner_threads_none_leaves_the_learner_pytorchs_threads():
    """torch.set_num_threads is process-wide: with learner_threads=None, neither IMPACT nor its thread collector lowers it."""
    previous = th.get_num_threads()
    th.set_num_threads(2)
    try:
        callback = TorchThreadsDuringTraining()
        IMPACT("MlpPolicy", "CartPole-v1", collector="thread", learner_threads=None, **small(IMPACT)).learn(
            256, callback=callback
        )
        assert callback.seen == {2} and th.get_num_threads() == 2
    finally:
        th.set_num_threads(previous)
