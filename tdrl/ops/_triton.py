"""The CUDA twin of :func:`tdrl.ops.scan.reverse_linear_scan`: one Triton kernel launch.

On a GPU the pure-torch blockwise scan is a few dozen small kernel launches (at PPO sizes, more
time than the rest of GAE); the Triton kernel (``tdrl/ops/_triton_kernel.py``) solves the whole
recurrence in one launch (``benchmarks/estimators.py --device cuda``). It runs under
``backend="auto"`` for CUDA tensors when no gradient is needed and Triton imports (it ships with
torch's CUDA builds); otherwise, and after a failed first compile (say, no C compiler for
Triton's launcher: one warning), the torch scan runs. It is not differentiable; the torch scan
is.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch
from torch import Tensor

_FLOATS = (torch.float32, torch.float64)
_broken: list[str] = []  # why the kernel failed once (then the torch scan runs)


@functools.cache
def _kernel() -> Any:
    """The jitted kernel, or ``None`` where Triton is not installed."""
    try:
        from tdrl.ops._triton_kernel import reverse_scan_kernel
    except Exception:  # not installed, or an install that does not import
        return None
    return reverse_scan_kernel


def usable(*tensors: Tensor | float) -> bool:
    """Whether the kernel can take these tensors: all CUDA, float32/float64 (or flags), no
    gradient needed, and a working Triton."""
    needs_grad, ok = False, True
    for t in tensors:
        if isinstance(t, Tensor):
            ok = ok and t.is_cuda and (t.dtype in _FLOATS or not t.is_floating_point())
            needs_grad = needs_grad or t.requires_grad
    if not ok or (needs_grad and torch.is_grad_enabled()) or _broken:
        return False
    return _kernel() is not None


def reverse_scan(a: Tensor, c: Tensor, *, strict: bool = False) -> Tensor | None:
    """Solve ``x_t = a_t + c_t x_{t+1}`` backwards over the last dim with ``x_T = 0``, as
    :func:`~tdrl.ops.scan.reverse_linear_scan` does; ``None`` if the kernel failed (warned
    once; the caller runs the torch scan), or with ``strict`` (``backend="triton"``) the
    kernel's error.

    Shapes:
        a, c, x: ``[N, T]`` on one CUDA device.
    """
    n, t = a.shape
    a, c = a.contiguous(), c.to(a.dtype).contiguous()
    x = torch.empty_like(a)
    if n == 0 or t == 0:
        return x
    block = min(1024, max(16, 1 << (t - 1).bit_length()))
    try:
        with torch.cuda.device(a.device):
            _kernel()[(n,)](a, c, x, t, BLOCK=block, num_warps=4 if block >= 512 else 1)
    except Exception as err:  # a compile or launch failure: fall back for good, say why
        _broken.append(f"{type(err).__name__}: {err}")
        if strict:
            raise
        warnings.warn(
            f"tdrl's Triton scan failed ({_broken[0]}); the torch scan runs instead",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return x
