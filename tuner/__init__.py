"""tuner: finds the fastest way to train a given PyTorch model on given hardware.

Short, carefully measured training trials run under Ray Tune with an Optuna search; every
trial lands in a Parquet leaderboard. README.md is the user's guide (its "Code map" says
which module does what); docs/benchmarks.md holds the measured figures.
"""

__version__ = "0.2.0"
