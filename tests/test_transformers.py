"""The Transformers adapter (tuner.integrations.transformers) and the answer as TrainingArguments
(tuner.integrations.transformers_args): a Trainer becomes a Workload whose model, data,
collator, loss and optimizer are the Trainer's, its baseline the TrainingArguments as written;
the answer builds real TrainingArguments; ``trainer_samples_per_sec`` trains in
``Trainer.train()``.

The Trainer below is importable as ``tests.test_transformers:trainer`` (tests/ is a package),
so Ray's workers import it by that path, as they would a user's module. Models are built from
configs (nothing is downloaded); the text is the repository's LICENSE, as bytes.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ray import cloudpickle
from torch.utils.data import DataLoader, IterableDataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from tuner.errors import TunerError
from tuner.integrations.transformers import (
    TransformersWorkload,
    from_transformers,
    trainer_args,
)
from tuner.integrations.transformers_args import format_answer, training_arguments
from tuner.knobs import Knobs
from tuner.option_checks import make_plan
from tuner.settings import RunOptions

REPO_ROOT = Path(__file__).resolve().parent.parent
BLOCK = 16
LOSS_CALLS: list[str] = []
"""Every call of ``ScaledLossTrainer.compute_loss``, by the ``id`` of the Trainer."""


class ByteWindows(torch.utils.data.Dataset):
    """Every BLOCK-byte window of the repository's LICENSE: ``{"input_ids": (BLOCK,)}``."""

    def __init__(self):
        data = (REPO_ROOT / "LICENSE").read_bytes()
        self.data = torch.frombuffer(bytearray(data), dtype=torch.uint8)

    def __len__(self):
        return len(self.data) - BLOCK

    def __getitem__(self, i):
        return {"input_ids": self.data[i:i + BLOCK].long()}


def collate(samples):
    """A user's collator: stacks ``input_ids`` and copies them to ``labels``."""
    ids = torch.stack([s["input_ids"] for s in samples])
    return {"input_ids": ids, "labels": ids.clone()}


class ScaledLossTrainer(Trainer):
    """A Trainer whose ``compute_loss`` override triples the model's loss."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        LOSS_CALLS.append(str(id(self)))
        outputs = model(**inputs)
        loss = 3.0 * outputs.loss
        return (loss, outputs) if return_outputs else loss


def tiny_model() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=256,
                                      n_positions=BLOCK, bos_token_id=0, eos_token_id=0))


def make_trainer(cls=Trainer, dataset="bytes", **arguments) -> Trainer:
    args = TrainingArguments(output_dir="unused-output", report_to="none",
                             **{"per_device_train_batch_size": 8, **arguments})
    return cls(model=tiny_model(), args=args, data_collator=collate,
               train_dataset=ByteWindows() if dataset == "bytes" else dataset)


trainer = make_trainer(ScaledLossTrainer, learning_rate=1e-3, weight_decay=0.05)


def one_batch(w: TransformersWorkload, n: int = 4) -> dict:
    return next(iter(DataLoader(w.build_dataset(Path(), "tiny"), batch_size=n,
                                collate_fn=w.collate_fn())))


# ------------------------------------------------------------------------ the workload


def test_the_loss_is_the_trainers_compute_loss_override_on_the_users_collated_batch():
    w = from_transformers(trainer)
    model = w.build_model("tiny").eval()  # no dropout: two forward passes agree
    batch = one_batch(w)
    assert type(batch) is dict and torch.equal(batch["labels"], batch["input_ids"])
    before = len(LOSS_CALLS)
    loss = w.training_step(model, batch)
    assert len(LOSS_CALLS) == before + 1
    assert torch.allclose(loss, 3.0 * model(**batch).loss)
    assert w.samples_in(batch) == 4


def test_each_model_is_a_fresh_copy_on_the_cpu_and_the_trainer_is_left_as_it_was():
    w = from_transformers(trainer)
    a, b = w.build_model("tiny"), w.build_model("tiny")
    assert a is not trainer.model and a is not b
    assert torch.equal(a.transformer.wte.weight, trainer.model.transformer.wte.weight)
    assert a.transformer.wte.weight.device.type == "cpu"
    assert trainer.train_dataset is not None and trainer.model is not None


def test_the_baseline_is_the_training_arguments_as_written():
    w = from_transformers(make_trainer())
    # Transformers 5's defaults: pinned memory, fused AdamW
    assert w.baseline == Knobs(batch_size=8, pin_memory=True, fused_optimizer=True)
    assert w.name == "gpt2lmheadmodel" and w.space_name == "transformers"
    assert w.units_per_sample("tiny") == {"tokens": BLOCK}  # a causal LM, one sample length
    assert w.sample_shape("tiny") == {"input_ids": [BLOCK]}
    mine = from_transformers(make_trainer(
        per_device_train_batch_size=4, gradient_accumulation_steps=2, dataloader_num_workers=2,
        dataloader_prefetch_factor=3, dataloader_persistent_workers=True,
        dataloader_pin_memory=False, bf16=True, use_cpu=True, optim="adamw_torch",
        torch_compile=True, torch_compile_mode="max-autotune"), name="mine")
    assert mine.baseline == Knobs(batch_size=4, grad_accum=2, num_workers=2, prefetch_factor=3,
                                  persistent_workers=True, amp="bf16", compile="max-autotune")
    assert mine.name == "mine"


def test_the_optimizer_is_the_trainers_adamw_with_its_decay_groups_and_clipping():
    w = from_transformers(trainer)
    model = w.build_model("tiny")
    optimizer = w.build_optimizer(model.parameters(), fused=False)
    assert type(optimizer) is torch.optim.AdamW
    decay, no_decay = optimizer.param_groups
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    assert all(g["lr"] == 1e-3 and not g["fused"] for g in optimizer.param_groups)
    names = {id(p): n for n, p in model.named_parameters()}
    assert all("bias" in names[id(p)] or "ln_" in names[id(p)] for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    fused = w.build_optimizer(model.parameters(), fused=True)
    assert all(g["fused"] for g in fused.param_groups)
    for p in model.parameters():
        p.grad = torch.full_like(p, 10.0)  # far above max_grad_norm=1.0
    fused.step()  # the pre-hook clips first, as the Trainer does
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert norm.item() == pytest.approx(1.0, rel=1e-4)


def test_another_optim_is_kept_as_given_and_searched_without_fused():
    from tuner.space import load_space
    w = from_transformers(make_trainer(optim="sgd", learning_rate=0.1))
    assert w.space_name == "transformers-own-optim"
    model = w.build_model("tiny")
    optimizer = w.build_optimizer(model.parameters(), fused=True)
    assert type(optimizer) is torch.optim.SGD and not optimizer.defaults.get("fused")
    assert w.baseline.fused_optimizer is False
    for name in ("transformers", "transformers-own-optim"):
        space = load_space(name).for_device("cpu", max_workers=2)
        space.project(w.baseline.clamp("cpu")[0])  # raises SpaceError outside the space
    assert "fused_optimizer" not in load_space("transformers-own-optim").domains


def test_the_workload_survives_pickling_as_ray_sends_it():
    # A Trainer trained in this process first leaves weak references in Accelerate's shared
    # state, which the workload must not carry.
    from_transformers(trainer).trainer_samples_per_sec(Knobs(batch_size=2), steps=2,
                                                       device="cpu", scale="tiny")
    w = from_transformers(trainer)
    copy = cloudpickle.loads(cloudpickle.dumps(w))
    assert isinstance(copy, TransformersWorkload) and copy.baseline == w.baseline
    model = copy.build_model("tiny").eval()
    batch = one_batch(copy)
    assert torch.allclose(copy.training_step(model, batch), 3.0 * model(**batch).loss)


class Stream(IterableDataset):
    def __iter__(self):
        yield from ({"input_ids": torch.zeros(BLOCK, dtype=torch.long)} for _ in range(4))


def _with(**attributes):
    made = make_trainer()
    for name, value in attributes.items():
        setattr(made.args, name, value)
    return made


def _with_optimizer():
    made = make_trainer()
    made.optimizer = torch.optim.SGD(made.model.parameters(), lr=0.1)
    return made


@pytest.mark.parametrize("make, message", [
    (lambda: make_trainer(dataset=None), r"the Trainer has no train_dataset"),
    (lambda: make_trainer(dataset=Stream(), max_steps=10), r"trains on an IterableDataset"),
    (lambda: _with(deepspeed="ds_config.json"), r"uses DeepSpeed \(args.deepspeed\)"),
    (lambda: _with(fsdp=["full_shard"]), r"uses FSDP \(args.fsdp\)"),
    (_with_optimizer, r"was given optimizers=\(optimizer, scheduler\)"),
    (lambda: make_trainer(gradient_checkpointing=True), r"activation \(gradient\) checkpointing"),
    (lambda: make_trainer(torch_compile=True, torch_compile_backend="eager"),
     r"compiles with backend 'eager'; tuner compiles with inductor"),
    (lambda: make_trainer(optim="lomo"), r"optim 'lomo'"),
    (lambda: object(), r"a object is not a transformers.Trainer"),
])
def test_what_is_not_supported_is_one_tuner_error(make, message):
    try:
        made = make()
    except (ImportError, ValueError) as exc:  # an optional package the optim needs is absent
        pytest.skip(f"Transformers refused the Trainer itself: {exc}")
    with pytest.raises(TunerError, match=message) as caught:
        from_transformers(made)
    assert "\n" not in str(caught.value)


def test_data_is_the_trainers_so_a_data_flag_is_refused(tmp_path, tuner_cache):
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(TunerError, match=r"--data .*: workload gpt2lmheadmodel takes its data "
                       r"from the Trainer's train_dataset; leave out --data"):
        make_plan(RunOptions(workload="tests.test_transformers:trainer", device="cpu",
                             data=str(tmp_path), results=str(tmp_path / "results")))


def test_the_loader_wraps_a_trainer_and_imports_transformers_for_nothing_else():
    from tuner.workload_loader import resolve
    w = resolve("tests.test_transformers:trainer")
    assert isinstance(w, TransformersWorkload) and w.baseline.batch_size == 8
    assert w.check_data(w.prepare_default_data(_cache(), "tiny"), "tiny") == len(ByteWindows())
    code = ("import sys; from tuner.workload_loader import resolve; "
            "w = resolve('tests.fake_workloads:regression'); "
            "print(w.name, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO_ROOT, check=True).stdout.split()
    assert out == ["fake-regression", "False"]


def _cache() -> Path:
    from tuner.settings import default_cache_dir
    return default_cache_dir() / "data"


def test_the_docs_example_is_the_bench_module():
    """docs/transformers.md's hf_gpt2.py is bench/hf_gpt2.py, which the measurements ran."""
    from tests.test_readme_examples import documented_examples
    example = documented_examples()["hf_gpt2.py"]
    assert example.code == (REPO_ROOT / "bench" / "hf_gpt2.py").read_text(encoding="utf-8")


# ------------------------------------------------------------- in the Trainer itself


def test_trainer_samples_per_sec_trains_the_users_trainer_class_and_gives_a_rate():
    w = from_transformers(trainer)
    before = len(LOSS_CALLS)
    rate = w.trainer_samples_per_sec(Knobs(batch_size=4, grad_accum=2), steps=3, device="cpu",
                                     scale="tiny")
    assert rate is not None and math.isfinite(rate) and rate > 0
    assert len(LOSS_CALLS) - before == 3 * 2  # the override, each micro-batch of each step
    with pytest.raises(TunerError, match=r"steps=1; needs at least 2"):
        w.trainer_samples_per_sec(w.baseline, steps=1, device="cpu", scale="tiny")


def test_trainer_args_are_the_users_with_the_knobs_and_a_short_quiet_run(tmp_path):
    args = make_trainer(dataloader_num_workers=2, dataloader_prefetch_factor=4,
                        torch_compile=True, torch_compile_mode="max-autotune",
                        max_grad_norm=0.5).args
    out = trainer_args(args, Knobs(batch_size=16, grad_accum=3), device="cpu", steps=7,
                       output_dir=str(tmp_path))
    assert (out.per_device_train_batch_size, out.gradient_accumulation_steps) == (16, 3)
    assert out.dataloader_num_workers == 0 and out.dataloader_prefetch_factor is None
    assert out.torch_compile is False and out.torch_compile_mode is None
    assert out.max_steps == 7 and out.use_cpu and out.report_to in ([], "none", ["none"])
    assert out.save_strategy == "no" and out.dataloader_drop_last and out.max_grad_norm == 0.5
    assert out.optim == "adamw_torch" and out.output_dir == str(tmp_path)


# ------------------------------------------------------------------- the printed answer

ANSWERS = [
    Knobs(batch_size=8),
    Knobs(batch_size=64, grad_accum=4, num_workers=3, prefetch_factor=8,
          persistent_workers=True, fused_optimizer=True),
    Knobs(batch_size=32, amp="bf16"),
    Knobs(batch_size=16, compile="max-autotune", num_workers=1),
    Knobs(batch_size=128, pin_memory=True, non_blocking=True, tf32=True, amp="fp16",
          cudnn_benchmark=True, channels_last=True, compile="default"),
]


@pytest.mark.parametrize("knobs", ANSWERS, ids=lambda k: f"bs{k.batch_size}")
def test_training_arguments_build_real_training_arguments_on_the_cpu(knobs, tmp_path):
    kwargs = training_arguments(knobs, "cpu")
    args = TrainingArguments(output_dir=str(tmp_path), **kwargs)
    applied = knobs.clamp("cpu")[0]
    assert args.per_device_train_batch_size == applied.batch_size
    assert args.gradient_accumulation_steps == applied.grad_accum
    assert args.dataloader_num_workers == applied.num_workers
    assert args.dataloader_prefetch_factor == applied.prefetch_factor
    assert args.dataloader_persistent_workers == applied.persistent_workers
    assert args.bf16 == (applied.amp == "bf16") and not args.fp16  # fp16 is off on a CPU
    assert args.torch_compile == (applied.compile != "off")
    assert args.optim == ("adamw_torch_fused" if applied.fused_optimizer else "adamw_torch")
    assert "tf32" not in kwargs and not args.dataloader_pin_memory
    cuda = training_arguments(knobs, "cuda")
    assert cuda["tf32"] is knobs.tf32 and cuda["fp16"] is (knobs.amp == "fp16")
    if knobs.compile != "off":
        assert args.torch_compile_mode == knobs.compile


@pytest.mark.parametrize("knobs", ANSWERS, ids=lambda k: f"bs{k.batch_size}")
def test_the_printed_answer_runs_and_builds_the_training_arguments(knobs, tmp_path,
                                                                   monkeypatch):
    text = format_answer(knobs, ["workload gpt2lmheadmodel", "", "1.42x the baseline"])
    lines = text.splitlines()
    assert lines[:3] == ["# workload gpt2lmheadmodel", "#", "# 1.42x the baseline"]
    assert "args = TrainingArguments(" in text and text.endswith("\n")
    if knobs.amp == "bf16":  # TrainingArguments refuses bf16 on a machine without a GPU
        assert "add use_cpu=True" in text
        text = text.replace('output_dir="out",', 'output_dir="out", use_cpu=True,')
    if knobs.tf32 and not torch.cuda.is_available():  # refused without an Ampere GPU
        assert "    tf32=True,\n" in text
        text = text.replace("    tf32=True,\n", "    tf32=False,\n")
    monkeypatch.chdir(tmp_path)
    namespace = {"model": torch.nn.Conv2d(3, 4, 3)}
    saved = torch.backends.cudnn.benchmark
    try:
        exec(text, namespace)
        assert torch.backends.cudnn.benchmark is (knobs.cudnn_benchmark or saved)
    finally:
        torch.backends.cudnn.benchmark = saved
    args = namespace["args"]
    assert args.per_device_train_batch_size == knobs.batch_size
    assert args.gradient_accumulation_steps == knobs.grad_accum
    assert args.optim == ("adamw_torch_fused" if knobs.fused_optimizer else "adamw_torch")
    if knobs.channels_last:
        weight = namespace["model"].weight
        assert weight.is_contiguous(memory_format=torch.channels_last)
    if knobs.non_blocking:
        assert args.accelerator_config.non_blocking is True


def test_a_knob_without_a_training_arguments_field_says_so():
    text = format_answer(Knobs(batch_size=8, data_path="cache", gradient_as_bucket_view=True),
                         [])
    assert "# data_path=cache: no Trainer equivalent" in text
    assert "# gradient_as_bucket_view=true: no TrainingArguments field" in text
    assert "import torch" not in text  # nothing needs it


# ------------------------------------------------------------------------------ through Ray

@pytest.mark.slow
def test_a_trainer_tunes_through_tuner_tune_into_leaderboard_rows(tmp_path, tuner_cache,
                                                              ray_session):
    import tuner
    summary = tuner.tune(from_transformers(trainer), trials=2, device="cpu",
                         results=str(tmp_path / "results"), progress=False, windows=2,
                         window_s=0.2, warmup_steps=1, confirm=0, ceiling=False,
                         early_stop=False, global_batch_size=16)
    rows = summary.rows
    assert summary.workload == "gpt2lmheadmodel" and len(rows) == 2
    assert [r["status"] for r in rows] == ["ok", "ok"], [r["error"] for r in rows]
    assert all(r["samples_per_sec"] > 0 and r["final_loss"] > 0 for r in rows)
    assert all(r["batch_size"] * r["grad_accum"] == 16 for r in rows)  # the global batch held
    assert rows[0]["reference"] == "baseline" and rows[0]["batch_size"] == 8
    assert rows[0]["tokens_per_sec"] == pytest.approx(rows[0]["samples_per_sec"] * BLOCK)


def test_the_docs_show_what_format_answer_prints_for_the_measured_answer():
    """docs/transformers.md's printed answer is format_answer's text for the run it quotes."""
    page = (REPO_ROOT / "docs" / "transformers.md").read_text(encoding="utf-8")
    shown = page.split("```text\n", 1)[1].split("```\n", 1)[0]
    knobs = Knobs(batch_size=617, num_workers=2, prefetch_factor=3, amp="bf16",
                  fused_optimizer=True)
    header = [line[2:] for line in shown.splitlines()[:2]]  # '# ...' lines
    assert shown == format_answer(knobs, header)
