"""Batch renormalization (Ioffe 2017, arXiv 1702.03275), the layer CrossQ's networks are built of
(Bhatt et al. 2024, ICLR; sb3-contrib's and sbx's CrossQ).

With ``mu_B``, ``sigma_B = sqrt(var_B + eps)`` the statistics of the batch (``var_B`` biased, as
``nn.BatchNorm1d`` normalizes) and ``mu``, ``sigma = sqrt(var + eps)`` the running ones::

    r     = clip(sigma_B / sigma, 1 / r_max, r_max)          (no gradient)
    d     = clip((mu_B - mu) / sigma, -d_max, d_max)         (no gradient)
    x_hat = (x - mu_B) / sigma_B * r + d                     while learning from a batch
    x_hat = (x - mu) / sigma                                 otherwise
    y     = scale * x_hat + bias

    mu  <- mu  + momentum (mu_B - mu)                        after every learning batch
    var <- var + momentum (var_B' - var)                     var_B' the unbiased batch variance

``r_max`` and ``d_max`` warm up: ``(1, 0)`` (plain batch norm) for the first ``warmup_steps``
learning batches, then linear to their final values over ``relax_steps`` (0: at once, as
sb3-contrib's ``BatchRenorm``; the paper relaxes them gradually).

**When a layer learns from a batch.** Unlike ``nn.BatchNorm1d``, these layers normalize with
their running statistics unless they run inside :func:`batch_statistics`: acting in the envs,
evaluation, export and a loss's target computations all see the running statistics without any
mode switching (an RL loop calls a network on batches of very different distributions, and a
batch of one env step has no variance), and only the forwards a loss names learn from their
batch. ``module.train()``/``eval()`` do not change this.

Inputs ``[*E, B, F]``: the statistics are over the batch dim ``-2``, one set per leading index
(an ensemble's members each keep their own).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn


class BatchRenorm(nn.Module):
    """Batch renormalization over dim ``-2`` of ``[*lead, B, F]``, statistics per ``lead`` index.

    Args:
        num_features: ``F``.
        lead_shape: the leading dims that keep their own statistics and affine parameters
            (``(E,)`` for an ensemble of ``E`` members; ``()`` for one network).
        momentum: the running statistics' rate (sb3-contrib's 0.01; the paper's JAX code 0.99 as
            ``1 - momentum``).
        eps: added to the variances.
        r_max, d_max: the final clips of ``r`` and ``d``.
        warmup_steps: learning batches normalized as plain batch norm (``r = 1``, ``d = 0``).
        relax_steps: learning batches over which the clips then grow linearly to ``r_max`` and
            ``d_max``.

    Shapes:
        ``[*lead, B, F]`` -> the same; a shared input ``[B, F]`` to a layer with a ``lead_shape``
        is broadcast to every member.
    """

    running_mean: torch.Tensor
    running_var: torch.Tensor
    steps: torch.Tensor

    def __init__(
        self,
        num_features: int,
        lead_shape: Sequence[int] = (),
        *,
        momentum: float = 0.01,
        eps: float = 1e-3,
        r_max: float = 3.0,
        d_max: float = 5.0,
        warmup_steps: int = 100_000,
        relax_steps: int = 0,
    ) -> None:
        super().__init__()
        if not 0.0 < momentum <= 1.0:
            raise ValueError(f"BatchRenorm: momentum must be in (0, 1], got {momentum}")
        if r_max < 1.0 or d_max < 0.0:
            raise ValueError(f"BatchRenorm: needs r_max >= 1 and d_max >= 0, got {r_max}, {d_max}")
        if warmup_steps < 0 or relax_steps < 0:
            raise ValueError(
                f"BatchRenorm: warmup_steps and relax_steps must be >= 0, got {warmup_steps}, "
                f"{relax_steps}"
            )
        shape = (*lead_shape, 1, num_features)
        self.num_features = num_features
        self.momentum, self.eps = momentum, eps
        self.r_max, self.d_max = r_max, d_max
        self.warmup_steps, self.relax_steps = warmup_steps, relax_steps
        self.scale = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))
        self.register_buffer("running_mean", torch.zeros(shape))
        self.register_buffer("running_var", torch.ones(shape))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.learning = False  # set by batch_statistics()
        self._steps: int | None = None  # the buffer's value on the host (read once, not per call)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        self._steps = None  # the loaded buffer is read again
        super()._load_from_state_dict(*args, **kwargs)

    def clips(self, steps: int | None = None) -> tuple[float, float]:
        """``(r_max, d_max)`` after ``steps`` learning batches (default: the ``steps`` buffer):
        ``(1, 0)`` through the warm-up, then linear."""
        steps = int(self.steps) if steps is None else steps
        if steps < self.warmup_steps:
            return 1.0, 0.0
        if self.relax_steps == 0:
            return self.r_max, self.d_max
        frac = min(1.0, (steps - self.warmup_steps) / self.relax_steps)
        return 1.0 + frac * (self.r_max - 1.0), frac * self.d_max

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.num_features:
            raise ValueError(
                f"BatchRenorm: input has {x.shape[-1]} features (shape {tuple(x.shape)}), the "
                f"layer takes {self.num_features}"
            )
        if not self.learning:  # x * a + b: one multiply-add on the batch
            a = self.scale * (self.running_var + self.eps).rsqrt()
            out = torch.addcmul(self.bias - self.running_mean * a, x, a)
            # one unbatched row [F] stays [F] (the statistics' [1, F] would add a dim)
            return out.view(x.shape) if x.dim() == 1 and self.scale.dim() == 2 else out
        if x.dim() < 2 or x.shape[-2] < 2:
            raise ValueError(
                f"BatchRenorm: learning from a batch needs at least 2 rows on dim -2, got shape "
                f"{tuple(x.shape)}"
            )
        # (torch.var over a non-last dim is several times slower than these two passes)
        mean = x.mean(dim=-2, keepdim=True)
        centered = x - mean
        var = centered.square().mean(dim=-2, keepdim=True)
        std = (var + self.eps).sqrt()
        if self._steps is None:  # one read of the buffer; then counted here (no host sync)
            self._steps = int(self.steps)
        r_max, d_max = self.clips(self._steps)
        with torch.no_grad():
            running_std = (self.running_var + self.eps).sqrt()
            r = (std / running_std).clamp(1.0 / r_max, r_max)
            d = ((mean - self.running_mean) / running_std).clamp(-d_max, d_max)
            n = x.shape[-2]
            self.running_mean.add_(self.momentum * (mean - self.running_mean))
            self.running_var.add_(self.momentum * (var * n / (n - 1) - self.running_var))
            self.steps.add_(1)
            self._steps += 1
        # (x - mean) / std * r + d, then the affine map: one multiply-add on the batch
        a = self.scale * r / std
        return torch.addcmul(self.bias + self.scale * d, centered, a)

    def extra_repr(self) -> str:
        lead = tuple(self.scale.shape[:-2])
        return (
            f"{self.num_features}, lead_shape={lead}, momentum={self.momentum}, "
            f"warmup_steps={self.warmup_steps}, relax_steps={self.relax_steps}"
        )


def renorm_layers(*modules: nn.Module) -> list[BatchRenorm]:
    """Every :class:`BatchRenorm` inside ``modules``."""
    return [m for module in modules for m in module.modules() if isinstance(m, BatchRenorm)]


@contextlib.contextmanager
def batch_statistics(*modules: nn.Module) -> Iterator[None]:
    """Inside this block the :class:`BatchRenorm` layers of ``modules`` normalize with their
    batch's statistics and update their running ones; outside it they use the running ones."""
    layers = [m for m in renorm_layers(*modules) if not m.learning]
    for layer in layers:
        layer.learning = True
    try:
        yield
    finally:
        for layer in layers:
            layer.learning = False
