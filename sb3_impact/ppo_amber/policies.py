"""
Policy aliases of PPO-AMBER: SB3's actor-critic policies, as for PPO.
CnnPolicy runs SB3's NatureCNN channels-last (faster on CPU, same numbers).
"""

from stable_baselines3.common.policies import ActorCriticPolicy, MultiInputActorCriticPolicy

from sb3_impact.common.torch_layers import ActorCriticCnnPolicy

MlpPolicy = ActorCriticPolicy
CnnPolicy = ActorCriticCnnPolicy
MultiInputPolicy = MultiInputActorCriticPolicy
