"""
The profilers' timing helper (on a fake clock), and the profilers' public hooks: a hook that is renamed, removed
or no longer called makes a profiler fail, never time nothing; throughput and ppo_amber_cost at a tiny size.
"""

import json
import math
from types import SimpleNamespace

import pytest

from benchmarks.profiling import iteration_cost, ppo_amber_cost, throughput, timing
from benchmarks.profiling.timing import SectionTimer, Timing
from sb3_impact import PPOAMBER
from sb3_impact.ptr_ppo import ptr_ppo as ptr_ppo_module

AMBER = "ppo_amber[n_steps=32,n_envs=2,batch_size=16,n_epochs=2]"
PTR_PPO = "ptr_ppo[n_steps=32,n_envs=2,batch_size=64,n_epochs=2,replay_rounds=2,replay_batch=2]"


class FakeClock:
    """Seconds that pass only when a test says so; CPU time runs at half the wall time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=fake))
    monkeypatch.setattr(timing, "cpu_seconds", lambda: fake.now / 2)
    return fake


def test_nested_sections_count_their_own_time_and_add_up_to_the_whole(clock):
    timer = SectionTimer()
    inner = timer.wrap(lambda: clock.advance(3), "inner")

    def outer() -> None:
        clock.advance(1)
        inner()
        clock.advance(1)

    with timer.section("whole") as whole:
        clock.advance(0.5)
        timer.wrap(outer, "outer")()
        inner()
    assert timer.sections["inner"] == Timing(wall=6, cpu=3, calls=2)
    assert timer.sections["outer"] == Timing(wall=2, cpu=1, calls=1)  # without the inner section it called
    assert whole == timer.sections["whole"] == Timing(wall=0.5, cpu=0.25, calls=1)
    assert sum(section.wall for section in timer.sections.values()) == clock.now


def test_a_section_from_a_mark_leaves_out_the_sections_timed_since(clock):
    timer = SectionTimer()
    with timer.section("whole"):
        mark = timer.mark()
        clock.advance(1)
        timer.wrap(lambda: clock.advance(2), "inner")()
        assert timer.add_since(mark, "since") == Timing(wall=1, cpu=0.5, calls=1)
        clock.advance(4)
    assert (timer.seconds("whole"), timer.seconds("since"), timer.seconds("inner")) == (4, 1, 2)
    with pytest.raises(RuntimeError, match="the section open at its mark is no longer the innermost one"):
        timer.add_since(mark, "since")


def test_a_generator_is_timed_at_each_resumption_not_while_its_consumer_works(clock):
    def numbers():
        for number in range(3):
            clock.advance(1)
            yield number

    timer = SectionTimer()
    for _ in timer.wrap(numbers, "numbers")():
        clock.advance(10)
    assert timer.seconds("numbers") == 3 and timer.calls("numbers") == 4  # three items, then the end


class Tally:
    """A class with the kinds of methods the profilers time."""

    total = 0

    def add(self, number: int) -> int:
        return number + 1

    @classmethod
    def build(cls) -> "Tally":
        return cls()

    def _hidden(self) -> None:
        """A private method: never timed."""


def test_patched_times_public_methods_keeps_classmethods_and_restores_them():
    timer = SectionTimer()
    tally = Tally()
    add, build = Tally.add, Tally.__dict__["build"]
    with timer.patched((Tally, "add", "add"), (Tally, "build", "build"), (math, "sqrt", "sqrt")):
        assert tally.add(1) == 2 and isinstance(Tally.build(), Tally) and isinstance(tally.build(), Tally)
        assert math.sqrt(4.0) == 2.0
    assert (timer.calls("add"), timer.calls("build"), timer.calls("sqrt")) == (1, 2, 1)
    assert Tally.add is add and Tally.__dict__["build"] is build and not hasattr(math.sqrt, "__wrapped__")


def test_patched_refuses_a_missing_private_or_plain_attribute_before_patching_any():
    timer = SectionTimer()
    add = Tally.add
    with pytest.raises(AttributeError, match="no method 'count' to time as section 'b': was it renamed or removed"):
        with timer.patched((Tally, "add", "a"), (Tally, "count", "b")):
            pass
    assert Tally.add is add
    with pytest.raises(ValueError, match="private"), timer.patched((Tally, "_hidden", "hidden")):
        pass
    with pytest.raises(TypeError, match="not callable"), timer.patched((Tally, "total", "total")):
        pass


def test_require_names_the_sections_that_never_ran():
    timer = SectionTimer()
    with timer.section("ran"):
        pass
    timer.require("ran")
    with pytest.raises(RuntimeError, match=r"\['scoring', 'memory'\] were never timed"):
        timer.require("ran", "scoring", "memory")


@pytest.mark.parametrize(
    "algo, owner, method",
    [(AMBER, PPOAMBER, "replay_ratios_and_kl"), (PTR_PPO, ptr_ppo_module, "score_segments")],
)
def test_iteration_cost_fails_when_a_method_it_times_is_renamed(algo, owner, method, monkeypatch):
    monkeypatch.delattr(owner, method)
    with pytest.raises(AttributeError, match=f"no method '{method}' .* renamed or removed"):
        iteration_cost.measure(algo, "CartPole-v1", 64, 0, 1000)


def test_iteration_cost_fails_when_a_method_it_times_is_no_longer_called(monkeypatch):
    # As if PPO-AMBER's train() no longer called replay_ratios_and_kl and the memory's add (inlined, say).
    monkeypatch.setattr(PPOAMBER, "train", lambda self: None)
    with pytest.raises(RuntimeError, match=r"\['scoring', 'memory'\] were never timed"):
        iteration_cost.measure(AMBER, "CartPole-v1", 64, 0, 1000)


def test_ppo_amber_cost_times_train_and_its_parts():
    row = ppo_amber_cost.profile("Pendulum-v1", replay_length=2, iterations=1, n_steps=64, seed=0)
    assert list(row) == ["train()", *ppo_amber_cost.PARTS]
    assert all(seconds > 0 for seconds in row.values())
    assert row["train()"] > sum(row[part] for part in ppo_amber_cost.PARTS)  # the parts run inside it


THROUGHPUT_FIELDS = """algo env batches vec_env collector device busy_processes repeats learner_threads machine command
batch_env_steps C_collect_seconds_per_batch C_wall_seconds_per_1k_steps C_cpu_seconds_per_1k_steps
L_learn_seconds_per_batch L_wall_seconds_per_1k_steps L_cpu_seconds_per_1k_steps T_async_wall_seconds_per_1k_steps
T_async_cpu_seconds_per_1k_steps T_async_seconds_per_batch broadcast_share_of_learner_time policy_lag_mean
policy_lag_max env_steps_per_second_async T_sync_seconds_per_batch T_sync_wall_seconds_per_1k_steps
T_sync_cpu_seconds_per_1k_steps C_plus_L T_async_over_max_C_L T_sync_over_T_async""".split()


def test_throughput_measures_c_l_and_t_with_the_fields_of_its_reports(tmp_path):
    throughput.main(["--algo", "impact", "--env", "CartPole-v1", "--batches", "3", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "throughput_impact_CartPole-v1_dummy_thread.json").read_text())
    assert [key for key in report if not key.startswith("collector_")] == THROUGHPUT_FIELDS
    assert report["command"].startswith("python -m benchmarks throughput --algo impact")
    for name in ("C", "L", "T_async", "T_sync"):
        assert report[f"{name}_wall_seconds_per_1k_steps"] > 0 and report[f"{name}_cpu_seconds_per_1k_steps"] > 0
    assert report["C_plus_L"] == report["C_collect_seconds_per_batch"] + report["L_learn_seconds_per_batch"]
    assert 0 < report["broadcast_share_of_learner_time"] < 1
