"""Adapters that turn another framework's training code into a ``tuner.workload.Workload``.

Each adapter lives in its own module and needs its framework installed as an optional extra:

* ``tuner.integrations.lightning``: ``from_lightning(module_or_class, datamodule)`` for a
  LightningModule and its LightningDataModule (``pip install 'tuner[lightning]'``);
  ``tuner.integrations.lightning_args``: the answer as ``Trainer(...)`` and ``DataLoader(...)``
  arguments (``best --format lightning``), torch-free; ``tuner.integrations.lightning_fit``:
  a configuration measured in ``Trainer.fit()`` (``validate``).
* ``tuner.integrations.transformers``: ``from_transformers(trainer)`` for a Transformers
  ``Trainer`` (``pip install 'tuner[transformers]'``); ``--workload mod:trainer`` wraps one
  itself (``tuner.workload_loader``); ``tuner.integrations.transformers_args``: the answer as
  ``TrainingArguments`` (``best --format transformers``), torch-free.

A workload built by an adapter goes through the same registry, harness and knobs as any
other; the rest of tuner imports only the torch-free answer formats (``best --format``)
and the loader the Transformers adapter, for a ``Trainer`` it is given.
"""
