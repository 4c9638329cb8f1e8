"""
Constructor-level input on all the classes it applies to: bad collection parameters raise naming them (the five
collecting classes), a Collector subclass is taken as the ``collector``, SACReFER and TD3ReFER have no collector
parameter, an unknown policy name is refused by all seven.
"""

import pytest

from sb3_impact.common.collectors import SyncCollector

from .algorithms import (
    ALGO_IDS,
    ALGOS,
    COLLECTING,
    COLLECTING_IDS,
    SB3_LOOP_ALGOS,
    SB3_LOOP_IDS,
    assert_counts_balance,
    short_pendulum,
    small,
)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(collector="carrier-pigeon"), ValueError, "collector"),
        (dict(collector=int), ValueError, "collector"),
        (dict(collector="thread", collector_kwargs=dict(queue_size=0)), ValueError, "queue_size"),
        (dict(collector="process", collector_kwargs=dict(queue_size=1.5)), ValueError, "queue_size"),
        (dict(collector="sync", collector_kwargs=dict(queue_size=2)), TypeError, "SyncCollector takes no options"),
        (dict(collector="thread", collector_kwargs=dict(num_workers=2)), TypeError, "num_workers"),
        (dict(collector="thread", collector_kwargs=[("queue_size", 1)]), TypeError, "collector_kwargs"),
    ],
)
@pytest.mark.parametrize("algo", COLLECTING, ids=COLLECTING_IDS)
def test_bad_collection_parameters_raise_naming_them(algo, kwargs, error, match):
    with pytest.raises(error, match=match):
        algo("MlpPolicy", "Pendulum-v1", **small(algo, **kwargs))


class CountingSyncCollector(SyncCollector):
    """A user's Collector subclass: SyncCollector counting the segments it hands out."""

    segments_delivered = 0

    def get_segment(self):
        segment = super().get_segment()
        type(self).segments_delivered += 1
        return segment


@pytest.mark.parametrize("algo", COLLECTING, ids=COLLECTING_IDS)
def test_a_collector_subclass_is_taken_as_the_collector(algo):
    CountingSyncCollector.segments_delivered = 0
    model = algo("MlpPolicy", short_pendulum(), seed=0, **small(algo, collector=CountingSyncCollector)).learn(64)
    assert model.collector is CountingSyncCollector
    assert CountingSyncCollector.segments_delivered > 0
    assert CountingSyncCollector.segments_delivered * model._segment_steps() * 2 == model.num_timesteps
    assert_counts_balance(model)


@pytest.mark.parametrize("name", ["collector", "collector_kwargs"])
@pytest.mark.parametrize("algo", SB3_LOOP_ALGOS, ids=SB3_LOOP_IDS)
def test_sb3_loop_classes_take_no_collector(algo, name):
    with pytest.raises(TypeError, match=name):
        algo("MlpPolicy", "Pendulum-v1", **small(algo, **{name: "thread" if name == "collector" else {}}))


@pytest.mark.parametrize("algo", ALGOS, ids=ALGO_IDS)
def test_an_unknown_policy_name_is_refused_naming_it(algo):
    with pytest.raises(ValueError, match="NoSuchPolicy"):
        algo("NoSuchPolicy", "Pendulum-v1", **small(algo))
