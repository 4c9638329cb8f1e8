"""
Policy aliases of PTR-PPO: SB3's actor-critic policies (the paper shares one network between actor and critic).
CnnPolicy runs SB3's NatureCNN channels-last (faster on CPU, same numbers).
"""

from stable_baselines3.common.policies import ActorCriticPolicy, MultiInputActorCriticPolicy

from sb3_impact.common.torch_layers import ActorCriticCnnPolicy

MlpPolicy = ActorCriticPolicy
CnnPolicy = ActorCriticCnnPolicy
MultiInputPolicy = MultiInputActorCriticPolicy
