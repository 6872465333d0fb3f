"""Search spaces: YAML validation (every error names the file, the knob and what is wrong), the
per-device space, references projected into it, and the conditional define-by-run sampler."""

from __future__ import annotations

import os
import textwrap

import optuna
import pytest

from tuner.errors import SpaceError
from tuner.knobs import Knobs
from tuner.space import Choices, IntRange, Space, load_space, parse_space
from tuner.workload_loader import available, resolve

optuna.logging.set_verbosity(optuna.logging.WARNING)

SOURCE = "my-space.yaml"

VALID = """
description: a space for the tests
knobs:
  batch_size: {low: 4, high: 256, log: true}
  grad_accum: 2
  num_workers: {low: 0, high: 8}
  prefetch_factor: {choices: [1, 2, 4, 8]}
  persistent_workers: {choices: [false, true]}
  pin_memory: {choices: [false, true]}
  non_blocking: true
  amp: {choices: ["off", fp16, bf16]}
  compile: {choices: ["off", default, reduce-overhead]}
  cudnn_benchmark: {choices: [false, true]}
  tf32: {choices: [false, true]}
  channels_last: false
cpu:
  batch_size: {low: 2, high: 32, step: 2}
cuda:
  compile: max-autotune
"""


def parse(text: str) -> Space:
    return parse_space(textwrap.dedent(text), SOURCE)


def space_error(text: str) -> str:
    with pytest.raises(SpaceError) as info:
        parse(text)
    message = str(info.value)
    assert SOURCE in message          # every error names the file
    assert "\n" not in message        # and fits on one line
    return message


def test_valid_file_parses_domains_constants_and_overrides():
    space = parse(VALID)
    assert space.source == SOURCE
    assert space.domains["batch_size"] == IntRange(4, 256, log=True)
    assert space.domains["num_workers"] == IntRange(0, 8)
    assert space.domains["prefetch_factor"] == Choices((1, 2, 4, 8))
    assert space.domains["amp"] == Choices(("off", "fp16", "bf16"))
    assert space.constants == {"grad_accum": 2, "non_blocking": True, "channels_last": False}
    assert set(space.overrides) == {"cpu", "cuda"}
    cpu_domains, cpu_constants = space.overrides["cpu"]
    assert cpu_domains == {"batch_size": IntRange(2, 32, step=2)} and cpu_constants == {}
    cuda_domains, cuda_constants = space.overrides["cuda"]
    assert cuda_domains == {} and cuda_constants == {"compile": "max-autotune"}


@pytest.mark.parametrize("text, expected", [
    ("knobs: [batch_size: {low: 4", "malformed YAML"),
    ("knobs:\n  batch_size: {low: 4, high: 8\n", "malformed YAML"),
    ("knobs:\n\tbatch_size: 8\n", "malformed YAML"),
    ("- just\n- a list\n", "non-empty 'knobs:' mapping"),
    ("knobs: {}\n", "non-empty 'knobs:' mapping"),
    ("knobs:\n  num_workers: 2\n", "batch_size must be given"),
    ("knobs:\n  batch_size: 8\nsearch: tpe\n", "unknown key(s) search"),
    ("knobs:\n  batch_size: 8\n  batchsize: {low: 1, high: 4}\n", "unknown knob 'batchsize'"),
    ("knobs:\n  batch_size: 8\ncpu:\n  workers: 2\n", "unknown knob 'workers' under 'cpu:'"),
    ("knobs:\n  batch_size: 8\ncuda: 4\n", "'cuda:' must map knobs"),
    ("knobs:\n  batch_size: {low: 64, high: 8}\n", "impossible range low=64 > high=8"),
    ("knobs:\n  batch_size: 8\n  num_workers: {low: 0, high: 4, log: true}\n",
     "log scale needs low >= 1"),
    ("knobs:\n  batch_size: {low: 4, high: 64, log: true, step: 2}\n", "step=2"),
    ("knobs:\n  batch_size: {low: 4, high: 64, step: 0}\n", "step=0"),
    ("knobs:\n  batch_size: {low: 4.5, high: 64}\n", "low=4.5 must be an integer"),
    ("knobs:\n  batch_size: {low: 4}\n", "a range is"),
    ("knobs:\n  batch_size: {low: 4, high: 8, scale: 2}\n", "a range is"),
    ("knobs:\n  batch_size: 8\n  amp: {low: 1, high: 2}\n", "needs an integer knob"),
    ("knobs:\n  batch_size: {choices: [8], low: 4}\n", "cannot be combined"),
    ("knobs:\n  batch_size: {choices: []}\n", "non-empty list"),
    ("knobs:\n  batch_size: {choices: 8}\n", "non-empty list"),
])
def test_malformed_space_is_rejected_with_the_reason(text, expected):
    assert expected in space_error(text)


@pytest.mark.parametrize("text, knob, value, accepted", [
    ("knobs:\n  batch_size: 8\n  amp: fp32\n", "amp", "fp32", "off, fp16, bf16"),
    ("knobs:\n  batch_size: 8\n  amp: {choices: [\"off\", fp32]}\n", "amp", "fp32",
     "off, fp16, bf16"),
    ("knobs:\n  batch_size: {choices: [0]}\n", "batch_size", "0", ">= 1"),
    ("knobs:\n  batch_size: {low: 0, high: 8}\n", "batch_size", "0", ">= 1"),
    ("knobs:\n  batch_size: 8\n  prefetch_factor: {choices: [2, 128]}\n", "prefetch_factor",
     "128", "1..64"),
    ("knobs:\n  batch_size: 8\n  pin_memory: {choices: [false, yes please]}\n", "pin_memory",
     "yes please", "true or false"),
])
def test_value_a_knob_does_not_accept_names_knob_value_and_accepted(text, knob, value, accepted):
    message = space_error(text)
    assert f"knob {knob}" in message
    assert value in message
    assert accepted in message


def test_bare_off_is_normalised_to_the_string_off():
    space = parse("""
        knobs:
          batch_size: 8
          amp: off
          compile: {choices: [off, default]}
    """)
    assert space.constants["amp"] == "off"
    assert space.domains["compile"] == Choices(("off", "default"))


def test_device_override_sections_replace_the_base_knob():
    space = parse(VALID)
    cpu = space.for_device("cpu", max_workers=64)
    assert cpu.domains["batch_size"] == IntRange(2, 32, step=2)
    cuda = space.for_device("cuda", max_workers=64)
    assert cuda.domains["batch_size"] == IntRange(4, 256, log=True)
    assert "compile" not in cuda.domains                      # the cuda override holds it
    assert cuda.constants["compile"] == "max-autotune"
    assert cpu.domains["compile"] == Choices(("off", "default"))


def test_for_cpu_drops_cuda_only_knobs_and_values_and_caps_workers():
    cpu = parse(VALID).for_device("cpu", max_workers=2)
    for name in ("pin_memory", "non_blocking", "cudnn_benchmark", "tf32"):
        assert name not in cpu.domains and name not in cpu.constants
    assert cpu.domains["amp"] == Choices(("off", "bf16"))
    assert cpu.domains["compile"] == Choices(("off", "default"))
    assert cpu.domains["num_workers"] == IntRange(0, 2)
    assert cpu.constants == {"grad_accum": 2, "channels_last": False}


def test_for_cuda_keeps_everything_and_caps_workers():
    cuda = parse(VALID).for_device("cuda", max_workers=4)
    for name in ("pin_memory", "cudnn_benchmark", "tf32", "amp"):
        assert name in cuda.domains
    assert cuda.constants["non_blocking"] is True
    assert cuda.domains["amp"] == Choices(("off", "fp16", "bf16"))
    assert cuda.domains["num_workers"] == IntRange(0, 4)


def test_for_cpu_keeps_a_single_remaining_value_of_a_cuda_only_choice():
    """amp {fp16, bf16} on CPU is {bf16}: the search must not fall back to amp off, a value the
    space excludes."""
    space = parse("""
        knobs:
          batch_size: 8
          amp: {choices: [fp16, bf16]}
          compile: {choices: [reduce-overhead, max-autotune]}
    """)
    for config in _sample(space.for_device("cpu", max_workers=2), n=3):
        knobs = Knobs.from_dict(config)
        assert knobs.amp == "bf16"
        assert knobs.compile == "max-autotune"


def test_project_reference_into_the_space():
    cpu = parse(VALID).for_device("cpu", max_workers=2)
    params = cpu.project(Knobs(batch_size=8, num_workers=6, prefetch_factor=4, amp="bf16",
                               grad_accum=2))
    # num_workers above the node's CPUs is recorded at the cap; the trial runs it as written.
    assert params == {"batch_size": 8, "num_workers": 2, "prefetch_factor": 4,
                      "persistent_workers": False, "amp": "bf16", "compile": "off"}
    # Worker knobs are not part of a configuration without workers.
    assert "prefetch_factor" not in cpu.project(Knobs(batch_size=8))


@pytest.mark.parametrize("knobs, knob, value", [
    (Knobs(batch_size=3), "batch_size", "3"),            # off the step-2 grid of the cpu section
    (Knobs(batch_size=8, num_workers=1, prefetch_factor=16), "prefetch_factor", "16"),
    (Knobs(batch_size=8, compile="max-autotune"), "compile", "max-autotune"),
])
def test_project_reference_outside_the_space_names_knob_and_value(knobs, knob, value):
    cpu = parse(VALID).for_device("cpu", max_workers=2)
    with pytest.raises(SpaceError) as info:
        cpu.project(knobs)
    message = str(info.value)
    assert f"knob {knob}" in message
    assert f"reference value {value}" in message
    assert SOURCE in message


def test_unknown_builtin_space_and_unreadable_file(tmp_path):
    with pytest.raises(SpaceError,
                       match="no built-in search space tuner/workloads/spaces/nope.yaml"):
        load_space("nope")
    with pytest.raises(SpaceError, match="cannot read it"):
        load_space(tmp_path / "missing.yaml", is_file=True)


def test_load_space_from_file(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(textwrap.dedent(VALID))
    space = load_space(path, is_file=True)
    assert space.source == str(path)
    assert space.domains == parse(VALID).domains


BUILTIN = sorted(available())


def test_builtins_are_listed():
    assert {"ddpm", "chargpt"} <= set(BUILTIN)


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_space_loads(name):
    workload = resolve(name)
    space = load_space(workload.space_name)
    assert "batch_size" in space.domains or "batch_size" in space.constants


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name", [*BUILTIN, "tests.fake_workloads:regression"])
def test_builtin_references_project_into_their_space(name, device):
    workload = resolve(name)
    space = load_space(workload.space_name).for_device(device, max_workers=os.cpu_count() or 1)
    assert "baseline" in workload.references
    for ref, knobs in workload.references.items():
        applied, _ = knobs.clamp(device)
        params = space.project(applied)
        assert params["batch_size"] <= applied.batch_size
        assert set(params) <= set(space.domains)


def _sample(space: Space, n: int, seed: int = 0) -> list[dict]:
    """``n`` configurations as Ray Tune's OptunaSearch builds them: suggested params, then the
    sampler's constants over them."""
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=seed))
    sampler = space.sampler()
    configs = []
    for _ in range(n):
        trial = study.ask()
        constants = sampler(trial)
        configs.append({**trial.params, **constants})
        study.tell(trial, 1.0)
    return configs


def test_sampler_suggests_worker_knobs_only_with_workers():
    space = parse("""
        knobs:
          batch_size: {low: 4, high: 64, log: true}
          num_workers: {low: 0, high: 2}
          prefetch_factor: {choices: [1, 2, 4]}
          persistent_workers: {choices: [false, true]}
          amp: {choices: ["off", bf16]}
    """).for_device("cpu", max_workers=2)
    configs = _sample(space, n=40)
    without = [c for c in configs if c["num_workers"] == 0]
    with_workers = [c for c in configs if c["num_workers"] > 0]
    assert without and with_workers                      # both branches were sampled
    for config in without:
        assert "prefetch_factor" not in config and "persistent_workers" not in config
    for config in with_workers:
        assert config["prefetch_factor"] in (1, 2, 4)
        assert config["persistent_workers"] in (False, True)
    for config in configs:
        Knobs.from_dict(config)                          # every sample is a valid Knobs


def test_sampler_drops_constant_worker_knobs_without_workers():
    space = parse("""
        knobs:
          batch_size: 8
          num_workers: {low: 0, high: 1}
          prefetch_factor: 4
          persistent_workers: true
    """).for_device("cpu", max_workers=1)        # a 1-CPU node: num_workers in [0, 1]
    configs = _sample(space, n=12)
    assert {c["num_workers"] for c in configs} == {0, 1}
    for config in configs:
        knobs = Knobs.from_dict(config)
        if knobs.num_workers:
            assert (knobs.prefetch_factor, knobs.persistent_workers) == (4, True)


@pytest.mark.parametrize("name", [*BUILTIN, "tests.fake_workloads:regression"])
def test_every_sample_of_a_builtin_space_is_valid_knobs(name):
    space = load_space(resolve(name).space_name).for_device("cpu", max_workers=2)
    for config in _sample(space, n=10):
        Knobs.from_dict(config)


def test_bounds_follow_the_machine_not_the_space_file():
    """The YAML's ranges were written for someone else's machine: num_workers reaches the
    node's CPUs (up or down), batch_size follows the memory probe's bound (up or down); the
    low end, log scale and hand-written choice lists stay."""
    space = parse(VALID).for_device("cuda", max_workers=16)       # the file says high: 8
    assert space.domains["num_workers"] == IntRange(0, 16)
    assert parse(VALID).for_device("cuda", max_workers=3).domains["num_workers"] == IntRange(0, 3)
    wider = space.with_batch_high(1024)                            # the file says high: 256
    assert wider.domains["batch_size"] == IntRange(4, 1024, log=True)
    assert wider.with_batch_high(48).domains["batch_size"] == IntRange(4, 48, log=True)
    assert wider.domains["num_workers"] == space.domains["num_workers"]
    assert wider.bounds()["batch_size"] == "[4, 1024] log"
    picked = Space("s", {"batch_size": Choices((8, 32, 128))}, {}).with_batch_high(1024)
    assert picked.domains["batch_size"] == Choices((8, 32, 128))  # choices are only capped


def test_the_batch_sizes_a_space_allows_are_the_spaces_question():
    """``candidates`` lives with the space; the probe and the follow-ups read it there
    (``tuner.probe.candidates`` is the same function)."""
    import tuner.probe as probe
    from tuner.space import Choices, IntRange, Space, candidates
    assert candidates(Space("t", {"batch_size": Choices((64, 8, 32))}, {})) == [8, 32, 64]
    assert candidates(Space("t", {"batch_size": IntRange(8, 32, step=8)}, {})) == [8, 16, 24, 32]
    assert candidates(Space("t", {}, {"batch_size": 12})) == [12]
    assert probe.candidates is candidates
