"""Parts shared by the algorithms: V-trace, behaviour-policy storage, segments, buffers and collectors."""
