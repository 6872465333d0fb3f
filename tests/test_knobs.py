"""Knobs: validation names the knob and what is accepted, device clamping is recorded, and the
paste-ready Python compiles."""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader

from tuner.knobs import Knobs


@pytest.mark.parametrize("changes, knob, accepted", [
    ({"batch_size": 0}, "batch_size", ">= 1"),
    ({"batch_size": 2.5}, "batch_size", "integer"),
    ({"batch_size": True}, "batch_size", "integer"),
    ({"grad_accum": 0}, "grad_accum", ">= 1"),
    ({"num_workers": -1}, "num_workers", ">= 0"),
    ({"num_workers": 2, "prefetch_factor": 0}, "prefetch_factor", "1..64"),
    ({"num_workers": 2, "prefetch_factor": 65}, "prefetch_factor", "1..64"),
    ({"amp": "fp32"}, "amp", "off, fp16, bf16"),
    ({"amp": False}, "amp", "off, fp16, bf16"),
    ({"compile": "fast"}, "compile", "off, default, reduce-overhead, max-autotune"),
    ({"pin_memory": "yes"}, "pin_memory", "true or false"),
    ({"channels_last": 1}, "channels_last", "true or false"),
    ({"tf32": None}, "tf32", "true or false"),
])
def test_invalid_value_names_knob_and_accepted_values(changes, knob, accepted):
    kwargs = {"batch_size": 8, **changes}
    with pytest.raises(ValueError) as info:
        Knobs(**kwargs)
    message = str(info.value)
    assert f"knob {knob}=" in message
    assert accepted in message


@pytest.mark.parametrize("changes, knob", [
    ({"prefetch_factor": 2}, "prefetch_factor"),
    ({"persistent_workers": True}, "persistent_workers"),
])
def test_worker_knobs_need_workers(changes, knob):
    with pytest.raises(ValueError, match=rf"{knob}.*needs num_workers > 0"):
        Knobs(batch_size=8, num_workers=0, **changes)


def test_prefetch_default_recorded_with_workers():
    assert Knobs(batch_size=8, num_workers=2).prefetch_factor == 2   # torch's default, explicit
    assert Knobs(batch_size=8, num_workers=2, prefetch_factor=4).prefetch_factor == 4
    assert Knobs(batch_size=8).prefetch_factor is None


def test_knobs_are_frozen():
    with pytest.raises(AttributeError):
        Knobs(batch_size=8).batch_size = 16  # type: ignore[misc]


CUDA_ONLY = Knobs(batch_size=8, num_workers=2, pin_memory=True, non_blocking=True,
                  cudnn_benchmark=True, tf32=True, amp="fp16", compile="reduce-overhead",
                  channels_last=True, fused_optimizer=True)


def test_clamp_on_cpu_turns_off_cuda_only_knobs_with_a_note_each():
    applied, notes = CUDA_ONLY.clamp("cpu")
    assert (applied.pin_memory, applied.non_blocking, applied.cudnn_benchmark,
            applied.tf32) == (False, False, False, False)
    assert applied.amp == "off"
    assert applied.compile == "default"
    assert sorted(notes) == sorted([
        "pin_memory: true -> false (cpu)",
        "non_blocking: true -> false (cpu)",
        "cudnn_benchmark: true -> false (cpu)",
        "tf32: true -> false (cpu)",
        "amp: fp16 -> off (cpu)",
        "compile: reduce-overhead -> default (cpu)",
    ])
    # Everything the CPU can honour is kept as asked.
    assert applied.replace(pin_memory=True, non_blocking=True, cudnn_benchmark=True, tf32=True,
                           amp="fp16", compile="reduce-overhead") == CUDA_ONLY


def test_clamp_on_cpu_keeps_what_cpu_honours_without_notes():
    knobs = Knobs(batch_size=8, amp="bf16", compile="max-autotune", channels_last=True)
    applied, notes = knobs.clamp("cpu")
    assert applied == knobs
    assert notes == []


def test_clamp_on_cuda_without_bf16_falls_back_to_fp16():
    knobs = Knobs(batch_size=8, amp="bf16", pin_memory=True, tf32=True)
    applied, notes = knobs.clamp("cuda", bf16_supported=False)
    assert applied == knobs.replace(amp="fp16")
    assert notes == ["amp: bf16 -> fp16 (cuda)"]
    assert knobs.clamp("cuda", bf16_supported=True) == (knobs, [])
    assert CUDA_ONLY.clamp("cuda") == (CUDA_ONLY, [])


def test_clamp_rejects_unknown_device():
    with pytest.raises(ValueError, match="'tpu'.*cpu, cuda"):
        Knobs(batch_size=8).clamp("tpu")


def test_from_dict_strict_names_unknown_keys():
    with pytest.raises(ValueError) as info:
        Knobs.from_dict({"batch_size": 8, "batchsize": 4, "workers": 2})
    message = str(info.value)
    assert "batchsize" in message and "workers" in message
    assert "batch_size" in message.split("accepted:")[1]   # lists what is accepted


def test_from_dict_lenient_ignores_other_keys():
    config = {"batch_size": 8, "num_workers": 1, "reference": "baseline", "tuner": {"x": 1}}
    assert Knobs.from_dict(config, strict=False) == Knobs(batch_size=8, num_workers=1)


def test_from_dict_requires_batch_size():
    with pytest.raises(ValueError, match="batch_size is required"):
        Knobs.from_dict({"num_workers": 1})


def test_from_dict_round_trips_to_dict():
    assert Knobs.from_dict(CUDA_ONLY.to_dict()) == CUDA_ONLY
    assert tuple(CUDA_ONLY.to_dict()) == Knobs.names()


def test_dataloader_kwargs_without_workers_leave_worker_options_out():
    kwargs = Knobs(batch_size=8, pin_memory=True).dataloader_kwargs()
    assert kwargs == {"batch_size": 8, "num_workers": 0, "pin_memory": True}
    DataLoader(list(range(16)), **kwargs)   # torch accepts them


def test_dataloader_kwargs_with_workers():
    kwargs = Knobs(batch_size=8, num_workers=2, prefetch_factor=4,
                   persistent_workers=True).dataloader_kwargs()
    assert kwargs == {"batch_size": 8, "num_workers": 2, "pin_memory": False,
                      "prefetch_factor": 4, "persistent_workers": True}
    DataLoader(list(range(16)), **kwargs)


@pytest.mark.parametrize("knobs, device", [
    (Knobs(batch_size=8), "cpu"),
    (Knobs(batch_size=8), "cuda"),
    (CUDA_ONLY, "cuda"),
    (Knobs(batch_size=32, grad_accum=4, num_workers=3, prefetch_factor=8, amp="bf16",
           compile="default", persistent_workers=True), "cuda"),
    (Knobs(batch_size=16, grad_accum=2, amp="fp16", compile="max-autotune"), "cuda"),
    (Knobs(batch_size=16, amp="bf16", channels_last=True), "cpu"),
])
def test_to_python_compiles_and_carries_the_dataloader_kwargs(knobs, device):
    src = knobs.to_python(device=device)
    compile(src, "x", "exec")
    for name, value in knobs.dataloader_kwargs().items():
        assert f"{name}={value!r}" in src
    assert f"{device!r}" in src
    if knobs.amp != "off":
        assert "torch.autocast" in src
    if knobs.amp == "fp16":
        assert "GradScaler" in src
    if knobs.compile != "off":
        assert "torch.compile" in src
    if knobs.fused_optimizer:
        assert "fused=True" in src


def test_every_knob_carries_its_facts_and_every_table_is_derived_from_them():
    from dataclasses import fields

    import pyarrow as pa

    from tuner import knobs as k
    from tuner import leaderboard
    arrow = {"int": pa.int32(), "bool": pa.bool_(), "choice": pa.string()}
    for f in fields(Knobs):
        info = f.metadata.get("knob")
        assert isinstance(info, k.KnobInfo), f"Knobs.{f.name} has no KnobInfo metadata"
        assert leaderboard.SCHEMA.field(f.name).type == arrow[info.kind]
    assert set(k.WORKER_KNOBS) == {n for n, i in k.KNOB_INFO.items() if i.needs_workers}
    assert "amp" in k.CHOICE_KNOBS and k.CHOICE_KNOBS["amp"] == k.AMP_MODES
    shorts = [i.short for i in k.KNOB_INFO.values()]
    assert len(set(shorts)) == len(shorts), "two knobs share a short name in knob_text"


def test_knob_text_names_every_knob_set_away_from_its_default():
    from tuner.knobs import knob_text
    every = Knobs(batch_size=32, grad_accum=2, num_workers=2, prefetch_factor=4, pin_memory=True,
                  persistent_workers=True, non_blocking=True, amp="bf16", channels_last=True,
                  compile="default", cudnn_benchmark=True, tf32=True, fused_optimizer=True)
    assert knob_text(every.to_dict()) == ("bs=32 acc=2 nw=2 pf=4 pin pw nb amp=bf16 cl "
                                          "compile=default cudnn tf32 fused")
    assert knob_text(Knobs(batch_size=8).to_dict()) == "bs=8 nw=0"  # workers are always shown


def test_cpu_clamp_follows_the_knob_table():
    every = Knobs(batch_size=8, num_workers=1, pin_memory=True, non_blocking=True, amp="fp16",
                  compile="reduce-overhead", cudnn_benchmark=True, tf32=True)
    applied, notes = every.clamp("cpu")
    assert applied == Knobs(batch_size=8, num_workers=1, amp="off", compile="default")
    assert len(notes) == 6 and "amp: fp16 -> off (cpu)" in notes
    assert Knobs(batch_size=8, amp="bf16").clamp("cpu") == (Knobs(batch_size=8, amp="bf16"), [])


def test_the_ddp_domains_and_the_device_paths_refused_knobs_are_knob_facts():
    """What a data-parallel run samples and which knobs the 'device' data path does not use
    are each knob's metadata; the search space derives its tables from them."""
    import dataclasses

    from tuner.knobs import DDP_KNOBS, DDP_VALUES, DEVICE_PATH_REFUSED, KNOB_INFO, KnobInfo
    from tuner.space import DDP_DOMAINS, DEVICE_PATH_NO, Choices
    assert DDP_VALUES == {"ddp_bucket_cap_mb": (25, 50, 100, 200),
                          "gradient_as_bucket_view": (False, True),
                          "static_graph": (False, True)}
    assert set(DDP_VALUES) == set(DDP_KNOBS)
    assert DDP_DOMAINS == {name: Choices(values) for name, values in DDP_VALUES.items()}
    assert set(DEVICE_PATH_REFUSED) == {"num_workers", "pin_memory", "prefetch_factor",
                                        "persistent_workers"} == set(DEVICE_PATH_NO)
    with pytest.raises(ValueError, match="ddp_values"):
        dataclasses.replace(KNOB_INFO["amp"], ddp_values=("bf16",))
    with pytest.raises(ValueError, match="ddp_values"):
        KnobInfo(short="x", kind="bool", memory="none", data_parallel=True)
