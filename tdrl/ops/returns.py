r"""GAE, TD(0), TD(1) and TD(lambda) over ``[*B, T, *F]`` tensors, exact at every episode end.

Step t is the transition ``s_t -> s_{t+1}``: ``reward[t] = r_t``, ``value[t] = V(s_t)``,
``next_value[t] = V(s_{t+1})`` computed from the *real* next observation (never a reset one), and
the flags are those of ``s_{t+1}`` (TorchRL's ``("next", ...)`` entries). Each step is one of:

* ordinary (no flag): bootstrap from ``next_value[t]``; the recursion continues to t+1.
* terminated: ``s_{t+1}`` is terminal, its value is 0; the recursion stops.
* truncated (``done & ~terminated``): the episode was cut (time limit, slice end); the
  recursion stops, and what happens to the step is the truncation policy:

  - ``"bootstrap"`` (default; partial-episode bootstrapping, Pardo et al. 2018,
    arXiv:1712.00378): the step bootstraps from ``next_value[t]`` like an ordinary one.
  - ``"mask"`` (Brax): the step's TD error and advantage are 0 and its value target equals
    ``value[t]``; the step before it (same episode) continues into it as into any step, so its
    lambda-return uses ``value[t]`` as the truncated step's return.
  - ``"terminate"`` (ablations): the step is treated as terminated (next value 0).
* last step of the batch, no flag (episode unfinished): a cut under every policy: bootstrap from
  ``next_value[T-1]``, the recursion stops because the time axis ends.

A step that is both terminated and truncated is terminated. ``done`` must equal
``terminated | truncated``; pass either or both. With ``gamma_t`` the discount of step t
(a scalar, or a per-step tensor, e.g. ``gamma ** steps_to_next_obs`` for n-step data),
``m_t = 0`` if terminated else 1, and ``k_t = 0`` at a cut (done or last step) else 1:

    delta_t = r_t + gamma_t m_t V'_t - V_t                                (V' = next_value)
    GAE:     A_t = delta_t + gamma_t lambda k_t A_{t+1},   value_target_t = A_t + V_t
    TD(l):   G_t = r_t + gamma_t m_t [(1 - lambda) V'_t + lambda (k_t G_{t+1} + (1 - k_t) V'_t)]

TD(1) is TD(lambda) at lambda = 1 (Monte Carlo, bootstrapped at cuts); TD(0) at lambda = 0.

Backends: a numba kernel on CPU when no gradient is needed (one pass, float64 arithmetic); on CUDA
without a gradient, the torch terms and one Triton kernel for the recursion (``tdrl.ops._triton``,
where Triton imports); else a differentiable pure-torch blockwise scan (``tdrl.ops.scan``). All
give the same numbers up to float rounding. Inputs
are checked (shapes, dtypes, bool flags, ``done`` consistency, NaN in reward/value, and in
next_value where it is used); errors are ``InputError`` naming the argument.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tdrl.ops import _kernels
from tdrl.ops._common import AdvantageEstimate, InputError
from tdrl.ops._prepare import prepare, scalar


def _check_mask_value(truncation: str, value: Tensor | None) -> None:
    if truncation == "mask" and value is None:
        raise InputError("value", "truncation='mask' needs value: a truncated step returns it")


def gae(
    reward: Tensor,
    value: Tensor,
    next_value: Tensor,
    terminated: Tensor,
    done: Tensor | None = None,
    *,
    truncated: Tensor | None = None,
    gamma: float | Tensor,
    lmbda: float | Tensor,
    truncation: str = "bootstrap",
    time_dim: int = -2,
    backend: str = "auto",
    validate: bool = True,
) -> AdvantageEstimate:
    r"""Generalized advantage estimation (Schulman et al. 2015, arXiv:1506.02438).

    ``A_t = delta_t + gamma_t lambda k_t A_{t+1}``, ``delta_t = r_t + gamma_t m_t V'_t - V_t``,
    ``value_target = A + V``: the module docstring defines ``m``, ``k`` and what terminated,
    truncated and done do under each ``truncation`` policy.

    Args:
        reward: ``r_t``.
        value: ``V(s_t)``.
        next_value: ``V(s_{t+1})`` of the real next observation.
        terminated: ``s_{t+1}`` is terminal (bool).
        done: ``terminated | truncated`` (bool); optional if ``truncated`` is given.
        truncated: the episode was cut at ``s_{t+1}`` (bool); optional if ``done`` is given.
        gamma: Discount, scalar or per-step tensor broadcastable to ``reward``.
        lmbda: GAE lambda (scalar).
        truncation: ``"bootstrap"``, ``"mask"`` or ``"terminate"``.
        time_dim: The time dim of the tensors.
        backend: ``"auto"`` (numba on CPU and the Triton scan on CUDA, without grad; else
            torch), ``"numba"``, ``"triton"`` (an error where they cannot run) or ``"torch"``.
        validate: Check shapes, dtypes, flags and NaNs (cheap; off only for trusted callers).

    Returns:
        ``(advantage, value_target)``.

    Shapes:
        all inputs and outputs ``[*B, T, *F]`` (TorchRL: ``[*B, T, 1]``).
    """
    rows = prepare(reward, value, next_value, terminated, done, truncated, gamma=gamma,
                   truncation=truncation, time_dim=time_dim, backend=backend,
                   validate=validate)  # fmt: skip
    lam = scalar("lmbda", lmbda, unit=True)
    assert rows.value is not None
    if rows.numba:
        advantage = torch.empty_like(rows.reward)
        value_target = torch.empty_like(rows.reward)
        checksum, flags_ok = _kernels.gae_kernel(
            rows.kernel_rows(), lam, advantage.numpy(), value_target.numpy()
        )
        rows.after_kernel(checksum, flags_ok)
        return AdvantageEstimate(rows.back(advantage), rows.back(value_target))
    done_rows, truncated_rows, nv = rows.torch_terms()
    g = rows.gamma_t()
    delta = rows.reward + g * nv - rows.value
    if rows.mask:
        delta = torch.where(truncated_rows, 0.0, delta)
    coeff = (g * lam) * (~rows.cut(done_rows)).to(delta.dtype)
    advantage = rows.scan(delta, torch.as_tensor(coeff, dtype=delta.dtype))
    return AdvantageEstimate(rows.back(advantage), rows.back(advantage + rows.value))


def td_lambda_return(
    reward: Tensor,
    next_value: Tensor,
    terminated: Tensor,
    done: Tensor | None = None,
    *,
    truncated: Tensor | None = None,
    value: Tensor | None = None,
    gamma: float | Tensor,
    lmbda: float | Tensor,
    truncation: str = "bootstrap",
    time_dim: int = -2,
    backend: str = "auto",
    validate: bool = True,
) -> Tensor:
    r"""TD(lambda) return (Sutton & Barto 2018, ch. 12; the lambda-return of Watkins 1989).

    ``G_t = r_t + gamma_t m_t [(1 - lambda) V'_t + lambda (k_t G_{t+1} + (1 - k_t) V'_t)]``,
    i.e. the lambda-weighted mix of n-step returns inside each episode segment, each bootstrapped
    from ``next_value``; the module docstring defines ``m``, ``k`` and the truncation policies.
    Under ``"mask"`` a truncated step returns ``value[t]``, so ``value`` is required there and
    unused otherwise. Arguments as in :func:`gae`.

    Returns:
        The lambda-return (the value target; advantage is ``G - value``).

    Shapes:
        all inputs and the output ``[*B, T, *F]``.
    """
    _check_mask_value(truncation, value)
    rows = prepare(reward, value, next_value, terminated, done, truncated, gamma=gamma,
                   truncation=truncation, time_dim=time_dim, backend=backend,
                   validate=validate)  # fmt: skip
    lam = scalar("lmbda", lmbda, unit=True)
    if rows.numba:
        out = torch.empty_like(rows.reward)
        checksum, flags_ok = _kernels.td_lambda_kernel(rows.kernel_rows(), lam, out.numpy())
        rows.after_kernel(checksum, flags_ok, value_truncated_only=True)
        return rows.back(out)
    done_rows, truncated_rows, nv = rows.torch_terms(value_only_truncated=True)
    g = rows.gamma_t()
    keep = (~rows.cut(done_rows)).to(nv.dtype)
    # G_t = [r_t + gamma m_t V'_t - gamma lambda k_t V'_t] + gamma lambda k_t G_{t+1}
    coeff = (g * lam) * keep
    offset = rows.reward + g * nv - coeff * nv
    if rows.mask:
        assert rows.value is not None
        offset = torch.where(truncated_rows, rows.value, offset)
    return rows.back(rows.scan(offset, torch.as_tensor(coeff, dtype=nv.dtype)))


def td1_return(
    reward: Tensor,
    next_value: Tensor,
    terminated: Tensor,
    done: Tensor | None = None,
    *,
    truncated: Tensor | None = None,
    value: Tensor | None = None,
    gamma: float | Tensor,
    truncation: str = "bootstrap",
    time_dim: int = -2,
    backend: str = "auto",
    validate: bool = True,
) -> Tensor:
    r"""TD(1): the discounted return to the segment end, bootstrapped at cuts (Sutton & Barto).

    ``G_t = r_t + gamma_t m_t (k_t G_{t+1} + (1 - k_t) V'_t)``: Monte Carlo inside an episode,
    ``V(s_{t+1})`` at a truncation (``"bootstrap"``) or the batch end, 0 after a terminal state.
    Equal to :func:`td_lambda_return` with ``lmbda=1``; arguments as there.

    Shapes:
        all inputs and the output ``[*B, T, *F]``.
    """
    return td_lambda_return(
        reward, next_value, terminated, done, truncated=truncated, value=value, gamma=gamma,
        lmbda=1.0, truncation=truncation, time_dim=time_dim, backend=backend, validate=validate,
    )  # fmt: skip


def td0_return(
    reward: Tensor,
    next_value: Tensor,
    terminated: Tensor,
    done: Tensor | None = None,
    *,
    truncated: Tensor | None = None,
    value: Tensor | None = None,
    gamma: float | Tensor,
    truncation: str = "bootstrap",
    time_dim: int = -2,
    validate: bool = True,
) -> Tensor:
    r"""TD(0) return, the one-step target ``G_t = r_t + gamma_t m_t V'_t`` (Sutton & Barto).

    Terminated: ``G_t = r_t``. Truncated: ``"bootstrap"`` keeps ``r_t + gamma V'_t``, ``"mask"``
    returns ``value[t]`` (required then), ``"terminate"`` returns ``r_t``. Elementwise torch
    (no recursion, so no kernel); arguments as in :func:`td_lambda_return`.

    Shapes:
        all inputs and the output ``[*B, T, *F]``.
    """
    _check_mask_value(truncation, value)
    if (
        not validate
        and truncation == "bootstrap"
        and terminated.dtype == torch.bool
        and reward.shape == next_value.shape == terminated.shape
        and (not isinstance(gamma, Tensor) or gamma.shape == reward.shape)
    ):
        # Elementwise and "bootstrap": done/truncated change nothing and no time layout is
        # needed, so the caller-checked inputs skip the row preparation (the off-policy
        # losses' Bellman target on every gradient step).
        if isinstance(gamma, Tensor):
            gamma = gamma.to(reward.dtype)
        return reward + gamma * torch.where(terminated, 0.0, next_value)
    rows = prepare(reward, value, next_value, terminated, done, truncated, gamma=gamma,
                   truncation=truncation, time_dim=time_dim, backend="torch",
                   validate=validate)  # fmt: skip
    _, truncated_rows, nv = rows.torch_terms(value_only_truncated=True)
    out = rows.reward + rows.gamma_t() * nv
    if rows.mask:
        assert rows.value is not None
        out = torch.where(truncated_rows, rows.value, out)
    return rows.back(out)
