"""
The V-RACER policy (Novati & Koumoutsakos, ICML 2019, section 2 and appendix A): one network gives the
state value ``V(s)`` and the mean ``m(s)`` of a Gaussian policy whose diagonal covariance is shared by
all states (initial variance 0.2, kept positive with a softplus).

Actions live in SB3's normalised space ``[-1, 1]`` (``scale_action``/``unscale_action``, appendix B's
linear action scaling); samples are drawn from the Gaussian truncated at three standard deviations
(appendix A). ``predict`` clips them to the action bounds. Observations are standardised with the
replay-memory statistics of appendix B (eqs. 14-15), stored as buffers so they are saved with the model.
"""

import math
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.preprocessing import is_image_space, preprocess_obs
from stable_baselines3.common.torch_layers import (
    BaseFeaturesExtractor,
    CombinedExtractor,
    FlattenExtractor,
    NatureCNN,
    create_mlp,
)
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from torch import nn
from torch.nn import functional as F

from sb3_impact.common.refer import diag_gaussian_log_prob

TRUNCATION_STDS = 3.0
STD_PARAMETERIZATIONS = ("softplus_variance", "smarties")
WEIGHT_INITS = ("pytorch", "glorot")
STANDARDIZATION_EPSILON = 1e-7  # appendix B


class ObservationStandardizer(nn.Module):
    """
    ``(s - mean) / (std + 1e-7)`` for every non-image Box part of the observation (appendix B).

    The identity until :meth:`set_statistics` is called; mean and std are buffers of the policy. Whether it is
    active is the buffer ``initialized`` (saved with the model) mirrored in a Python bool, so that ``forward``
    reads no tensor to decide (no device sync, and no graph break under ``torch.compile``).
    """

    def __init__(self, observation_space: spaces.Space) -> None:
        super().__init__()
        subspaces = observation_space.spaces if isinstance(observation_space, spaces.Dict) else {"": observation_space}
        self.is_dict = isinstance(observation_space, spaces.Dict)
        self.keys = [
            key
            for key, space in subspaces.items()
            if isinstance(space, spaces.Box) and not is_image_space(space, check_channels=False)
        ]
        for index, key in enumerate(self.keys):
            shape = subspaces[key].shape
            self.register_buffer(f"mean_{index}", th.zeros(shape, dtype=th.float32))
            self.register_buffer(f"std_{index}", th.ones(shape, dtype=th.float32))
        self.register_buffer("initialized", th.tensor(False))
        self._active = False

    @property
    def active(self) -> bool:
        """Whether observations are standardised (the statistics were set)."""
        return self._active

    def set_active(self, active: bool) -> None:
        """Turn the standardisation on or off (:meth:`set_statistics` turns it on)."""
        self.initialized.fill_(active)
        self._active = bool(active)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._active = bool(self.initialized)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if "_active" not in state:
            self._active = bool(self.initialized)

    def set_statistics(self, statistics: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        """Set the mean and std of each standardised component (keys: those of the Dict space, or "")."""
        for index, key in enumerate(self.keys):
            mean, std = statistics[key]
            getattr(self, f"mean_{index}").copy_(th.as_tensor(mean, dtype=th.float32))
            getattr(self, f"std_{index}").copy_(th.as_tensor(std, dtype=th.float32))
        self.set_active(True)

    def statistics(self) -> dict[str, tuple[th.Tensor, th.Tensor]]:
        return {key: (getattr(self, f"mean_{index}"), getattr(self, f"std_{index}")) for index, key in enumerate(self.keys)}

    def _standardize(self, index: int, observation: th.Tensor) -> th.Tensor:
        return (observation - getattr(self, f"mean_{index}")) / (getattr(self, f"std_{index}") + STANDARDIZATION_EPSILON)

    def forward(self, observation: th.Tensor | dict[str, th.Tensor]) -> th.Tensor | dict[str, th.Tensor]:
        if not self._active:
            return observation
        if not self.is_dict:
            return self._standardize(0, observation) if self.keys else observation  # type: ignore[arg-type]
        standardized = dict(observation)  # type: ignore[arg-type]
        for index, key in enumerate(self.keys):
            standardized[key] = self._standardize(index, standardized[key])
        return standardized


def truncated_standard_normal(like: th.Tensor, bound: float) -> th.Tensor:
    """
    Standard normal noise shaped as ``like``, truncated to ``[-bound, bound]`` by redrawing what falls outside
    (0.27% of draws at three standard deviations): the truncated normal, in three tensor operations per draw
    where ``nn.init.trunc_normal_``'s inverse CDF takes about ten (a cost at one sampled step per env step).
    """
    noise = th.randn_like(like)
    outside = noise.abs() > bound
    while bool(outside.any()):
        noise[outside] = th.randn(int(outside.sum()), dtype=noise.dtype, device=noise.device)
        outside = noise.abs() > bound
    return noise


class _SoftsignFunction(th.autograd.Function):
    """``x / (1 + |x|)`` with the derivative ``1 / (1 + |x|)^2`` written out: two tensors kept, two operations back."""

    @staticmethod
    def forward(ctx: th.autograd.function.FunctionCtx, x: th.Tensor) -> th.Tensor:  # type: ignore[override]
        denominator = x.abs().add_(1.0)
        ctx.save_for_backward(denominator)
        return x / denominator

    @staticmethod
    def backward(ctx: th.autograd.function.FunctionCtx, grad_output: th.Tensor) -> th.Tensor:  # type: ignore[override]
        (denominator,) = ctx.saved_tensors  # type: ignore[attr-defined]
        return grad_output / (denominator * denominator)


class Softsign(nn.Module):
    """
    The paper's activation, ``x / (1 + |x|)`` (appendix A): the values of ``nn.Softsign`` with a backward pass of
    two operations instead of autograd's six (a 128x128 MLP's gradient step on one CPU thread: 0.50 ms against
    0.63 ms).
    """

    def forward(self, x: th.Tensor) -> th.Tensor:
        if not (th.is_grad_enabled() and x.requires_grad):  # sampling, targets: no autograd Function to set up
            return x / x.abs().add_(1.0)
        return _SoftsignFunction.apply(x)


def softplus_inverse(value: float) -> float:
    return math.log(math.expm1(value))


class VRACERPolicy(BasePolicy):
    """
    One network: features -> shared MLP -> ``V(s)`` and Gaussian mean; a state-independent diagonal variance.

    Implements :class:`~sb3_impact.common.distributions.BehaviourSamplingPolicy` (:meth:`sample_behaviour`,
    :meth:`env_actions`): a collector's sampler stores the unclipped Gaussian samples and their log-probability,
    and steps the environment with the clipped, unscaled actions.

    :param observation_space: Observation space
    :param action_space: Action space (Box)
    :param lr_schedule: Learning rate schedule (its value at progress 1 sets the optimizer's initial rate)
    :param net_arch: Hidden layer sizes of the shared MLP (paper: two layers of 128)
    :param activation_fn: Activation function (paper: Softsign; :class:`Softsign` computes it with a shorter backward pass)
    :param initial_variance: Initial diagonal variance of the Gaussian policy (paper: 0.2)
    :param std_parameterization: How the free parameter ``p`` gives the std: ``"softplus_variance"`` (the paper's
        appendix A: ``sigma^2 = softplus(p)``) or ``"smarties"`` (the authors' code: ``sigma = (p + sqrt(1 + p^2)) / 2``)
    :param weight_init: The hidden layers' initialisation: ``"pytorch"`` (``nn.Linear``'s default) or ``"glorot"``
        (appendix A and smarties: Glorot-uniform weights and biases, bound ``sqrt(6 / (fan_in + fan_out))``)
    :param clip_env_actions: Clip the sampled actions to [-1, 1] before the environment (True); False sends them
        unclipped, as smarties does, so that an environment whose cost grows with the action penalises ``|a| > 1``
    :param features_extractor_class: Features extractor to use
    :param features_extractor_kwargs: Keyword arguments to pass to the features extractor
    :param normalize_images: Whether to normalize images or not, dividing by 255.0
    :param optimizer_class: The optimizer to use (paper: Adam)
    :param optimizer_kwargs: Additional keyword arguments, excluding the learning rate, to pass to the optimizer
        (default for Adam: ``{"fused": True}``, one kernel for all parameters instead of a loop over them)
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_arch: list[int] | None = None,
        activation_fn: type[nn.Module] = Softsign,
        initial_variance: float = 0.2,
        std_parameterization: str = "softplus_variance",
        weight_init: str = "pytorch",
        clip_env_actions: bool = True,
        features_extractor_class: type[BaseFeaturesExtractor] = FlattenExtractor,
        features_extractor_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = True,
        optimizer_class: type[th.optim.Optimizer] = th.optim.Adam,
        optimizer_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(action_space, spaces.Box):
            raise ValueError(
                f"Unsupported action space {action_space}: V-RACER needs a Box action space "
                "(its policy is a diagonal Gaussian over the flattened action)"
            )
        if optimizer_kwargs is None and optimizer_class is th.optim.Adam:
            optimizer_kwargs = {"fused": True}
        if not initial_variance > 0:
            raise ValueError(f"initial_variance must be positive, got {initial_variance}")
        if std_parameterization not in STD_PARAMETERIZATIONS:
            raise ValueError(f"std_parameterization must be one of {STD_PARAMETERIZATIONS}, got {std_parameterization!r}")
        if weight_init not in WEIGHT_INITS:
            raise ValueError(f"weight_init must be one of {WEIGHT_INITS}, got {weight_init!r}")
        super().__init__(
            observation_space,
            action_space,
            features_extractor_class,
            features_extractor_kwargs,
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
            squash_output=True,  # predict() maps [-1, 1] to the action bounds with unscale_action
            normalize_images=normalize_images,
        )
        self.net_arch = [128, 128] if net_arch is None else list(net_arch)
        self.activation_fn = activation_fn
        self.initial_variance = initial_variance
        self.std_parameterization = std_parameterization
        self.weight_init = weight_init
        self.clip_env_actions = clip_env_actions
        self.action_dim = int(np.prod(action_space.shape))

        self.obs_standardizer = ObservationStandardizer(observation_space)
        self.features_extractor = self.make_features_extractor()
        self.features_dim = self.features_extractor.features_dim
        self.shared_net = nn.Sequential(*create_mlp(self.features_dim, -1, self.net_arch, activation_fn))
        latent_dim = self.net_arch[-1] if self.net_arch else self.features_dim
        self.value_net = nn.Linear(latent_dim, 1)
        self.action_net = nn.Linear(latent_dim, self.action_dim)
        if std_parameterization == "softplus_variance":
            initial_parameter = softplus_inverse(initial_variance)
        else:  # the inverse of sigma = (p + sqrt(1 + p^2)) / 2 is p = sigma - 1 / (4 sigma)
            initial_std = math.sqrt(initial_variance)
            initial_parameter = initial_std - 1.0 / (4.0 * initial_std)
        self.variance_parameter = nn.Parameter(th.full((self.action_dim,), initial_parameter))
        if weight_init == "glorot":
            for layer in self.shared_net:
                if isinstance(layer, nn.Linear):
                    bound = math.sqrt(6.0 / (layer.in_features + layer.out_features))
                    nn.init.uniform_(layer.weight, -bound, bound)
                    nn.init.uniform_(layer.bias, -bound, bound)
        # Appendix A: near-zero outputs at the start, U[-0.1/sqrt(fan_in), 0.1/sqrt(fan_in)], zero bias
        for head in (self.value_net, self.action_net):
            bound = 0.1 / math.sqrt(latent_dim)
            nn.init.uniform_(head.weight, -bound, bound)
            nn.init.zeros_(head.bias)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)  # type: ignore[call-arg]

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            dict(
                net_arch=self.net_arch,
                activation_fn=self.activation_fn,
                initial_variance=self.initial_variance,
                std_parameterization=self.std_parameterization,
                weight_init=self.weight_init,
                clip_env_actions=self.clip_env_actions,
                lr_schedule=self._dummy_schedule,  # as SB3's policies: the algorithm sets the real learning rate
                features_extractor_class=self.features_extractor_class,
                features_extractor_kwargs=self.features_extractor_kwargs,
                optimizer_class=self.optimizer_class,
                optimizer_kwargs=self.optimizer_kwargs,
            )
        )
        return data

    def extract_features(self, obs: PyTorchObs, features_extractor: BaseFeaturesExtractor | None = None) -> th.Tensor:
        """Preprocess (SB3), standardise (appendix B), then run the features extractor."""
        preprocessed = preprocess_obs(obs, self.observation_space, normalize_images=self.normalize_images)
        return (features_extractor or self.features_extractor)(self.obs_standardizer(preprocessed))

    def log_std(self) -> th.Tensor:
        """The state-independent log standard deviation: ``log sqrt(softplus(p))`` or ``log((p + sqrt(1 + p^2)) / 2)``."""
        if self.std_parameterization == "smarties":
            p = self.variance_parameter
            return th.log(0.5 * (p + th.sqrt(1.0 + p * p)) + 1e-12)
        return 0.5 * th.log(F.softplus(self.variance_parameter) + 1e-12)

    def forward_parts(self, obs: PyTorchObs) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """``(mean [B, d], log_std [B, d], V(s) [B])`` from one pass of the network."""
        latent = self.shared_net(self.extract_features(obs))
        mean = self.action_net(latent)
        return mean, self.log_std().expand_as(mean), self.value_net(latent).squeeze(-1)

    def sample_actions(self, mean: th.Tensor, log_std: th.Tensor) -> th.Tensor:
        """Gaussian samples truncated at three standard deviations (appendix A), not clipped to the bounds."""
        return mean + th.exp(log_std) * truncated_standard_normal(mean, TRUNCATION_STDS)

    def forward(self, obs: PyTorchObs, deterministic: bool = False) -> th.Tensor:
        return self._predict(obs, deterministic)

    def _predict(self, observation: PyTorchObs, deterministic: bool = False) -> th.Tensor:
        mean, log_std, _ = self.forward_parts(observation)
        actions = mean if deterministic else self.sample_actions(mean, log_std)
        return th.clamp(actions, -1.0, 1.0)

    def act(self, obs: PyTorchObs) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """Behaviour step: ``(sampled action, behaviour parameters [mean, log_std], V(s))``."""
        mean, log_std, values = self.forward_parts(obs)
        return self.sample_actions(mean, log_std), th.cat([mean, log_std], dim=1), values

    def sample_behaviour(self, obs: PyTorchObs) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """
        What a collector's sampler stores: ``(actions [n, d], log mu(a|s) [n], behaviour parameters [n, 2d])``.

        The actions are the stored (unclipped) samples of :meth:`act`; their log-probability is that of the
        untruncated Gaussian, as in the loss; the parameters are ``[mean, log_std]``.
        """
        actions, log_probs, params, _ = self.sample_behaviour_and_values(obs)
        return actions, log_probs, params

    def sample_behaviour_and_values(self, obs: PyTorchObs) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """:meth:`sample_behaviour` and ``V(s) [n]`` of the same forward pass (the sampler records them)."""
        actions, params, values = self.act(obs)
        mean, log_std = params.chunk(2, dim=1)
        return actions, diag_gaussian_log_prob(actions, mean, log_std), params, values

    def env_actions(self, actions: np.ndarray) -> np.ndarray:
        """
        What the environment is stepped with: the stored actions clipped to [-1, 1] (unless ``clip_env_actions`` is
        False) and unscaled to its bounds.
        """
        actions = np.asarray(actions).reshape((-1, *self.action_space.shape))
        return self.unscale_action(np.clip(actions, -1.0, 1.0) if self.clip_env_actions else actions)

    def predict_values(self, obs: PyTorchObs) -> th.Tensor:
        return self.forward_parts(obs)[2]


class VRACERCnnPolicy(VRACERPolicy):
    """:class:`VRACERPolicy` with SB3's NatureCNN features extractor (images are not standardised)."""

    def __init__(self, *args, features_extractor_class: type[BaseFeaturesExtractor] = NatureCNN, **kwargs) -> None:
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)


class VRACERMultiInputPolicy(VRACERPolicy):
    """:class:`VRACERPolicy` for Dict observation spaces (SB3's CombinedExtractor)."""

    def __init__(self, *args, features_extractor_class: type[BaseFeaturesExtractor] = CombinedExtractor, **kwargs) -> None:
        super().__init__(*args, features_extractor_class=features_extractor_class, **kwargs)


MlpPolicy = VRACERPolicy
CnnPolicy = VRACERCnnPolicy
MultiInputPolicy = VRACERMultiInputPolicy
