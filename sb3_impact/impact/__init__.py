from sb3_impact.impact.impact import IMPACT
from sb3_impact.impact.policies import CnnPolicy, MlpPolicy, MultiInputPolicy

__all__ = ["IMPACT", "CnnPolicy", "MlpPolicy", "MultiInputPolicy"]
