from sb3_impact.impala.impala import IMPALA
from sb3_impact.impala.policies import CnnPolicy, MlpPolicy, MultiInputPolicy

__all__ = ["IMPALA", "CnnPolicy", "MlpPolicy", "MultiInputPolicy"]
