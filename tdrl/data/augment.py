"""Image augmentation of replay samples: DrQ's random shift (Kostrikov et al. 2020, arXiv
2004.13649; Laskin et al.'s RAD, arXiv 2004.14990, calls it translate/crop).

Each image is padded by ``pad`` pixels on every side, repeating its border pixels, and cropped
back to its size at a random offset: a shift of up to ``pad`` pixels in each direction, drawn per
sample and per entry (the observation and the next observation get their own, as in DrQ). All
channels of a sample (a frame stack) move together. Applied to sampled batches only (a replay
buffer's ``transform``): the stored data and what the policy acts on stay as they are.

    buffer = make_replay_buffer(100_000, transform=RandomShift(pad=4))
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torch import Tensor

from tdrl import keys
from tdrl.keyed import check_counts, require

__all__ = ["RandomShift"]


class RandomShift:
    """Shift the images under ``in_keys`` of a ``[B]`` batch by up to ``pad`` pixels (replicate
    padding, then a random crop of the original size); returns the batch, changed in place.

    Args:
        pad: the largest shift in pixels, per direction (DrQ: 4 for 84x84 frames).
        in_keys: the image entries, each ``[B, C, H, W]`` (uint8 frames or floats); default
            ``"observation"`` and ``("next", "observation")``.
        generator: a seed or a CPU ``torch.Generator`` for the offsets. Default: torch's global
            one, whose state tdrl's checkpoints save (a resumed run draws the same offsets);
            a generator of its own is the caller's to save.

    Shapes:
        each entry ``[B, C, H, W]`` in and out, dtype kept.
    """

    def __init__(
        self,
        pad: int = 4,
        in_keys: Sequence[NestedKey] = (keys.OBSERVATION, (keys.NEXT, keys.OBSERVATION)),
        *,
        generator: int | torch.Generator | None = None,
    ) -> None:
        check_counts("RandomShift", pad=pad)
        if not in_keys:
            raise ValueError("RandomShift: in_keys is empty; name the image entries to shift")
        self.pad = int(pad)
        self.in_keys = list(in_keys)
        if generator is not None and not isinstance(generator, torch.Generator):
            if isinstance(generator, bool):
                raise TypeError("RandomShift: generator must be a seed or a torch.Generator")
            generator = torch.Generator().manual_seed(operator.index(generator))
        elif generator is not None and generator.device.type != "cpu":
            raise ValueError("RandomShift: the offsets are drawn on the CPU; pass a CPU generator")
        self.generator = generator

    def __call__(self, batch: TensorDictBase) -> TensorDictBase:
        if batch.batch_dims != 1:
            raise ValueError(
                f"RandomShift: expected a [B] batch of samples, got batch size "
                f"{tuple(batch.batch_size)}"
            )
        for key in self.in_keys:
            x = require(batch, key, "RandomShift")
            if x.dim() != 4 or x.is_complex() or x.dtype == torch.bool:
                raise ValueError(
                    f"RandomShift: {key!r} must be [B, C, H, W] images (uint8 or float), got "
                    f"{x.dtype} of shape {tuple(x.shape)}"
                )
            n = x.shape[0]
            offsets = torch.randint(0, 2 * self.pad + 1, (2, n), generator=self.generator)
            batch.set(key, shift(x, offsets[0].to(x.device), offsets[1].to(x.device), self.pad))
        return batch

    def __repr__(self) -> str:
        return f"RandomShift(pad={self.pad}, in_keys={self.in_keys})"


def shift(x: Tensor, rows: Tensor, cols: Tensor, pad: int) -> Tensor:
    """``x`` ``[B, C, H, W]`` padded by ``pad`` (its border pixels repeated) and cropped to
    ``H x W`` from row ``rows[b]`` and column ``cols[b]`` of the padded image (``0 .. 2 pad``; an
    offset of ``pad`` gives the image back). One gather: the padding is never built."""
    b, c, h, w = x.shape
    r = (rows.view(b, 1) - pad + torch.arange(h, device=x.device)).clamp_(0, h - 1)  # [B, H]
    q = (cols.view(b, 1) - pad + torch.arange(w, device=x.device)).clamp_(0, w - 1)  # [B, W]
    batch = torch.arange(b, device=x.device).view(b, 1, 1, 1)
    channel = torch.arange(c, device=x.device).view(1, c, 1, 1)
    return x[batch, channel, r.view(b, 1, h, 1), q.view(b, 1, 1, w)]
