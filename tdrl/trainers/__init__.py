"""tdrl.trainers: the run kit a recipe's loop calls. Configs (:func:`parse`, :func:`configure`;
the config groups are in :mod:`tdrl.trainers.config`), envs and collectors (:func:`make_envs`,
:func:`make_collector`), :class:`Run` (run folder, logs, evaluation, checkpoints and resume,
report), and the optimizer step, compiled or captured (:func:`compiled_step`). No loop lives
here: each recipe writes its own.

Each name loads its module on first use: the config part needs neither torch nor TorchRL, so a
recipe parses its command line (and answers ``--help``) before the library loads.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tdrl.trainers.checkpoint import load_checkpoint, save_checkpoint
    from tdrl.trainers.compiled import compiled_step
    from tdrl.trainers.config import RunConfig, configclass, configure, parse
    from tdrl.trainers.logger import read_csv
    from tdrl.trainers.offline import OfflineSteps
    from tdrl.trainers.optim import adam, linear_decay, optimizer_step
    from tdrl.trainers.run import Run, latest_checkpoint, make_collector, make_envs

# public name -> the module that defines it
_HOME = {
    "OfflineSteps": "offline",
    "Run": "run",
    "RunConfig": "config",
    "adam": "optim",
    "compiled_step": "compiled",
    "configclass": "config",
    "configure": "config",
    "latest_checkpoint": "run",
    "linear_decay": "optim",
    "load_checkpoint": "checkpoint",
    "make_collector": "run",
    "make_envs": "run",
    "optimizer_step": "optim",
    "parse": "config",
    "read_csv": "logger",
    "save_checkpoint": "checkpoint",
}
__all__ = [
    "OfflineSteps",
    "Run",
    "RunConfig",
    "adam",
    "compiled_step",
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
assert sorted(_HOME) == __all__


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'tdrl.trainers' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tdrl.trainers.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
