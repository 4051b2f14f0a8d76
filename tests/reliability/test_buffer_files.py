"""Saved replay buffers: loading runs no code, and missing, truncated or inconsistent files are
refused with an error naming the file or value at fault (never silently zero-filled)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from tensordict import NonTensorData, TensorDict

from tdrl.data import PrioritizedReplayBuffer, ReplayBuffer
from tests.rollouts import rollout


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    rb = ReplayBuffer(20, generator=0)
    rb.extend(rollout(steps=5))
    rb.save(tmp_path / "rb")
    return tmp_path / "rb"


def test_round_trip_still_exact(saved: Path) -> None:
    rb = ReplayBuffer(20, generator=0)
    rb.extend(rollout(steps=5))
    other = ReplayBuffer(20)
    other.load(saved)
    assert (other.storage == rb.storage).all() and len(other) == len(rb)


class Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_crafted_pickle_in_the_buffer_folder_is_refused_and_runs_nothing(saved, tmp_path):
    marker = tmp_path / "PWNED"
    # What an attacker can write: a tensordict memmap folder whose metadata points at a pickle.
    TensorDict({"x": NonTensorData(Evil(str(marker)))}, batch_size=[]).memmap(
        saved / "tensors" / "evil"
    )
    meta = json.loads((saved / "tensors" / "meta.json").read_text())
    meta["evil"] = {"type": "TensorDict"}
    (saved / "tensors" / "meta.json").write_text(json.dumps(meta))
    meta = json.loads((saved / "meta.json").read_text())
    meta.pop("files")  # the attacker rewrites the manifest too
    (saved / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="cannot load its tensors safely"):
        ReplayBuffer(20).load(saved)
    assert not marker.exists()


def _leaf_file(saved: Path) -> Path:
    return next(p for p in (saved / "tensors").rglob("*.memmap") if "observation" in p.name)


def test_a_missing_leaf_file_is_named(saved: Path) -> None:
    leaf = _leaf_file(saved)
    leaf.unlink()
    name = leaf.relative_to(saved / "tensors").as_posix()
    with pytest.raises(ValueError, match=f"file '{name}' is missing"):
        ReplayBuffer(20).load(saved)


def test_a_truncated_or_zeroed_file_is_named(saved: Path) -> None:
    leaf = _leaf_file(saved)
    data = leaf.read_bytes()
    leaf.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="bytes, the manifest says"):
        ReplayBuffer(20).load(saved)
    leaf.write_bytes(bytes(len(data)))  # right size, zeroed
    with pytest.raises(ValueError, match="does not match its SHA-256"):
        ReplayBuffer(20).load(saved)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("size", 10**9, r"size=1000000000 out of range"),
        ("cursor", -1, r"cursor=-1"),
        ("cursor", 3, r"cursor=3 must equal size=5"),
        ("num_streams", 0, r"num_streams=0 is out of range"),
        ("capacity", 40, r"capacity 40, this buffer 20"),
    ],
)
def test_out_of_range_counters_are_refused(saved: Path, field, value, match) -> None:
    meta = json.loads((saved / "meta.json").read_text())
    meta[field] = value
    (saved / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=match):
        ReplayBuffer(20).load(saved)


def test_loading_a_plain_buffer_into_a_prioritized_one_says_so(saved: Path) -> None:
    with pytest.raises(ValueError, match="saved by a ReplayBuffer.*PrioritizedReplayBuffer"):
        PrioritizedReplayBuffer(20).load(saved)


def test_a_leaf_of_another_dtype_is_named(saved: Path) -> None:
    meta = json.loads((saved / "meta.json").read_text())
    meta["leaves"]["storage/observation"]["dtype"] = "torch.float64"
    (saved / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="leaf 'storage/observation' is torch.float32"):
        ReplayBuffer(20).load(saved)
    assert os.path.exists(saved)


def test_prioritized_buffer_refuses_eps_zero_and_float_indices() -> None:
    for eps in (0.0, -1e-3, float("nan")):
        with pytest.raises(ValueError, match="eps must be > 0"):
            PrioritizedReplayBuffer(20, eps=eps)
    rb = PrioritizedReplayBuffer(20, generator=0)
    rb.extend(rollout(steps=5))
    with pytest.raises(TypeError, match="index must hold integers.*float32"):
        rb.update_priority(torch.tensor([0.0, 1.7]), torch.tensor([1.0, 2.0]))


def test_non_tensor_leaves_are_refused_by_name() -> None:
    td = rollout(steps=5)
    td["note"] = NonTensorData("text", batch_size=td.batch_size)
    with pytest.raises(TypeError, match="'note'"):
        ReplayBuffer(20).extend(td)
