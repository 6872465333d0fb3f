"""tuner: finds the fastest way to train a given PyTorch model on given hardware.

Short, carefully measured training trials run under Ray Tune with an Optuna search; every
trial lands in a Parquet leaderboard. See README.md and DESIGN notes in docs/.
"""

__version__ = "0.1.0"
