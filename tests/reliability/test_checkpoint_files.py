"""Checkpoint files: loading runs no code, damaged files are refused naming the file, and a
checkpoint folder is complete or ignored, never half-read."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from tdrl.trainers.checkpoint import (
    MANIFEST,
    latest_checkpoint_dir,
    load_checkpoint,
    save_checkpoint,
    verify_checkpoint_dir,
    write_checkpoint_dir,
)

MARKER = "tdrl_pwned_marker"


class Evil:
    """Unpickling it would create a marker file (what an attacker's payload would do)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


def test_a_crafted_checkpoint_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / MARKER
    path = tmp_path / "checkpoint.pt"
    torch.save({"_rng": {}, "model": Evil(str(marker))}, path)
    with pytest.raises(ValueError, match="cannot be loaded safely"):
        load_checkpoint(path, restore_rng=False)
    assert not marker.exists()
    # A raw pickle stream (not a torch zip file) is refused as well.
    path.write_bytes(pickle.dumps(Evil(str(marker))))
    with pytest.raises(ValueError, match="cannot be loaded safely"):
        load_checkpoint(path, restore_rng=False)
    assert not marker.exists()


def test_numpy_state_round_trips_through_a_safe_load(tmp_path):
    rng = np.random.default_rng(3)
    state = {
        "array": np.arange(6, dtype=np.float64).reshape(2, 3),
        "uint": np.array([1, 2], dtype=np.uint32),
        "scalar": np.int64(7),
        "bitgen": rng.bit_generator.state,  # 128-bit Python ints
        "nested": [np.zeros(2, np.bool_), (np.float32(1.5), None)],
    }
    path = save_checkpoint(tmp_path / "c.pt", extra=state)
    rng_before = (np.random.rand(), torch.rand(1).item())
    loaded = load_checkpoint(path)["extra"]
    assert (np.random.rand(), torch.rand(1).item()) == rng_before  # RNG restored
    np.testing.assert_array_equal(loaded["array"], state["array"])
    assert loaded["array"].dtype == np.float64 and loaded["uint"].dtype == np.uint32
    assert loaded["scalar"] == 7 and loaded["bitgen"] == state["bitgen"]
    assert loaded["nested"][0].dtype == np.bool_ and loaded["nested"][1] == (1.5, None)


def test_zeroed_bytes_in_a_checkpoint_are_refused(tmp_path):
    path = save_checkpoint(tmp_path / "c.pt", model=torch.nn.Linear(3, 2))
    folder = write_checkpoint_dir(
        tmp_path / "ckpts", 5, lambda d: os.replace(path, d / "checkpoint.pt")
    )
    target = folder / "checkpoint.pt"
    data = bytearray(target.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
    target.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="'checkpoint.pt' does not match its SHA-256"):
        verify_checkpoint_dir(folder)
    with pytest.raises(ValueError, match="checkpoint.pt"):
        latest_checkpoint_dir(tmp_path / "ckpts")


def _write(files: dict[str, bytes]):
    def write(folder: Path) -> None:
        for name, data in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)

    return write


def test_truncated_and_missing_files_are_named(tmp_path):
    folder = write_checkpoint_dir(tmp_path, 1, _write({"a.pt": b"x" * 100, "buf/t.bin": b"y" * 10}))
    (folder / "a.pt").write_bytes(b"x" * 50)
    with pytest.raises(ValueError, match="'a.pt' has 50 bytes, the manifest says 100"):
        verify_checkpoint_dir(folder)
    folder = write_checkpoint_dir(tmp_path, 2, _write({"a.pt": b"x", "buf/t.bin": b"y"}))
    (folder / "buf" / "t.bin").unlink()
    with pytest.raises(ValueError, match="'buf/t.bin' is missing"):
        verify_checkpoint_dir(folder)


def test_newest_complete_folder_wins_and_unfinished_ones_are_ignored(tmp_path):
    assert latest_checkpoint_dir(tmp_path / "none") is None
    write_checkpoint_dir(tmp_path, 10, _write({"a": b"10"}))
    first = write_checkpoint_dir(tmp_path, 20, _write({"a": b"20"}))
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # older ones removed
    # A save killed half-way (no manifest, or manifest but not yet renamed) is ignored.
    (tmp_path / "000000000030.tmp").mkdir()
    (tmp_path / "000000000030.tmp" / "a").write_bytes(b"30")
    assert latest_checkpoint_dir(tmp_path) == first
    # The same step saved twice replaces the folder.
    again = write_checkpoint_dir(tmp_path, 20, _write({"a": b"20 again"}))
    assert (again / "a").read_bytes() == b"20 again" and (again / MANIFEST).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [again.name]
    # Killed between the two renames of a same-step save: the moved-aside folder is used.
    os.replace(again, tmp_path / (again.name + ".old"))
    assert latest_checkpoint_dir(tmp_path) == tmp_path / (again.name + ".old")
