"""The run folder's lock: one process per run folder (light: no torch, so a process can take or
test it at once)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from tdrl.trainers.config import RunFolderError

__all__ = ["LOCK_FILE", "lock_run_folder"]

LOCK_FILE = ".lock"


def lock_run_folder(log_dir: Path) -> IO[str]:
    """An exclusive lock on the run folder, held until the returned file is closed: a second
    process on the same folder (two fresh runs, or two ``--resume``) would delete the other's
    unfinished checkpoint and interleave its log rows, so it gets a :class:`RunFolderError`
    naming the holder instead. The lock goes with the process (a killed run frees it)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    handle = open(log_dir / LOCK_FILE, "a+")  # noqa: SIM115  # held for the run's life
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise RunFolderError(
            f"run folder {str(log_dir)!r} is in use by {holder}: wait for it to end, or pass "
            "another --log-dir"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"process {os.getpid()}")
    handle.flush()
    return handle
