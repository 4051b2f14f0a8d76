"""Target networks: frozen copies, soft (Polyak) and hard updates, and PER priority wiring.

A loss owns its targets and lists them in ``target_pairs()`` as ``(online, target)`` module
pairs; :class:`SoftUpdate` and :class:`HardUpdate` (TorchRL's names and arguments) move every
target of a loss. Updates run one ``lerp_`` / ``copy_`` per tensor: a fused multi-tensor
call saves under 1% of a SAC gradient step on CPU, less than a fast path must buy
(docs/design.md, "Fast paths"), so there is none.
"""

from __future__ import annotations

import copy
from typing import Any, Protocol

import torch
from tensordict import TensorDictBase
from torch import nn

from tdrl.keyed import check_counts
from tdrl.keys import INDEX, MASK, TD_ERROR
from tdrl.modules.noise import noise_buffers


class HasTargets(Protocol):
    """A loss that owns target networks."""

    def target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        """``(online, target)`` module pairs."""
        ...


def make_target(module: nn.Module) -> nn.Module:
    """A frozen deep copy of ``module``: ``requires_grad=False`` on every parameter.

    The copy is excluded from autograd, so no loss can send it gradients; only
    :func:`soft_update_` / :func:`hard_update_` change it.
    """
    target = copy.deepcopy(module)
    target.requires_grad_(False)
    return target


def _tracked_buffers(module: nn.Module) -> list[torch.Tensor]:
    """The buffers a target copies: all but those a submodule names in its ``noise_buffers``
    (a noisy layer's noise draw, which the target draws for itself; copying it would give the
    target the online network's noise, on every step under a soft update)."""
    return [
        b
        for m in module.modules()
        for name, b in m.named_buffers(recurse=False)
        if name not in noise_buffers(m)
    ]


def _tensors(online: nn.Module, target: nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    src: list[torch.Tensor] = list(online.parameters())
    dst: list[torch.Tensor] = list(target.parameters())
    if len(src) != len(dst) or any(a.shape != b.shape for a, b in zip(src, dst, strict=True)):
        raise ValueError("target and online networks have different parameter shapes")
    return src, dst


@torch.no_grad()
def soft_update_(target: nn.Module, online: nn.Module, tau: float) -> None:
    """Polyak update ``p_t <- tau p + (1 - tau) p_t`` in place (Lillicrap et al. 2015).

    Buffers (e.g. normalisation statistics) are copied, not averaged; noise draws are not
    copied (``noise_buffers``, e.g. :class:`~tdrl.modules.NoisyLinear`'s).
    """
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must lie in [0, 1], got {tau}")
    src, dst = _tensors(online, target)
    for p_t, p in zip(dst, src, strict=True):
        p_t.lerp_(p, tau)  # p_t + tau (p - p_t) = tau p + (1 - tau) p_t
    for b_t, b in zip(_tracked_buffers(target), _tracked_buffers(online), strict=True):
        b_t.copy_(b)


@torch.no_grad()
def hard_update_(target: nn.Module, online: nn.Module) -> None:
    """Copy ``online``'s parameters and buffers, except noise draws, into ``target``."""
    src, dst = _tensors(online, target)
    for p_t, p in zip(dst, src, strict=True):
        p_t.copy_(p)
    for b_t, b in zip(_tracked_buffers(target), _tracked_buffers(online), strict=True):
        b_t.copy_(b)


class SoftUpdate:
    """Soft-update every target of ``loss`` by ``tau`` on each :meth:`step`.

    Args:
        loss: a loss with ``target_pairs()``.
        tau: Polyak coefficient (the weight of the online network), e.g. 0.005 for SAC/TD3.
        eps: TorchRL's spelling, ``eps = 1 - tau``; give one of the two.
    """

    def __init__(self, loss: HasTargets, *, tau: float | None = None, eps: float | None = None):
        if (tau is None) == (eps is None):
            raise ValueError("give exactly one of tau and eps (= 1 - tau)")
        self.loss = loss
        self.tau = float(tau if tau is not None else 1.0 - eps)  # type: ignore[operator]

    def step(self) -> None:
        for online, target in self.loss.target_pairs():
            soft_update_(target, online, self.tau)


class HardUpdate:
    """Copy every target of ``loss`` once per ``value_network_update_interval`` steps.

    Args:
        loss: a loss with ``target_pairs()``.
        value_network_update_interval: number of :meth:`step` calls between copies (DQN: the
            target update period, counted in gradient steps).
    """

    def __init__(self, loss: HasTargets, *, value_network_update_interval: int = 1000):
        check_counts("HardUpdate", value_network_update_interval=value_network_update_interval)
        self.loss = loss
        self.value_network_update_interval = value_network_update_interval
        self.counter = 0

    def step(self, updates: int | None = None) -> None:
        """Count one gradient step (or set the count to ``updates``, the run's gradient steps so
        far: a resumed run then copies on time) and copy when it is a multiple of the
        interval."""
        self.counter = self.counter + 1 if updates is None else updates
        if self.counter % self.value_network_update_interval == 0:
            for online, target in self.loss.target_pairs():
                hard_update_(target, online)


def update_priority(buffer: Any, batch: TensorDictBase, loss_out: TensorDictBase) -> None:
    """Feed a loss's ``"td_error"`` back to a prioritized buffer as the new priorities.

    ``buffer.update_priority(batch["index"], loss_out["td_error"])``: the buffer turns
    ``|td_error|`` into ``(|td_error| + eps) ** alpha`` (Schaul et al. 2015, arXiv 1511.05952).
    For ``[B, L]`` slices with one priority each (``DRQNLoss``), the slice's start index
    ``batch["index"][:, 0]`` gets it (R2D2's prioritized sequences), except where a padded slice
    was cut by the newest stored step: its start keeps its priority until the whole sequence is
    stored (R2D2 replays whole sequences).
    """
    index = batch.get(INDEX, None)
    if index is None:
        raise KeyError(f"update_priority: the batch has no {INDEX!r} entry (sampled indices)")
    td_error = loss_out.get(TD_ERROR, None)
    if td_error is None:
        raise KeyError(f"update_priority: the loss output has no {TD_ERROR!r} entry")
    if index.dim() == 2 and td_error.dim() == 1:  # one priority per slice: its start's
        mask = batch.get(MASK, None)
        if mask is not None:  # a padded slice cut by the newest stored step keeps its
            last = index.gather(1, (mask.sum(1, keepdim=True) - 1).clamp_min(0))[:, 0]
            whole = ~buffer.is_newest(last)  # priority: its whole sequence is not stored yet
            index, td_error = index[whole], td_error[whole]
        index = index[..., 0]
    buffer.update_priority(index, td_error.detach())
