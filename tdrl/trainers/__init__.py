"""tdrl.trainers: the run kit a recipe's loop calls. Configs (:func:`parse`, :func:`configure`;
the config groups are in :mod:`tdrl.trainers.config`), envs and collectors (:func:`make_envs`,
:func:`make_collector`), :class:`Run` (run folder, logs, evaluation, checkpoints and resume,
report), and the optimizer step. No loop lives here: each recipe writes its own."""

from tdrl.trainers.checkpoint import load_checkpoint, save_checkpoint
from tdrl.trainers.config import RunConfig, configclass, configure, parse
from tdrl.trainers.logger import read_csv
from tdrl.trainers.offline import OfflineSteps
from tdrl.trainers.optim import adam, linear_decay, optimizer_step
from tdrl.trainers.run import Run, latest_checkpoint, make_collector, make_envs

__all__ = [
    "OfflineSteps",
    "Run",
    "RunConfig",
    "adam",
    "configclass",
    "configure",
    "latest_checkpoint",
    "linear_decay",
    "load_checkpoint",
    "make_collector",
    "make_envs",
    "optimizer_step",
    "parse",
    "read_csv",
    "save_checkpoint",
]
