"""tdrl.trainers: what recipes share (logs, checkpoints, plots, config parsing) and loops."""

from tdrl.trainers.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from tdrl.trainers.config import parse
from tdrl.trainers.logger import Logger, format_metrics, read_csv
from tdrl.trainers.offpolicy import (
    crossed,
    episode_metrics,
    evaluate_and_log,
    has_run,
    load_run,
    make_replay_buffer,
    optimizer_step,
    save_run,
    torch_default_init_,
    transitions,
    truncate_streams,
    updates_due,
)
from tdrl.trainers.plotting import plot_learning_curve

__all__ = [
    "Logger",
    "crossed",
    "episode_metrics",
    "evaluate_and_log",
    "format_metrics",
    "has_run",
    "load_checkpoint",
    "load_run",
    "make_replay_buffer",
    "optimizer_step",
    "parse",
    "plot_learning_curve",
    "read_csv",
    "rng_state",
    "save_checkpoint",
    "save_run",
    "set_rng_state",
    "torch_default_init_",
    "transitions",
    "truncate_streams",
    "updates_due",
]
