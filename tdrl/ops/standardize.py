"""Element-wise rules the losses and estimators share: advantage (and reward) standardization and
the critic distance, one definition each."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["DISTANCES", "distance", "standardize", "value_rescale", "value_unscale"]

DISTANCES = ("l2", "l1", "smooth_l1")


def standardize(x: Tensor, *, eps: float = 1e-8) -> Tensor:
    """``(x - mean(x)) / (std(x) + eps)`` over all elements (SB3's and CleanRL's advantage
    normalization; TorchRL's ``average_gae`` divides by ``max(std, 1e-4)`` instead, which differs
    only for a nearly constant ``x``). Fewer than 2 elements have no spread: ``x`` is returned
    unchanged, as SB3 does.

    Shapes:
        any -> the same.
    """
    if x.numel() < 2:
        return x
    std, mean = torch.std_mean(x)
    return (x - mean) / (std + eps)


def distance(input: Tensor, target: Tensor, kind: str) -> Tensor:
    """Element-wise ``l2`` (squared error), ``l1`` or ``smooth_l1`` (Huber, beta 1): the critic
    distance of every tdrl loss (TorchRL's ``loss_function`` / ``loss_critic_type`` names).

    Shapes:
        input, target ``[*B]`` -> ``[*B]``.
    """
    if kind == "l2":
        return (input - target).pow(2)
    if kind == "l1":
        return (input - target).abs()
    if kind == "smooth_l1":
        return torch.nn.functional.smooth_l1_loss(input, target, reduction="none")
    raise ValueError(f"the critic distance must be one of {DISTANCES}, got {kind!r}")


def value_rescale(x: Tensor, eps: float = 1e-3) -> Tensor:
    """R2D2's value rescaling ``h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x`` (Kapturowski et al.
    2019, after Pohlen et al. 2018, arXiv 1805.11593): a Q network learns ``h(Q)``, so returns
    of very different scales share one network.

    Shapes:
        any -> the same.
    """
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def value_unscale(x: Tensor, eps: float = 1e-3) -> Tensor:
    """The inverse of :func:`value_rescale`: ``h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 +
    eps)) - 1) / (2 eps))^2 - 1)`` (Pohlen et al. 2018, Proposition A.2).

    Shapes:
        any -> the same.
    """
    wide = x.double()  # sqrt(1 + 4 eps ...) - 1 cancels: float32 loses ~1e-4 near 0
    root = (torch.sqrt(1.0 + 4.0 * eps * (wide.abs() + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return (torch.sign(wide) * (root * root - 1.0)).to(x.dtype)
