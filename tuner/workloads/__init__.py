"""Built-in workloads: one module per model family from the users' tuning reports.

Each module exposes ``workload`` (a ``tuner.workload.Workload``) and imports nothing of the
trial (``tuner.trial.harness.make_trainable(workload)`` builds its Ray Tune function trainable). See
``tuner.workload_loader.BUILTINS`` for the names. Their search spaces are
this package's data: ``spaces/<workload>.yaml`` (format: ``spaces/README.md``), read by
``tuner.space.load_space``.
"""
