"""Compiled CPU kernels (numba) for the backward recursions.

All arrays are ``[N, T]`` with time last and contiguous, as TorchRL's ``[*B, T, 1]`` tensors are
in memory, so each row is processed in cache: a forward pass that LLVM vectorizes (TD errors,
flag checks, a NaN checksum), then the short serial backward recursion. Flags come as given
(``terminated`` plus ``done`` and/or ``truncated``; ``has_done``/``has_trunc`` say which are real,
a missing one is any placeholder array) so that deriving and checking them costs no extra pass.
``gamma`` is a ``[1, 1]`` array (``gamma_scalar``) or a per-step ``[N, T]`` one. Arithmetic runs in
float64, stored in the output dtype.

``fastmath`` allows reassociation (to vectorize the checksum) but not ``nnan``/``ninf``: NaNs
must survive to be reported. Each kernel returns ``(checksum, flags_ok)``; a NaN checksum sends
the caller to find and name the input at fault.
"""

from __future__ import annotations

import math

import numba
import numpy as np

_FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}


@numba.njit(inline="always")
def _ends(
    terminated: np.ndarray,
    done: np.ndarray,
    truncated: np.ndarray,
    i: int,
    t: int,
    has_done: bool,
    has_trunc: bool,
    terminate: bool,
) -> tuple[bool, bool, bool]:
    """(terminal after the policy, done, flags consistent) of step ``(i, t)``."""
    # Bitwise, not short-circuit, operators: no branches, so the loops vectorize.
    term = terminated[i, t]
    if has_done:
        d = done[i, t]
        ok = (d == (term | truncated[i, t])) if has_trunc else (d | (not term))
    else:
        d = term | truncated[i, t]
        ok = True
    if terminate:
        term = d
    return term, d, ok


@numba.njit(cache=True, nogil=True, fastmath=_FASTMATH)
def gae_kernel(
    reward: np.ndarray,
    value: np.ndarray,
    next_value: np.ndarray,
    terminated: np.ndarray,
    done: np.ndarray,
    truncated: np.ndarray,
    has_done: bool,
    has_trunc: bool,
    gamma: np.ndarray,
    gamma_scalar: bool,
    lmbda: float,
    policy: int,
    advantage: np.ndarray,
    value_target: np.ndarray,
) -> tuple[float, bool]:
    n, t_len = reward.shape
    mask, terminate = policy == 1, policy == 2
    g0 = gamma[0, 0]
    chk = 0.0
    flags_ok = True
    for i in range(n):
        for t in range(t_len):
            term, d, ok = _ends(terminated, done, truncated, i, t, has_done, has_trunc, terminate)
            flags_ok &= ok
            g = g0 if gamma_scalar else gamma[i, t]
            r = reward[i, t]
            v = value[i, t]
            nv = 0.0 if term else next_value[i, t]
            chk += r + v + nv
            advantage[i, t] = 0.0 if (mask & d & (not term)) else r + g * nv - v
            # scratch: the recursion's coefficient, overwritten by the target below
            value_target[i, t] = 0.0 if d else g * lmbda
        acc = 0.0
        for t in range(t_len - 1, -1, -1):
            delta = advantage[i, t]
            c = value_target[i, t]
            acc = delta if c == 0.0 else delta + c * acc
            advantage[i, t] = acc
            value_target[i, t] = acc + value[i, t]
    return chk, flags_ok


@numba.njit(cache=True, nogil=True, fastmath=_FASTMATH)
def td_lambda_kernel(
    reward: np.ndarray,
    value: np.ndarray,
    next_value: np.ndarray,
    terminated: np.ndarray,
    done: np.ndarray,
    truncated: np.ndarray,
    has_done: bool,
    has_trunc: bool,
    gamma: np.ndarray,
    gamma_scalar: bool,
    lmbda: float,
    policy: int,
    value_target: np.ndarray,
) -> tuple[float, bool]:
    n, t_len = reward.shape
    mask, terminate = policy == 1, policy == 2
    g0 = gamma[0, 0]
    chk = 0.0
    flags_ok = True
    for i in range(n):
        ret = 0.0
        for t in range(t_len - 1, -1, -1):
            term, d, ok = _ends(terminated, done, truncated, i, t, has_done, has_trunc, terminate)
            flags_ok &= ok
            g = g0 if gamma_scalar else gamma[i, t]
            r = reward[i, t]
            nv = 0.0 if term else next_value[i, t]
            if mask and d and not term:
                ret = value[i, t]
                chk += r + ret
            else:
                chk += r + nv
                # G_t = r + g m V' at a cut, else r + g ((1 - lambda) V' + lambda G_{t+1})
                cont = 0.0 if (d or t == t_len - 1) else lmbda
                ret = r + g * ((1.0 - cont) * nv + cont * ret)
            value_target[i, t] = ret
    return chk, flags_ok


@numba.njit(cache=True, nogil=True, fastmath=_FASTMATH)
def vtrace_kernel(
    reward: np.ndarray,
    value: np.ndarray,
    next_value: np.ndarray,
    log_rho: np.ndarray,
    terminated: np.ndarray,
    done: np.ndarray,
    truncated: np.ndarray,
    has_done: bool,
    has_trunc: bool,
    gamma: np.ndarray,
    gamma_scalar: bool,
    lmbda: float,
    rho_thresh: float,
    c_thresh: float,
    policy: int,
    advantage: np.ndarray,
    value_target: np.ndarray,
) -> tuple[float, bool]:
    n, t_len = reward.shape
    mask, terminate = policy == 1, policy == 2
    g0 = gamma[0, 0]
    chk = 0.0
    flags_ok = True
    pg_weight = np.empty(t_len)  # rho_bar gamma k: weight of (vs_{t+1} - V'_t) in the advantage
    nv_row = np.empty(t_len)
    for i in range(n):
        # Forward pass (no recursion): rho-weighted TD errors, scratch in the outputs.
        for t in range(t_len):
            term, d, ok = _ends(terminated, done, truncated, i, t, has_done, has_trunc, terminate)
            flags_ok &= ok
            g = g0 if gamma_scalar else gamma[i, t]
            r = reward[i, t]
            v = value[i, t]
            lr = log_rho[i, t]
            nv = 0.0 if term else next_value[i, t]
            chk += r + v + lr + nv
            rho = math.exp(lr)
            rho_bar = min(rho, rho_thresh)
            cut = d | (t == t_len - 1)
            advantage[i, t] = 0.0 if (mask & d & (not term)) else rho_bar * (r + g * nv - v)
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
            vs = value[i, t] + acc
            advantage[i, t] = delta + pg_weight[t] * (vs_next - nv_row[t])
            value_target[i, t] = vs
            vs_next = vs
    return chk, flags_ok
