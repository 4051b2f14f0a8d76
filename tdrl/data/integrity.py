"""File checksums for saved buffers and checkpoints: what was written is what is read back."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

__all__ = ["check_files", "ensure_free_space", "file_digest", "file_records"]


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes, hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def file_records(folder: Path) -> dict[str, dict[str, Any]]:
    """``{relative path: {"bytes", "sha256"}}`` of every file under ``folder``."""
    return {
        f.relative_to(folder).as_posix(): {"bytes": f.stat().st_size, "sha256": file_digest(f)}
        for f in sorted(folder.rglob("*"))
        if f.is_file()
    }


def check_files(folder: Path, records: dict[str, dict[str, Any]], what: str) -> None:
    """Raise ``ValueError`` naming the first file of ``records`` that is missing, has another
    size (truncated or overwritten) or another SHA-256 (corrupted) under ``folder``."""
    for name, meta in records.items():
        f = folder / name
        if not f.is_file():
            raise ValueError(f"{what}: file {name!r} is missing")
        size = f.stat().st_size
        if size != meta["bytes"]:
            raise ValueError(
                f"{what}: file {name!r} has {size} bytes, the manifest says {meta['bytes']} "
                "(truncated or overwritten)"
            )
        if file_digest(f) != meta["sha256"]:
            raise ValueError(f"{what}: file {name!r} does not match its SHA-256 (corrupted)")


def ensure_free_space(folder: Path, nbytes: int, *, margin: int = 1 << 20) -> None:
    """Raise ``OSError(ENOSPC)`` ("disk full") when the file system of ``folder`` has less than
    ``nbytes`` (plus ``margin``) free: for writes through memory maps, which a full disk would
    answer with SIGBUS, killing the process without a word."""
    free = shutil.disk_usage(folder).free
    if free < nbytes + margin:
        raise OSError(
            errno.ENOSPC,
            f"disk full: writing {nbytes / 2**20:.1f} MiB under {str(folder)!r} needs more than "
            f"the {free / 2**20:.1f} MiB free",
        )
