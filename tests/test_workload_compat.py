"""A workload written for tuner 0.2 (scales 'tiny' and 'seed') runs unchanged: its methods get
'seed' for 'full', with one deprecation warning naming 'full' (tuner.workload_calls); the plan's
parameter count never builds the full-size model on the CPU; a workload method's error outside
a trial is one line and exit code 2, inside a trial the trial's error row, traceback kept.

Fast tests in this process (no Ray); one end-to-end run of the 0.2 module through
``python -m tuner run`` (slow: Ray)."""

from __future__ import annotations

import inspect
import os
import pickle
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.conftest import REPO_ROOT, tuner_in_process
from tuner.errors import TunerDeprecationWarning
from tuner.knobs import Knobs
from tuner.workload import Workload
from tuner.workload_calls import meta_parameter_count, user_error

OLD_MODULE = textwrap.dedent('''\
    """A workload as a user of tuner 0.2 wrote it, after its bring-your-own docstring."""
    from pathlib import Path

    import numpy as np
    import torch
    from torch import nn
    from torch.utils.data import Dataset

    from tuner.harness import make_trainable
    from tuner.knobs import Knobs
    from tuner.workload import Workload

    WIDTH = {"tiny": 8, "seed": 64}
    FILES = {"tiny": 16, "seed": 32}
    CALLS = []


    class Vectors(Dataset):
        def __init__(self, data_dir):
            self.files = sorted(Path(data_dir).glob("*.npy"))

        def __len__(self):
            return len(self.files)

        def __getitem__(self, i):
            v = np.load(self.files[i])
            return torch.from_numpy(v[:16]), torch.tensor(v[16])


    class OldWorkload(Workload):
        name = "old-workload"
        description = "an MLP of tuner 0.2"
        source = "tests"
        references = {"baseline": Knobs(batch_size=4)}
        space = str(Path(__file__).with_name("space.yaml"))

        def build_model(self, scale):
            CALLS.append(("build_model", scale, torch.empty(0).device.type))
            width = WIDTH[scale]
            return nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, 1))

        def build_dataset(self, data_dir, scale):
            CALLS.append(("build_dataset", scale))
            return Vectors(data_dir)

        def prepare_default_data(self, cache_dir, scale):
            CALLS.append(("prepare_default_data", scale))
            out = Path(cache_dir) / f"old-workload-{scale}"
            out.mkdir(parents=True, exist_ok=True)
            rng = np.random.default_rng(0)
            for i in range(FILES[scale]):
                np.save(out / f"{i}.npy", rng.standard_normal(17).astype("float32"))
            return out

        def training_step(self, model, batch):
            x, y = batch
            return ((model(x).squeeze(-1) - y) ** 2).mean()

        def sample_shape(self, scale):
            return {"x": [16]}

        def check_data(self, data_dir, scale):
            CALLS.append(("check_data", scale))
            assert len(self.build_dataset(data_dir, scale)) >= FILES[scale]
            return FILES[scale]

        def units_per_sample(self, scale):
            return {"features": {"tiny": 16, "seed": 16}[scale]}


    workload = OldWorkload()
    trainable = make_trainable(workload)
''')

SPACE = "knobs:\n  batch_size: {low: 4, high: 16, log: true}\n  num_workers: {choices: [0]}\n"
FULL_WARNING = "the scale word 'seed' in workload"


@pytest.fixture
def old_module(tmp_path, monkeypatch):
    """The tuner 0.2 module as ``<tmp>/oldwl.py``, imported afresh; (its spec, the module)."""
    (tmp_path / "oldwl.py").write_text(OLD_MODULE)
    (tmp_path / "space.yaml").write_text(SPACE)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "oldwl", raising=False)
    from tuner.workload_loader import resolve
    spec = f"{tmp_path}/oldwl.py:workload"
    with warnings.catch_warnings():  # its `from tuner.harness import make_trainable`
        warnings.simplefilter("ignore", TunerDeprecationWarning)
        resolve(spec)
    yield spec, sys.modules["oldwl"]
    sys.modules.pop("oldwl", None)


def _recorded(call):
    """``call()`` and the tuner deprecation warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = call()
    return value, [w for w in caught if issubclass(w.category, TunerDeprecationWarning)]


def test_a_tuner_0_2_workload_gets_seed_for_full_with_one_warning_at_its_method(old_module):
    spec, module = old_module
    w = module.workload
    model, caught = _recorded(lambda: w.build_model("full"))
    assert model[0].out_features == 64                       # the 'seed' size
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith(f"the scale word 'seed' in workload {spec!r} (build_model takes "
                              "'seed' and rejects 'full') was deprecated in tuner 0.3.0 and "
                              "will be removed in tuner 0.4.0; make its methods take 'full'")
    assert caught[0].filename == module.__file__              # at the user's method
    assert "def build_model" in open(module.__file__).read().splitlines()[caught[0].lineno - 1]
    # every other method and call: 'seed' where it needs it, no second warning
    (units, data, again), caught = _recorded(lambda: (
        w.units_per_sample("full"), w.prepare_default_data(Path(module.__file__).parent, "full"),
        w.build_model("full")))
    assert caught == [] and units == {"features": 16} and data.name == "old-workload-seed"
    assert again[0].out_features == 64
    assert ("build_model", "full", "cpu") in module.CALLS      # the one rejected call
    assert module.CALLS.count(("build_model", "seed", "cpu")) == 2
    # the tiny scale is the same word in both releases: passed as it is
    (tiny, caught) = _recorded(lambda: w.build_model("tiny"))
    assert tiny[0].out_features == 8 and caught == []


def test_its_own_methods_pass_the_word_tuner_gave_them_on_without_a_warning(old_module):
    _, module = old_module
    w = module.workload
    write = inspect.unwrap(type(w).prepare_default_data)       # its own code, no tuner between
    data = write(w, Path(module.__file__).parent, "seed")
    count, caught = _recorded(lambda: w.check_data(data, "full"))
    assert count == 32 and len(caught) == 1 and "(check_data takes 'seed'" in str(caught[0].message)
    assert ("build_dataset", "seed") in module.CALLS           # from check_data, as it was given


def test_a_caller_that_passes_seed_itself_is_warned_at_its_own_line(old_module):
    _, module = old_module
    model, caught = _recorded(lambda: module.workload.build_model("seed"))
    assert model[0].out_features == 64
    assert [str(w.message).split(" was ")[0] for w in caught] == [
        "scale 'seed'", f"the scale word 'seed' in workload {old_module[0]!r} (build_model takes "
        "'seed' and rejects 'full')"]
    assert caught[0].filename == __file__


def test_a_tiny_run_of_it_shows_its_full_size_from_the_meta_device_and_warns_once(old_module):
    from tuner.progress import _parameters_text
    _, module = old_module
    text, caught = _recorded(lambda: _parameters_text(module.workload, "tiny"))
    assert text == "145 parameters at tiny scale (1,153 at full)" and len(caught) == 1
    assert ("build_model", "seed", "meta") in module.CALLS
    assert not any(call[1:] in (("seed", "cpu"), ("full", "cpu")) for call in module.CALLS)


def test_the_choice_travels_with_the_pickled_workload_to_a_trial_process(old_module):
    _, module = old_module
    _recorded(lambda: module.workload.build_model("full"))
    copy = pickle.loads(pickle.dumps(module.workload))
    module.CALLS.clear()
    model, caught = _recorded(lambda: copy.build_model("full"))
    assert model[0].out_features == 64 and caught == []
    assert module.CALLS == [("build_model", "seed", "cpu")]    # no retry there


class Current(Workload):
    """A workload of tuner 0.3: 'full' and 'tiny'; records each build."""

    name = "current"
    description = source = "tests"
    references = {"baseline": Knobs(batch_size=4)}

    def __init__(self):
        self.calls = []

    def build_model(self, scale):
        self.calls.append((scale, torch.empty(0).device.type))
        width = {"tiny": 8, "full": 4096}[scale]
        return nn.Sequential(nn.Linear(16, width), nn.Linear(width, 1))

    def build_dataset(self, data_dir, scale):
        raise ZeroDivisionError("division by zero")

    def training_step(self, model, batch):
        raise NotImplementedError

    def sample_shape(self, scale):
        return {"x": [16]}


def test_a_current_workload_is_called_once_with_its_own_word_and_never_warned():
    w = Current()
    model, caught = _recorded(lambda: w.build_model("full"))
    assert model[0].out_features == 4096 and caught == [] and w.calls == [("full", "cpu")]


def test_a_full_error_that_seed_does_not_cure_stands_as_it_was_raised():
    class Broken(Current):
        def build_model(self, scale):
            self.calls.append((scale, "cpu"))
            raise KeyError(scale)

    w = Broken()
    with pytest.raises(KeyError, match="'full'") as info:
        _recorded(lambda: w.build_model("full"))
    assert w.calls == [("full", "cpu"), ("seed", "cpu")]      # tried once with the old word
    assert info.value.__context__ is None                      # no "during handling of ..."
    with pytest.raises(KeyError, match="'full'"):              # and again: nothing remembered
        w.build_model("full")


def test_the_parameter_count_shown_never_builds_the_full_model_on_the_cpu():
    from tuner.progress import _parameters_text
    w = Current()
    assert _parameters_text(w, "tiny") == "145 parameters at tiny scale (73,729 at full)"
    assert ("full", "cpu") not in w.calls and ("full", "meta") in w.calls

    class NotOnMeta(Current):  # reads a value at build time: no meta build, then no full
        def build_model(self, scale):
            torch.ones(1).item()
            return super().build_model(scale)

    w = NotOnMeta()
    assert _parameters_text(w, "tiny") == "145 parameters at tiny scale"
    assert w.calls == [("tiny", "cpu")]                        # the scale in use, on the CPU
    assert meta_parameter_count(w, "full") is None


def test_a_method_error_keeps_its_type_and_becomes_one_line_naming_method_scale_and_line():
    w = Current()
    with pytest.raises(ZeroDivisionError) as info:             # a trial sees what it raised
        w.check_data(Path("."), "tiny")
    line = str(user_error(info.value))
    assert line.startswith("workload 'current': build_dataset(scale='tiny') raised "
                           "ZeroDivisionError: division by zero at ")
    first = inspect.unwrap(Current.build_dataset).__code__.co_firstlineno
    assert line.endswith(f"{__file__}:{first + 1}")
    assert user_error(ZeroDivisionError("not a workload's")) is None


def test_profile_measures_it_at_full_and_says_so_once_in_one_line(old_module, tmp_path,
                                                                  monkeypatch):
    """``profile`` (a trial in this process, no Ray) as the command line shows it: the
    deprecations tuner's own filters leave to the command line's (no test-suite filter)."""
    spec, module = old_module
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.resetwarnings()
        out = tuner_in_process("profile", "--workload", spec, "--device", "cpu", "--scale",
                               "full", "--results", str(tmp_path / "r"), "--steps", "2",
                               env={"TUNER_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr
    about_full = [line for line in out.stderr.splitlines() if FULL_WARNING in line]
    assert len(about_full) == 1 and about_full[0].startswith("warning: "), out.stderr
    assert "samples/sec" in out.stdout and "(full scale on cpu)" in out.stdout
    assert ("build_model", "seed", "cpu") in module.CALLS      # the trial's model: 'seed'-size


def test_a_workload_method_error_in_a_command_is_one_line_and_exit_2(tmp_path, monkeypatch):
    (tmp_path / "bad_wl.py").write_text(textwrap.dedent('''\
        from tuner.knobs import Knobs
        from tuner.workload import Workload

        class Bad(Workload):
            name = "bad"
            description = source = "tests"
            references = {"baseline": Knobs(batch_size=4)}
            space = "tests/tests-space.yaml"
            def build_model(self, scale):
                return {"tiny": None}[scale]
            def build_dataset(self, data_dir, scale):
                return []
            def prepare_default_data(self, cache_dir, scale):
                return {"tiny": cache_dir}[scale]
            def training_step(self, model, batch):
                return batch
            def sample_shape(self, scale):
                return {}

        workload = Bad()
    '''))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "bad_wl", raising=False)
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(REPO_ROOT)  # its space: tests/tests-space.yaml
    spec = f"{tmp_path}/bad_wl.py:workload"
    try:
        out = tuner_in_process("run", "--workload", spec, "--device", "cpu", "--scale", "full",
                               "--results", str(tmp_path / "r"))
    finally:
        sys.modules.pop("bad_wl", None)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"error: workload {spec!r}: prepare_default_data(scale='full') raised KeyError: 'full' "
        f"at {tmp_path}/bad_wl.py:14"]
    assert not (tmp_path / "r").exists()


def test_inside_a_trial_a_method_error_stays_the_trials_error_row(regression_data):
    from tests.fake_workloads import Regression
    from tuner.settings import TrialSettings
    from tuner.trial.harness import run_trial

    class FailsInTrial(Regression):
        def build_model(self, scale):
            raise RuntimeError("no such layer")

    settings = TrialSettings(scale="tiny", device="cpu", data_dir=str(regression_data),
                             windows=2, window_s=0.1, warmup_steps=1)
    row = run_trial(FailsInTrial(), Knobs(batch_size=4), settings)
    assert row["status"] == "error" and "RuntimeError" in row["error"]
    assert "no such layer" in row["error"]
    assert "Traceback (most recent call last)" in row["traceback"]
    assert "in build_model" in row["traceback"]


@pytest.mark.slow
def test_a_tuner_0_2_module_runs_unchanged_with_one_warning_naming_full(tmp_path):
    """``python -m tuner run`` at the full scale (the one tuner 0.2 called 'seed'), its trials in
    Ray's workers: both trials measure, and the console says it once."""
    (tmp_path / "oldwl.py").write_text(OLD_MODULE)
    (tmp_path / "space.yaml").write_text(SPACE)
    env = {**os.environ, "TUNER_CACHE": str(tmp_path / "cache"), "COLUMNS": "200",
           "PYTHONPATH": str(REPO_ROOT), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", "run", "--workload", "oldwl.py:workload", "--device",
         "cpu", "--scale", "full", "--trials", "2", "--seed", "2", "--results", "results",
         "--windows", "2", "--window-s", "0.1", "--warmup-steps", "1", "--confirm", "0",
         "--no-ceiling", "--no-early-stop"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = proc.stdout + proc.stderr
    about_full = [line for line in shown.splitlines() if FULL_WARNING in line]
    assert len(about_full) == 1, shown[-3000:]
    assert about_full[0].startswith("warning: ") and "take 'full'" in about_full[0]
    assert "Traceback" not in shown
    assert "model: 1,153 parameters at full scale" in shown       # the 'seed'-size model
    assert shown.count(" ok ") >= 2 and "2 ok" in shown
