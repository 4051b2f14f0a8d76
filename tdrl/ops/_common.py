"""Shared plumbing of the value-estimator ops: input checks, flag algebra, layout, backend choice.

Every op works on ``[N, T]`` views with time last (the layout the numba kernels want and the one
TorchRL's ``[*B, T, 1]`` batches already have in memory), and maps results back to the caller's
``[*B, T, *F]`` shape.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, NamedTuple

import torch
from torch import Tensor

Truncation = Literal["bootstrap", "mask", "terminate"]
Backend = Literal["auto", "numba", "triton", "torch"]
BACKENDS: tuple[str, ...] = ("auto", "numba", "triton", "torch")
TRUNCATION_POLICIES: tuple[str, ...] = ("bootstrap", "mask", "terminate")


class AdvantageEstimate(NamedTuple):
    """What an advantage op returns; unpacks like TorchRL's ``(advantage, value_target)``."""

    advantage: Tensor
    value_target: Tensor


class InputError(ValueError):
    """Bad input to an op; ``argument`` names the argument so callers can name their key."""

    def __init__(self, argument: str, detail: str) -> None:
        super().__init__(f"{argument}: {detail}")
        self.argument = argument
        self.detail = detail


def check_discount(name: str, value: float | Tensor) -> None:
    """Raise ``InputError`` unless ``value`` (gamma or lambda) is finite and in [0, 1]: a gamma of
    1.5 or NaN would give diverging or all-NaN returns without a word."""
    if isinstance(value, Tensor):
        if value.numel() == 0:
            raise InputError(name, "is an empty tensor")
        if value.is_floating_point():
            bad = ~((value >= 0) & (value <= 1))  # NaN compares False: caught here
            if bool(bad.any()):
                raise InputError(name, f"must lie in [0, 1], got {value[bad].flatten()[0].item()}")
        elif bool(((value < 0) | (value > 1)).any()):
            raise InputError(name, "must lie in [0, 1]")
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(name, f"must be a number in [0, 1], got {type(value).__name__}")
    if not 0.0 <= value <= 1.0:  # False for NaN
        raise InputError(name, f"must lie in [0, 1], got {value}")


def check_like(name: str, x: Tensor, reward: Tensor, *, flag: bool = False) -> None:
    """Raise ``InputError`` unless ``x`` is a tensor of ``reward``'s shape and device, and of its
    dtype (``flag``: torch.bool, an episode-end flag)."""
    if not isinstance(x, Tensor):
        kind = "a bool tensor" if flag else "a tensor"
        raise InputError(name, f"expected {kind}, got {type(x).__name__}")
    if flag and x.dtype != torch.bool:
        raise InputError(name, f"episode-end flags must be torch.bool, got {x.dtype}")
    if not flag and x.dtype != reward.dtype:
        raise InputError(name, f"dtype {x.dtype} differs from reward's {reward.dtype}")
    if x.shape != reward.shape:
        raise InputError(
            name, f"shape {tuple(x.shape)} does not match reward's {tuple(reward.shape)}"
        )
    if x.device != reward.device:
        raise InputError(name, f"device {x.device} differs from reward's {reward.device}")


def check_flags(
    terminated: Tensor, done: Tensor | None, truncated: Tensor | None, reward: Tensor
) -> None:
    """Dtype, shape and device of the flags (metadata only: no pass over the data)."""
    for name, flag in (("terminated", terminated), ("done", done), ("truncated", truncated)):
        if flag is not None:
            check_like(name, flag, reward, flag=True)


def check_done(terminated: Tensor, done: Tensor, truncated: Tensor | None) -> None:
    """Raise unless ``done == terminated | truncated`` (or ``done`` covers ``terminated``).

    A terminal step that is not done would let the recursion run into the next episode.
    """
    if truncated is not None:
        bad = done != (terminated | truncated)
        what = "terminated | truncated"
    else:
        bad = terminated & ~done
        what = "True wherever terminated is"
    if bool(bad.any()):
        index = tuple(int(i) for i in bad.nonzero()[0])
        raise InputError("done", f"must be {what}; first mismatch at index {index}")


def effective_flags(
    terminated: Tensor, done: Tensor | None, truncated: Tensor | None, truncation: str
) -> tuple[Tensor, Tensor]:
    """``(terminated, done)`` after the truncation policy: ``"terminate"`` makes every end
    terminal. ``done`` defaults to ``terminated | truncated`` (no truncation if both absent)."""
    if done is None:
        done = terminated if truncated is None else terminated | truncated
    if truncation == "terminate":
        terminated = done
    return terminated, done


def time_last(shape: torch.Size, time_dim: int) -> bool:
    """Whether only size-1 dims follow the time dim (TorchRL's ``[*B, T, 1]``): then moving time
    last changes no element order, and one reshape does it (the ops' small-batch overhead is
    mostly such view calls)."""
    return len(shape) == time_dim + 1 or math.prod(shape[time_dim + 1 :]) == 1


def row_view(shape: torch.Size, time_dim: int, last: bool) -> Callable[[Tensor], Tensor]:
    """:func:`to_rows` for tensors of ``shape`` (``last``: :func:`time_last` of it), with the
    layout worked out once (an op views six inputs of one shape on every call)."""
    steps = shape[time_dim]
    if last:
        n = math.prod(shape) // steps if steps else 0
        # sizes as separate ints: torch parses them faster than a tuple or a Size
        return lambda x: x.reshape(n, steps)
    return lambda x: x.movedim(time_dim, -1).reshape(-1, steps)


def to_rows(x: Tensor, time_dim: int) -> Tensor:
    """``[*B, T, *F]`` -> ``[N, T]`` with time last (a view for TorchRL's ``[*B, T, 1]``)."""
    return row_view(x.shape, time_dim, time_last(x.shape, time_dim))(x)


def from_rows(x: Tensor, shape: torch.Size, time_dim: int, last: bool | None = None) -> Tensor:
    """Inverse of :func:`to_rows` for a tensor of the original ``shape`` (``last``:
    :func:`time_last` of it, when the caller has it already)."""
    if time_last(shape, time_dim) if last is None else last:
        return x.reshape(*shape)  # a Size unpacked: torch parses separate ints faster
    moved = list(shape)
    moved.append(moved.pop(time_dim))
    return x.reshape(moved).movedim(-1, time_dim)


def normalize_time_dim(time_dim: int, ndim: int) -> int:
    """Non-negative time dim, with an error naming the shape when it is out of range."""
    if not -ndim <= time_dim < ndim:
        raise ValueError(f"time_dim={time_dim} is out of range for tensors with {ndim} dims")
    return time_dim % ndim


_KERNEL_FLOATS = (torch.float32, torch.float64)


_HALF = (torch.float16, torch.bfloat16)


def working_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the ops compute in: float32 for half-precision inputs (bfloat16 rounds a
    gamma of 0.999 to 1.0, and float16 sums overflow at 65504), else the input's own."""
    return torch.float32 if dtype in _HALF else dtype


def use_numba(backend: str, *tensors: Tensor | float) -> bool:
    """The compiled CPU kernels run unless a gradient is needed or a tensor is not on CPU."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend in ("torch", "triton"):
        return False
    ok, needs_grad = True, False
    for t in tensors:  # one loop: this runs on every estimator call
        if isinstance(t, Tensor):
            ok = ok and t.is_cpu and (t.dtype in _KERNEL_FLOATS or not t.is_floating_point())
            needs_grad = needs_grad or t.requires_grad
    needs_grad = needs_grad and torch.is_grad_enabled()
    if backend == "numba":
        if not ok or needs_grad:
            raise ValueError(
                "backend='numba' needs float32/float64 CPU tensors and no gradient; "
                "use backend='torch' (or 'auto')"
            )
        return True
    return ok and not needs_grad


def raise_nan(bad: int, named: list[tuple[str, Tensor | None]]) -> None:
    """Turn a NaN bitmask (bit i: ``named[i]``) into an ``InputError`` naming the argument."""
    for bit, (name, x) in enumerate(named):
        if bad & (1 << bit) and x is not None:
            where = _bad(name, x.detach()).nonzero()
            index = tuple(int(i) for i in where[0])
            raise InputError(
                name,
                f"contains NaN{'' if name == 'log_rho' else ' or inf'} (first at index "
                f"{index} of shape {tuple(x.shape)})",
            )


def _bad(name: str, x: Tensor) -> Tensor:
    """Where ``x`` cannot enter a return: NaN, and for rewards and values also +-inf (0 * inf
    in the torch scan would turn other episodes to NaN). ``log_rho`` may be -inf (rho = 0)."""
    return torch.isnan(x) if name == "log_rho" else ~torch.isfinite(x)


def nan_bits(named: list[tuple[str, Tensor | None]], used: list[Tensor | None]) -> int:
    """Torch-path twin of the kernels' NaN bitmask: bit i set if ``named[i]`` has a NaN where
    ``used[i]`` (a bool mask, or ``None`` for everywhere) says the value enters the result."""
    bad = 0
    for bit, ((name, x), keep) in enumerate(zip(named, used, strict=True)):
        if x is None:
            continue
        isnan = _bad(name, x.detach())
        if keep is not None:
            isnan = isnan & keep
        if bool(isnan.any()):
            bad |= 1 << bit
    return bad
