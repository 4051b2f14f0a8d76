"""Preallocated per-stream TensorDict storage, the data half of every tdrl replay buffer.

Layout: every leaf of the first batch gets a tensor ``[L, S, *F]`` (time-major, like SB3's
``[buffer_size, n_envs, ...]``), ``S`` env streams of ``L = capacity // S`` steps each, all
streams written in lockstep by one cursor. Item ``(p, s)`` has the flat index ``p * S + s``;
a stream's steps stay contiguous in time, so n-step and slice windows never mix envs.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from operator import attrgetter, itemgetter
from typing import Any

import numba
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torch import Tensor

NestedKey = str | tuple[str, ...]

__all__ = ["StreamStorage"]


_memmove = ctypes.memmove


_meta = attrgetter("dtype", "shape", "is_cpu")
_contiguous = Tensor.is_contiguous
_data_ptr = Tensor.data_ptr


def _single_item(items: Sequence[Any]) -> tuple[Any]:
    return (items[0],)


def _none(d: dict[str, Any]) -> None:
    return None


def _empty(d: dict[str, Any]) -> tuple[()]:
    return ()


def _fetcher(
    root_count: int,
    root_get: Callable[[dict[str, Any]], tuple[Any, ...]],
    nodes: list[tuple[int, str, int, Callable[[dict[str, Any]], tuple[Any, ...]]]],
) -> Callable[[dict[str, Any]], tuple[Any, ...] | None]:
    """The leaves of a TensorDict's root dict in fast-path order, or None if its nodes differ.

    ``nodes``: (parent node, name, number of entries, leaf getter) per nested node, parents
    first (node 0 is the root). Raises KeyError where a stored key is missing.
    """
    if len(nodes) == 1:  # the common layout (a "next" sub-dict): no loop, ~0.2 us less
        (_, name, count, get) = nodes[0]

        def fetch_one(root: dict[str, Any]) -> tuple[Any, ...] | None:
            sub = root[name]
            if len(root) != root_count or type(sub) is not TensorDict:
                return None
            d = sub._tensordict
            return root_get(root) + get(d) if len(d) == count else None

        return fetch_one

    def fetch(root: dict[str, Any]) -> tuple[Any, ...] | None:
        if len(root) != root_count:
            return None
        dicts, srcs = [root], root_get(root)
        for parent, name, count, get in nodes:
            sub = dicts[parent][name]
            if type(sub) is not TensorDict or len(sub._tensordict) != count:
                return None
            dicts.append(sub._tensordict)
            srcs += get(sub._tensordict)
        return srcs

    return fetch


def _single(name: str) -> Callable[[dict[str, Any]], tuple[Any]]:
    return lambda d: (d[name],)


# ``_geom`` layout: cursor, size, length, streams, leaves n, then n base addresses and n bytes
# per step of each leaf (fast-path order). One int64 array: one argument to unbox, not five.
_CURSOR, _SIZE, _LENGTH, _STREAMS, _LEAVES, _HEAD = 0, 1, 2, 3, 4, 5


@numba.njit(nogil=True)  # not cached: numba cannot cache a function calling a ctypes pointer
def _write_rows(geom: np.ndarray, src: tuple[int, ...], steps: int) -> bool:
    # One compiled call for all leaves (a ctypes memmove per leaf from Python costs ~0.6 us
    # each), with the cursor bookkeeping; ``src`` is a tuple of ints (cheaper to pass than an
    # array built per call). False, nothing written, when the steps would wrap around.
    cursor, length, S, n = geom[_CURSOR], geom[_LENGTH], geom[_STREAMS], geom[_LEAVES]
    if cursor + steps > length:
        return False
    for i in range(n):
        step = geom[_HEAD + n + i]
        _memmove(geom[_HEAD + i] + cursor * S * step, src[i], steps * S * step)
    geom[_CURSOR] = (cursor + steps) % length
    geom[_SIZE] = min(geom[_SIZE] + steps, length)
    return True


@numba.njit(nogil=True)  # not cached: calls a ctypes pointer
def _gather_rows(geom: np.ndarray, dst: tuple[int, ...], index: np.ndarray) -> bool:
    # Row j of every leaf's output = flat row index[j] of that leaf. A memmove per row (a
    # compiled call); leaf-major so that each leaf's misses overlap. False, nothing copied, for
    # an index out of range.
    rows = geom[_LENGTH] * geom[_STREAMS]
    for j in range(index.shape[0]):
        if index[j] < 0 or index[j] >= rows:
            return False
    n = geom[_LEAVES]
    for i in range(n):
        step, base, out = geom[_HEAD + n + i], geom[_HEAD + i], dst[i]
        for j in range(index.shape[0]):
            _memmove(out + j * step, base + index[j] * step, step)
    return True


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
        # cursor: next time position to write, shared by all streams; size: written time
        # positions per stream (<= length); both live in _geom for the compiled write.
        self._geom = np.array([0, 0, self.length, num_streams, 0], dtype=np.int64)
        self.keys: list[tuple[str, ...]] = []
        self.leaves: list[Tensor] = []  # [L, S, *F]
        self.flat: list[Tensor] = []  # [L * S, *F] views
        # Fast-path walk of an input TensorDict's dicts: the root's leaf getter, then per nested
        # node (parent node, name, number of entries, leaf getter), parents first.
        self._fetch: Callable[[dict[str, Any]], tuple[Any, ...] | None] = _none
        self._order: list[int] = []  # storage leaf numbers in the fast path's order
        self._sigs: dict[torch.Size, tuple[int, list[tuple[Any, ...]]]] = {}
        self._fast = False  # whether the memcpy write path applies (CPU storage, no complex)
        self._protos: dict[int, list[Tensor]] = {}  # empty [B, *F] per leaf, for gather
        self._in_order: Callable[[Sequence[Any]], tuple[Any, ...]] = _single_item

    @property
    def cursor(self) -> int:
        return int(self._geom[_CURSOR])

    @cursor.setter
    def cursor(self, value: int) -> None:
        self._geom[_CURSOR] = value

    @property
    def size(self) -> int:
        return int(self._geom[_SIZE])

    @size.setter
    def size(self, value: int) -> None:
        self._geom[_SIZE] = value

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
        self.leaves, self.flat = [], []
        for k in self.keys:
            x = td.get(_spell(k))
            leaf = torch.zeros(
                (self.length, self.num_streams, *x.shape[batch_dims:]),
                dtype=x.dtype,
                device=self.device,
            )
            self.leaves.append(leaf)
            self.flat.append(leaf.view(self.length * self.num_streams, *leaf.shape[2:]))
        self._index_nodes()

    def _index_nodes(self) -> None:
        # The node tree of the stored keys, for the fast extend path that walks the input
        # TensorDict's dicts directly instead of resolving each nested key; an itemgetter per
        # node fetches its leaves in one C call.
        node_ids: dict[tuple[str, ...], int] = {(): 0}
        counts: dict[tuple[str, ...], set[str]] = {(): set()}
        node_list: list[tuple[int, str]] = []
        names: dict[int, list[str]] = {}
        order: dict[int, list[int]] = {}  # node -> storage leaf numbers, in getter order
        for i, k in enumerate(self.keys):
            for depth in range(1, len(k)):
                parent, node = k[: depth - 1], k[:depth]
                counts[parent].add(k[depth - 1])
                if node not in node_ids:
                    node_ids[node] = len(node_ids)
                    counts[node] = set()
                    node_list.append((node_ids[parent], k[depth - 1]))
            counts[k[:-1]].add(k[-1])
            names.setdefault(node_ids[k[:-1]], []).append(k[-1])
            order.setdefault(node_ids[k[:-1]], []).append(i)
        inv = {v: k for k, v in node_ids.items()}
        # itemgetter of a single name returns the item, not a 1-tuple: wrap those.
        getters = {n: itemgetter(*ks) if len(ks) > 1 else _single(ks[0]) for n, ks in names.items()}
        nodes = [
            (p, name, len(counts[inv[i + 1]]), getters.get(i + 1, _empty))
            for i, (p, name) in enumerate(node_list)
        ]
        self._fetch = _fetcher(len(counts[()]), getters.get(0, _empty), nodes)
        self._order = [i for n in [0, *range(1, len(node_ids))] for i in order.get(n, [])]
        self._in_order = itemgetter(*self._order) if len(self._order) > 1 else _single_item
        self._sigs, self._protos = {}, {}
        leaves = [self.leaves[i] for i in self._order]
        # The memcpy path needs host memory and plain values: complex leaves may carry a lazy
        # conjugate bit, which a byte copy would drop.
        fast = self.device.type == "cpu" and not any(x.is_complex() for x in leaves)
        self._fast = fast
        head = [self.cursor, self.size, self.length, self.num_streams, len(leaves) if fast else 0]
        self._geom = np.array(
            head
            + [x.data_ptr() for x in leaves]
            + [x[0, 0].numel() * x.element_size() for x in leaves],
            dtype=np.int64,
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
        # Hot path of ``extend`` (issue 4: at least SB3's add rate): CPU storage, a plain
        # TensorDict of contiguous CPU tensors, one step per stream (or one stream), no wrap.
        # Python work per leaf is what costs here (~0.1 us per tensor attribute, ~0.5 us per
        # leaf for a naive check), so each pass over the leaves is one C-level call: itemgetters
        # fetch the leaves of each node, ``map`` with an attrgetter collects (dtype, shape,
        # is_cpu), compared with the cached signature of this batch size in one list
        # comparison, then contiguity and data pointers; one compiled call memmoves every leaf
        # into its row and moves the cursor. Anything else (any mismatch) goes to the checked
        # path, which copies the batch or raises an error naming the fault.
        sig = self._sigs.get(td.batch_size) if type(td) is TensorDict else None
        if sig is None:
            return self._checked_write(td)
        try:
            srcs = self._fetch(td._tensordict)
            if srcs is None or list(map(_meta, srcs)) != sig[1] or not all(map(_contiguous, srcs)):
                return self._checked_write(td)
        except (KeyError, AttributeError, TypeError, RuntimeError):
            # a missing key, a non-tensor or sparse leaf: the checked path names it
            return self._checked_write(td)
        if _write_rows(self._geom, tuple(map(_data_ptr, srcs)), sig[0]):
            return sig[0]
        return self._checked_write(td)  # it would wrap around: two copies per leaf

    def _checked_write(self, td: TensorDictBase) -> int:
        T = self.steps_of(td)
        if T == 0:
            return 0
        if self._fast and type(td) is TensorDict and td.batch_size not in self._sigs:
            self._signature(td.batch_size)  # the fast path takes the next such batch
        self._slow_write(td, T)
        self.cursor = (self.cursor + T) % self.length
        self.size = min(self.size + T, self.length)
        return T

    def _signature(self, bs: torch.Size) -> None:
        # (steps, [(dtype, shape, is_cpu)] in fast-path leaf order) for a batch size that the
        # fast path can memcpy: [S] (one step per stream) or [T] with a single stream.
        if len(bs) != 1 or bs[0] == 0 or (bs[0] != self.num_streams and self.num_streams != 1):
            return
        steps = 1 if self.num_streams > 1 else bs[0]
        expected = [
            (self.leaves[i].dtype, torch.Size((*bs, *self.leaves[i].shape[2:])), True)
            for i in self._order
        ]
        if len(self._sigs) < 64:  # bounded: [T] batches of one stream may vary in T
            self._sigs[bs] = (steps, expected)

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
        """The rows ``index`` of the flat views. Shapes: index ``[B]`` -> ``[B, *F]``.

        All leaves of a CPU storage: one compiled call copies every row of every leaf (issue
        4's sample speed; ``index_select`` costs ~3.5 us of overhead per leaf). Otherwise, or
        for an index out of range (then ``index_select`` raises), one ``index_select`` per leaf.
        """
        if leaves is None and self._fast and index.dtype == torch.int64 and index.dim() == 1:
            if index.is_cpu and index.is_contiguous():
                protos = self._protos.get(index.shape[0])
                if protos is None:
                    protos = self._prototypes(index.shape[0])
                # empty_like of a cached [B, *F] tensor: ~0.7 us, torch.empty(shape, dtype) ~1.5
                out = list(map(torch.empty_like, protos))
                dst = tuple(map(_data_ptr, self._in_order(out)))
                if _gather_rows(self._geom, dst, index.numpy()):
                    return out
        chosen = range(len(self.flat)) if leaves is None else leaves
        return [self.flat[i].index_select(0, index) for i in chosen]

    def _prototypes(self, n: int) -> list[Tensor]:
        protos = [torch.empty((n, *x.shape[1:]), dtype=x.dtype) for x in self.flat]
        if len(self._protos) < 16:  # bounded: batch sizes seldom vary
            self._protos[n] = protos
        return protos

    def oldest(self) -> int:
        """Time position of the oldest stored step."""
        return self.cursor if self.size == self.length else 0
