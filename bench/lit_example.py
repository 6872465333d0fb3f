"""Benchmark workload: a LightningModule and datamodule with something to tune on a CPU.

The docs/lightning.md example, a little bigger: an MLP classifier (256 -> 1024 -> 1024 -> 10,
1.3 M parameters) on 16,384 random samples, its ``train_dataloader()`` as a first script
writes it (``batch_size=16``, no workers). At batch 16 a step is a few milliseconds and the
per-step costs (optimizer, hooks, Python) weigh; larger micro-batches amortise them.

Tune it, then check the answer in ``Trainer.fit()``::

    python -m tuner run --workload bench/lit_example.py:workload --time-budget 300
    python -m tuner best --workload bench/lit_example.py:workload --format lightning
    python -m tuner validate --workload bench/lit_example.py:workload

The raw outputs of those commands are kept under ``bench/results/``.
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tuner.integrations.lightning import from_lightning

FEATURES = 256
CLASSES = 10
SAMPLES = 16384


class LitClassifier(pl.LightningModule):
    """An MLP over (B, 256) features -> (B, 10) logits, cross-entropy loss."""

    def __init__(self, width: int = 1024):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, width), nn.ReLU(), nn.Linear(width, width),
                                 nn.ReLU(), nn.Linear(width, CLASSES))

    def training_step(self, batch, batch_idx):
        x, y = batch  # (B, 256) float32, (B,) int64
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3, weight_decay=0.01)


class Features(pl.LightningDataModule):
    """16,384 random feature vectors with labels, made in ``setup``."""

    def setup(self, stage: str):
        g = torch.Generator().manual_seed(0)
        self.train_set = TensorDataset(torch.randn(SAMPLES, FEATURES, generator=g),
                                       torch.randint(0, CLASSES, (SAMPLES,), generator=g))

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=16, shuffle=True)


workload = from_lightning(LitClassifier, Features(), name="lit-classifier")
