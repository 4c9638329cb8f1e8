"""
Parts shared by the algorithms: the estimators (V-trace, GAE, Retrace, importance weights), behaviour-policy
storage, segments, training batches, rollout buffers and collectors.
"""
