"""DrQ's random shift: each sample's image is a crop of its border-repeated padding, written out
here pixel by pixel; offsets per sample and per entry; bad input named."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.data import RandomShift, ReplayBuffer
from tdrl.data.augment import shift


def padded_crop(image: torch.Tensor, row: int, col: int, pad: int) -> torch.Tensor:
    """The definition: pad ``[C, H, W]`` by repeating its border pixels, crop ``H x W`` at
    ``(row, col)`` of the padded image; one pixel at a time."""
    c, h, w = image.shape
    out = torch.empty_like(image)
    for i in range(h):
        for j in range(w):
            src_i = min(max(row + i - pad, 0), h - 1)  # row i of the crop, in the image
            src_j = min(max(col + j - pad, 0), w - 1)
            out[:, i, j] = image[:, src_i, src_j]
    return out


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_shift_is_a_crop_of_the_border_padded_image(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 255, (5, 3, 7, 9), generator=g).to(dtype)
    pad = 2
    rows = torch.tensor([0, 4, 2, 1, 3])
    cols = torch.tensor([4, 0, 2, 3, 1])
    out = shift(x, rows, cols, pad)
    assert out.dtype == dtype and out.shape == x.shape
    for b in range(5):
        torch.testing.assert_close(out[b], padded_crop(x[b], int(rows[b]), int(cols[b]), pad))
    torch.testing.assert_close(shift(x, torch.full((5,), pad), torch.full((5,), pad), pad), x)


def test_random_shift_draws_offsets_per_sample_and_per_entry():
    n, pad = 64, 3
    image = torch.arange(10 * 12, dtype=torch.float32).view(1, 1, 10, 12)  # every pixel distinct
    batch = TensorDict(
        {"observation": image.expand(n, 1, 10, 12).clone(),
         ("next", "observation"): image.expand(n, 1, 10, 12).clone()},
        batch_size=[n],
    )  # fmt: skip
    RandomShift(pad, generator=0)(batch)
    offsets = {}
    crops = {
        (r, c): padded_crop(image[0], r, c, pad)
        for r in range(2 * pad + 1)
        for c in range(2 * pad + 1)
    }
    for key in ("observation", ("next", "observation")):
        found, shifted = [], batch[key]
        for b in range(n):  # recover each sample's offset by trying all of them
            hits = [offset for offset, crop in crops.items() if torch.equal(shifted[b], crop)]
            assert len(hits) == 1  # a crop of the padded image, at exactly one offset
            found.append(hits[0])
        offsets[key] = found
        assert len(set(found)) > 10  # drawn per sample, not one offset for the batch
    assert offsets["observation"] != offsets[("next", "observation")]  # each entry its own
    again = TensorDict({"observation": image.expand(n, 1, 10, 12).clone()}, batch_size=[n])
    RandomShift(pad, ["observation"], generator=0)(again)
    first = [padded_crop(image[0], r, c, pad) for r, c in offsets["observation"]]
    assert torch.equal(again["observation"], torch.stack(first))  # the seed fixes the offsets


def test_random_shift_names_bad_input():
    with pytest.raises(ValueError, match="pad must be >= 1, got 0"):
        RandomShift(0)
    with pytest.raises(ValueError, match="in_keys is empty"):
        RandomShift(4, [])
    with pytest.raises(TypeError, match="generator must be a seed or a torch.Generator"):
        RandomShift(4, generator=True)
    assert RandomShift(4, generator=np.int64(3)).generator.initial_seed() == 3
    flat = TensorDict({"observation": torch.zeros(4, 17)}, batch_size=[4])
    with pytest.raises(ValueError, match=r"'observation' must be \[B, C, H, W\] .*\(4, 17\)"):
        RandomShift(4, ["observation"])(flat)
    with pytest.raises(KeyError, match="next"):
        RandomShift(4)(TensorDict({"observation": torch.zeros(4, 1, 8, 8)}, batch_size=[4]))
    rollout = TensorDict({"observation": torch.zeros(2, 3, 1, 8, 8)}, batch_size=[2, 3])
    with pytest.raises(ValueError, match=r"a \[B\] batch of samples, got batch size \(2, 3\)"):
        RandomShift(4, ["observation"])(rollout)


def test_a_buffer_shifts_its_samples_and_keeps_its_data():
    frames = torch.randint(0, 255, (32, 2, 8, 8), dtype=torch.uint8)
    data = TensorDict(
        {"observation": frames, ("next", "observation"): frames.roll(1, 0),
         ("next", "reward"): torch.zeros(32, 1)},
        batch_size=[32],
    )  # fmt: skip
    buffer = ReplayBuffer(64, generator=0, transform=RandomShift(2, generator=1))
    buffer.extend(data)
    sample = buffer.sample(16)
    stored = buffer.storage["observation"].reshape(-1, 2, 8, 8)[:32]
    assert torch.equal(stored, frames)  # the stored frames are untouched
    originals = frames[sample["index"]]
    assert sample["observation"].dtype == torch.uint8
    assert not torch.equal(sample["observation"], originals)  # shifted (16 zero offsets: ~0)
