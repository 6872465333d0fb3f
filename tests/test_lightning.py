"""The Lightning adapter (tuner.integrations.lightning): a LightningModule and its datamodule
become a Workload whose loss, optimizer, dataset and baseline are the user's; one short run
through Ray gets leaderboard rows.

The modules below are importable as ``tests.test_lightning`` (tests/ is a package), so Ray's
workers import them by that path, as they would a user's module.
"""

from __future__ import annotations

import warnings

import lightning.pytorch as pl
import pytest
import torch
from ray import cloudpickle
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from tuner.driver import run
from tuner.errors import TunerError
from tuner.integrations.lightning import LightningWorkload, from_lightning
from tuner.knobs import Knobs
from tuner.option_checks import make_plan
from tuner.settings import RunOptions

FEATURES = 8
SAMPLES = 64


class LitRegressor(pl.LightningModule):
    """An MLP regressing a scalar; weights with weight decay, biases without (two groups)."""

    def __init__(self, returns: str = "dict"):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU(), nn.Linear(16, 1))
        self.returns = returns
        self.seen_batch_idx: list[int] = []

    def forward(self, x):  # (B, 8) -> (B,)
        return self.net(x).squeeze(-1)

    def training_step(self, batch, batch_idx):
        x, y = batch  # (B, 8), (B,)
        self.seen_batch_idx.append(batch_idx)
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        self.log_dict({"train_mse": loss})
        return {"dict": {"loss": loss}, "tensor": loss, "none": None}[self.returns]

    def configure_optimizers(self):
        decay = [p for n, p in self.named_parameters() if n.endswith("weight")]
        no_decay = [p for n, p in self.named_parameters() if n.endswith("bias")]
        optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                                       {"params": no_decay, "weight_decay": 0.0}], lr=3e-3)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


class RegressionData(pl.LightningDataModule):
    """64 random samples made in ``setup``; the loader as a user writes it."""

    def __init__(self, **loader_kwargs):
        super().__init__()
        self.loader_kwargs = {"batch_size": 8, **loader_kwargs}

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(0)
        self.train_set = TensorDataset(torch.randn(SAMPLES, FEATURES, generator=g),
                                       torch.randn(SAMPLES, generator=g))

    def train_dataloader(self):
        return DataLoader(self.train_set, shuffle=True, **self.loader_kwargs)


def stack_pairs(samples):
    """A user's collate_fn: (x, y) pairs -> ((B, 8), (B,))."""
    return torch.stack([s[0] for s in samples]), torch.stack([s[1] for s in samples])


workload = from_lightning(LitRegressor, RegressionData())


def one_batch(n: int = 4):
    data = RegressionData()
    data.setup("fit")
    return next(iter(DataLoader(data.train_set, batch_size=n)))


# ------------------------------------------------------------------------ in-process checks

def test_the_loss_is_what_training_step_returns_with_batch_idx_counted():
    batch = one_batch()
    for returns in ("dict", "tensor"):
        w = from_lightning(LitRegressor(returns=returns), RegressionData())
        model = w.build_model("tiny")
        losses = [w.training_step(model, batch) for _ in range(3)]
        expected = nn.functional.mse_loss(model.module(batch[0]), batch[1])
        assert torch.equal(losses[-1], expected)
        assert model.module.seen_batch_idx == [0, 1, 2]
    w = from_lightning(LitRegressor(returns="none"), RegressionData())
    with pytest.raises(TunerError, match="training_step returned None"):
        w.training_step(w.build_model("tiny"), batch)


def test_self_log_outside_a_trainer_neither_warns_nor_fails():
    model = workload.build_model("tiny")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Lightning warns on every self.log without a Trainer
        loss = workload.training_step(model, one_batch())
    assert loss.ndim == 0 and torch.isfinite(loss)


def test_each_model_is_fresh_and_moves_with_the_lightning_device_property():
    instance = LitRegressor()
    w = from_lightning(instance, RegressionData())
    a, b = w.build_model("tiny"), w.build_model("tiny")
    assert a.module is not instance and a.module is not b.module
    assert torch.equal(a.module.net[0].weight, instance.net[0].weight)  # a copy of the instance
    assert a.to("meta") is a and a.module.device.type == "meta"  # LightningModule.to ran
    assert sum(p.numel() for p in a.parameters()) == w.parameter_count("tiny") == 8 * 16 + 16 + 17


def test_the_optimizer_is_configure_optimizers_rebuilt_over_the_trials_parameters():
    model = workload.build_model("tiny")
    optimizer = workload.build_optimizer(model.parameters(), fused=False)
    assert type(optimizer) is torch.optim.AdamW
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.05, 0.0]
    assert all(g["lr"] == 3e-3 for g in optimizer.param_groups)
    weights = [model.module.net[0].weight, model.module.net[2].weight]
    assert [id(p) for p in optimizer.param_groups[0]["params"]] == [id(p) for p in weights]
    assert not optimizer.defaults["fused"]
    fused = workload.build_optimizer(model.parameters(), fused=True)
    assert fused.defaults["fused"] is True and all(g["fused"] for g in fused.param_groups)


def test_an_sgd_optimizer_keeps_its_class_and_momentum_and_takes_fused():
    class LitSGD(LitRegressor):
        def configure_optimizers(self):
            return [torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)]

    w = from_lightning(LitSGD(), RegressionData())
    model = w.build_model("tiny")
    optimizer = w.build_optimizer(model.parameters(), fused=True)
    assert type(optimizer) is torch.optim.SGD
    assert optimizer.defaults["momentum"] == 0.9 and optimizer.defaults["fused"] is True
    loss = w.training_step(model, one_batch())
    loss.backward()
    optimizer.step()  # a fused step on CPU runs


def test_the_baseline_and_collate_fn_come_from_train_dataloader():
    assert workload.baseline == Knobs(batch_size=8)
    assert workload.name == "litregressor" and workload.space_name == "lightning"
    assert workload.sample_shape("tiny") == {"[0]": [FEATURES], "[1]": []}
    data = RegressionData(batch_size=16, num_workers=2, pin_memory=True,
                          persistent_workers=True, prefetch_factor=3, collate_fn=stack_pairs)
    w = from_lightning(LitRegressor, data, name="mine")
    assert w.baseline == Knobs(batch_size=16, num_workers=2, prefetch_factor=3,
                               pin_memory=True, persistent_workers=True)
    assert w.collate_fn() is stack_pairs and w.name == "mine"
    assert not hasattr(data, "train_set")  # setup ran on a copy: the object given is untouched
    assert len(w.build_dataset(w.prepare_default_data(_cache(), "tiny"), "tiny")) == SAMPLES


def _cache():
    from tuner.settings import default_cache_dir
    return default_cache_dir() / "data"


def test_the_workload_survives_pickling_as_ray_sends_it():
    copy = cloudpickle.loads(cloudpickle.dumps(workload))
    assert isinstance(copy, LightningWorkload) and copy.baseline == workload.baseline
    loss = copy.training_step(copy.build_model("tiny"), one_batch())
    assert torch.isfinite(loss)


class Stream(IterableDataset):
    def __iter__(self):
        yield from ((torch.zeros(FEATURES), torch.zeros(())) for _ in range(4))


class LitManual(LitRegressor):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False


class LitTwo(LitRegressor):
    def configure_optimizers(self):
        return [torch.optim.SGD(self.net[0].parameters(), lr=0.1),
                torch.optim.Adam(self.net[2].parameters())]


class LitNeedsTrainer(LitRegressor):
    def configure_optimizers(self):
        steps = self.trainer.estimated_stepping_batches
        return torch.optim.SGD(self.parameters(), lr=0.1 / steps)


class LoaderOf(pl.LightningDataModule):
    def __init__(self, make):
        super().__init__()
        self.make = make

    def train_dataloader(self):
        return self.make()


@pytest.mark.parametrize("module, data, message", [
    (LitManual, RegressionData(), r"manual optimization \(automatic_optimization = False\)"),
    (LitTwo, RegressionData(), r"returned 2 optimizers; tuner tunes a module with exactly one"),
    (LitNeedsTrainer, RegressionData(),
     r"LitNeedsTrainer.configure_optimizers\(\) raised RuntimeError: .*without a Trainer"),
    (nn.Linear(2, 2), RegressionData(), r"Linear is not a LightningModule"),
    (LitRegressor, LoaderOf(lambda: DataLoader(Stream(), batch_size=2)),
     r"an IterableDataset is not supported"),
    (LitRegressor, LoaderOf(lambda: DataLoader(list(range(8)), batch_sampler=[[0, 1]])),
     r"uses a batch_sampler"),
    (LitRegressor, LoaderOf(lambda: {"a": DataLoader(list(range(8)), batch_size=2)}),
     r"returned a dict; tuner needs one torch DataLoader"),
    (LitRegressor, object(), r"the datamodule object has no train_dataloader\(\)"),
])
def test_what_is_not_supported_is_one_tuner_error(module, data, message):
    with pytest.raises(TunerError, match=message) as caught:
        from_lightning(module, data)
    assert "\n" not in str(caught.value)


def test_data_is_the_datamodules_so_a_data_flag_is_refused(tmp_path, tuner_cache):
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(
        TunerError,
        match=r"--data .*: workload litregressor takes its data from "
        r"its datamodule's train_dataloader\(\); leave out --data",
    ):
        make_plan(RunOptions(workload="tests.test_lightning:workload", device="cpu",
                             data=str(tmp_path), results=str(tmp_path / "results")))


# ------------------------------------------------------------------------------ through Ray

@pytest.mark.slow
def test_a_lightning_module_trains_through_tuner_into_leaderboard_rows(tmp_path, tuner_cache,
                                                                       ray_session):
    summary = run(RunOptions(workload="tests.test_lightning:workload", trials=2, device="cpu",
                             results=str(tmp_path / "results"), windows=2, window_s=0.2,
                             warmup_steps=1, confirm=0, ceiling=False, early_stop=False))
    rows = summary.rows
    assert summary.workload == "litregressor" and len(rows) == 2
    assert [r["status"] for r in rows] == ["ok", "ok"], [r["error"] for r in rows]
    assert all(r["samples_per_sec"] > 0 and r["final_loss"] > 0 for r in rows)
    assert rows[0]["reference"] == "baseline" and rows[0]["batch_size"] == 8
    assert rows[0]["model_flops_per_sample"] > 0  # counted through training_step


def test_the_readme_example_trains_one_trial(tmp_path, tuner_cache):
    """The README's "Your LightningModule" example, pasted as the user would, runs a trial."""
    import runpy

    from tests.test_readme_examples import documented_examples
    from tuner.settings import TrialSettings
    from tuner.trial.harness import run_trial

    example = documented_examples()["lit_mlp.py"]
    (tmp_path / "lit_mlp.py").write_text(example.code, encoding="utf-8")
    w = runpy.run_path(str(tmp_path / "lit_mlp.py"))["workload"]
    assert w.baseline == Knobs(batch_size=64, num_workers=1, prefetch_factor=2)
    data = w.prepare_default_data(tuner_cache / "data", "tiny")
    assert w.check_data(data, "tiny") == 4096
    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(data), warmup_steps=1,
                             windows=1, window_s=0.2)
    result = run_trial(w, w.baseline, settings, cpus=2)
    assert result["status"] == "ok", result["error"]
    assert result["samples_per_sec"] > 0 and result["batch_size"] == 64
