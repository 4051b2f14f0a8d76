"""tdrl.trainers: what recipes share (logs, checkpoints, plots, config parsing) and loops."""

from tdrl.trainers.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from tdrl.trainers.config import parse
from tdrl.trainers.logger import Logger, format_metrics, read_csv
from tdrl.trainers.plotting import plot_learning_curve

__all__ = [
    "Logger",
    "format_metrics",
    "load_checkpoint",
    "parse",
    "plot_learning_curve",
    "read_csv",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
]
