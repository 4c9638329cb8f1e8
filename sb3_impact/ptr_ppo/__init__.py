from sb3_impact.ptr_ppo.policies import CnnPolicy, MlpPolicy, MultiInputPolicy
from sb3_impact.ptr_ppo.ptr_ppo import PTRPPO

__all__ = ["PTRPPO", "CnnPolicy", "MlpPolicy", "MultiInputPolicy"]
