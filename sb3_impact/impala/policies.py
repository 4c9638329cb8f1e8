"""
Policy aliases of IMPALA: SB3's actor-critic policies (shared trunk, separate policy and value heads).
CnnPolicy runs SB3's NatureCNN channels-last (faster on CPU, same numbers). The LSTM policies are sb3-contrib's
recurrent actor-critic policies, as RecurrentPPO's (see docs/algorithms/collectors.md, "Recurrent policies").
"""

from sb3_contrib.common.recurrent.policies import (
    RecurrentActorCriticCnnPolicy,
    RecurrentActorCriticPolicy,
    RecurrentMultiInputActorCriticPolicy,
)
from stable_baselines3.common.policies import ActorCriticPolicy, MultiInputActorCriticPolicy

from sb3_impact.common.torch_layers import ActorCriticCnnPolicy

MlpPolicy = ActorCriticPolicy
CnnPolicy = ActorCriticCnnPolicy
MultiInputPolicy = MultiInputActorCriticPolicy
MlpLstmPolicy = RecurrentActorCriticPolicy
CnnLstmPolicy = RecurrentActorCriticCnnPolicy
MultiInputLstmPolicy = RecurrentMultiInputActorCriticPolicy
