from sb3_impact.vracer.policies import CnnPolicy, MlpPolicy, MultiInputPolicy
from sb3_impact.vracer.vracer import VRACER

__all__ = ["VRACER", "CnnPolicy", "MlpPolicy", "MultiInputPolicy"]
