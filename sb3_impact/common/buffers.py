"""
The import path of the behaviour-recording rollout buffers before they moved to
:mod:`sb3_impact.common.rollout_buffers`: models saved then pickled ``rollout_buffer_class`` under this name, and
load() finds it here. New code imports from ``rollout_buffers``.
"""

from sb3_impact.common.rollout_buffers import BehaviourRolloutBuffer, DictBehaviourRolloutBuffer

__all__ = ["BehaviourRolloutBuffer", "DictBehaviourRolloutBuffer"]
