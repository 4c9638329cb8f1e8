"""sb3-impact: policy-gradient methods that reuse stale experience, as Stable-Baselines3 algorithms."""

import os

from sb3_impact.impact import IMPACT
from sb3_impact.impala import IMPALA

# Read version from file
version_file = os.path.join(os.path.dirname(__file__), "version.txt")
with open(version_file) as file_handler:
    __version__ = file_handler.read().strip()

__all__ = ["IMPACT", "IMPALA", "__version__"]
