"""The channels-last CNN policy: SB3's network and numbers in another memory layout."""

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3.common.policies import ActorCriticCnnPolicy as SB3ActorCriticCnnPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

from sb3_impact import IMPACT, IMPALA, PPOAMBER, PTRPPO
from sb3_impact.common.torch_layers import ActorCriticCnnPolicy, ChannelsLastNatureCNN

from .conftest import ImageEnv

IMAGES = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(4), gym.spaces.Box(-1, 1, (2,))], ids=["Discrete", "Box"])
@pytest.mark.parametrize("share_features_extractor", [True, False])
def test_same_network_and_outputs_as_sb3(action_space, share_features_extractor):
    kwargs = dict(share_features_extractor=share_features_extractor)
    sb3 = SB3ActorCriticCnnPolicy(IMAGES, action_space, lambda _: 1e-4, **kwargs)
    ours = ActorCriticCnnPolicy(IMAGES, action_space, lambda _: 1e-4, **kwargs)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in sb3.state_dict().items()}
    assert all(
        module.cnn[0].weight.is_contiguous(memory_format=th.channels_last)
        for module in ours.modules()
        if isinstance(module, ChannelsLastNatureCNN)
    )
    ours.load_state_dict(sb3.state_dict())
    observations = th.randint(0, 256, (8, *IMAGES.shape), dtype=th.uint8).float()
    actions = th.as_tensor(np.stack([action_space.sample() for _ in range(8)]))
    for expected, actual in zip(
        sb3.evaluate_actions(observations, actions), ours.evaluate_actions(observations, actions), strict=True
    ):
        th.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    # And back: SB3's policy takes our (channels-last) weights unchanged.
    sb3.load_state_dict(ours.state_dict())
    th.testing.assert_close(sb3.predict_values(observations), ours.predict_values(observations), rtol=1e-5, atol=1e-5)


class ViewingCNN(BaseFeaturesExtractor):
    """A user's extractor that flattens with ``view``, which a channels-last tensor refuses."""

    def __init__(self, observation_space: gym.Space) -> None:
        super().__init__(observation_space, features_dim=8 * 20 * 20)
        self.conv = th.nn.Conv2d(observation_space.shape[0], 8, kernel_size=8, stride=4)

    def forward(self, observations: th.Tensor) -> th.Tensor:
        return self.conv(observations).view(len(observations), -1)


@pytest.mark.parametrize("share_features_extractor", [True, False])
def test_other_features_extractors_get_sb3_layout_and_defaults(share_features_extractor):
    kwargs = dict(features_extractor_class=ViewingCNN, share_features_extractor=share_features_extractor)
    policy = ActorCriticCnnPolicy(IMAGES, gym.spaces.Discrete(2), lambda _: 1e-4, **kwargs)
    assert isinstance(policy.features_extractor, ViewingCNN)
    assert len(policy.mlp_extractor.policy_net) > 0  # SB3's default 64 x 64 for extractors other than NatureCNN
    policy.evaluate_actions(th.randint(0, 256, (3, *IMAGES.shape), dtype=th.uint8).float(), th.zeros(3))


@pytest.mark.parametrize("algo", [IMPACT, IMPALA, PPOAMBER, PTRPPO])
def test_cnn_policy_learns_saves_and_loads(algo, tmp_path):
    kwargs = {} if algo in (IMPACT, IMPALA) else dict(batch_size=8)
    model = algo("CnnPolicy", ImageEnv(), n_steps=16, device="cpu", seed=0, **kwargs).learn(32)
    assert isinstance(model.policy.features_extractor, ChannelsLastNatureCNN)
    model.save(tmp_path / "model")
    loaded = algo.load(tmp_path / "model", device="cpu")
    observation = np.stack([ImageEnv().observation_space.sample() for _ in range(4)])
    np.testing.assert_array_equal(
        loaded.predict(observation, deterministic=True)[0], model.predict(observation, deterministic=True)[0]
    )


def test_fused_adam_with_sb3_eps_unless_the_optimizer_is_chosen():
    policy = ActorCriticCnnPolicy(IMAGES, gym.spaces.Discrete(2), lambda _: 1e-4)
    assert isinstance(policy.optimizer, th.optim.Adam)
    assert policy.optimizer.defaults["fused"] and policy.optimizer.defaults["eps"] == 1e-5
    chosen = ActorCriticCnnPolicy(IMAGES, gym.spaces.Discrete(2), lambda _: 1e-4, optimizer_kwargs=dict(eps=1e-3))
    assert not chosen.optimizer.defaults["fused"] and chosen.optimizer.defaults["eps"] == 1e-3
    sgd = ActorCriticCnnPolicy(IMAGES, gym.spaces.Discrete(2), lambda _: 1e-4, optimizer_class=th.optim.SGD)
    assert isinstance(sgd.optimizer, th.optim.SGD)
