"""Slice sampling: sequences inside one episode, with optional frame stacking."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from tensordict import TensorDict
from torch import Tensor

from tdrl import keys
from tdrl.data.replay_buffer import _assemble

if TYPE_CHECKING:
    from tdrl.data.replay_buffer import ReplayBuffer

__all__ = ["sample_slices"]

# Rejection rounds before enumerating every valid start (when valid starts are rare).
_ROUNDS = 16


def _valid(buffer: ReplayBuffer, start: Tensor, slice_len: int) -> Tensor:
    """Whether the slice from flat index ``start`` stays inside one episode and stored data."""
    s = buffer._storage
    assert s is not None
    S = s.num_streams
    position, stream = start // S, start % S
    ok = buffer._ahead(position) >= slice_len
    if slice_len > 1:
        offsets = torch.arange(slice_len - 1, device=start.device)
        window = ((position.unsqueeze(1) + offsets) % s.length) * S + stream.unsqueeze(1)
        done = s.flat[buffer._leaf(keys.NEXT_DONE)][window].reshape(window.shape + (-1,)).any(-1)
        ok &= ~done.any(1)
    return ok


def _starts(buffer: ReplayBuffer, batch_size: int, slice_len: int) -> Tensor:
    total = len(buffer)
    found: list[Tensor] = []
    count = 0
    for _ in range(_ROUNDS):
        cand = torch.from_numpy(buffer.rng.integers(0, total, 2 * batch_size)).to(buffer.device)
        good = cand[_valid(buffer, cand, slice_len)]
        found.append(good)
        count += good.numel()
        if count >= batch_size:
            return torch.cat(found)[:batch_size]
    # Rare valid starts: enumerate them all (O(len)) and draw uniformly among them.
    everything = torch.arange(total, device=buffer.device)
    valid = everything[_valid(buffer, everything, slice_len)]
    if valid.numel() == 0:
        raise RuntimeError(
            f"no slice of length {slice_len} fits inside one stored episode "
            f"({total} stored steps): lower slice_len or store more data"
        )
    pick = torch.from_numpy(buffer.rng.integers(0, valid.numel(), batch_size)).to(buffer.device)
    return valid[pick]


def _frame_stack(buffer: ReplayBuffer, index: Tensor, k: int) -> Tensor:
    """Flat indices of the last k observations of each step, clamped at the episode start.

    Shapes: index ``[B, L]`` -> ``[B, L, k]`` (oldest first).
    """
    s = buffer._storage
    assert s is not None
    S, length = s.num_streams, s.length
    position, stream = index // S, index % S
    back = torch.arange(1, k, device=index.device)  # look-backs j = 1..k-1
    prev = ((position.unsqueeze(-1) - back) % length) * S + stream.unsqueeze(-1)  # [B, L, k-1]
    ended = s.flat[buffer._leaf(keys.NEXT_DONE)][prev].reshape(prev.shape + (-1,)).any(-1)
    age = (position - s.oldest()) % length  # stored steps before this one in the stream
    # Look-back j is allowed while no step in between ended an episode and data are stored.
    allowed = (torch.cumsum(ended.int(), -1) == 0) & (back <= age.unsqueeze(-1))
    reach = allowed.int().sum(-1, keepdim=True)  # allowed look-backs form a prefix 1..reach
    lookback = torch.minimum(torch.arange(k - 1, -1, -1, device=index.device), reach)
    return ((position.unsqueeze(-1) - lookback) % length) * S + stream.unsqueeze(-1)


def sample_slices(
    buffer: ReplayBuffer, batch_size: int, slice_len: int, *, frame_stack: int = 1
) -> TensorDict:
    """See :meth:`tdrl.data.ReplayBuffer.sample_slices`."""
    s = buffer._require(batch_size)
    if not 1 <= slice_len <= s.length:
        raise ValueError(
            f"slice_len must be in [1, {s.length}] (steps per stream), got {slice_len}"
        )
    if frame_stack < 1:
        raise ValueError(f"frame_stack must be >= 1, got {frame_stack}")
    S = s.num_streams
    start = _starts(buffer, batch_size, slice_len)
    offsets = torch.arange(slice_len, device=start.device)
    index = (((start // S).unsqueeze(1) + offsets) % s.length) * S + (start % S).unsqueeze(1)
    flat = index.reshape(-1)
    leaves = [x.view(batch_size, slice_len, *x.shape[1:]) for x in s.gather(flat)]
    done_i, trunc_i = buffer._leaf(keys.NEXT_DONE), buffer._leaf(keys.NEXT_TRUNCATED)
    goes_on = ~leaves[done_i][:, -1]
    leaves[trunc_i][:, -1] |= goes_on
    leaves[done_i][:, -1] |= goes_on
    if frame_stack > 1:
        obs_i, next_obs_i = buffer._leaf(keys.OBSERVATION), buffer._leaf(keys.NEXT_OBSERVATION)
        stacked = s.flat[obs_i][_frame_stack(buffer, index, frame_stack)]  # [B, L, k, *obs]
        leaves[obs_i] = stacked
        leaves[next_obs_i] = torch.cat([stacked[:, :, 1:], leaves[next_obs_i].unsqueeze(2)], 2)
    out = _assemble(buffer._plan, leaves, torch.Size([batch_size, slice_len]), s.device)
    out._tensordict[keys.INDEX] = index
    return out
