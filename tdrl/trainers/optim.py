"""The gradient step every recipe takes: ``zero_grad -> backward -> (clip) -> step``.

One function for on-policy minibatch updates and off-policy updates alike. It is written with
torch's public API; with ``tdrl.set_fast(True)`` (the default) the three parts run their fast twins
in ``tdrl._fast.optim``, which give bitwise the same parameters and optimizer state
(``tests/trainers/test_optim.py``) a few hundredths of a millisecond sooner
(``benchmarks/fast_paths.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from tdrl import _fast
from tdrl._fast import optim as fast

__all__ = ["adam", "clip_grad_norm_", "linear_decay", "optimizer_step"]


def adam(
    *groups: tuple[Iterable[torch.Tensor], float],
    eps: float = 1e-8,
    betas: tuple[float, float] = (0.9, 0.999),
) -> torch.optim.Adam:
    """One fused Adam over parameter groups ``(parameters, lr)``: the same updates as one Adam
    per group, with one kernel per group instead of a Python loop over tensors."""
    return torch.optim.Adam(
        [{"params": list(params), "lr": lr} for params, lr in groups], eps=eps, betas=betas,
        fused=True,
    )  # fmt: skip


def clip_grad_norm_(parameters: Iterable[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale the gradients of ``parameters`` so that their global 2-norm is at most
    ``max_norm``; returns the norm before clipping (``torch.nn.utils.clip_grad_norm_``)."""
    params = list(parameters)
    if _fast.enabled():
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return torch.tensor(0.0)
        norm = fast.clip_grad_norm_(grads, max_norm)
        if norm is not None:
            return norm
    return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)


def optimizer_step(
    loss: torch.Tensor,
    *optimizers: torch.optim.Optimizer,
    max_grad_norm: float | None = None,
    parameters: Iterable[torch.Tensor] | None = None,
    clip_groups: Sequence[Iterable[torch.Tensor]] | None = None,
) -> torch.Tensor | None:
    """``zero_grad -> backward -> (clip) -> step`` on every optimizer; returns the grad norm
    (``None`` without clipping; with ``clip_groups``, each group's norm, stacked).

    The losses route their terms to disjoint parameter groups (SAC's ``loss_actor`` reaches the
    actor only, and so on), so one backward of the sum updates every network at once.
    ``parameters`` (default: those of the optimizers) are clipped when ``max_grad_norm`` is set;
    ``clip_groups`` clips each group to ``max_grad_norm`` on its own (an actor's gradient is
    not shrunk by a critic's, as with one optimizer per network: BenchMARL's).
    """
    if clip_groups is not None and (parameters is not None or max_grad_norm is None):
        raise ValueError("clip_groups takes max_grad_norm and no parameters")
    if max_grad_norm is not None and not max_grad_norm > 0:  # False for NaN
        # < 0 would flip every gradient (ascent), 0 zero them, NaN make them NaN
        raise ValueError(f"max_grad_norm must be > 0 (inf: no clipping), got {max_grad_norm}")
    use_fast = _fast.enabled()
    for optimizer in optimizers:
        if not (use_fast and fast.zero_grad(optimizer)):
            optimizer.zero_grad(set_to_none=True)
    loss.backward()
    norm = None
    if clip_groups is not None:
        assert max_grad_norm is not None
        norm = torch.stack([clip_grad_norm_(group, max_grad_norm) for group in clip_groups])
    elif max_grad_norm is not None:
        if parameters is None:
            parameters = [p for o in optimizers for g in o.param_groups for p in g["params"]]
        norm = clip_grad_norm_(parameters, max_grad_norm)
    for optimizer in optimizers:
        if not (use_fast and fast.adam_step(optimizer)):
            optimizer.step()
    return norm


def linear_decay(
    optimizer: torch.optim.Optimizer, steps: int, *, decay: bool = True
) -> torch.optim.lr_scheduler.LambdaLR:
    """A scheduler that scales the learning rates linearly from 1 to 0 over ``steps`` calls of
    ``scheduler.step()`` (one per batch: Tianshou's and SB3's on-policy default); constant
    when ``decay`` is False."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: max(1.0 - i / steps, 0.0) if decay else 1.0
    )
