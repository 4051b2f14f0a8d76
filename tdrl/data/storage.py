"""Preallocated per-stream TensorDict storage, the data half of every tdrl replay buffer.

Layout: every leaf of the first batch gets a tensor ``[L, S, *F]`` (time-major, like SB3's
``[buffer_size, n_envs, ...]``), ``S`` env streams of ``L = capacity // S`` steps each, all
streams written in lockstep by one cursor. Item ``(p, s)`` has the flat index ``p * S + s``;
a stream's steps stay contiguous in time, so n-step and slice windows never mix envs.

The sampling rules (``tdrl.data.sampling``) read the storage through its public geometry:
:meth:`leaf`, :meth:`ahead`, :meth:`window`, :meth:`oldest`, :meth:`gather` and
:meth:`assemble`. With ``tdrl.set_fast(True)`` (the default) writes and gathers of a CPU
storage run their fast twins (``tdrl._fast.storage.RowCopier``: one compiled memmove call for
all leaves); the checked per-leaf copies below are the plain twins.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import MemoryMappedTensor, TensorDict, TensorDictBase, is_non_tensor
from torch import Tensor

from tdrl import _fast
from tdrl._fast.storage import RowCopier
from tdrl._fast.tdict import new_unchecked

NestedKey = str | tuple[str, ...]

__all__ = ["StreamStorage"]

_Plan = list[tuple[str, Any]]


def _path(key: NestedKey) -> tuple[str, ...]:
    return key if isinstance(key, tuple) else (key,)


def _spell(key: tuple[str, ...]) -> NestedKey:
    return key if len(key) > 1 else key[0]


def _plan(paths: list[tuple[str, ...]]) -> _Plan:
    """Nested-dict plan of leaf positions, to assemble output TensorDicts without key parsing."""
    groups: dict[str, list[tuple[int, tuple[str, ...]]]] = {}
    for i, p in enumerate(paths):
        groups.setdefault(p[0], []).append((i, p[1:]))
    return [
        (name, items[0][0] if len(items) == 1 and not items[0][1] else _subplan(items))
        for name, items in groups.items()
    ]


def _subplan(items: list[tuple[int, tuple[str, ...]]]) -> _Plan:
    groups: dict[str, list[tuple[int, tuple[str, ...]]]] = {}
    for i, rest in items:
        groups.setdefault(rest[0], []).append((i, rest[1:]))
    return [
        (name, sub[0][0] if len(sub) == 1 and not sub[0][1] else _subplan(sub))
        for name, sub in groups.items()
    ]


class _Counter:
    """An int attribute kept in the storage's ``_counters`` array (the fast twin writes it)."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __get__(self, storage: Any, owner: Any = None) -> int:
        return int(storage._counters[self.index])

    def __set__(self, storage: Any, value: int) -> None:
        storage._counters[self.index] = value


class StreamStorage:
    """``S`` circular streams of ``L`` steps, preallocated from the first batch.

    ``write(td)`` takes ``[S]`` (one step of each stream) or ``[S, T]`` (T steps of each
    stream); with ``S == 1`` a 1-D ``[T]`` batch is T consecutive steps of the single stream
    (what a TorchRL collector over one env yields).

    Shapes:
        leaves ``[L, S, *F]``; flat views ``[L * S, *F]``.
    """

    def __init__(
        self,
        capacity: int,
        num_streams: int,
        device: torch.device | str = "cpu",
        *,
        path: str | os.PathLike | None = None,
    ):
        if num_streams < 1 or capacity < num_streams:
            raise ValueError(f"need capacity >= num_streams >= 1, got {capacity}, {num_streams}")
        # path: keep the leaves in memory-mapped files in this folder (disk-backed storage for
        # buffers larger than RAM; the OS pages them in and out). CPU only.
        self.path = None if path is None else Path(path)
        if self.path is not None and torch.device(device).type != "cpu":
            raise ValueError(f"a memory-mapped storage lives on the CPU, got device={device!r}")
        self.num_streams = num_streams
        self.length = capacity // num_streams
        self.device = torch.device(device)
        # [cursor, size]: the next time position to write (shared by all streams) and the
        # written positions per stream (<= length); an array, so the fast twin updates it (its
        # copier replaces it by a view of the array its compiled writes take).
        self._counters = np.zeros(2, dtype=np.int64)
        self.keys: list[tuple[str, ...]] = []
        self.leaves: list[Tensor] = []  # [L, S, *F]
        self.flat: list[Tensor] = []  # [L * S, *F] views
        self._key_index: dict[tuple[str, ...], int] = {}
        self._plan: _Plan = []
        self._copier: RowCopier | None = None
        # batch size -> the fast twin's write for that validated layout (the copier's table; a
        # writer returns the steps written, or None, nothing written, for the checked path)
        self.fast_writers: dict[torch.Size, Callable[[TensorDictBase], int | None]] = {}
        # the fast writes refuse NaN and infinite floats (ReplayBuffer(on_nonfinite="raise"),
        # which checks the other writes itself)
        self._check_finite = False

    # the next time position to write, and the written positions per stream
    cursor, size = _Counter(0), _Counter(1)

    @property
    def check_finite(self) -> bool:
        """Whether the fast writes refuse NaN and infinite floats (nothing written)."""
        return self._check_finite

    @check_finite.setter
    def check_finite(self, value: bool) -> None:
        self._check_finite = bool(value)
        if self._copier is not None:  # its writers hold the old setting: learned again
            self._copier.check_finite = self._check_finite
            self._copier.writers.clear()

    def __getstate__(self) -> dict[str, Any]:
        """What a copy or a pickle takes: the leaves and counters, not the fast twin (its
        writers hold this storage's memory addresses and counters; a copy builds its own on
        first use) nor the flat views (a pickle would store them as separate tensors)."""
        state = self.__dict__.copy()
        state["_copier"], state["fast_writers"], state["flat"] = None, {}, []
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.flat = [x.view(self.length * self.num_streams, *x.shape[2:]) for x in self.leaves]

    @property
    def allocated(self) -> bool:
        return bool(self.leaves)

    @property
    def capacity(self) -> int:
        return self.length * self.num_streams

    def move_files(self, path: str | os.PathLike) -> None:
        """Move a memory-mapped storage's files into folder ``path`` (replacing the ones there,
        and dropping any ``leaf*.bin`` there beyond this storage's leaves; a live map of a
        replaced file keeps its data) and remove its old folder (with any file a crashed
        earlier load left there)."""
        if self.path is None:
            raise ValueError("move_files: this storage is in memory, not memory-mapped")
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        names = {f"leaf{i}.bin" for i in range(len(self.leaves))}
        for name in sorted(names):
            os.replace(self.path / name, path / name)
        for stale in path.glob("leaf*.bin"):
            if stale.name not in names:
                stale.unlink()
        shutil.rmtree(self.path, ignore_errors=True)
        self.path = path

    # --- allocation ------------------------------------------------------------------------
    def allocate(self, td: TensorDictBase, batch_dims: int) -> None:
        """Create one ``[L, S, *F]`` tensor per leaf of ``td`` (nested keys included)."""
        found = _tensor_leaves(td)  # refuses non-tensor entries, naming the key
        self.keys = sorted(found)
        self.leaves, self.flat = [], []
        for i, k in enumerate(self.keys):
            x = found[k]
            shape = (self.length, self.num_streams, *x.shape[batch_dims:])
            if self.path is None:
                leaf = _lazy_zeros(shape, x.dtype, self.device)
            else:
                self.path.mkdir(parents=True, exist_ok=True)
                # A plain tensor view of the file-backed one: the same memory, torch's type.
                file = self.path / f"leaf{i}.bin"
                # The folder is this storage's own: a file from an earlier run (or process) on
                # the same path is replaced (a live map of it keeps its data; the name is new).
                file.unlink(missing_ok=True)
                leaf = MemoryMappedTensor.zeros(shape, dtype=x.dtype, filename=file).view(shape)
            self.leaves.append(leaf)
            self.flat.append(leaf.view(self.length * self.num_streams, *leaf.shape[2:]))
        self._key_index = {k: i for i, k in enumerate(self.keys)}
        self._plan = _plan(self.keys)
        self._copier = None
        self.fast_writers = {}

    def _fast_copier(self) -> RowCopier | None:
        """The fast twin of writes and gathers, when the fast paths are on and it applies: host
        memory and plain values (complex leaves may carry a lazy conjugate bit, which a byte
        copy would drop). Built once per allocation."""
        if self._copier is None and self.leaves and _fast.supported():
            if self.device.type == "cpu" and not any(x.is_complex() for x in self.leaves):
                self._copier = RowCopier(
                    self.keys, self.leaves, self._counters, check_finite=self.check_finite
                )
                self._counters = self._copier.counters  # the compiled writes update these
                self.fast_writers = self._copier.writers
        return self._copier if _fast.enabled() else None

    # --- geometry (what the sampling rules read) -------------------------------------------
    def leaf(self, key: NestedKey) -> int:
        """The storage number of ``key``'s leaf; a KeyError naming the key when it is absent."""
        k = _path(key)
        if k not in self._key_index:
            raise KeyError(f"the stored batches have no {_spell(k)!r} entry, needed here")
        return self._key_index[k]

    def ahead(self, position: Tensor) -> Tensor:
        """Steps stored from time position ``p`` up to the newest one, inclusive."""
        return (self.cursor - 1 - position) % self.length + 1

    def oldest(self) -> int:
        """Time position of the oldest stored step."""
        return self.cursor if self.size == self.length else 0

    def time_order(self) -> Tensor:
        """The time positions of the stored steps, oldest first (``[size]``: a wrapped ring
        starts at the cursor)."""
        return (torch.arange(self.size) + self.oldest()) % self.length

    def window(self, index: Tensor, offsets: Tensor) -> Tensor:
        """Flat indices of the steps ``offsets`` after each item of ``index`` in its own stream
        (wrapping around the ring). Shapes: index ``[*B]``, offsets ``[K]`` -> ``[*B, K]``."""
        S = self.num_streams
        position, stream = index // S, index % S
        return ((position.unsqueeze(-1) + offsets) % self.length) * S + stream.unsqueeze(-1)

    def advance(self, index: Tensor, steps: Tensor) -> Tensor:
        """Flat indices ``steps`` (per item) after each item of ``index`` in its own stream.
        Shapes: index ``[*B]``, steps ``[*B]`` -> ``[*B]``."""
        S = self.num_streams
        return ((index // S + steps) % self.length) * S + index % S

    def gather(self, index: Tensor, leaves: list[int] | None = None) -> list[Tensor]:
        """The rows ``index`` of the flat views (all leaves, or those numbered ``leaves``).

        Shapes: index ``[B]`` -> ``[B, *F]`` per leaf.
        """
        if leaves is None:
            copier = self._fast_copier()
            if copier is not None:
                out = copier.gather(index)
                if out is not None:
                    return out
        chosen = range(len(self.flat)) if leaves is None else leaves
        return [self.flat[i].index_select(0, index) for i in chosen]

    def assemble(self, leaves: list[Tensor], batch_size: torch.Size) -> TensorDict:
        """A TensorDict with the storage's keys from one tensor per leaf (storage order), each
        with ``batch_size`` leading dims. With the fast paths on it is built unchecked
        (``tdrl._fast.tdict``): every leaf was gathered here with the right batch size."""
        if _fast.enabled():
            return _assemble_unchecked(self._plan, leaves, batch_size, self.device)
        return TensorDict(
            {_spell(k): x for k, x in zip(self.keys, leaves, strict=True)},
            batch_size=batch_size,
            device=self.device,
        )

    # --- writing ---------------------------------------------------------------------------
    def steps_of(self, td: TensorDictBase) -> int:
        """Number of time steps per stream in ``td`` (validates its batch size)."""
        bs = td.batch_size
        S = self.num_streams
        if len(bs) == 2 and bs[0] == S:
            return bs[1]
        if len(bs) == 1 and S == 1:
            return bs[0]
        if len(bs) == 1 and bs[0] == S:
            return 1
        raise ValueError(
            f"batch size {tuple(bs)} does not fit a storage of {S} env streams: "
            f"expected [{S}] (one step per stream) or [{S}, T]"
            + (" (a 1-D batch is a time sequence only when num_streams == 1)" if S > 1 else "")
        )

    def write(self, td: TensorDictBase) -> int:
        """Write ``td`` at the cursor; returns the number of time steps written per stream."""
        writer = self.fast_writers.get(td.batch_size)  # validated layouts only (plain TensorDicts)
        if writer is not None and _fast.enabled():
            steps = writer(td)
            if steps is not None and steps >= 0:  # else (None or NONFINITE) nothing was written
                return steps
        steps = self.write_checked(td)
        copier = self._fast_copier()
        if copier is not None and type(td) is TensorDict and steps:
            copier.learn(td.batch_size)  # this layout is valid: the fast twin takes the next
        return steps

    def write_checked(self, td: TensorDictBase) -> int:
        """:meth:`write` with every leaf checked and copied by torch (the plain twin)."""
        T = self.steps_of(td)
        values = self.check(td)  # an empty batch too: a wrong one is refused whatever its length
        if T == 0:
            return 0
        L, S = self.length, self.num_streams
        skip = max(T - L, 0)  # more steps than a stream holds: only the newest L survive anyway
        start = (self.cursor + skip) % L
        n = T - skip
        first = min(n, L - start)
        rollout = td.batch_dims == 2
        for x, leaf in zip(values, self.leaves, strict=True):
            # -> [T, S, *F] time-major like the storage
            if rollout:
                x = x.transpose(0, 1)
            else:  # [S] one step per stream, or [T] steps of the single stream
                x = x.unsqueeze(0) if S > 1 else x.unsqueeze(1)
            if skip:
                x = x[skip:]
            if x.requires_grad:  # stored data, not a graph (and as the fast copies store it)
                x = x.detach()
            if first == n:  # (each op counts: this is the per-step add of the plain path)
                leaf[start : start + n].copy_(x, non_blocking=True)
            else:  # wrap-around: two copies
                leaf[start : start + first].copy_(x[:first], non_blocking=True)
                leaf[: n - first].copy_(x[first:], non_blocking=True)
        self.cursor = (self.cursor + T) % self.length
        self.size = min(self.size + T, self.length)
        return T

    def check(self, td: TensorDictBase) -> list[Tensor]:
        """Raise an error naming the key, shape or dtype where ``td`` differs from the storage;
        returns its leaves in the storage's order."""
        found = _tensor_leaves(td)
        stored = set(self.keys)
        if found.keys() != stored:
            missing = sorted(map(_spell, stored - found.keys()), key=str)
            extra = sorted(map(_spell, found.keys() - stored), key=str)
            raise KeyError(
                f"batch keys differ from the storage's: missing {missing}, extra {extra}"
            )
        bdims = td.batch_dims
        values = [found[k] for k in self.keys]
        for k, leaf, x in zip(self.keys, self.leaves, values, strict=True):
            if x.is_meta:
                raise ValueError(f"key {_spell(k)!r}: a meta tensor has no data to store")
            if x.shape[bdims:] != leaf.shape[2:]:
                raise ValueError(
                    f"key {_spell(k)!r}: feature shape {tuple(x.shape[bdims:])} differs from the "
                    f"storage's {tuple(leaf.shape[2:])} (batch size {tuple(td.batch_size)})"
                )
            if x.dtype != leaf.dtype:
                raise TypeError(
                    f"key {_spell(k)!r}: dtype {x.dtype} differs from the storage's {leaf.dtype}"
                )
        return values


def _lazy_zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """Zeros of ``shape``: on the CPU in numpy's zeroed (``calloc``) memory, for a large block
    fresh pages that the OS typically maps as they are first written, so a large buffer commits
    memory as it fills, as SB3's numpy buffers do, where ``torch.zeros`` writes every byte at
    allocation (a 1M-step Atari buffer is ~7 GB). Other devices, and dtypes numpy lacks
    (bfloat16): ``torch.zeros``."""
    if device.type == "cpu":
        try:
            return torch.from_numpy(np.zeros(shape, torch.empty((), dtype=dtype).numpy().dtype))
        except TypeError:  # no numpy twin
            pass
    return torch.zeros(shape, dtype=dtype, device=device)


def _tensor_leaves(td: TensorDictBase) -> dict[tuple[str, ...], Tensor]:
    """Every tensor leaf of ``td`` by path, in one pass over its entries. Non-tensor entries
    (strings, objects) are left out of ``keys(leaves_only=True)``: storing the rest would drop
    them without a word, so they are an error naming the key."""
    leaves = {}
    for key, value in td.items(include_nested=True, leaves_only=False):
        if is_non_tensor(value) or not isinstance(value, (Tensor, TensorDictBase)):
            raise TypeError(
                f"key {key!r}: a {type(value).__name__} entry cannot be stored (only tensors; "
                "keep non-tensor data out of the batch)"
            )
        if isinstance(value, Tensor):
            leaves[_path(key)] = value
    return leaves


def _assemble_unchecked(
    plan: _Plan, leaves: list[Tensor], batch_size: torch.Size, device: torch.device
) -> TensorDict:
    source = {
        name: leaves[item]
        if isinstance(item, int)
        else _assemble_unchecked(item, leaves, batch_size, device)
        for name, item in plan
    }
    return new_unchecked(source, batch_size, device)
