"""
The profilers: where the time of the package's algorithms and collectors goes (``python -m benchmarks throughput``,
``step_cost``, ``gradient_step_cost``, ``iteration_cost``, ``ppo_amber_cost``, ``ray_scaling``).
"""
