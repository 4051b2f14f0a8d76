"""Compiled CPU kernels (numba) for the backward recursions.

All arrays are ``[N, T]`` with time last and contiguous, as TorchRL's ``[*B, T, 1]`` tensors are
in memory, so each row is processed in cache: a forward pass that LLVM vectorizes (TD errors,
flag checks, a NaN checksum) into float64 scratch rows, the short serial backward recursion
there (four rows side by side), then the results written out. Every kernel
takes the inputs they share as one :class:`KernelRows` (built by ``Rows.kernel_rows``) and reads
a step through :func:`_step`, so the flag algebra and the truncation policy are written once. Flags
come as given (``terminated`` plus ``done`` and/or ``truncated``; ``has_done``/``has_trunc`` say
which are real, a missing one is any placeholder array) so that deriving and checking them costs
no extra pass. Arithmetic runs in float64, stored in the output dtype.

``fastmath`` allows reassociation (to vectorize the checksum) but not ``nnan``/``ninf``: NaNs
must survive to be reported. Each kernel returns ``(checksum, flags_ok)``; a NaN checksum sends
the caller to find and name the input at fault.
"""

from __future__ import annotations

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


# The collector's layout (``done``, ``terminated`` and ``truncated`` all given, a scalar gamma,
# the bootstrap policy) as a constant: the forward passes are inlined once with it and once
# with the batch's own layout, and LLVM vectorizes the constant one without the branches the
# others need (~13% of a GAE call on a [64, 2048] batch, benchmarks/estimators.py).
COLLECTOR_LAYOUT = (True, True, False, BOOTSTRAP)


@numba.njit(inline="always")
def _layout(rows: KernelRows) -> tuple[bool, bool, bool, int]:
    """``(has_done, has_trunc, per_step_gamma, policy)`` of ``rows``."""
    return rows.has_done, rows.has_trunc, rows.per_step_gamma, rows.policy


@numba.njit(inline="always")
def _step(
    rows: KernelRows, i: int, t: int, layout: tuple[bool, bool, bool, int]
) -> tuple[float, float, float, float, bool, bool, bool]:
    """``(r, V, V', gamma, done, masked, flags_ok)`` of step ``(i, t)`` after the truncation
    policy: ``V'`` is 0 after a terminal state and at a masked one; ``masked`` is a truncated
    step under MASK. ``layout`` is :func:`_layout`'s (or :data:`COLLECTOR_LAYOUT`)."""
    has_done, has_trunc, per_step_gamma, policy = layout
    # Bitwise, not short-circuit, operators: no branches, so the loops vectorize.
    term = rows.terminated[i, t]
    if has_done:
        done = rows.done[i, t]
        ok = (done == (term | rows.truncated[i, t])) if has_trunc else (done | (not term))
    else:
        done = term | rows.truncated[i, t]
        ok = True
    if policy == TERMINATE:
        term = done
    gamma = rows.gamma_steps[i, t] if per_step_gamma else rows.gamma
    masked = (policy == MASK) & done & (not term)
    # V' is read after a running step only: 0 after a terminal one, and after a truncated one
    # under MASK (no final observation: its V' may be NaN and must not reach a product)
    next_value = 0.0 if term | masked else rows.next_value[i, t]
    return rows.reward[i, t], rows.value[i, t], next_value, gamma, done, masked, ok


@numba.njit(inline="always")
def _scan_block(offset: np.ndarray, coeff: np.ndarray, rows: int) -> None:
    """``x_t = a_t + c_t x_{t+1}`` backwards over the first ``rows`` (4 or 1) scratch rows, in
    place of ``offset`` (``x_t = a_t`` where ``c_t`` is 0, a cut: whatever ``x_{t+1}`` holds,
    a NaN or an infinity included, nothing crosses it).

    The recursion is a chain of dependent multiply-adds: one row at a time it runs at the
    chain's latency, so four rows run side by side (four chains in flight). The scratch rows
    are float64 and in cache (2 x 4 rows, 64 KiB each at T = 2048): the serial part converts
    nothing."""
    if rows == 4:
        a0, a1, a2, a3 = offset[0], offset[1], offset[2], offset[3]
        c0, c1, c2, c3 = coeff[0], coeff[1], coeff[2], coeff[3]
        x0 = x1 = x2 = x3 = 0.0
        for t in range(offset.shape[1] - 1, -1, -1):
            x0 = a0[t] if c0[t] == 0.0 else a0[t] + c0[t] * x0
            x1 = a1[t] if c1[t] == 0.0 else a1[t] + c1[t] * x1
            x2 = a2[t] if c2[t] == 0.0 else a2[t] + c2[t] * x2
            x3 = a3[t] if c3[t] == 0.0 else a3[t] + c3[t] * x3
            a0[t], a1[t], a2[t], a3[t] = x0, x1, x2, x3
    else:
        a, c = offset[0], coeff[0]
        x = 0.0
        for t in range(offset.shape[1] - 1, -1, -1):
            x = a[t] if c[t] == 0.0 else a[t] + c[t] * x
            a[t] = x


@numba.njit(inline="always")
def _gae_forward(
    rows: KernelRows,
    i: int,
    lmbda: float,
    delta: np.ndarray,
    coeff: np.ndarray,
    layout: tuple[bool, bool, bool, int],
) -> tuple[float, bool]:
    """Row ``i``'s TD errors into ``delta`` and its recursion coefficients (0 at a done step)
    into ``coeff``, both float64 scratch rows; ``(checksum, flags_ok)``."""
    chk = 0.0
    flags_ok = True
    for t in range(rows.reward.shape[1]):
        r, v, nv, g, done, masked, ok = _step(rows, i, t, layout)
        flags_ok &= ok
        chk += r + v + nv
        delta[t] = 0.0 if masked else r + g * nv - v
        coeff[t] = 0.0 if done else g * lmbda
    return chk, flags_ok


@numba.njit(inline="always")
def _td_lambda_forward(
    rows: KernelRows,
    i: int,
    lmbda: float,
    offset: np.ndarray,
    coeff: np.ndarray,
    layout: tuple[bool, bool, bool, int],
) -> tuple[float, bool]:
    """Row ``i`` as ``G_t = a_t + c_t G_{t+1}`` into float64 scratch rows: ``a_t = r + g (1 -
    l_t) V'`` and ``c_t = g l_t`` with ``l_t`` lambda inside a segment and 0 at a cut (done or
    the last step); a masked step returns ``V`` (``a_t = V``, ``c_t = 0``)."""
    t_len = rows.reward.shape[1]
    chk = 0.0
    flags_ok = True
    for t in range(t_len):
        r, v, nv, g, done, masked, ok = _step(rows, i, t, layout)
        flags_ok &= ok
        chk += r + (v if masked else nv)
        cont = 0.0 if (done or t == t_len - 1) else lmbda
        offset[t] = v if masked else r + g * (1.0 - cont) * nv
        coeff[t] = 0.0 if (masked or cont == 0.0) else g * cont
    return chk, flags_ok


@numba.njit(inline="always")
def _vtrace_forward(
    rows: KernelRows,
    i: int,
    lmbda: float,
    clipped: tuple[np.ndarray, float, float],
    offset: np.ndarray,
    coeff: np.ndarray,
    delta: np.ndarray,
    pg_weight: np.ndarray,
    next_value: np.ndarray,
    layout: tuple[bool, bool, bool, int],
) -> tuple[float, bool]:
    """Row ``i`` as ``vs_t - V_t = delta_t + c_t (vs_{t+1} - V_{t+1})`` into float64 scratch
    rows: ``delta_t = rho_bar_t (r + g V' - V)`` (0 at a masked step) into ``offset`` (scanned)
    and ``delta``, ``c_t = g lambda min(rho_t, c_bar)`` (0 at a cut), and for the advantage
    ``rho_bar_t g`` (0 at a cut) and ``V'_t``. ``clipped``: the ratios ``rho`` and the
    thresholds ``rho_bar`` and ``c_bar``."""
    ratio, rho_thresh, c_thresh = clipped
    t_len = rows.reward.shape[1]
    chk = 0.0
    flags_ok = True
    for t in range(t_len):
        r, v, nv, g, done, masked, ok = _step(rows, i, t, layout)
        flags_ok &= ok
        rho = ratio[i, t]
        chk += r + v + rho + nv
        rho_bar = min(rho, rho_thresh)
        cut = done | (t == t_len - 1)
        d = 0.0 if masked else rho_bar * (r + g * nv - v)
        offset[t] = d
        delta[t] = d
        coeff[t] = 0.0 if cut else g * lmbda * min(rho, c_thresh)
        pg_weight[t] = 0.0 if cut else rho_bar * g
        next_value[t] = nv
    return chk, flags_ok


GAE, TD_LAMBDA, VTRACE = 0, 1, 2  # what _scan_rows computes


@numba.njit(inline="always")
def _forward(
    rows: KernelRows,
    i: int,
    kind: int,
    lmbda: float,
    clipped: tuple[np.ndarray, float, float],
    scratch: tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]],
    layout: tuple[bool, bool, bool, int],
) -> tuple[float, bool]:
    """Row ``i``'s forward pass of ``kind`` into the scratch rows ``(offset, coeff, extra)``
    (``extra``: V-trace's three, and its ``clipped`` ratios)."""
    offset, coeff, extra = scratch
    if kind == GAE:
        return _gae_forward(rows, i, lmbda, offset, coeff, layout)
    if kind == TD_LAMBDA:
        return _td_lambda_forward(rows, i, lmbda, offset, coeff, layout)
    delta, pg_weight, next_value = extra
    return _vtrace_forward(rows, i, lmbda, clipped, offset, coeff, delta, pg_weight, next_value,
                           layout)  # fmt: skip


@numba.njit(inline="always")
def _scan_rows(
    rows: KernelRows,
    lmbda: float,
    kind: int,
    first: np.ndarray,
    second: np.ndarray,
    ratio: np.ndarray,
    rho_thresh: float,
    c_thresh: float,
) -> tuple[float, bool]:
    """Per block of four rows (then one at a time): the vectorized forward passes into float64
    scratch, the backward scan there, and the vectorized passes writing the results. GAE:
    ``first`` = A, ``second`` = A + V; TD(lambda): ``first`` = G; V-trace: ``first`` = the
    advantage ``rho_bar_t (r + g vs_{t+1} - V)`` (``V'_t`` for ``vs_{t+1}`` at a cut), ``second``
    = vs. ``ratio`` (``rho = exp(log_rho)``) and the thresholds are V-trace's (placeholders
    otherwise)."""
    n, t_len = rows.reward.shape
    value = rows.value
    offset = np.empty((4, t_len))
    coeff = np.empty((4, t_len))
    # V-trace's further rows: delta, the advantage's weight rho_bar g, V'
    extra = np.empty((3, 4, t_len if kind == VTRACE else 0))
    chk = 0.0
    flags_ok = True
    clipped = (ratio, rho_thresh, c_thresh)
    collector_layout = (
        rows.has_done and rows.has_trunc and not rows.per_step_gamma and rows.policy == BOOTSTRAP
    )
    i = 0
    while i < n:
        block = 4 if i + 4 <= n else 1
        for k in range(block):
            # V-trace's three further rows one by one: each a contiguous row, as offset's
            scratch = (offset[k], coeff[k], (extra[0, k], extra[1, k], extra[2, k]))
            if collector_layout:  # the same pass, specialized on the constant layout
                c, ok = _forward(rows, i + k, kind, lmbda, clipped, scratch, COLLECTOR_LAYOUT)
            else:
                c, ok = _forward(rows, i + k, kind, lmbda, clipped, scratch, _layout(rows))
            chk += c
            flags_ok &= ok
        _scan_block(offset, coeff, block)
        for k in range(block):
            x = offset[k]
            if kind == VTRACE:
                for t in range(t_len):
                    x[t] += value[i + k, t]  # vs
                    second[i + k, t] = x[t]
                delta, weight, next_value = extra[0, k], extra[1, k], extra[2, k]
                for t in range(t_len - 1):
                    first[i + k, t] = delta[t] + weight[t] * (x[t + 1] - next_value[t])
                first[i + k, t_len - 1] = delta[t_len - 1]  # a cut: its weight is 0
            else:
                for t in range(t_len):
                    first[i + k, t] = x[t]
                if kind == GAE:
                    for t in range(t_len):
                        second[i + k, t] = x[t] + value[i + k, t]
        i += block
    return chk, flags_ok


_NO_RATIO = np.zeros((0, 0))


@numba.njit(cache=True, nogil=True, fastmath=_FASTMATH)
def gae_kernel(
    rows: KernelRows, lmbda: float, advantage: np.ndarray, value_target: np.ndarray
) -> tuple[float, bool]:
    return _scan_rows(rows, lmbda, GAE, advantage, value_target, _NO_RATIO, 0.0, 0.0)


@numba.njit(cache=True, nogil=True, fastmath=_FASTMATH)
def td_lambda_kernel(
    rows: KernelRows, lmbda: float, value_target: np.ndarray
) -> tuple[float, bool]:
    # G_t = r + g m V' at a cut, else r + g ((1 - lambda) V' + lambda G_{t+1})
    return _scan_rows(rows, lmbda, TD_LAMBDA, value_target, value_target, _NO_RATIO, 0.0, 0.0)


@numba.njit(cache=True, nogil=True, fastmath=_FASTMATH)
def vtrace_kernel(
    rows: KernelRows,
    ratio: np.ndarray,
    lmbda: float,
    rho_thresh: float,
    c_thresh: float,
    advantage: np.ndarray,
    value_target: np.ndarray,
) -> tuple[float, bool]:
    # ratio: the importance ratios rho = exp(log_rho) (a NaN log_rho gives a NaN ratio, which
    # the checksum catches; -inf gives 0, a legal ratio)
    return _scan_rows(rows, lmbda, VTRACE, advantage, value_target, ratio, rho_thresh, c_thresh)
