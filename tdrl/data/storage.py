"""Preallocated per-stream TensorDict storage, the data half of every tdrl replay buffer.

Layout: every leaf of the first batch gets a tensor ``[L, S, *F]`` (time-major, like SB3's
``[buffer_size, n_envs, ...]``), ``S`` env streams of ``L = capacity // S`` steps each, all
streams written in lockstep by one cursor. Item ``(p, s)`` has the flat index ``p * S + s``;
a stream's steps stay contiguous in time, so n-step and slice windows never mix envs.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numba
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torch import Tensor

NestedKey = str | tuple[str, ...]

__all__ = ["StreamStorage"]


_memmove = ctypes.memmove


@numba.njit(nogil=True)  # not cached: numba cannot cache a function calling a ctypes pointer
def _copy_rows(
    base: np.ndarray, src: np.ndarray, step_bytes: np.ndarray, row: int, rows: int
) -> None:
    # One compiled call for all leaves: a ctypes memmove per leaf from Python costs ~0.6 us each.
    for i in range(base.shape[0]):
        _memmove(base[i] + row * step_bytes[i], src[i], rows * step_bytes[i])


def _path(key: NestedKey) -> tuple[str, ...]:
    return key if isinstance(key, tuple) else (key,)


def _spell(key: tuple[str, ...]) -> NestedKey:
    return key if len(key) > 1 else key[0]


class StreamStorage:
    """``S`` circular streams of ``L`` steps, preallocated from the first batch.

    ``write(td)`` takes ``[S]`` (one step of each stream) or ``[S, T]`` (T steps of each
    stream); with ``S == 1`` a 1-D ``[T]`` batch is T consecutive steps of the single stream
    (what a TorchRL collector over one env yields).

    Shapes:
        leaves ``[L, S, *F]``; flat views ``[L * S, *F]``.
    """

    def __init__(self, capacity: int, num_streams: int, device: torch.device | str = "cpu"):
        if num_streams < 1 or capacity < num_streams:
            raise ValueError(f"need capacity >= num_streams >= 1, got {capacity}, {num_streams}")
        self.num_streams = num_streams
        self.length = capacity // num_streams
        self.device = torch.device(device)
        self.cursor = 0  # next time position to write, shared by all streams
        self.size = 0  # written time positions per stream (<= length)
        self.keys: list[tuple[str, ...]] = []
        self.leaves: list[Tensor] = []  # [L, S, *F]
        self.flat: list[Tensor] = []  # [L * S, *F] views
        self._nodes: list[tuple[int, str, int]] = []  # (parent node, name, number of entries)
        self._leaf_node: list[tuple[int, str]] = []
        self._shapes: dict[torch.Size, list[torch.Size]] = {}
        self._dtypes: list[torch.dtype] = []
        self._addr: list[int] = []  # base addresses of the CPU leaves (fast path)
        self._base = np.zeros(0, dtype=np.uint64)
        self._step_bytes = np.zeros(0, dtype=np.uint64)

    @property
    def allocated(self) -> bool:
        return bool(self.leaves)

    @property
    def capacity(self) -> int:
        return self.length * self.num_streams

    # --- allocation ------------------------------------------------------------------------
    def allocate(self, td: TensorDictBase, batch_dims: int) -> None:
        """Create one ``[L, S, *F]`` tensor per leaf of ``td`` (nested keys included)."""
        keys = [_path(k) for k in td.keys(include_nested=True, leaves_only=True)]
        for k in keys:
            if not isinstance(td.get(_spell(k)), Tensor):
                raise TypeError(f"key {_spell(k)!r}: only tensor leaves can be stored")
        self.keys = sorted(keys)
        self.leaves, self.flat, self._dtypes = [], [], []
        for k in self.keys:
            x = td.get(_spell(k))
            leaf = torch.zeros(
                (self.length, self.num_streams, *x.shape[batch_dims:]),
                dtype=x.dtype,
                device=self.device,
            )
            self.leaves.append(leaf)
            self.flat.append(leaf.view(self.length * self.num_streams, *leaf.shape[2:]))
            self._dtypes.append(x.dtype)
        self._index_nodes()

    def _index_nodes(self) -> None:
        # The node tree of the stored keys, for the fast extend path that walks the input
        # TensorDict's dicts directly instead of resolving each nested key.
        node_ids: dict[tuple[str, ...], int] = {(): 0}
        counts: dict[tuple[str, ...], set[str]] = {(): set()}
        self._nodes, self._leaf_node = [], []
        for k in self.keys:
            for depth in range(1, len(k)):
                parent, node = k[: depth - 1], k[:depth]
                counts[parent].add(k[depth - 1])
                if node not in node_ids:
                    node_ids[node] = len(node_ids)
                    counts[node] = set()
                    self._nodes.append((node_ids[parent], k[depth - 1], 0))
            counts[k[:-1]].add(k[-1])
            self._leaf_node.append((node_ids[k[:-1]], k[-1]))
        inv = {v: k for k, v in node_ids.items()}
        self._root_count = len(counts[()])
        self._nodes = [
            (p, name, len(counts[inv[i + 1]])) for i, (p, name, _) in enumerate(self._nodes)
        ]
        self._shapes = {}
        self._addr = [leaf.data_ptr() for leaf in self.leaves] if self.device.type == "cpu" else []
        self._base = np.array(self._addr, dtype=np.uint64)
        self._step_bytes = np.array(
            [leaf[0, 0].numel() * leaf.element_size() for leaf in self.leaves], dtype=np.uint64
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
        T = self.steps_of(td)
        if T == 0:
            return 0
        if not self._fast_write(td, T):
            self._slow_write(td, T)
        self.cursor = (self.cursor + T) % self.length
        self.size = min(self.size + T, self.length)
        return T

    def _fast_write(self, td: TensorDictBase, T: int) -> bool:
        # Hot path of ``extend`` (issue 4: as fast as SB3's add): CPU storage, a plain
        # TensorDict of contiguous CPU tensors, one step per stream or one stream, no wrap.
        # Validation compares dtypes, shapes and contiguity with the cached signature in list
        # comprehensions; one compiled call then memmoves every leaf into its storage row.
        # Anything else (or any mismatch) takes the checked slow path, which names the fault.
        if not self._addr or type(td) is not TensorDict or td.batch_dims != 1:
            return False
        if self.cursor + T > self.length:
            return False
        root = td._tensordict
        if len(root) != self._root_count:
            return False
        nodes = [root]
        for parent, name, count in self._nodes:
            sub = nodes[parent].get(name)
            if type(sub) is not TensorDict or len(sub._tensordict) != count:
                return False
            nodes.append(sub._tensordict)
        bs = td.batch_size
        shapes = self._shapes.get(bs)
        if shapes is None:
            shapes = [torch.Size((*bs, *leaf.shape[2:])) for leaf in self.leaves]
            self._shapes[bs] = shapes
        try:
            srcs = [nodes[node][name] for node, name in self._leaf_node]
            if (
                [x.dtype for x in srcs] != self._dtypes
                or [x.shape for x in srcs] != shapes
                or not all([x.is_contiguous() and x.is_cpu for x in srcs])
            ):
                return False
            src = np.array([x.data_ptr() for x in srcs], dtype=np.uint64)
        except (KeyError, AttributeError, TypeError):
            return False
        _copy_rows(
            self._base, src, self._step_bytes, self.cursor * self.num_streams, T * self.num_streams
        )
        return True

    def check(self, td: TensorDictBase) -> None:
        """Raise an error naming the key, shape or dtype where ``td`` differs from the storage."""
        keys = {_path(k) for k in td.keys(include_nested=True, leaves_only=True)}
        stored = set(self.keys)
        if keys != stored:
            missing = sorted(map(_spell, stored - keys), key=str)
            extra = sorted(map(_spell, keys - stored), key=str)
            raise KeyError(
                f"batch keys differ from the storage's: missing {missing}, extra {extra}"
            )
        bdims = td.batch_dims
        for k, leaf in zip(self.keys, self.leaves, strict=False):
            x = td.get(_spell(k))
            if not isinstance(x, Tensor):
                raise TypeError(f"key {_spell(k)!r}: expected a tensor, got {type(x).__name__}")
            if x.shape[bdims:] != leaf.shape[2:]:
                raise ValueError(
                    f"key {_spell(k)!r}: feature shape {tuple(x.shape[bdims:])} differs from the "
                    f"storage's {tuple(leaf.shape[2:])} (batch size {tuple(td.batch_size)})"
                )
            if x.dtype != leaf.dtype:
                raise TypeError(
                    f"key {_spell(k)!r}: dtype {x.dtype} differs from the storage's {leaf.dtype}"
                )

    def _slow_write(self, td: TensorDictBase, T: int) -> None:
        self.check(td)
        L, S = self.length, self.num_streams
        skip = max(T - L, 0)  # more steps than a stream holds: only the newest L survive anyway
        start = (self.cursor + skip) % L
        n = T - skip
        first = min(n, L - start)
        for k, leaf in zip(self.keys, self.leaves, strict=False):
            x = td.get(_spell(k))
            # -> [T, S, *F] time-major like the storage
            if td.batch_dims == 2:
                x = x.transpose(0, 1)
            else:  # [S] one step per stream, or [T] steps of the single stream
                x = x.unsqueeze(0) if S > 1 else x.unsqueeze(1)
            x = x[skip:]
            leaf[start : start + first].copy_(x[:first], non_blocking=True)
            if first < n:  # wrap-around: the second of at most two copies
                leaf[: n - first].copy_(x[first:], non_blocking=True)

    # --- reading ---------------------------------------------------------------------------
    def gather(self, index: Tensor, leaves: Sequence[int] | None = None) -> list[Tensor]:
        """One ``index_select`` per leaf on the flat views. Shapes: index ``[B]`` -> ``[B, *F]``."""
        chosen = range(len(self.flat)) if leaves is None else leaves
        return [self.flat[i].index_select(0, index) for i in chosen]

    def oldest(self) -> int:
        """Time position of the oldest stored step."""
        return self.cursor if self.size == self.length else 0
