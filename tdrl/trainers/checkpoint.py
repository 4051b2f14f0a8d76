"""Checkpoints that resume a run exactly: modules, optimizers, counters and every RNG state.

A checkpoint is one ``torch.save`` file written atomically (to a temporary name, then renamed),
so a run killed while saving keeps its previous checkpoint. Resuming restores the RNG states of
Python, NumPy and torch, so the resumed run draws the same minibatches and actions as an
uninterrupted one would (env states are not saved: recipes re-create envs from their seed and
counters, see the recipes' ``resume`` handling).
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch


def rng_state() -> dict[str, Any]:
    """The RNG states of Python, NumPy and torch (CPU, and CUDA when available)."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _state_of(obj: Any) -> Any:
    return obj.state_dict() if hasattr(obj, "state_dict") else obj


def save_checkpoint(path: str | os.PathLike, **objects: Any) -> Path:
    """Save ``objects`` (modules and optimizers by their ``state_dict``, other values as they
    are) with the current RNG states, atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {name: _state_of(obj) for name, obj in objects.items()}
    payload["_rng"] = rng_state()
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(
    path: str | os.PathLike, *, restore_rng: bool = True, **objects: Any
) -> dict[str, Any]:
    """Load a checkpoint: every object passed by name gets ``load_state_dict`` of its entry.

    Returns the whole payload (plain values such as counters are read from it). Raises a
    ``KeyError`` naming the entry when an object passed has no entry in the file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {str(path)!r}")
    payload = torch.load(path, map_location="cpu", weights_only=False)
    for name, obj in objects.items():
        if name not in payload:
            raise KeyError(
                f"checkpoint {str(path)!r} has no entry {name!r} (it has {sorted(payload)})"
            )
        obj.load_state_dict(payload[name])
    if restore_rng:
        set_rng_state(payload["_rng"])
    return payload
