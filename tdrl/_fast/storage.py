"""Fast twins of the replay storage's row copies: one compiled ``memmove`` call for all leaves.

``RowCopier.write`` is the twin of ``StreamStorage.write_checked`` for a plain TensorDict of
contiguous CPU tensors with one step per stream (or steps of the single stream) that does not
wrap around; ``RowCopier.gather`` is the twin of one ``index_select`` per leaf. Both copy the
same bytes (tests/data/test_fast_extend.py, over the ``fast_mode`` fixture). The saving is
Python work per leaf: ~3.5 us of ``index_select`` overhead per leaf on sample, ~1 us per leaf
on add (``benchmarks/buffers.py`` prints the fast and plain rates side by side).

Checks stay: every call compares each leaf's (dtype, shape, on CPU) with the layout validated
by the checked path for this batch size, and contiguity; anything else returns None and the
caller takes the checked path, which copies or raises an error naming the key.
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

__all__ = ["RowCopier"]

_memmove = ctypes.memmove
_meta = attrgetter("dtype", "shape", "is_cpu")
_contiguous = Tensor.is_contiguous
_data_ptr = Tensor.data_ptr

# counters: [cursor, size] (owned by the storage). geom: length, streams, leaves n, then n base
# addresses and n bytes per step of each leaf (this module's leaf order).
_LENGTH, _STREAMS, _LEAVES, _HEAD = 0, 1, 2, 3


@numba.njit(nogil=True)  # not cached: numba cannot cache a function calling a ctypes pointer
def _write_rows(counters: np.ndarray, geom: np.ndarray, src: tuple[int, ...], steps: int) -> bool:
    # One compiled call for all leaves (a ctypes memmove per leaf from Python costs ~0.6 us
    # each), with the cursor bookkeeping. False, nothing written, when the steps would wrap.
    cursor, length, S, n = counters[0], geom[_LENGTH], geom[_STREAMS], geom[_LEAVES]
    if cursor + steps > length:
        return False
    for i in range(n):
        step = geom[_HEAD + n + i]
        _memmove(geom[_HEAD + i] + cursor * S * step, src[i], steps * S * step)
    counters[0] = (cursor + steps) % length
    counters[1] = min(counters[1] + steps, length)
    return True


@numba.njit(nogil=True)  # not cached: calls a ctypes pointer
def _gather_rows(geom: np.ndarray, dst: tuple[int, ...], index: np.ndarray) -> bool:
    # Row j of every leaf's output = flat row index[j] of that leaf; leaf-major so that each
    # leaf's cache misses overlap. False, nothing copied, for an index out of range.
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


def _single(name: str) -> Callable[[dict[str, Any]], tuple[Any]]:
    return lambda d: (d[name],)


def _empty(d: dict[str, Any]) -> tuple[()]:
    return ()


def _single_item(items: Sequence[Any]) -> tuple[Any]:
    return (items[0],)


def _fetcher(
    root_count: int,
    root_get: Callable[[dict[str, Any]], tuple[Any, ...]],
    nodes: list[tuple[int, str, int, Callable[[dict[str, Any]], tuple[Any, ...]]]],
) -> Callable[[dict[str, Any]], tuple[Any, ...] | None]:
    """The leaves of a TensorDict's root dict in this module's order, or None if its nodes
    differ. ``nodes``: (parent node, name, number of entries, leaf getter) per nested node,
    parents first (node 0 is the root). Raises KeyError where a stored key is missing."""
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


class RowCopier:
    """The compiled row copies of one allocated storage (CPU, no complex leaves).

    Args:
        keys: the storage's leaf paths (sorted), ``leaves`` their ``[L, S, *F]`` tensors.
        counters: the storage's ``[cursor, size]`` int64 array (updated in place by writes).
    """

    def __init__(self, keys: list[tuple[str, ...]], leaves: list[Tensor], counters: np.ndarray):
        self.counters = counters
        self.leaves = leaves
        length, streams = leaves[0].shape[:2]
        # The node tree of the stored keys: the write walks the input TensorDict's dicts
        # directly instead of resolving each nested key; an itemgetter per node fetches its
        # leaves in one C call.
        node_ids: dict[tuple[str, ...], int] = {(): 0}
        counts: dict[tuple[str, ...], set[str]] = {(): set()}
        node_list: list[tuple[int, str]] = []
        names: dict[int, list[str]] = {}
        order: dict[int, list[int]] = {}  # node -> storage leaf numbers, in getter order
        for i, k in enumerate(keys):
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
        getters = {n: itemgetter(*ks) if len(ks) > 1 else _single(ks[0]) for n, ks in names.items()}
        nodes = [
            (p, name, len(counts[inv[i + 1]]), getters.get(i + 1, _empty))
            for i, (p, name) in enumerate(node_list)
        ]
        self._fetch = _fetcher(len(counts[()]), getters.get(0, _empty), nodes)
        self._order = [i for n in [0, *range(1, len(node_ids))] for i in order.get(n, [])]
        self._in_order = itemgetter(*self._order) if len(self._order) > 1 else _single_item
        ordered = [leaves[i] for i in self._order]
        self._geom = np.array(
            [length, streams, len(ordered)]
            + [x.data_ptr() for x in ordered]
            + [x[0, 0].numel() * x.element_size() for x in ordered],
            dtype=np.int64,
        )
        # batch size -> (steps per stream, [(dtype, shape, is_cpu)] in this module's order)
        self._sigs: dict[torch.Size, tuple[int, list[tuple[Any, ...]]]] = {}
        self._protos: dict[int, list[Tensor]] = {}  # empty [B, *F] per leaf, for gather

    def learn(self, batch_size: torch.Size) -> None:
        """Accept batches of ``batch_size`` (the checked path just validated one): ``[S]`` (one
        step per stream) or ``[T]`` with a single stream."""
        length, streams = int(self._geom[_LENGTH]), int(self._geom[_STREAMS])
        bs = batch_size
        if len(bs) != 1 or bs[0] == 0 or (bs[0] != streams and streams != 1):
            return
        steps = 1 if streams > 1 else bs[0]
        if steps > length:
            return
        expected = [
            (self.leaves[i].dtype, torch.Size((*bs, *self.leaves[i].shape[2:])), True)
            for i in self._order
        ]
        if len(self._sigs) < 64:  # bounded: [T] batches of one stream may vary in T
            self._sigs[bs] = (steps, expected)

    def write(self, td: TensorDictBase) -> int | None:
        """Steps written per stream, or None (nothing written) when the checked path must run."""
        sig = self._sigs.get(td.batch_size) if type(td) is TensorDict else None
        if sig is None:
            return None
        try:
            srcs = self._fetch(td._tensordict)  # type: ignore[attr-defined]
            if srcs is None or list(map(_meta, srcs)) != sig[1] or not all(map(_contiguous, srcs)):
                return None
        except (KeyError, AttributeError, TypeError, RuntimeError):
            return None  # a missing key, a non-tensor or sparse leaf: the checked path names it
        if _write_rows(self.counters, self._geom, tuple(map(_data_ptr, srcs)), sig[0]):
            return sig[0]
        return None  # it would wrap around

    def gather(self, index: Tensor) -> list[Tensor] | None:
        """Rows ``index`` of every leaf (storage order), or None (nothing done) when the index is
        not a contiguous 1-D int64 CPU tensor within range."""
        if index.dtype != torch.int64 or index.dim() != 1 or not index.is_cpu:
            return None
        if not index.is_contiguous():
            return None
        protos = self._protos.get(index.shape[0])
        if protos is None:
            protos = [
                torch.empty((index.shape[0], *x.shape[2:]), dtype=x.dtype) for x in self.leaves
            ]
            if len(self._protos) < 16:  # bounded: batch sizes seldom vary
                self._protos[index.shape[0]] = protos
        # empty_like of a cached [B, *F] tensor: ~0.7 us, torch.empty(shape, dtype) ~1.5
        out = list(map(torch.empty_like, protos))
        if _gather_rows(self._geom, tuple(map(_data_ptr, self._in_order(out))), index.numpy()):
            return out
        return None
