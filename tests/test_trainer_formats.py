"""The answer in the trainers' own terms: ``best --format lightning`` (and ``transformers``,
where that adapter is installed) prints arguments that build the framework's objects, and
``validate`` checks a LightningModule's answer in ``Trainer.fit()``.

Each printed answer is executed as printed: the ``Trainer(...)`` and ``DataLoader(...)``
blocks build a real ``lightning.pytorch.Trainer`` and ``torch.utils.data.DataLoader``, which
then fit the module of ``tests.test_lightning`` for two steps.
"""

from __future__ import annotations

import math

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.conftest import tuner_in_process
from tests.test_leaderboard import row
from tests.test_lightning import FEATURES, SAMPLES, LitRegressor, workload
from tuner import leaderboard
from tuner.checks import ValidationPlan, trainer_validation
from tuner.integrations.lightning_args import (
    PRECISION,
    dataloader_arguments,
    format_answer,
    trainer_arguments,
)
from tuner.knobs import Knobs

LIT = "tests.test_lightning:workload"


def test_each_amp_mode_is_a_lightning_precision_and_cpu_clamps_fp16_off():
    assert [trainer_arguments(Knobs(batch_size=8, amp=a), "cuda")["precision"]
            for a in ("off", "fp16", "bf16")] == ["32-true", "16-mixed", "bf16-mixed"]
    assert trainer_arguments(Knobs(batch_size=8, amp="fp16"), "cpu")["precision"] == "32-true"
    args = trainer_arguments(Knobs(batch_size=8, grad_accum=4, cudnn_benchmark=True), "cuda")
    assert args == {"precision": "32-true", "accumulate_grad_batches": 4, "benchmark": True}
    assert trainer_arguments(Knobs(batch_size=8, cudnn_benchmark=True), "cpu")["benchmark"] is False
    assert set(PRECISION) == {"off", "fp16", "bf16"}


def test_dataloader_arguments_give_worker_settings_only_with_workers():
    assert dataloader_arguments(Knobs(batch_size=8)) == {
        "batch_size": 8, "num_workers": 0, "pin_memory": False}
    assert dataloader_arguments(Knobs(batch_size=8, num_workers=2, prefetch_factor=4,
                                      persistent_workers=True, pin_memory=True)) == {
        "batch_size": 8, "num_workers": 2, "pin_memory": True, "prefetch_factor": 4,
        "persistent_workers": True}


def test_knobs_without_a_trainer_setting_get_their_lines_beside_it():
    knobs = Knobs(batch_size=8, tf32=True, compile="max-autotune", channels_last=True,
                  fused_optimizer=True)
    text = format_answer(knobs, ["tuner best for x"], device="cuda")
    assert 'torch.set_float32_matmul_precision("high")' in text
    assert "model = torch.compile(model, mode='max-autotune')" in text
    assert "model = model.to(memory_format=torch.channels_last)" in text
    assert "fused=True" in text
    cpu = format_answer(knobs, ["tuner best for x"], device="cpu")  # tf32 is CUDA only
    assert "set_float32_matmul_precision" not in cpu
    two = format_answer(Knobs(batch_size=8, ddp_bucket_cap_mb=100), [], device="cpu",
                        world_size=2)
    assert "strategy=DDPStrategy(bucket_cap_mb=100, gradient_as_bucket_view=False, " \
           "static_graph=False)" in two and "devices=2" in two
    assert "torch.set_num_threads(1)" in format_answer(knobs, [], device="cpu", torch_threads=1)
    assert "set_num_threads" not in format_answer(knobs, [], device="cuda", torch_threads=1)


def _printed(tmp_path, knobs: Knobs, fmt: str) -> str:
    leaderboard.append(tmp_path, [row(0, knobs=knobs, workload=workload.name)])
    proc = tuner_in_process("best", "--workload", LIT, "--results", str(tmp_path),
                            "--format", fmt)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _built(text: str) -> dict:
    """The printed text executed up to its ``trainer.fit`` line, with the user's names."""
    code, fit, _ = text.partition("trainer.fit(")
    assert fit, text
    g = torch.Generator().manual_seed(0)
    dataset = TensorDataset(torch.randn(SAMPLES, FEATURES, generator=g),
                            torch.randn(SAMPLES, generator=g))
    namespace = {"model": LitRegressor(returns="tensor"), "dataset": dataset}
    exec(compile(code, "best-lightning.py", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("knobs", [
    Knobs(batch_size=16, amp="bf16", grad_accum=2, num_workers=1, prefetch_factor=3,
          persistent_workers=True, fused_optimizer=True),
    Knobs(batch_size=8),
], ids=["bf16-accumulated-workers", "baseline"])
def test_the_lightning_answer_builds_a_trainer_and_a_dataloader_that_fit(tmp_path, knobs,
                                                                          monkeypatch):
    text = _printed(tmp_path, knobs, "lightning")
    monkeypatch.chdir(tmp_path)  # the printed Trainer logs to ./lightning_logs
    assert text.startswith("# tuner best for tests.test_lightning:workload on cpu:test:2cpu: ")
    ns = _built(text)
    trainer, loader = ns["trainer"], ns["train_loader"]
    assert isinstance(trainer, pl.Trainer) and isinstance(loader, DataLoader)
    assert trainer.precision == trainer_arguments(knobs, "cpu")["precision"]
    assert trainer.accumulate_grad_batches == knobs.grad_accum
    assert loader.batch_size == knobs.batch_size and loader.drop_last
    assert loader.num_workers == knobs.num_workers
    assert loader.persistent_workers == knobs.persistent_workers
    if knobs.num_workers:
        assert loader.prefetch_factor == knobs.prefetch_factor
    trainer.fit_loop.epoch_loop.max_steps = 2  # the printed Trainer, two optimizer steps
    model = ns["model"]
    before = [p.detach().clone() for p in model.parameters()]
    trainer.fit(model, train_dataloaders=loader)
    assert trainer.global_step == 2
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_the_transformers_answer_builds_training_arguments(tmp_path, monkeypatch):
    pytest.importorskip("tuner.integrations.transformers_args")
    transformers = pytest.importorskip("transformers")
    text = _printed(tmp_path, Knobs(batch_size=16, grad_accum=2, num_workers=1), "transformers")
    assert text.startswith("# tuner best for tests.test_lightning:workload on cpu:test:2cpu: ")
    monkeypatch.chdir(tmp_path)
    ns: dict = {"model": LitRegressor()}
    exec(compile(text, "best-transformers.py", "exec"), ns)
    args = next(v for v in ns.values() if isinstance(v, transformers.TrainingArguments))
    assert args.per_device_train_batch_size == 16 and args.gradient_accumulation_steps == 2
    assert args.dataloader_num_workers == 1


def test_lightning_trainer_fit_measures_a_finite_positive_rate():
    for knobs in (Knobs(batch_size=8), Knobs(batch_size=16, amp="bf16", grad_accum=2,
                                             fused_optimizer=True)):
        rate = workload.trainer_samples_per_sec(knobs, steps=4, device="cpu", scale="tiny")
        assert rate is not None and math.isfinite(rate) and rate > 0


def test_a_workload_without_a_trainer_says_none():
    from tests.fake_workloads import Regression
    assert Regression().trainer_samples_per_sec(Knobs(batch_size=8), steps=4, device="cpu",
                                                scale="tiny") is None


class _Recorded(type(workload)):
    """The Lightning workload with its trainer replaced by a record of the calls."""

    def trainer_samples_per_sec(self, knobs, *, steps, device, scale):
        self.calls.append((knobs.batch_size, steps, torch.get_num_threads()))
        return float(100 * knobs.batch_size + len(self.calls))


def test_validate_interleaves_the_answer_and_the_baseline_in_the_trainer(tmp_path):
    recorded = _Recorded.__new__(_Recorded)
    recorded.__dict__.update(workload.__dict__, calls=[])
    answer = row(1, knobs=Knobs(batch_size=32), sps=400.0, workload=workload.name,
                 trial_cpus=2.0, torch_threads=1)
    base = row(0, knobs=Knobs(batch_size=8), sps=100.0, reference="baseline", trial_cpus=2.0,
               torch_threads=2)
    plan = ValidationPlan(recorded, answer, Knobs(batch_size=32), 1, 1, tmp_path, base)
    assert plan.in_trainer
    threads = torch.get_num_threads()
    v = trainer_validation(plan, steps=5, rounds=3)
    # answer, baseline, answer, ...: each on the threads its own trial trained with; the
    # first round of each side warms the process up and is not counted
    assert recorded.calls == [(32, 5, 1), (8, 5, 2)] * 4
    assert torch.get_num_threads() == threads                 # put back
    assert v.answer_samples_per_sec == [3203.0, 3205.0, 3207.0]
    assert v.baseline_samples_per_sec == [804.0, 806.0, 808.0]
    assert v.ratio == pytest.approx(3205.0 / 400.0)
    assert v.speedup == pytest.approx(3205.0 / 806.0)
    assert v.round_speedups == pytest.approx([3203 / 804, 3205 / 806, 3207 / 808])
    assert v.trial_speedup == pytest.approx(4.0)


def test_the_baseline_figure_is_its_re_measured_rounds_geometric_mean_as_best_reads_it():
    from tuner.checks import _baseline_row
    rows = [row(0, knobs=Knobs(batch_size=8), sps=68.9, reference="baseline"),
            row(1, knobs=Knobs(batch_size=64), sps=7000.0),
            row(2, knobs=Knobs(batch_size=8), sps=75.4, reference="baseline",
                phase="remeasure"),
            row(3, knobs=Knobs(batch_size=8), sps=138.4, reference="baseline",
                phase="remeasure"),
            row(4, knobs=Knobs(batch_size=8), sps=500.0, reference="baseline", run="run-b")]
    base = _baseline_row(rows, rows[1])
    assert base["trial_id"] == "run-a-3"
    assert base["samples_per_sec"] == pytest.approx(math.sqrt(75.4 * 138.4))
    assert _baseline_row(rows[:2], rows[1])["samples_per_sec"] == pytest.approx(68.9)
    assert _baseline_row(rows[1:2], rows[1]) is None


def test_the_validate_command_runs_lightnings_trainer_against_the_trials(tmp_path,
                                                                         tuner_cache):
    leaderboard.append(tmp_path, [
        row(0, knobs=Knobs(batch_size=8), sps=2000.0, reference="baseline",
            workload=workload.name),
        row(1, knobs=Knobs(batch_size=16, amp="bf16"), sps=3000.0, workload=workload.name)])
    proc = tuner_in_process("validate", "--workload", LIT, "--results", str(tmp_path),
                            "--steps", "4", "--trial", "run-a-1")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "validating trial run-a-1" in out
    assert "litregressor: Lightning Trainer.fit() vs the trial" in out
    assert "predicted (trial median)" in out and "3,000.0" in out
    assert "measured in the trainer (median of 3 rounds, 4 steps each)" in out
    ratio = float(out.split("measured ÷ predicted")[1].split()[1])
    assert ratio > 0
    speedup = out.split("speed-up over the baseline in the trainer")[1].split("│")[1].strip()
    assert speedup.endswith("x") and float(speedup[:-1]) > 0
    assert "speed-up over the baseline in the trials" in out and "1.50x" in out
    rounds = out.split("rounds in order (answer / baseline samples/sec):")[1].split("\n")[0]
    assert len(rounds.split(";")) == 3 and rounds.count("/") == 3


@pytest.mark.parametrize("path", ["cache", "device"])
def test_the_lightning_answer_of_a_cache_or_device_path_fits_as_printed(path, tmp_path,
                                                                         monkeypatch):
    """The 'cache' path prints a DataLoader over ``tuner.data.CachedDataset``, the 'device'
    path ``tuner.data.DeviceBatches`` (an iterable Lightning fits); both from the lines
    printed, with ``workload.sample_path`` a user's split of the sample path."""
    from types import SimpleNamespace
    g = torch.Generator().manual_seed(0)
    decoded = TensorDataset(torch.randn(SAMPLES, FEATURES, generator=g),
                            torch.randn(SAMPLES, generator=g))
    split = SimpleNamespace(decoded=decoded, augment=lambda s: s, augment_batch=lambda b: b)
    knobs = Knobs(batch_size=8, data_path=path)
    text = format_answer(knobs, ["tuner best for x"], device="cpu", scale="tiny")
    monkeypatch.chdir(tmp_path)  # the printed Trainer logs to ./lightning_logs
    code, fit, _ = text.partition("trainer.fit(")
    ns = {"model": LitRegressor(returns="tensor"), "data_dir": "unused",
          "workload": SimpleNamespace(sample_path=lambda data_dir, scale: split)}
    exec(compile(code, "best-lightning.py", "exec"), ns)
    loader = ns["train_loader"]
    assert len(loader) == SAMPLES // 8
    ns["trainer"].fit_loop.epoch_loop.max_steps = 3
    ns["trainer"].fit(ns["model"], train_dataloaders=loader)
    assert ns["trainer"].global_step == 3
