"""Element-wise rules the losses and estimators share: advantage (and reward) standardization and
the critic distance, one definition each."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["DISTANCES", "distance", "standardize"]

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
