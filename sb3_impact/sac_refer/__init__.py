from sb3_impact.sac_refer.sac_refer import SACReFER

__all__ = ["SACReFER"]
