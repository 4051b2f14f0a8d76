"""Residual networks of normalized blocks: SimBa's (Lee et al. 2024, arXiv 2410.09754), the
scaled critics and actors of the BRO/SimBa line of off-policy work, for one network or ``E``
ensemble members at once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from tdrl.modules.ensembles import EnsembleLinear, MemberLayerNorm, Members
from tdrl.modules.renorm import BatchRenorm


def residual_shape(hidden_sizes: Sequence[int]) -> tuple[int, int]:
    """``(width, blocks)`` of a residual network given as one hidden width per block."""
    widths = set(hidden_sizes)
    if len(widths) != 1:
        raise ValueError(
            "residual blocks add their input to their output, so they need one width: "
            f"hidden sizes {tuple(hidden_sizes)}"
        )
    return widths.pop(), len(hidden_sizes)


class ResidualMLP(nn.Module):
    """SimBa's network: a linear embedding, pre-norm residual blocks, a norm, a linear head::

        h = W_e x + b_e
        h = h + W_2 relu(W_1 N_k(h) + b_1) + b_2      for each block k (W_1: width -> 4 width)
        y = W_o N(h) + b_o

    ``N`` is a LayerNorm (SimBa) or, with ``batch_renorm``, a
    :class:`~tdrl.modules.renorm.BatchRenorm` (CrossQ's normalization). SimBa also normalizes
    its input by running statistics; tdrl leaves that to the caller (``RunningObservationNorm``).
    Layers keep PyTorch's default init.

    Args:
        in_features: input width.
        out_features: output width.
        hidden_sizes: one width per block, all equal (:func:`residual_shape`).
        num_members: ``E`` ensemble members run as batched products (``[E, *B, out]`` out), or
            None for one network (``[*B, out]`` out).
        expansion: the blocks' inner width over their width (SimBa: 4).
        batch_renorm: keyword arguments of the batch renorm layers that replace the
            LayerNorms, or None.

    Shapes:
        ``[*B, in]`` -> ``[E, *B, out]`` (``[*B, out]`` without ``num_members``).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        hidden_sizes: Sequence[int],
        *,
        num_members: int | None = None,
        expansion: int = 4,
        batch_renorm: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        width, blocks = residual_shape(hidden_sizes)
        self.single = num_members is None
        members = 1 if num_members is None else num_members
        self.num_members = members

        def norm() -> nn.Module:
            if batch_renorm is not None:
                return BatchRenorm(width, (members,), **batch_renorm)
            return MemberLayerNorm(width, members)

        self.embed = EnsembleLinear(in_features, width, members)
        self.norms = nn.ModuleList(norm() for _ in range(blocks + 1))  # each block's, the last
        self.up = nn.ModuleList(
            EnsembleLinear(width, expansion * width, members) for _ in range(blocks)
        )
        self.down = nn.ModuleList(
            EnsembleLinear(expansion * width, width, members) for _ in range(blocks)
        )
        self.output = EnsembleLinear(width, out_features, members)

    def _norm(self, i: int, h: torch.Tensor, members: Members) -> torch.Tensor:
        norm = self.norms[i]
        if isinstance(norm, MemberLayerNorm):
            return norm(h, members)
        if members is not None:
            raise ValueError("ResidualMLP: a member subset cannot run through batch renorm")
        flat = norm(h.reshape(h.shape[0], -1, h.shape[-1]))
        return flat.view(h.shape)

    def forward(self, x: torch.Tensor, members: Members = None) -> torch.Tensor:
        h = self.embed(x, True, members)
        for i, (up, down) in enumerate(zip(self.up, self.down, strict=True)):
            h = h + down(torch.relu(up(self._norm(i, h, members), False, members)), False, members)
        out = self.output(self._norm(len(self.up), h, members), False, members)
        return out[0] if self.single else out
