"""sb3-impact: policy-gradient methods that reuse stale experience, as Stable-Baselines3 algorithms."""

import os

from sb3_impact.impact import IMPACT
from sb3_impact.impala import IMPALA
from sb3_impact.ppo_amber import PPOAMBER
from sb3_impact.ptr_ppo import PTRPPO
from sb3_impact.sac_refer import SACReFER
from sb3_impact.td3_refer import TD3ReFER
from sb3_impact.vracer import VRACER

# Read version from file
version_file = os.path.join(os.path.dirname(__file__), "version.txt")
with open(version_file) as file_handler:
    __version__ = file_handler.read().strip()

__all__ = ["IMPACT", "IMPALA", "PPOAMBER", "PTRPPO", "VRACER", "SACReFER", "TD3ReFER", "__version__"]
