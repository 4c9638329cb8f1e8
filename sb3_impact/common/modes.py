"""Training/evaluation mode: targets and bootstraps are computed in evaluation mode, as SB3 computes its targets."""

from collections.abc import Iterator
from contextlib import contextmanager

from stable_baselines3.common.policies import BasePolicy
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd
from torch.nn.modules.instancenorm import _InstanceNorm

# Layers whose output depends on the mode (batch statistics, dropout masks, RReLU's random slopes).
MODE_DEPENDENT_LAYERS = (_BatchNorm, _InstanceNorm, _DropoutNd, nn.RReLU)


def has_mode_dependent_layers(module: nn.Module) -> bool:
    """
    Whether ``module`` holds a layer that computes differently in training and in evaluation mode (a recurrent layer
    with ``dropout`` between its layers included).
    """
    return any(
        isinstance(layer, MODE_DEPENDENT_LAYERS) or (isinstance(layer, nn.RNNBase) and layer.dropout > 0)
        for layer in module.modules()
    )


@contextmanager
def evaluation_mode(policy: BasePolicy) -> Iterator[BasePolicy]:
    """``policy`` in evaluation mode inside the block, then back in the mode it was in."""
    training = policy.training
    if not training:  # already there: a full set_training_mode walks every module, twice
        yield policy
        return
    policy.set_training_mode(False)
    try:
        yield policy
    finally:
        policy.set_training_mode(training)
