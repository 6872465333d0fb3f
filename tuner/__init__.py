"""tuner: finds the fastest way to train a given PyTorch model on given hardware.

Short, carefully measured training trials run under Ray Tune with an Optuna search; every
trial lands in a Parquet leaderboard. README.md is the user's guide (its "Code map" says
which module does what); docs/benchmarks.md holds the measured figures.

The Python API: ``tuner.tune(...)`` returns a ``tuner.TuneResult`` (``tuner.api``). Importing
``tuner`` stays light: the API, torch and Ray load on first use.
"""

from typing import Any

from tuner.settings import VERSION as __version__

__all__ = ["tune", "TuneResult", "__version__"]


def __getattr__(name: str) -> Any:
    """``tuner.tune`` and ``tuner.TuneResult``, imported from ``tuner.api`` when first used."""
    if name in ("tune", "TuneResult"):
        from tuner import api
        return getattr(api, name)
    raise AttributeError(f"module 'tuner' has no attribute {name!r}")
