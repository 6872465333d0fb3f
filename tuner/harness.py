"""The old import path of the trial's harness, kept for one release: the torch side of a trial
(the harness, knob application, measurement, ...) lives in ``tuner.trial``; import
``make_trainable`` and ``run_trial`` from ``tuner.trial.harness``."""

from tuner._deprecated import moved

__getattr__ = moved(__name__, {
    "make_trainable": "tuner.trial.harness",
    "run_trial": "tuner.trial.harness",
    "training_threads": "tuner.trial.harness",
    # deprecated before the move (their home is the time budget's module)
    **{name: "tuner.budget" for name in ("COMPILE_NEEDS_S", "COMPILE_MARGIN", "compile_needs_s")},
})
