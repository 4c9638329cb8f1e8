"""
The profilers: where the time of the package's algorithms and collectors goes (``python -m benchmarks throughput``,
``step_cost``, ``gradient_step_cost``, ``iteration_cost``, ``ppo_amber_cost``, ``ray_scaling``).

They share one timing helper (:mod:`benchmarks.profiling.timing`) and time through public hooks only: SB3's
callbacks, the logger's values, public methods and attributes of the package's classes and the collector's
documented interface. A method a profiler wraps is looked up before it runs and a section it expects must have
run, so a renamed, removed or no longer called hook makes it fail, never time nothing.
"""
