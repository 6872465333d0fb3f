"""Built-in workloads: one module per model family from the users' tuning reports.

Each module exposes ``workload`` (a ``tuner.workload.Workload``) and ``trainable`` (its Ray Tune
function trainable). See ``tuner.workload.BUILTINS`` for the names.
"""
