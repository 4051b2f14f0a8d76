"""Compiled CPU kernels (numba) for the backward recursions.

All arrays are ``[N, T]`` with time last and contiguous, as TorchRL's ``[*B, T, 1]`` tensors are
in memory, so each row is processed in cache: a forward pass that LLVM vectorizes (TD errors,
flag checks, a NaN checksum), then the short serial backward recursion. Every kernel takes the
inputs they share as one :class:`KernelRows` (built by ``Rows.kernel_rows``) and reads a step
through :func:`_step`, so the flag algebra and the truncation policy are written once. Flags
come as given (``terminated`` plus ``done`` and/or ``truncated``; ``has_done``/``has_trunc`` say
which are real, a missing one is any placeholder array) so that deriving and checking them costs
no extra pass. Arithmetic runs in float64, stored in the output dtype.

``fastmath`` allows reassociation (to vectorize the checksum) but not ``nnan``/``ninf``: NaNs
must survive to be reported. Each kernel returns ``(checksum, flags_ok)``; a NaN checksum sends
the caller to find and name the input at fault.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

_FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}

# Truncation policies, as the kernels see them.
BOOTSTRAP, MASK, TERMINATE = 0, 1, 2


class KernelRows(NamedTuple):
    """The inputs every kernel reads, as ``[N, T]`` arrays (``value`` may be a placeholder
    where the estimator does not read it)."""

    reward: np.ndarray
    value: np.ndarray
    next_value: np.ndarray
    terminated: np.ndarray
    done: np.ndarray  # a placeholder unless has_done
    truncated: np.ndarray  # a placeholder unless has_trunc
    has_done: bool
    has_trunc: bool
    gamma: float  # the discount, unless per_step_gamma
    gamma_steps: np.ndarray  # [N, T] per-step discounts if per_step_gamma, else a placeholder
    per_step_gamma: bool
    policy: int  # BOOTSTRAP, MASK or TERMINATE


@numba.njit(inline="always")
def _step(rows: KernelRows, i: int, t: int) -> tuple[float, float, float, float, bool, bool, bool]:
    """``(r, V, V', gamma, done, masked, flags_ok)`` of step ``(i, t)`` after the truncation
    policy: ``V'`` is 0 after a terminal state and at a masked one; ``masked`` is a truncated
    step under MASK."""
    # Bitwise, not short-circuit, operators: no branches, so the loops vectorize.
    term = rows.terminated[i, t]
    if rows.has_done:
        done = rows.done[i, t]
        ok = (done == (term | rows.truncated[i, t])) if rows.has_trunc else (done | (not term))
    else:
        done = term | rows.truncated[i, t]
        ok = True
    if rows.policy == TERMINATE:
        term = done
    gamma = rows.gamma_steps[i, t] if rows.per_step_gamma else rows.gamma
    masked = (rows.policy == MASK) & done & (not term)
    # V' is read after a running step only: 0 after a terminal one, and after a truncated one
    # under MASK (no final observation: its V' may be NaN and must not reach a product)
    next_value = 0.0 if term | masked else rows.next_value[i, t]
    return rows.reward[i, t], rows.value[i, t], next_value, gamma, done, masked, ok


@numba.njit(inline="always")
def _gae_forward(
    rows: KernelRows, i: int, lmbda: float, delta: np.ndarray, coeff: np.ndarray
) -> tuple[float, bool]:
    """Row ``i``'s TD errors into ``delta`` and its recursion coefficients (0 at a done step)
    into ``coeff``, both float64 scratch rows; ``(checksum, flags_ok)``."""
    chk = 0.0
    flags_ok = True
    for t in range(rows.reward.shape[1]):
        r, v, nv, g, done, masked, ok = _step(rows, i, t)
        flags_ok &= ok
        chk += r + v + nv
        delta[t] = 0.0 if masked else r + g * nv - v
        coeff[t] = 0.0 if done else g * lmbda
    return chk, flags_ok


@numba.njit(inline="always")
def _gae_back(delta: np.ndarray, coeff: np.ndarray, t: int, acc: float) -> float:
    """One step of ``A_t = delta_t + c_t A_{t+1}`` in place (``A_t = delta_t`` at a cut,
    whatever ``A_{t+1}`` holds)."""
    c = coeff[t]
    acc = delta[t] if c == 0.0 else delta[t] + c * acc
    delta[t] = acc
    return acc


@numba.njit(inline="always")
def _gae_write(
    value: np.ndarray, i: int, adv: np.ndarray, advantage: np.ndarray, value_target: np.ndarray
) -> None:
    """Row ``i``'s advantage and value target (``A + V``) from its float64 scratch row."""
    for t in range(adv.shape[0]):
        advantage[i, t] = adv[t]
        value_target[i, t] = adv[t] + value[i, t]


@numba.njit(cache=True, nogil=True, fastmath=_FASTMATH)
def gae_kernel(
    rows: KernelRows, lmbda: float, advantage: np.ndarray, value_target: np.ndarray
) -> tuple[float, bool]:
    # The backward recursion is a chain of dependent multiply-adds: one row at a time it runs at
    # the chain's latency. Four rows side by side keep four independent chains in flight. The
    # chains read and write float64 scratch rows (in L1): the float32 conversions stay in the
    # forward and write-out passes, which LLVM vectorizes.
    n, t_len = rows.reward.shape
    value = rows.value
    delta = np.empty((4, t_len))
    coeff = np.empty((4, t_len))
    chk = 0.0
    flags_ok = True
    blocked = n - n % 4
    for i in range(0, blocked, 4):
        for k in range(4):
            c, ok = _gae_forward(rows, i + k, lmbda, delta[k], coeff[k])
            chk += c
            flags_ok &= ok
        d0, d1, d2, d3 = delta[0], delta[1], delta[2], delta[3]
        c0, c1, c2, c3 = coeff[0], coeff[1], coeff[2], coeff[3]
        a0 = a1 = a2 = a3 = 0.0
        for t in range(t_len - 1, -1, -1):
            a0 = _gae_back(d0, c0, t, a0)
            a1 = _gae_back(d1, c1, t, a1)
            a2 = _gae_back(d2, c2, t, a2)
            a3 = _gae_back(d3, c3, t, a3)
        for k in range(4):
            _gae_write(value, i + k, delta[k], advantage, value_target)
    for i in range(blocked, n):
        c, ok = _gae_forward(rows, i, lmbda, delta[0], coeff[0])
        chk += c
        flags_ok &= ok
        acc = 0.0
        for t in range(t_len - 1, -1, -1):
            acc = _gae_back(delta[0], coeff[0], t, acc)
        _gae_write(value, i, delta[0], advantage, value_target)
    return chk, flags_ok


@numba.njit(cache=True, nogil=True, fastmath=_FASTMATH)
def td_lambda_kernel(
    rows: KernelRows, lmbda: float, value_target: np.ndarray
) -> tuple[float, bool]:
    n, t_len = rows.reward.shape
    chk = 0.0
    flags_ok = True
    for i in range(n):
        ret = 0.0
        for t in range(t_len - 1, -1, -1):
            r, v, nv, g, done, masked, ok = _step(rows, i, t)
            flags_ok &= ok
            if masked:
                ret = v
                chk += r + ret
            else:
                chk += r + nv
                # G_t = r + g m V' at a cut, else r + g ((1 - lambda) V' + lambda G_{t+1})
                cont = 0.0 if (done or t == t_len - 1) else lmbda
                ret = r + g * ((1.0 - cont) * nv + cont * ret)
            value_target[i, t] = ret
    return chk, flags_ok


@numba.njit(cache=True, nogil=True, fastmath=_FASTMATH)
def vtrace_kernel(
    rows: KernelRows,
    log_rho: np.ndarray,
    lmbda: float,
    rho_thresh: float,
    c_thresh: float,
    advantage: np.ndarray,
    value_target: np.ndarray,
) -> tuple[float, bool]:
    n, t_len = rows.reward.shape
    chk = 0.0
    flags_ok = True
    pg_weight = np.empty(t_len)  # rho_bar gamma k: weight of (vs_{t+1} - V'_t) in the advantage
    nv_row = np.empty(t_len)
    for i in range(n):
        # Forward pass (no recursion): rho-weighted TD errors, scratch in the outputs.
        for t in range(t_len):
            r, v, nv, g, done, masked, ok = _step(rows, i, t)
            flags_ok &= ok
            lr = log_rho[i, t]
            chk += r + v + lr + nv
            rho = math.exp(lr)
            rho_bar = min(rho, rho_thresh)
            cut = done | (t == t_len - 1)
            advantage[i, t] = 0.0 if masked else rho_bar * (r + g * nv - v)
            value_target[i, t] = 0.0 if cut else g * lmbda * min(rho, c_thresh)
            pg_weight[t] = 0.0 if cut else rho_bar * g
            nv_row[t] = nv
        # Backward pass: vs_t - V_t = delta_t + c_t (vs_{t+1} - V_{t+1}).
        acc = 0.0
        vs_next = 0.0
        for t in range(t_len - 1, -1, -1):
            delta = advantage[i, t]
            c = value_target[i, t]
            acc = delta if c == 0.0 else delta + c * acc
            vs = rows.value[i, t] + acc
            advantage[i, t] = delta + pg_weight[t] * (vs_next - nv_row[t])
            value_target[i, t] = vs
            vs_next = vs
    return chk, flags_ok
