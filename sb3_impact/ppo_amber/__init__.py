from sb3_impact.ppo_amber.policies import CnnPolicy, MlpPolicy, MultiInputPolicy
from sb3_impact.ppo_amber.ppo_amber import PPOAMBER

__all__ = ["PPOAMBER", "CnnPolicy", "MlpPolicy", "MultiInputPolicy"]
