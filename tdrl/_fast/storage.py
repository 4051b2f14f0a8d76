"""Fast twins of the replay storage's row copies: one compiled ``memmove`` call for all leaves.

``RowCopier.write`` is the twin of ``StreamStorage.write_checked`` for a plain TensorDict of
contiguous CPU tensors with one step per stream (or steps of the single stream) that does not
wrap around; ``RowCopier.gather`` is the twin of one ``index_select`` per leaf. Both copy the
same bytes (tests/data/test_fast_extend.py, over the ``fast_mode`` fixture). The saving is
Python work per leaf, on sample and on add (``benchmarks/buffers.py`` prints the fast and plain
rates side by side).

Checks stay: every call compares each leaf's (dtype, shape, on CPU) with the layout validated
by the checked path for this batch size, and contiguity (and the negative bit of one-element
leaves, see ``RowCopier.learn``); anything else returns None and the caller takes the checked
path, which copies or raises an error naming the key. "On CPU" is read once per batch when the
TensorDict says ``device="cpu"`` (tensordict keeps its leaves there).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import torch
from numba import types
from numba.extending import intrinsic
from tensordict import TensorDict, TensorDictBase
from torch import Tensor

__all__ = ["NONFINITE", "RowCopier"]

_memmove = ctypes.memmove
_data_ptr = Tensor.data_ptr

# geom: the counters cursor and size (the storage reads them through a view, one array less to
# pass per compiled call), length, streams, leaves n, then n base addresses and n bytes per
# step of each leaf (this module's leaf order).
_CURSOR, _SIZE, _LENGTH, _STREAMS, _LEAVES, _HEAD = 0, 1, 2, 3, 4, 5
# geom also holds, after the bytes per step, each leaf's float width for the finiteness scan:
# 4 (float32), 8 (float64) or 0 (not scanned here: not a float, or a half float).


def _pointer_intrinsic(dtype: Any) -> Any:
    """A numba intrinsic that reads an int64 address as a pointer to ``dtype`` (what
    ``numba.carray`` takes)."""
    pointer = types.CPointer(dtype)

    def cast(typingctx: Any, address: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return builder.inttoptr(args[0], context.get_value_type(pointer))

        return pointer(types.int64), codegen

    return intrinsic(cast)


_u32_ptr = _pointer_intrinsic(types.uint32)
_u64_ptr = _pointer_intrinsic(types.uint64)


# Finiteness from the bits: a float32 (float64) is NaN or infinite exactly when its exponent
# bits are all ones. An integer max has no order to keep, so the loop vectorises (a float sum
# is a serial chain: about 8x slower on the 41 floats of a HalfCheetah transition).
_EXP32, _EXP64 = np.uint32(0x7F800000), np.uint64(0x7FF0000000000000)


@numba.njit(nogil=True, cache=True)
def _finite32(address: int, count: int) -> bool:
    bits = numba.carray(_u32_ptr(address), count)  # type: ignore[call-arg]
    top = np.uint32(0)
    for b in bits:
        top = max(top, b & _EXP32)
    return top != _EXP32


@numba.njit(nogil=True, cache=True)
def _finite64(address: int, count: int) -> bool:
    bits = numba.carray(_u64_ptr(address), count)  # type: ignore[call-arg]
    top = np.uint64(0)
    for b in bits:
        top = max(top, b & _EXP64)
    return top != _EXP64


@numba.njit(nogil=True)  # not cached: numba cannot cache a function calling a ctypes pointer
def _write_rows(geom: np.ndarray, src: tuple[int, ...], steps: int, check: bool) -> int:
    # One compiled call for all leaves (a ctypes memmove per leaf from Python would pay a
    # Python call per leaf), with the cursor bookkeeping. 1: written. 0, nothing written, when
    # the steps would wrap or a source has no data of its own (a wrapper tensor subclass:
    # data_ptr 0). NONFINITE, nothing written, when ``check`` and a scanned float source holds
    # a NaN or an infinity.
    cursor, length, S, n = geom[_CURSOR], geom[_LENGTH], geom[_STREAMS], geom[_LEAVES]
    if cursor + steps > length:
        return 0
    for i in range(n):
        if src[i] == 0:
            return 0
    if check:
        for i in range(n):
            width = geom[_HEAD + 2 * n + i]
            if width == 0:
                continue
            count = steps * S * geom[_HEAD + n + i] // width
            finite = _finite32(src[i], count) if width == 4 else _finite64(src[i], count)
            if not finite:
                return -1
    for i in range(n):
        step = geom[_HEAD + n + i]
        _memmove(geom[_HEAD + i] + cursor * S * step, src[i], steps * S * step)
    geom[_CURSOR] = (cursor + steps) % length
    geom[_SIZE] = min(geom[_SIZE] + steps, length)
    return 1


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


# What a writer returns when its finiteness check fails (nothing written): the caller names the
# entry (ReplayBuffer's checked path).
NONFINITE = -1


def _writer_source(
    keys: list[tuple[str, ...]], floats: list[int] | None = None
) -> tuple[str, dict[str, Any]]:
    """Python source of a write function specialised to ``keys``, and the names it reads.

    Unrolled per leaf (fetch, then ``dtype is``, ``shape ==``, ``is_cpu`` unless the batch's
    device is the CPU, ``is_contiguous()``, ``data_ptr()``): faster than ``map`` over
    attrgetters (the standard library's dataclasses generate code the same way). Key strings
    are passed as bound names, never pasted into the source. ``floats``: the indices of the
    half-float leaves, which torch checks (a concatenated sum: NaN and inf survive it) when the
    copier checks finiteness; the compiled write scans float32 and float64 leaves itself.
    """
    names: dict[str, Any] = {}
    nodes: dict[tuple[str, ...], str] = {(): "d0"}
    children: dict[tuple[str, ...], set[str]] = {(): set()}
    for k in keys:
        for depth in range(1, len(k)):
            children.setdefault(k[:depth], set())
            children[k[: depth - 1]].add(k[depth - 1])
        children[k[:-1]].add(k[-1])
    lines = [
        "    if type(td) is not _TD:",  # a subclass or a lazy stack: the checked path
        "        return None",
        "    try:",
        "        d0 = td._tensordict",
        f"        if len(d0) != {len(children[()])}:",
        "            return None",
        # A TensorDict with device="cpu" holds CPU leaves only (tensordict moves every leaf it
        # is given): one check for the whole batch instead of ``is_cpu`` per leaf (~50 ns each).
        # A nested TensorDict must say the same device, else each leaf is checked.
        "        dev = td._device",
        "        cpu = dev == _CPU",
    ]
    for node in sorted(children, key=len):
        if not node:
            continue
        var, parent = f"d{len(nodes)}", nodes[node[:-1]]
        nodes[node] = var
        names[f"n_{var}"] = node[-1]
        lines += [
            f"        {var} = {parent}[n_{var}]",
            f"        if type({var}) is not _TD:",
            "            return None",
            f"        cpu = cpu and {var}._device == dev",
            f"        {var} = {var}._tensordict",
            f"        if len({var}) != {len(children[node])}:",
            "            return None",
        ]
    checks = []
    for i, k in enumerate(keys):
        names[f"k{i}"] = k[-1]
        lines.append(f"        x{i} = {nodes[k[:-1]]}[k{i}]")
        checks.append(
            f"x{i}.dtype is t{i} and {{shape{i}}} and (cpu or x{i}.is_cpu) and x{i}.is_contiguous()"
        )
    lines += [
        "        ok = " + " and ".join(checks),
        "        ptrs = (" + "".join(f"x{i}.data_ptr(), " for i in range(len(keys))) + ")",
        "    except (KeyError, AttributeError, TypeError, RuntimeError):",
        "        return None",  # a missing key, a non-tensor or sparse leaf: the checked path
        "    if not ok:",
        "        return None",
    ]
    if floats:  # leaves the compiled scan does not read (half floats): one torch sum
        flat = "".join(f"x{i}.view(-1), " for i in floats)  # contiguous here: free views
        lines += [
            f"    if check and not _isfinite(_cat(({flat})).sum().item()):",
            "        return _NONFINITE",
        ]
    lines += [
        "    done = _write_rows(geom, ptrs, steps, check)",
        "    return steps if done > 0 else (None if done == 0 else _NONFINITE)",
    ]
    return "def write(td):\n" + "\n".join(lines) + "\n", names


class RowCopier:
    """The compiled row copies of one allocated storage (CPU, no complex leaves).

    Args:
        keys: the storage's leaf paths (sorted), ``leaves`` their ``[L, S, *F]`` tensors.
        counters: the storage's ``[cursor, size]`` int64 array. The copier keeps its own copy
            of them (in the array its compiled writes take) and :attr:`counters` is a view
            of it: the storage reads and sets the counters through that view from then on.
        check_finite: writes refuse a batch with a NaN or infinite float value (returning
            :data:`NONFINITE`, nothing written).
    """

    def __init__(
        self,
        keys: list[tuple[str, ...]],
        leaves: list[Tensor],
        counters: np.ndarray,
        *,
        check_finite: bool = False,
    ):
        self.keys, self.leaves = keys, leaves
        length, streams = leaves[0].shape[:2]
        widths = {torch.float32: 4, torch.float64: 8}  # what the compiled scan reads
        self._geom = np.array(
            [int(counters[0]), int(counters[1]), length, streams, len(leaves)]
            + [x.data_ptr() for x in leaves]
            + [x[0, 0].numel() * x.element_size() for x in leaves]
            + [widths.get(x.dtype, 0) for x in leaves],
            dtype=np.int64,
        )
        self.counters = self._geom[_CURSOR : _SIZE + 1]  # a view: [cursor, size]
        self.check_finite = check_finite
        halves = [
            i for i, x in enumerate(leaves) if x.is_floating_point() and x.dtype not in widths
        ]
        self._source, self._names = _writer_source(keys, halves)
        # batch size -> the write function specialised to it (see learn): td -> steps or None
        self.writers: dict[torch.Size, Callable[[TensorDictBase], int | None]] = {}
        self._protos: dict[int, list[Tensor]] = {}  # empty [B, *F] per leaf, for gather

    def learn(self, batch_size: torch.Size) -> None:
        """Accept batches of ``batch_size`` (the checked path just validated one): ``[S]`` (one
        step per stream) or ``[T]`` with a single stream, and the rollouts laid out in memory as
        those: ``[S, 1]`` (one step of each stream; a collector of one step a batch) and
        ``[1, T]`` with a single stream. (A ``[S, T]`` rollout is stream-major, the storage
        time-major: the checked path transposes it.)"""
        length, streams = int(self._geom[_LENGTH]), int(self._geom[_STREAMS])
        bs = batch_size
        if bs in self.writers or len(self.writers) >= 64:  # [T] batches may vary in T
            return
        if 0 in bs:
            return
        if len(bs) == 1 and (bs[0] == streams or streams == 1):
            steps = 1 if streams > 1 else bs[0]
        elif len(bs) == 2 and streams == 1 and bs[0] == 1:
            steps = bs[1]
        elif len(bs) == 2 and bs[1] == 1 and bs[0] == streams:
            steps = 1
        else:
            return
        if steps > length:
            return
        namespace: dict[str, Any] = {
            **self._names,
            "_TD": TensorDict,
            "_CPU": torch.device("cpu"),
            "_write_rows": _write_rows,
            "_cat": torch.cat,
            "_isfinite": math.isfinite,
            "_NONFINITE": NONFINITE,
            "check": self.check_finite,
            "geom": self._geom,
            "steps": steps,
        }
        shape_checks = {}
        for i, x in enumerate(self.leaves):
            namespace[f"t{i}"] = x.dtype
            namespace[f"s{i}"] = shape = torch.Size((*bs, *x.shape[2:]))
            # A TensorDict's leaves start with its batch size, so a leaf of at most one feature
            # dim is pinned by its number of dims and elements (cheaper than building a Size).
            if len(shape) <= len(bs) + 1:
                shape_checks[f"shape{i}"] = (
                    f"x{i}.dim() == {len(shape)} and x{i}.numel() == {shape.numel()}"
                )
            else:
                shape_checks[f"shape{i}"] = f"x{i}.shape == s{i}"
            if shape.numel() == 1:
                # A real tensor carries the negative bit when it is the ``.imag`` of a conjugated
                # complex one; its elements then sit two apart, so only a one-element one passes
                # ``is_contiguous``, and its raw bytes are the value's negation. (Other leaves
                # skip the check. ``as_strided`` over such a view, or ``torch._neg_view``, could
                # make a longer one: not checked.)
                shape_checks[f"shape{i}"] += f" and not x{i}.is_neg()"
        exec(self._source.format(**shape_checks), namespace)  # our generated source
        self.writers[bs] = namespace["write"]

    def write(self, td: TensorDictBase) -> int | None:
        """Steps written per stream, or None (nothing written) when the checked path must run."""
        writer = self.writers.get(td.batch_size)
        return None if writer is None else writer(td)

    def gather(self, index: Tensor) -> list[Tensor] | None:
        """Rows ``index`` of every leaf (storage order), or None (nothing done) when the index is
        not a contiguous 1-D int64 CPU tensor within range."""
        if index.dtype != torch.int64 or index.dim() != 1 or not index.is_cpu:
            return None
        if not index.is_contiguous():
            return None
        protos = self._protos.get(index.shape[0])
        if protos is None:
            n = index.shape[0]
            protos = [
                torch.empty((n, *x.shape[2:]), dtype=x.dtype, device="cpu") for x in self.leaves
            ]  # on the CPU whatever torch's default device (the copies are host memmoves)
            if len(self._protos) < 16:  # bounded: batch sizes seldom vary
                self._protos[n] = protos
        # empty_like of a cached [B, *F] tensor: about half the cost of torch.empty(shape, dtype)
        out = list(map(torch.empty_like, protos))
        if _gather_rows(self._geom, tuple(map(_data_ptr, out)), index.numpy()):
            return out
        return None
