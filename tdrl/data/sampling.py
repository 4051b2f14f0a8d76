"""Sampling rules as functions of (storage, generator): uniform items, n-step transitions, slices
inside one episode, frame stacks. The buffer classes call them; ``tdrl.data.prioritized`` draws
its items from a sum tree and reuses the rest.

Every rule reads the storage through its public geometry (``StreamStorage.window``, ``ahead``,
``oldest``, ``gather``, ``assemble``). The n-step rule is :func:`tdrl.ops.nstep_return` itself,
run on each sampled window, so the buffer and the op cannot disagree.
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from tdrl import keys
from tdrl.data.frames import frame_stack_index
from tdrl.data.storage import NestedKey, StreamStorage
from tdrl.keyed import check_counts
from tdrl.ops import nstep_return, nstep_steps
from tdrl.ops._common import working_dtype

__all__ = ["frame_stack_index", "nstep_leaves", "padded_slices", "sample_slices", "uniform_index"]

# Rejection rounds before enumerating every valid slice start (when valid starts are rare).
_ROUNDS = 16


def uniform_index(storage: StreamStorage, generator: torch.Generator, batch_size: int) -> Tensor:
    """``batch_size`` flat indices drawn uniformly from the stored items (on ``generator``'s
    device, then moved to the storage's)."""
    index = torch.randint(storage.size * storage.num_streams, (batch_size,), generator=generator)
    return index.to(storage.device, non_blocking=True)


def nstep_leaves(
    storage: StreamStorage, index: Tensor, n: int, gamma: float
) -> tuple[list[Tensor], dict[NestedKey, Tensor]]:
    """The leaves of n-step transitions rooted at ``index``, and their extra entries.

    Root entries are those of step t; ``("next", ...)`` entries those of step ``t + k - 1``;
    ``("next", "reward")`` is ``sum_{i<k} gamma^i r_{t+i}`` and the extras are
    ``"steps_to_next_obs"`` (k) and ``"gamma"`` (``gamma^k``), where k stops after a done step,
    after n steps, or at the newest stored step of the stream (never reading unwritten or stale
    steps): :func:`tdrl.ops.nstep_steps` / :func:`tdrl.ops.nstep_return` on the window of n
    steps after each root, with the newest stored step marked as the end of the time axis.

    Shapes: index ``[B]`` -> leaves ``[B, *F]``; extras ``[B, 1]``.
    """
    done_i, reward_i = storage.leaf(keys.NEXT_DONE), storage.leaf(keys.NEXT_REWARD)
    offsets = torch.arange(n, device=index.device)
    window = storage.window(index, offsets)  # [B, n]
    done = storage.flat[done_i][window].reshape(*window.shape, -1).any(-1)  # [B, n]
    # The newest stored step of the stream ends the time axis: nothing after it is read.
    cut = done | (offsets >= storage.ahead(index // storage.num_streams).unsqueeze(1) - 1)
    cut[:, -1] = True
    steps = nstep_steps(cut, n, time_dim=1)[:, 0]  # [B]
    reward = storage.flat[reward_i][window]  # [B, n, *F]
    flags = cut.view(*cut.shape, *([1] * (reward.dim() - 2))).expand(reward.shape)
    reward = nstep_return(reward, None, flags, flags, gamma=gamma, n=n, time_dim=1)[:, 0]
    last = window.gather(1, (steps - 1).unsqueeze(1)).squeeze(1)
    leaves = []
    for i, k in enumerate(storage.keys):
        if i == reward_i:
            leaves.append(reward)
        else:
            leaves.append(storage.flat[i].index_select(0, last if k[0] == keys.NEXT else index))
    extra: dict[NestedKey, Tensor] = {
        keys.STEPS_TO_NEXT_OBS: steps.unsqueeze(-1),
        # gamma ** k in the reward's precision (float32 for half): an int power is float32
        keys.GAMMA: torch.pow(gamma, steps.to(working_dtype(reward.dtype)))
        .unsqueeze(-1)
        .to(reward.dtype),
    }
    return leaves, extra


def _valid_starts(storage: StreamStorage, start: Tensor, slice_len: int) -> Tensor:
    """Whether the slice from flat index ``start`` stays inside one episode and stored data."""
    ok = storage.ahead(start // storage.num_streams) >= slice_len
    if slice_len > 1:
        window = storage.window(start, torch.arange(slice_len - 1, device=start.device))
        done_i = storage.leaf(keys.NEXT_DONE)
        done = storage.flat[done_i][window].reshape(*window.shape, -1).any(-1)
        ok &= ~done.any(1)
    return ok


def _slice_starts(
    storage: StreamStorage, rng: np.random.Generator, batch_size: int, slice_len: int
) -> Tensor:
    total = storage.size * storage.num_streams
    found: list[Tensor] = []
    count = 0
    for _ in range(_ROUNDS):
        cand = torch.from_numpy(rng.integers(0, total, 2 * batch_size)).to(storage.device)
        good = cand[_valid_starts(storage, cand, slice_len)]
        found.append(good)
        count += good.numel()
        if count >= batch_size:
            return torch.cat(found)[:batch_size]
    # Rare valid starts: enumerate them all (O(len)) and draw uniformly among them.
    everything = torch.arange(total, device=storage.device)
    valid = everything[_valid_starts(storage, everything, slice_len)]
    if valid.numel() == 0:
        raise RuntimeError(
            f"no slice of length {slice_len} fits inside one stored episode "
            f"({total} stored steps): lower slice_len or store more data"
        )
    pick = torch.from_numpy(rng.integers(0, valid.numel(), batch_size)).to(storage.device)
    return valid[pick]


def sample_slices(
    storage: StreamStorage,
    rng: np.random.Generator,
    batch_size: int,
    slice_len: int,
    *,
    frame_stack: int = 1,
    observation_keys: list[NestedKey] | None = None,
) -> TensorDict:
    """``[B, L]`` sequences of consecutive steps of one stream inside one episode
    (see :meth:`tdrl.data.ReplayBuffer.sample_slices`).

    ``frame_stack = k > 1`` stacks each observation leaf (``observation_keys``: default every
    root leaf that has a ``("next", ...)`` twin, so dict observations stack key by key) into
    ``[B, L, k, *obs]`` and its ``("next", ...)`` twin likewise.
    """
    if not 1 <= slice_len <= storage.length:
        raise ValueError(
            f"slice_len must be in [1, {storage.length}] (steps per stream), got {slice_len}"
        )
    check_counts("sample_slices", frame_stack=frame_stack)
    start = _slice_starts(storage, rng, batch_size, slice_len)
    index = storage.window(start, torch.arange(slice_len, device=start.device))  # [B, L]
    flat = index.reshape(-1)
    leaves = [x.view(batch_size, slice_len, *x.shape[1:]) for x in storage.gather(flat)]
    done_i, trunc_i = storage.leaf(keys.NEXT_DONE), storage.leaf(keys.NEXT_TRUNCATED)
    goes_on = ~leaves[done_i][:, -1]
    leaves[trunc_i][:, -1] |= goes_on
    leaves[done_i][:, -1] |= goes_on
    if frame_stack > 1:
        stack_index = frame_stack_index(storage, index, frame_stack)
        for obs_i, next_i in _observation_pairs(storage, observation_keys):
            stacked = storage.flat[obs_i][stack_index]  # [B, L, k, *obs]
            leaves[obs_i] = stacked
            leaves[next_i] = torch.cat([stacked[:, :, 1:], leaves[next_i].unsqueeze(2)], 2)
    out = storage.assemble(leaves, torch.Size([batch_size, slice_len]))
    out.set(keys.INDEX, index)
    return out


def padded_slices(storage: StreamStorage, start: Tensor, slice_len: int) -> TensorDict:
    """``[B, L]`` slices from the flat ``start`` indices ``[B]`` (any stored steps), padded past
    their episode's end (R2D2's sequences): ``"mask"`` ``[B, L]`` keeps the slice's own episode
    up to its end or the newest stored step, whose last kept step is marked truncated where the
    slice cuts the episode (see :meth:`tdrl.data.ReplayBuffer.sample_slices`)."""
    check_counts("padded_slices", slice_len=slice_len)
    batch_size = start.shape[0]
    offsets = torch.arange(slice_len, device=start.device)
    index = storage.window(start, offsets)  # [B, L]
    gathered = storage.gather(index.reshape(-1))
    leaves = [x.view(batch_size, slice_len, *x.shape[1:]) for x in gathered]
    done_i, trunc_i = storage.leaf(keys.NEXT_DONE), storage.leaf(keys.NEXT_TRUNCATED)
    done = leaves[done_i].reshape(batch_size, slice_len, -1).any(-1)  # [B, L]
    stored = offsets < storage.ahead(start // storage.num_streams).unsqueeze(1)
    after_end = (done.int().cumsum(1) - done.int()) > 0  # a done step came before
    mask = stored & ~after_end  # [B, L]: the slice's own episode, stored steps only
    last = mask.sum(1) - 1  # its last step: done, or cut here (the episode goes on)
    rows = torch.arange(batch_size, device=start.device)
    for i in (done_i, trunc_i):  # a cut is a truncation: the last step is bootstrapped
        flag = leaves[i].reshape(batch_size, slice_len, -1)
        flag[rows, last] |= ~done[rows, last].unsqueeze(-1)
    out = storage.assemble(leaves, torch.Size([batch_size, slice_len]))
    out.set(keys.INDEX, index)
    out.set(keys.MASK, mask)
    return out


def _observation_pairs(
    storage: StreamStorage, observation_keys: list[NestedKey] | None
) -> list[tuple[int, int]]:
    """(root leaf, ``("next", ...)`` leaf) storage numbers of the observation leaves."""
    if observation_keys is None:
        roots = [k for k in storage.keys if k[0] != keys.NEXT and (keys.NEXT, *k) in storage.keys]
        roots = [k for k in roots if k not in _NOT_OBSERVATIONS]
        if not roots:
            raise KeyError(
                "frame_stack needs observation entries with a ('next', ...) twin; the storage "
                f"has {storage.keys}"
            )
        return [(storage.leaf(k), storage.leaf((keys.NEXT, *k))) for k in roots]
    return [
        (storage.leaf(k), storage.leaf((keys.NEXT, *(k if isinstance(k, tuple) else (k,)))))
        for k in observation_keys
    ]


# Root entries with a ("next", ...) twin that are not observations (the episode-end flags).
_NOT_OBSERVATIONS = {
    (keys.DONE,),
    (keys.TERMINATED,),
    (keys.TRUNCATED,),
    (keys.REWARD,),
    (keys.ACTION_MASK,),
}
