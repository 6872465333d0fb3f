"""Adapters that turn another framework's training code into a ``tuner.workload.Workload``.

Each adapter lives in its own module and needs its framework installed as an optional extra:

* ``tuner.integrations.lightning``: ``from_lightning(module_or_class, datamodule)`` for a
  LightningModule and its LightningDataModule (``pip install 'tuner[lightning]'``).

Nothing here is imported by the rest of tuner: a workload built by an adapter goes through the
same registry, harness and knobs as any other.
"""
