"""The process collector's shared-memory segment slots: what goes in comes out, and no observation is pickled."""

import itertools
import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.policies import ActorCriticPolicy, MultiInputActorCriticPolicy
from stable_baselines3.common.vec_env import VecNormalize

from sb3_impact.common.collectors import ProcessCollector, SegmentSampler
from sb3_impact.common.collectors.shared_slots import SegmentSlots


class DictObservation(gym.ObservationWrapper):
    def __init__(self, env):
        super().__init__(env)
        box = env.observation_space
        self.observation_space = spaces.Dict({"state": box, "image": spaces.Box(0, 255, (3, 4), np.uint8)})

    def observation(self, observation):
        return {"state": observation, "image": np.full((3, 4), int(abs(observation[0]) * 100) % 255, np.uint8)}


def make_sampler(dict_observations=False, normalize=False, n_steps=20):
    def make():
        env = gym.make("CartPole-v1", max_episode_steps=6)
        return DictObservation(env) if dict_observations else env

    env = make_vec_env(make, n_envs=2, seed=0)
    if normalize:
        env = VecNormalize(env)
    policy_class = MultiInputActorCriticPolicy if dict_observations else ActorCriticPolicy
    policy = policy_class(env.observation_space, env.action_space, lambda _: 1e-3, net_arch=[8])
    policy.set_training_mode(False)
    return SegmentSampler(env, policy, n_steps, env.reset())


def slots_for(sampler, n_slots=2):
    actions, log_probs, params = sampler.draw_once(sampler.last_observation)
    return SegmentSlots(
        n_slots, sampler.n_steps, sampler.last_observation, actions, log_probs, params, original_rewards=normalize_of(sampler)
    )


def normalize_of(sampler):
    return isinstance(sampler.env, VecNormalize)


def assert_same_observation(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    else:
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dict_observations", [False, True])
@pytest.mark.parametrize("normalize", [False, True])
def test_a_segment_comes_out_of_its_slot_as_it_went_in(dict_observations, normalize):
    sampler = make_sampler(dict_observations, normalize)
    slots = slots_for(sampler)
    for slot in (0, 1, 0):
        segment = sampler.collect()
        assert segment.truncations.any() or segment.terminations.any()
        copy = slots.read(slot, pickle.loads(pickle.dumps(slots.write(slot, segment))))
        for name in ("actions", "rewards", "terminations", "truncations", "behaviour_log_probs", "behaviour_params"):
            np.testing.assert_array_equal(getattr(copy, name), getattr(segment, name))
            assert getattr(copy, name).dtype == getattr(segment, name).dtype
        assert_same_observation(copy.observations, segment.observations)
        assert_same_observation(copy.next_observations, segment.next_observations)
        np.testing.assert_array_equal(copy.final_observation_indices, segment.final_observation_indices)
        if segment.final_observations is None:
            assert copy.final_observations is None
        else:
            assert_same_observation(copy.final_observations, segment.final_observations)
        for step in range(segment.n_steps):
            for env_index, info in enumerate(segment.infos[step]):
                assert info.keys() == copy.infos[step][env_index].keys()
                if "terminal_observation" in info:
                    assert_same_observation(copy.infos[step][env_index]["terminal_observation"], info["terminal_observation"])
        if normalize:
            np.testing.assert_array_equal(copy.extras["original_rewards"], segment.extras["original_rewards"])
        assert copy.policy_version == segment.policy_version


def test_the_slot_is_free_once_read_and_the_message_carries_no_observation():
    sampler = make_sampler(dict_observations=True)
    slots = slots_for(sampler, n_slots=1)
    segment = sampler.collect()
    message = slots.write(0, segment)

    def arrays(value):
        if isinstance(value, np.ndarray):
            yield value
        elif isinstance(value, dict):
            for item in value.values():
                yield from arrays(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                yield from arrays(item)

    observation_shapes = {(3, 4), (4,)}
    assert not any(array.shape[-len(shape) :] == shape for array in arrays(message) for shape in observation_shapes)
    copy = slots.read(0, message)
    slots.write(0, sampler.collect())  # the next segment into the same slot leaves the copy alone
    assert_same_observation(copy.observations, segment.observations)
    slots.close()


def test_a_segment_that_does_not_fit_its_slot_is_refused_by_name():
    sampler = make_sampler()
    slots = slots_for(sampler)
    segment = sampler.collect()
    segment.rewards = segment.rewards[:, :1]
    with pytest.raises(ValueError, match="rewards has shape"):
        slots.write(0, segment)


def test_the_process_collector_delivers_segments_through_its_slots():
    sampler = make_sampler(dict_observations=True, n_steps=8)
    collector = ProcessCollector(sampler, queue_size=2)
    collector.set_step_budget(5 * collector.segment_size)
    collector.start()
    try:
        segments = [collector.get_segment() for _ in range(5)]
    finally:
        collector.close()
    assert collector.slots is not None and collector.slots.n_slots == 2
    for previous, segment in itertools.pairwise(segments):
        assert_same_observation(segment.observations["state"][0], previous.next_observations["state"])
    assert collector.sampled_steps == collector.delivered_steps == 5 * 16
    assert collector.stats()["shared_memory_mib"] > 0
