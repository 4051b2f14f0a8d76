"""Checkpoints that resume a run exactly: modules, optimizers, counters and every RNG state.

A checkpoint file is one ``torch.save`` payload written atomically (to a temporary name, then
renamed) and loaded with ``weights_only=True``: tensors and plain values only, so a crafted file
runs no code. Resuming restores the RNG states of Python, NumPy and torch, so the resumed run
draws the same minibatches and actions as an uninterrupted one would. The env state travels in
the collector's state (``Collector.state_dict``: ``tdrl.envs.env_state`` of sync envs, exact;
async envs are re-seeded instead). A run's checkpoint folders (:func:`write_checkpoint_dir`)
hold the file, the replay buffer and a manifest of SHA-256 sums as one unit.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import random
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tdrl.data.integrity import file_digest

MANIFEST = "MANIFEST.json"
_NDARRAY = "__ndarray__"  # marks a numpy array stored as a tensor (weights_only loads no numpy)


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


def _encode(value: Any) -> Any:
    """``value`` with numpy arrays and scalars turned into what ``torch.load(weights_only=True)``
    reads: tensors (marked, to come back as arrays), Python numbers, lists, tuples, dicts."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biufc":
            raise TypeError(f"cannot checkpoint a numpy array of dtype {value.dtype}")
        return {_NDARRAY: torch.from_numpy(np.ascontiguousarray(value).copy())}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_encode(v) for v in value)
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and _NDARRAY in value:
            return value[_NDARRAY].numpy()
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_decode(v) for v in value)
    return value


def save_checkpoint(path: str | os.PathLike, **objects: Any) -> Path:
    """Save ``objects`` (modules and optimizers by their ``state_dict``, other values as they
    are) with the current RNG states, atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {name: _state_of(obj) for name, obj in objects.items()}
    payload["_rng"] = rng_state()
    tmp = path.with_name(path.name + ".tmp")
    torch.save(_encode(payload), tmp)
    _fsync(tmp)
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
    try:
        # weights_only: tensors and plain containers only; a crafted pickle runs no code.
        payload = _decode(torch.load(path, map_location="cpu", weights_only=True))
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as err:
        raise ValueError(
            f"checkpoint {str(path)!r} cannot be loaded safely (it is damaged, or holds objects "
            f"other than tensors and plain values, which are never unpickled): {err}"
        ) from None
    if not isinstance(payload, dict) or "_rng" not in payload:
        raise ValueError(f"checkpoint {str(path)!r} is not a tdrl checkpoint (no '_rng' entry)")
    for name, obj in objects.items():
        if name not in payload:
            raise KeyError(
                f"checkpoint {str(path)!r} has no entry {name!r} (it has {sorted(payload)})"
            )
        obj.load_state_dict(payload[name])
    if restore_rng:
        set_rng_state(payload["_rng"])
    return payload


def nonfinite_entry(state: Any, path: str = "") -> str | None:
    """The path (``"state/0/exp_avg"``) of the first floating tensor in ``state`` (nested
    dicts, lists, tuples: a ``state_dict``) that holds NaN or an infinity; None when none does."""
    if isinstance(state, torch.Tensor):
        finite = not state.is_floating_point() or bool(torch.isfinite(state).all())
        return None if finite else path
    if isinstance(state, dict):
        items: Iterable[tuple[Any, Any]] = state.items()
    elif isinstance(state, (list, tuple)):
        items = enumerate(state)
    else:
        return None
    for key, value in items:
        found = nonfinite_entry(value, f"{path}/{key}" if path else str(key))
        if found is not None:
            return found
    return None


# --- checkpoint folders: one unit per step -------------------------------------------------------
# A run's checkpoints live in ``<run>/checkpoints/<step>/``: every file of step N (the torch file,
# the replay buffer) is written into ``<step>.tmp/``, then a manifest with each file's size and
# SHA-256, then the folder is renamed to ``<step>/`` -- the one switch that makes it complete.
# The previous complete folder is removed only after that, so a kill at any point leaves a
# complete checkpoint to resume from, and a loaded checkpoint is checked byte for byte.

CHECKPOINTS = "checkpoints"


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _step_of(folder: Path) -> int | None:
    return int(folder.name) if folder.name.isdigit() else None


def write_checkpoint_dir(root: str | os.PathLike, step: int, write: Callable[[Path], None]) -> Path:
    """Write checkpoint ``step`` under ``root`` as one unit; returns its folder.

    ``write(folder)`` puts every file of the checkpoint into ``folder`` (a temporary one). Then
    the manifest is written, the folder renamed to ``root/<step>`` (replacing an older folder of
    the same step) and older checkpoints removed.
    """
    if step < 0:
        raise ValueError(f"checkpoint step must be >= 0, got {step}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    name = f"{step:012d}"
    tmp = root / (name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        write(tmp)
        files = {}
        for f in sorted(p for p in tmp.rglob("*") if p.is_file()):
            _fsync(f)
            digest = file_digest(f)
            files[f.relative_to(tmp).as_posix()] = {"bytes": f.stat().st_size, "sha256": digest}
        manifest = tmp / MANIFEST
        manifest.write_text(json.dumps({"step": step, "files": files}, indent=1))
        _fsync(manifest)
        _fsync(tmp)
    except OSError as err:  # disk full, say: the unfinished folder goes, the last one stays
        shutil.rmtree(tmp, ignore_errors=True)
        if err.errno == errno.ENOSPC:
            raise OSError(
                errno.ENOSPC,
                f"disk full: checkpoint {step} could not be written under {str(root)!r} "
                f"({err.strerror}); the previous checkpoint is kept",
            ) from err
        raise
    final = root / name
    if final.exists():  # the same step saved again: move the old one aside, then drop it
        old = root / (name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync(root)
    for other in root.iterdir():  # unfinished saves and older complete checkpoints, nothing else
        older = (_step_of(other) or 0) < step and (other / MANIFEST).is_file()
        if other != final and (older or other.suffix in (".tmp", ".old")):
            shutil.rmtree(other, ignore_errors=True)
    return final


def remove_unfinished(root: str | os.PathLike) -> None:
    """Remove the unfinished saves (``<step>.tmp/``: a save killed or out of disk) under
    ``root``, which hold space and nothing a resume can use. Only the process holding the run
    folder's lock may call this."""
    root = Path(root)
    if root.is_dir():
        for entry in root.glob("*.tmp"):
            shutil.rmtree(entry, ignore_errors=True)


def verify_checkpoint_dir(folder: str | os.PathLike) -> dict[str, Any]:
    """Check a checkpoint folder against its manifest: every listed file present with its size
    and SHA-256, no file the manifest does not list, the step the folder's name says; returns
    the manifest. Raises ``ValueError`` naming the first file at fault."""
    folder = Path(folder)
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text())
        files = manifest["files"]
        int(manifest["step"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(
            f"checkpoint {str(folder)!r}: unreadable manifest {MANIFEST}: {err}"
        ) from None
    step = int(manifest["step"])
    if _step_of(folder) not in (None, step):
        raise ValueError(
            f"checkpoint {str(folder)!r}: the manifest is of step {step}, the folder's name says "
            f"{int(folder.name)} (a manifest copied from another checkpoint)"
        )
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    extra = sorted(present - set(files) - {MANIFEST})
    if extra:  # written after the save: the checkpoint is no longer the unit that was saved
        raise ValueError(
            f"checkpoint {str(folder)!r}: file {extra[0]!r} is not in the manifest (added after "
            f"the save{f', with {len(extra) - 1} more' if len(extra) > 1 else ''}): move it out "
            "of the folder to resume"
        )
    for name, meta in files.items():
        f = folder / name
        if name not in present:
            raise ValueError(f"checkpoint {str(folder)!r}: file {name!r} is missing")
        size = f.stat().st_size
        if size != meta["bytes"]:
            raise ValueError(
                f"checkpoint {str(folder)!r}: file {name!r} has {size} bytes, "
                f"the manifest says {meta['bytes']} (truncated or overwritten)"
            )
        if file_digest(f) != meta["sha256"]:
            raise ValueError(
                f"checkpoint {str(folder)!r}: file {name!r} does not match its SHA-256 "
                "in the manifest (corrupted)"
            )
    return manifest


def latest_checkpoint_dir(root: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint folder under ``root`` (``None`` when there is none).

    Unfinished folders (``.tmp``: a save was killed) are ignored. The newest complete one is
    verified with :func:`verify_checkpoint_dir`; a damaged one raises rather than silently
    falling back to an older checkpoint.
    """
    root = Path(root)
    if not root.is_dir():
        return None
    for entry in root.iterdir():  # what a resume cannot read is refused, never written over
        if entry.suffix in (".tmp", ".old"):
            continue
        if _step_of(entry) is None or not entry.is_dir() or not (entry / MANIFEST).is_file():
            raise ValueError(
                f"{str(entry)!r} is not a checkpoint tdrl can read (a checkpoint is a "
                f"<step>/ folder with {MANIFEST}): move it out of {str(root)!r} to resume, or "
                "start a new run with another --log-dir"
            )
    complete = [p for p in root.iterdir() if _step_of(p) is not None and (p / MANIFEST).is_file()]
    if not complete:
        old = [p for p in root.iterdir() if p.name.endswith(".old") and (p / MANIFEST).is_file()]
        complete = old  # killed between the two renames of a same-step save
    if not complete:
        return None
    newest = max(complete, key=lambda p: int(p.name.split(".")[0]))
    verify_checkpoint_dir(newest)
    return newest
