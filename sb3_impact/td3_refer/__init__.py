from sb3_impact.td3_refer.td3_refer import TD3ReFER

__all__ = ["TD3ReFER"]
