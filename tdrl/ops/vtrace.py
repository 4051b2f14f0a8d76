r"""V-trace off-policy targets (Espeholt et al. 2018, IMPALA, arXiv:1802.01561).

Episode ends as in ``tdrl.ops.returns``: terminated zeroes the next value and stops the
recursion; truncated stops it and bootstraps (``"bootstrap"``), is masked (``"mask"``: advantage 0,
``vs_t = V_t``) or counts as terminal (``"terminate"``); the last step of the batch is a cut.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tdrl.ops import _kernels
from tdrl.ops._common import AdvantageEstimate, InputError, check_like
from tdrl.ops._prepare import np_view, prepare, scalar


def vtrace(
    reward: Tensor,
    value: Tensor,
    next_value: Tensor,
    log_rho: Tensor,
    terminated: Tensor,
    done: Tensor | None = None,
    *,
    truncated: Tensor | None = None,
    gamma: float | Tensor,
    rho_thresh: float | Tensor = 1.0,
    c_thresh: float | Tensor = 1.0,
    lmbda: float | Tensor = 1.0,
    truncation: str = "bootstrap",
    time_dim: int = -2,
    backend: str = "auto",
    validate: bool = True,
) -> AdvantageEstimate:
    r"""V-trace value targets ``vs`` and policy-gradient advantages.

    With ``rho_t = exp(log_rho_t)`` (target over behaviour probability of the taken action),
    ``rho_bar = min(rho_thresh, rho)``, ``c_t = lambda min(c_thresh, rho)``, and ``m``, ``k`` as in
    ``tdrl.ops.returns`` (``m_t = 0`` after a terminal state, ``k_t = 0`` at a cut):

        delta_t = rho_bar_t (r_t + gamma_t m_t V'_t - V_t)
        vs_t - V_t = delta_t + gamma_t c_t k_t (vs_{t+1} - V_{t+1})
        advantage_t = rho_bar_t (r_t + gamma_t m_t q_t - V_t),  q_t = vs_{t+1} if k_t else V'_t

    (the paper's eq. 1 and its policy-gradient term; ``lambda`` is its section 4.2 variant).

    Args:
        reward: ``r_t``.
        value: ``V(x_t)``.
        next_value: ``V(x_{t+1})`` of the real next observation.
        log_rho: ``log pi(a_t|x_t) - log mu(a_t|x_t)``.
        terminated, done, truncated: Episode-end flags, as in ``tdrl.ops.gae``.
        gamma: Discount, scalar or per-step tensor broadcastable to ``reward``.
        rho_thresh: ``rho_bar`` clip (scalar).
        c_thresh: ``c_bar`` clip (scalar).
        lmbda: Trace decay (scalar).
        truncation: ``"bootstrap"``, ``"mask"`` or ``"terminate"``.
        time_dim: The time dim of the tensors.
        backend: ``"auto"``, ``"numba"``, ``"triton"`` or ``"torch"`` (as in :func:`gae`).
        validate: Check shapes, dtypes, flags and NaNs.

    Returns:
        ``(advantage, value_target)`` with ``value_target = vs``.

    Shapes:
        all inputs and outputs ``[*B, T, *F]``.
    """
    if validate:
        check_like("log_rho", log_rho, reward)
    rows = prepare(reward, value, next_value, terminated, done, truncated, gamma=gamma,
                   truncation=truncation, time_dim=time_dim, backend=backend, validate=validate,
                   extra=(log_rho,))  # fmt: skip
    lam = scalar("lmbda", lmbda, unit=True)
    rho_max = scalar("rho_thresh", rho_thresh)
    c_max = scalar("c_thresh", c_thresh)
    for name, clip in (("rho_thresh", rho_max), ("c_thresh", c_max)):
        if not clip > 0:  # False for NaN (the kernel's min() would then skip the clip)
            raise InputError(name, f"must be > 0 (a clip of importance ratios), got {clip}")
    assert rows.value is not None
    log_rho = log_rho.to(rows.reward.dtype)  # float32 for half-precision inputs, as prepare's
    log_rho_rows = log_rho.movedim(rows.time_dim, -1).reshape(rows.reward.shape)
    if rows.numba:
        advantage = torch.empty_like(rows.reward)
        value_target = torch.empty_like(rows.reward)
        # the ratios by torch's vectorized exp: the kernel's own exp, one at a time, was most
        # of its time
        rho = log_rho_rows.detach().exp()
        checksum, flags_ok = _kernels.vtrace_kernel(
            rows.kernel_rows(), np_view(rho), lam, rho_max, c_max,
            advantage.numpy(), value_target.numpy(),
        )  # fmt: skip
        rows.after_kernel(checksum, flags_ok, log_rho=log_rho_rows)
        return AdvantageEstimate(rows.back(advantage), rows.back(value_target))
    done_rows, truncated_rows, nv = rows.torch_terms(log_rho=log_rho_rows)
    g = rows.gamma_t()
    rho = log_rho_rows.exp()
    rho_bar = rho.clamp_max(rho_max)
    keep = ~rows.cut(done_rows)
    delta = rho_bar * (rows.reward + g * nv - rows.value)
    if rows.mask:
        delta = torch.where(truncated_rows, 0.0, delta)
    coeff = g * lam * rho.clamp_max(c_max) * keep.to(delta.dtype)
    vs = rows.value + rows.scan(delta, coeff)
    vs_next = torch.cat([vs[:, 1:], vs.new_zeros(vs.shape[0], 1)], dim=1)
    q = torch.where(keep, vs_next, nv)
    advantage = rho_bar * (rows.reward + g * q - rows.value)
    if rows.mask:
        advantage = torch.where(truncated_rows, 0.0, advantage)
    return AdvantageEstimate(rows.back(advantage), rows.back(vs))
