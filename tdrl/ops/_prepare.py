"""Input preparation shared by the ops: checks, row views, the flags each backend needs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from tdrl.ops import _triton
from tdrl.ops._common import (
    TRUNCATION_POLICIES,
    InputError,
    check_discount,
    check_done,
    check_flags,
    check_like,
    effective_flags,
    from_rows,
    nan_bits,
    normalize_time_dim,
    raise_nan,
    row_view,
    time_last,
    to_rows,
    use_numba,
    working_dtype,
)
from tdrl.ops._kernels import BOOTSTRAP, MASK, TERMINATE, KernelRows
from tdrl.ops.scan import reverse_linear_scan

_POLICY_CODE = {"bootstrap": BOOTSTRAP, "mask": MASK, "terminate": TERMINATE}
_NO_STEPS = np.zeros((1, 1))  # the per-step gamma array when gamma is a scalar


@dataclass
class Rows:
    """Inputs as ``[N, T]`` time-last views, plus what is needed to map results back."""

    reward: Tensor
    value: Tensor | None
    next_value: Tensor
    terminated: Tensor  # as given (before the truncation policy)
    done: Tensor | None
    truncated: Tensor | None
    gamma: float | Tensor
    shape: torch.Size
    time_dim: int
    truncation: str
    numba: bool
    triton: bool  # the torch path's scan is the Triton kernel (CUDA, no gradient)
    backend: str  # as asked: "triton" raises where the kernel fails, "auto" falls back
    validate: bool
    dtype: torch.dtype  # the caller's: results are cast back to it
    time_last: bool = False  # only size-1 dims follow time: a result goes back in one reshape

    @property
    def mask(self) -> bool:
        return self.truncation == "mask"

    def back(self, x: Tensor) -> Tensor:
        """``[N, T]`` -> the caller's ``[*B, T, *F]`` (a result in the caller's dtype)."""
        out = from_rows(x, self.shape, self.time_dim, self.time_last)
        if out.dtype is self.dtype or not out.is_floating_point():
            return out
        return out.to(self.dtype)

    # --- numba path ---------------------------------------------------------------------
    def kernel_rows(self) -> KernelRows:
        """The kernels' inputs; ``value`` falls back to ``reward`` as a placeholder where absent
        (TD(lambda) reads it only under ``"mask"``, which requires it)."""
        term = np_view(self.terminated)
        if isinstance(self.gamma, Tensor):
            gamma, steps = 0.0, self.gamma.detach().to(torch.float64).contiguous().numpy()
        else:
            gamma, steps = self.gamma, _NO_STEPS
        return KernelRows(
            reward=np_view(self.reward),
            value=np_view(self.reward if self.value is None else self.value),
            next_value=np_view(self.next_value),
            terminated=term,
            done=term if self.done is None else np_view(self.done),
            truncated=term if self.truncated is None else np_view(self.truncated),
            has_done=self.done is not None,
            has_trunc=self.truncated is not None,
            gamma=gamma,
            gamma_steps=steps,
            per_step_gamma=isinstance(self.gamma, Tensor),
            policy=_POLICY_CODE[self.truncation],
        )

    def after_kernel(
        self,
        checksum: float,
        flags_ok: bool,
        *,
        value_truncated_only: bool = False,
        log_rho: Tensor | None = None,
    ) -> None:
        """Turn the kernel's checks into errors naming the argument (slow path on error only)."""
        if not self.validate:
            return
        if not flags_ok:
            assert self.done is not None
            check_done(self.back(self.terminated), self.back(self.done), self._back(self.truncated))
        if not math.isfinite(checksum):  # NaN or inf somewhere: find and name it
            where = self.truncated_after_policy() if value_truncated_only else None
            self.nan_check(where, log_rho)

    # --- torch path ---------------------------------------------------------------------
    def scan(self, a: Tensor, c: Tensor) -> Tensor:
        """``x_t = a_t + c_t x_{t+1}`` backwards over the rows: the Triton kernel where it was
        chosen (and works), else the differentiable torch scan."""
        if self.triton:
            x = _triton.reverse_scan(a, c, strict=self.backend == "triton")
            if x is not None:
                return x
        return reverse_linear_scan(a, c)

    def gamma_t(self) -> float | Tensor:
        """``gamma`` for the torch path, in the reward's dtype."""
        if isinstance(self.gamma, Tensor):
            return self.gamma.to(self.reward.dtype)
        return self.gamma

    def flags(self) -> tuple[Tensor, Tensor]:
        """``(terminated, done)`` after the truncation policy (checked when validating)."""
        if self.validate and self.done is not None:
            check_done(self.terminated, self.done, self.truncated)
        return effective_flags(self.terminated, self.done, self.truncated, self.truncation)

    def nan_check(self, value_where: Tensor | None, log_rho: Tensor | None = None) -> None:
        """Raise for NaN in reward and log_rho (anywhere), value where ``value_where`` (None:
        everywhere; the value is not checked if absent), next_value where it is used."""
        terminated, done = effective_flags(
            self.terminated, self.done, self.truncated, self.truncation
        )
        # next_value enters after a step that is not terminal; under "mask" (no final
        # observation) not after a truncated one either
        next_used = ~done if self.mask else ~terminated
        named = [
            ("reward", self.reward),
            ("value", self.value),
            ("next_value", self.next_value),
            ("log_rho", log_rho),
        ]
        bad = nan_bits(named, [None, value_where, next_used, None])
        if bad:
            raise_nan(bad, [(n, self._back(x)) for n, x in named])

    def torch_terms(
        self, *, value_only_truncated: bool = False, log_rho: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The torch path's common start: ``(done, truncated, next_value)`` after the truncation
        policy, the next value 0 after a terminal step; NaN-checked when validating (the value
        only at truncated steps under ``"mask"`` with ``value_only_truncated``)."""
        terminated, done = self.flags()
        truncated = done & ~terminated
        if self.validate:
            self.nan_check(truncated if value_only_truncated and self.mask else None, log_rho)
        unread = done if self.mask else terminated  # as the kernels' _step: V' is not read
        return done, truncated, torch.where(unread, 0.0, self.next_value)

    def truncated_after_policy(self) -> Tensor:
        terminated, done = effective_flags(
            self.terminated, self.done, self.truncated, self.truncation
        )
        return done & ~terminated

    def cut(self, done: Tensor) -> Tensor:
        """Where the recursion stops: a done step, or the last step of the batch."""
        cut = done.clone()
        cut[:, -1] = True
        return cut

    def _back(self, x: Tensor | None) -> Tensor | None:
        return None if x is None else self.back(x)


def scalar(name: str, x: float | Tensor, *, unit: bool = False) -> float:
    """A hyperparameter that must be a scalar (python number or one-element tensor); with
    ``unit``, finite and in [0, 1] (lambda)."""
    if isinstance(x, Tensor) and x.numel() != 1:
        raise InputError(name, f"expected a scalar, got shape {tuple(x.shape)}")
    if unit:
        check_discount(name, x)
    return float(x)


def prepare(
    reward: Tensor,
    value: Tensor | None,
    next_value: Tensor,
    terminated: Tensor,
    done: Tensor | None,
    truncated: Tensor | None,
    *,
    gamma: float | Tensor,
    truncation: str,
    time_dim: int,
    backend: str,
    validate: bool,
    extra: tuple[Tensor, ...] = (),
) -> Rows:
    """Check metadata (shapes, dtypes), and view every input as ``[N, T]`` rows."""
    if truncation not in TRUNCATION_POLICIES:
        raise ValueError(f"truncation must be one of {TRUNCATION_POLICIES}, got {truncation!r}")
    if not isinstance(reward, Tensor) or not reward.is_floating_point() or reward.ndim == 0:
        raise InputError("reward", f"expected a floating tensor with a time dim, got {_d(reward)}")
    shape = reward.shape
    if validate:
        check_like("next_value", next_value, reward)
        if value is not None:
            check_like("value", value, reward)
        check_flags(terminated, done, truncated, reward)
    tdim = normalize_time_dim(time_dim, reward.ndim)
    if shape[tdim] == 0:
        raise InputError("reward", f"the time dimension (dim {tdim} of {tuple(shape)}) is empty")
    if validate or not isinstance(gamma, Tensor):
        check_discount("gamma", gamma)
    if isinstance(gamma, Tensor) and gamma.numel() == 1 and not gamma.requires_grad:
        gamma = float(gamma)
    if isinstance(gamma, Tensor):
        try:
            gamma = to_rows(gamma.expand(shape), tdim)
        except RuntimeError as err:
            raise InputError(
                "gamma", f"shape {tuple(gamma.shape)} does not broadcast to {tuple(shape)}"
            ) from err
    else:
        gamma = float(gamma)
    dtype, work = reward.dtype, working_dtype(reward.dtype)
    if work != dtype:  # half precision: computed in float32, returned in the caller's dtype
        reward, next_value = reward.to(work), next_value.to(work)
        value = None if value is None else value.to(work)
        extra = tuple(x.to(work) for x in extra)
    # gamma takes part in the choice (a per-step gamma that needs a gradient must not reach a
    # kernel), at the working dtype, as the other inputs (a bfloat16 gamma is computed in float32)
    g = gamma.to(working_dtype(gamma.dtype)) if isinstance(gamma, Tensor) else None
    tensors = (reward, next_value, *(x for x in (value, *extra, g) if x is not None))
    numba = use_numba(backend, *tensors)
    triton = backend in ("auto", "triton") and not numba and _triton.usable(*tensors)
    if backend == "triton" and not triton:
        raise ValueError(
            "backend='triton' needs CUDA float32/float64 tensors, no gradient and an importable, "
            "working Triton; use backend='torch' (or 'auto')"
        )
    last = time_last(shape, tdim)
    view = row_view(shape, tdim, last)
    return Rows(
        reward=view(reward),
        value=None if value is None else view(value),
        next_value=view(next_value),
        terminated=view(terminated),
        done=None if done is None else view(done),
        truncated=None if truncated is None else view(truncated),
        gamma=gamma,
        shape=shape,
        time_dim=tdim,
        truncation=truncation,
        numba=numba,
        triton=triton,
        backend=backend,
        validate=validate,
        dtype=dtype,
        time_last=last,
    )


def np_view(x: Tensor) -> np.ndarray:
    """A zero-copy numpy view of a CPU tensor (contiguous rows for the kernels)."""
    if x.requires_grad:
        x = x.detach()
    return (x if x.is_contiguous() else x.contiguous()).numpy()


def _d(x: object) -> str:
    if isinstance(x, Tensor):
        return f"dtype {x.dtype}, shape {tuple(x.shape)}"
    return type(x).__name__
