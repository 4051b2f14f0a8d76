"""Frame-efficient storage of pixel observations: each frame once, stacks built at sampling.

A DQN-style Atari transition holds two stacks of k frames (``observation`` and
``("next", "observation")``), yet consecutive steps share all but one frame, and the next
observation of a step is the observation of the step after it, except at an episode end. So
:class:`FrameStore` keeps, per stored step, only the newest frame of each frame entry, and
rebuilds both stacks when a batch is sampled (as DQN's replay memory did, Mnih et al. 2015):

- root stack of step t: the frames of steps t-k+1 .. t of its stream, clamped at the episode's
  first step (which repeats, as gymnasium's ``FrameStackObservation(padding_type="reset")``
  does), and at the oldest stored step (also when storing began mid-episode: the first stored
  steps' older frames, which their batch held, are not kept, and their stacks repeat the oldest
  stored frame; collect from an episode start to keep them);
- next frame of step t: the newest frame of step t+1 when step t is not done; the real final
  frame, kept aside in a small growing ring, when it is (terminated or truncated); the newest
  step's next frame is held per stream until its successor arrives;
- next stack: the root stack without its oldest frame, then the next frame.

Frames are compared when a step's successor is written: a next frame that is not the following
step's frame (data of a stream that are not consecutive) is an error naming the key, stream and
step, so nothing is rebuilt wrong. So is a step whose next stack is not its stack shifted by
one frame (the env stacks another number of frames than ``frame_stack``: the rebuilt stacks
would hold frames in an order that never happened); the error names the stack size the data
fit. Memory per step: one frame per key, plus one per episode end.

Shapes:
    an entry of the batch ``[*B, k * C, *F]`` (k frames of C channels, oldest first, as
    ``tdrl.envs`` ``frame_stack=k`` returns them); stored ``[L, S, C, *F]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from tensordict import TensorDict, TensorDictBase
from torch import Tensor
from torchrl.data import Composite

from tdrl import keys
from tdrl.data.storage import NestedKey, StreamStorage, _path, _spell
from tdrl.keyed import check_counts
from tdrl.modules.networks import is_frames

__all__ = ["STORE_ONCE_BYTES", "FrameStore", "frame_stack_index", "store_frames_once"]

# Frames of this many bytes or more are stored once (frame-efficient storage) even unstacked.
STORE_ONCE_BYTES = 4096


def store_frames_once(observation_spec: Composite, frame_stack: int) -> bool:
    """Whether a replay buffer should store each frame once (``frame_keys``, :class:`FrameStore`)
    instead of each transition's observation and next observation: for stacks (a frame is
    otherwise stored 2k times) and for large frames (Atari's 84x84: 7,056 bytes). MinAtar's
    frames (at most 10x10 of 10 channels) are stored plainly: its 100k-transition buffer holds at
    most 200 MB either way, and the plain write and sample made DQN on Breakout about 15% faster
    a step. False for observations that are not uint8 frames (:func:`is_frames`)."""
    if not is_frames(observation_spec):
        return False
    leaf = observation_spec[keys.OBSERVATION]
    frame_bytes = math.prod(int(d) for d in leaf.shape[-2:]) * int(leaf.shape[-3]) // frame_stack
    return frame_stack > 1 or frame_bytes >= STORE_ONCE_BYTES


def frame_stack_index(storage: StreamStorage, index: Tensor, k: int) -> Tensor:
    """Flat indices of the last k steps of each step's stream, clamped at the episode start and
    at the oldest stored step.

    Shapes: index ``[*B]`` -> ``[*B, k]`` (oldest first).
    """
    if k == 1:
        return index.unsqueeze(-1)
    S, length = storage.num_streams, storage.length
    position = index // S
    back = torch.arange(1, k, device=index.device)  # look-backs j = 1..k-1
    prev = storage.window(index, -back)  # [*B, k-1]
    done = storage.flat[storage.leaf(keys.NEXT_DONE)][prev].reshape(*prev.shape, -1).any(-1)
    age = (position - storage.oldest()) % length  # stored steps before this one in the stream
    # Look-back j is allowed while no step in between ended an episode and data are stored.
    allowed = (torch.cumsum(done.int(), -1) == 0) & (back <= age.unsqueeze(-1))
    reach = allowed.int().sum(-1, keepdim=True)  # allowed look-backs form a prefix 1..reach
    lookback = torch.minimum(torch.arange(k - 1, -1, -1, device=index.device), reach)
    return ((position.unsqueeze(-1) - lookback) % length) * S + (index % S).unsqueeze(-1)


class FrameStore:
    """The frame entries of a replay buffer, stored one frame a step (see the module docstring).

    Args:
        frame_keys: root observation entries stored frame-efficiently; their ``("next", ...)``
            twins are not stored but rebuilt.
        frame_stack: k, the frames per observation in the batches (and in the samples).
    """

    def __init__(self, frame_keys: Sequence[NestedKey], frame_stack: int) -> None:
        check_counts(type(self).__name__, frame_stack=frame_stack)
        if not frame_keys:
            raise ValueError("frame_keys is empty: name the observation entries holding frames")
        self.keys = [_path(k) for k in frame_keys]
        if any(k[0] == keys.NEXT for k in self.keys):
            raise ValueError(f"frame_keys are root entries, got {list(map(_spell, self.keys))}")
        self.k = frame_stack
        self.clear()

    def clear(self) -> None:
        """Forget every stored frame (an empty buffer's state)."""
        self.slot_of = torch.empty(0, dtype=torch.int64)  # [capacity]: final-frame slot or -1
        self.owner = torch.empty(0, dtype=torch.int64)  # [F]: flat index owning each slot
        self.finals: list[Tensor] = []  # per key [F, C, *F]
        self.pending: list[Tensor] = []  # per key [S, C, *F]: the newest step's next frame
        self.next_slot = 0
        self._staged: tuple[list[Tensor], Tensor] | None = None

    # --- writing -------------------------------------------------------------------------
    def split(
        self, td: TensorDictBase, num_streams: int, storage: StreamStorage | None
    ) -> TensorDictBase:
        """The batch to store (each frame entry cut to its newest frame, the ``("next", ...)``
        twins left out); the next frames are staged for :meth:`written`. Checks first: the
        entries' presence and shapes, and that each next frame that is not an episode's final
        one is the following step's frame (the stored newest step's included)."""
        bdims = td.batch_dims
        out = td.exclude(*[(keys.NEXT, *k) for k in self.keys])
        roots, nexts, stacks = [], [], []
        for key in self.keys:
            name = _spell(key)
            root, nxt = td.get(name, None), td.get((keys.NEXT, *key), None)
            if not isinstance(root, Tensor) or not isinstance(nxt, Tensor):
                raise KeyError(
                    f"frame key {name!r}: the batch needs {name!r} and its ('next', ...)"
                )
            if root.dim() <= bdims or root.shape[bdims] % self.k or root.shape != nxt.shape:
                raise ValueError(
                    f"frame key {name!r}: expected [*batch, {self.k} * C, ...] stacks of "
                    f"frame_stack={self.k} frames (root and next alike), got root "
                    f"{tuple(root.shape)} and next {tuple(nxt.shape)} for batch size "
                    f"{tuple(td.batch_size)}"
                )
            stacks.append((root, nxt))
            c = root.shape[bdims] // self.k
            newest = root.narrow(bdims, root.shape[bdims] - c, c)
            out.set(name, newest.contiguous())
            roots.append(_streams_first(newest, bdims, num_streams))
            nexts.append(
                _streams_first(nxt.narrow(bdims, nxt.shape[bdims] - c, c), bdims, num_streams)
            )
        done = _streams_first(td.get(keys.NEXT_DONE), bdims, num_streams)
        done = done.reshape(*done.shape[:2], -1).any(-1)  # [S, T]
        newest_done = self._newest_done(storage) if self.pending else None
        for i, (key, root, nxt) in enumerate(zip(self.keys, roots, nexts, strict=True)):
            if self.pending and root.shape[2:] != self.pending[i].shape[1:]:
                raise ValueError(
                    f"frame key {_spell(key)!r}: frames of shape {tuple(root.shape[2:])}, the "
                    f"storage holds {tuple(self.pending[i].shape[1:])}"
                )
            self._check_successors(i, root, nxt, done, newest_done)
        for key, (root, nxt) in zip(self.keys, stacks, strict=True):
            self._check_stacks(key, root, nxt, bdims, num_streams)
        # The ring bookkeeping (slot_of, owner) lives on the CPU whatever the frames' device.
        self._staged = (nexts, done.cpu())
        return out

    def _newest_done(self, storage: StreamStorage | None) -> Tensor:
        """Whether each stream's stored newest step is done, as the storage's flags say now.
        A step marked done after it was written (``tdrl.data.truncate_streams`` at a
        resume) gets its held next frame moved into the final-frame ring first."""
        assert storage is not None and storage.size > 0
        S = storage.num_streams
        newest = ((storage.cursor - 1) % storage.length) * S + torch.arange(S)
        done = storage.flat[storage.leaf(keys.NEXT_DONE)][newest]
        done = done.reshape(S, -1).any(-1).cpu()  # for the CPU bookkeeping
        orphan = done & (self.slot_of[newest] < 0)
        if bool(orphan.any()):
            owners = newest[orphan]
            slots = self._take_slots(owners.numel())
            for finals, pending in zip(self.finals, self.pending, strict=True):
                finals[slots] = pending[orphan]
            self.owner[slots] = owners
            self.slot_of[owners] = slots
        return done

    def _check_successors(
        self, i: int, root: Tensor, nxt: Tensor, done: Tensor, newest_done: Tensor | None
    ) -> None:
        same = (nxt[:, :-1] == root[:, 1:]).flatten(2).all(-1)  # [S, T - 1]
        bad = ~(same | done[:, :-1])
        where = ""
        if bad.any():
            s, t = (int(i) for i in bad.nonzero()[0])
            where = f"stream {s}, step {t} of the batch"
        elif newest_done is not None:
            first = (self.pending[i].to(root.device) == root[:, 0]).flatten(1).all(-1)
            bad0 = ~(first | newest_done.to(first.device))
            if bad0.any():
                where = f"stream {int(bad0.nonzero()[0, 0])}, the stored newest step"
        if where:
            name = _spell(self.keys[i])
            raise ValueError(
                f"frame key {name!r}: ('next', {name!r}) at {where} is not the next "
                "step's frame although that step is not done; frame-efficient storage needs each "
                "stream's steps in order (mark the step done, or store without frame_keys)"
            )

    def _check_stacks(
        self, key: tuple[str, ...], root: Tensor, nxt: Tensor, bdims: int, num_streams: int
    ) -> None:
        """Each step's next stack must be its stack shifted by one frame (true of any env that
        stacks ``k`` frames, at episode ends and resets too): one comparison per batch. Where it
        fails, the error names the stack size the batch does fit (the largest that does)."""
        if self.k == 1 or not bool(_unshifted(root, nxt, bdims, self.k).any()):
            return
        n = root.shape[bdims]
        bad = _unshifted(root, nxt, bdims, self.k).flatten(bdims).any(-1)  # [*B]
        s, t = (int(i) for i in _streams_first(bad, bdims, num_streams).nonzero()[0])
        fits = max(
            k for k in range(1, n + 1) if n % k == 0 and not _unshifted(root, nxt, bdims, k).any()
        )
        raise ValueError(
            f"frame key {_spell(key)!r}: at stream {s}, step {t} of the batch the next stack is "
            f"not the stack shifted by one frame, read as frame_stack={self.k} frames of "
            f"{n // self.k} channel(s): the rebuilt stacks would be observations that never "
            f"happened. The batch fits frame_stack={fits} ({n // fits} channel(s) a frame): "
            "build the buffer with the env's frame_stack"
        )

    def written(self, storage: StreamStorage, cursor: int, steps: int) -> None:
        """Record the staged next frames of the ``steps`` steps just written from ``cursor``."""
        assert self._staged is not None
        nexts, done = self._staged
        self._staged = None
        S, length = storage.num_streams, storage.length
        # The frames live on the storage's device, whatever the batch's (a CUDA buffer may be
        # fed CPU rollouts).
        nexts = [x.to(storage.device) for x in nexts]
        if not self.pending:  # the first write: allocate from its shapes
            self.slot_of = torch.full((storage.capacity,), -1, dtype=torch.int64)
            size = max(16, 4 * S)
            self.owner = torch.full((size,), -1, dtype=torch.int64)
            self.finals = [x.new_zeros(size, *x.shape[2:]) for x in nexts]
            self.pending = [x.new_zeros(S, *x.shape[2:]) for x in nexts]
        m = min(steps, length)  # only the newest `length` steps of a long batch were kept
        positions = (cursor + steps - m + torch.arange(m)) % length  # [m]
        flat = positions.unsqueeze(0) * S + torch.arange(S).unsqueeze(1)  # [S, m]
        self.slot_of[flat.reshape(-1)] = -1  # overwritten steps free their final frames
        ended = done[:, steps - m :]
        if ended.any():
            owners = flat[ended]
            slots = self._take_slots(owners.numel())
            for finals, nxt in zip(self.finals, nexts, strict=True):
                finals[slots] = nxt[:, steps - m :][ended]
            self.owner[slots] = owners
            self.slot_of[owners] = slots
        for pending, nxt in zip(self.pending, nexts, strict=True):
            pending.copy_(nxt[:, -1])

    def _take_slots(self, n: int) -> Tensor:
        """n free slots of the final-frame ring, growing it when the next ones are in use."""
        size = self.owner.numel()
        slots = (self.next_slot + torch.arange(n)) % size
        owner = self.owner[slots]
        live = (owner >= 0) & (self.slot_of[owner.clamp(min=0)] == slots)
        if n > size or bool(live.any()):
            grown = max(2 * size, size + n)
            self.owner = torch.cat([self.owner, self.owner.new_full((grown - size,), -1)])
            self.finals = [
                torch.cat([f, f.new_zeros(grown - size, *f.shape[1:])]) for f in self.finals
            ]
            slots = size + torch.arange(n)
            self.next_slot = (size + n) % grown
            return slots
        self.next_slot = (self.next_slot + n) % size
        return slots

    # --- reading -------------------------------------------------------------------------
    def next_frames(self, storage: StreamStorage, index: Tensor) -> list[Tensor]:
        """The frame after each step ``index`` (flat ``[N]``), one ``[N, C, *F]`` per key."""
        S = storage.num_streams
        successor = storage.window(index, index.new_ones(1))[:, 0]
        newest = storage.ahead(index // S) == 1
        slot = self.slot_of[index.cpu()]  # the ring bookkeeping is on the CPU
        ended = slot >= 0
        out = []
        for key, pending, finals in zip(self.keys, self.pending, self.finals, strict=True):
            frame = storage.flat[storage.leaf(key)][successor]
            if bool(newest.any()):
                frame[newest] = pending[(index % S)[newest]]
            if bool(ended.any()):
                frame[ended] = finals[slot[ended]]
            out.append(frame)
        return out

    def fill(
        self, storage: StreamStorage, out: TensorDictBase, index: Tensor, last: Tensor
    ) -> None:
        """Set the frame entries of a sample ``out`` taken at ``index`` (``[*B]`` flat): root
        stacks of the steps ``index``, next stacks after the steps ``last`` (n-step samples end
        there; ``last`` is ``index`` otherwise), both ``[*B, k * C, *F]``."""
        shape, one_step = index.shape, last is index
        index, last = index.reshape(-1), last.reshape(-1)
        roots = self._stacks(storage, index)
        tails = roots if one_step else self._stacks(storage, last)
        for key, root, tail, nxt in zip(
            self.keys, roots, tails, self.next_frames(storage, last), strict=True
        ):
            following = torch.cat([tail[:, 1:], nxt.unsqueeze(1)], 1)
            out.set(_spell(key), root.reshape(*shape, -1, *root.shape[3:]))
            out.set((keys.NEXT, *key), following.reshape(*shape, -1, *root.shape[3:]))

    def _stacks(self, storage: StreamStorage, index: Tensor) -> list[Tensor]:
        """``[N, k, C, *F]`` frame stacks of the steps ``index`` ``[N]``, per key."""
        stack = frame_stack_index(storage, index, self.k)
        return [storage.flat[storage.leaf(key)][stack] for key in self.keys]

    # --- state ---------------------------------------------------------------------------
    def state(self) -> TensorDict | None:
        if not self.pending:
            return None
        data = TensorDict(
            {
                "slot_of": self.slot_of,
                "owner": self.owner,
                "next_slot": torch.tensor(self.next_slot),
            },
            batch_size=[],
        )
        for i, key in enumerate(self.keys):
            data.set(("finals", *key), self.finals[i])
            data.set(("pending", *key), self.pending[i])
        return data

    @staticmethod
    def check_state(data: TensorDictBase, storage: StreamStorage) -> None:
        """Raise if a :meth:`state` does not fit the storage's geometry."""
        slot_of, owner = data.get("slot_of"), data.get("owner")
        if slot_of.shape != (storage.capacity,) or owner.dim() != 1:
            raise ValueError(
                f"frame state: slot_of {tuple(slot_of.shape)} does not fit a storage of "
                f"capacity {storage.capacity}"
            )
        size = owner.numel()
        if bool(((slot_of < -1) | (slot_of >= size)).any()):
            raise ValueError(f"frame state: slot_of holds slots outside [-1, {size})")

    def load(self, data: TensorDictBase | None, storage: StreamStorage | None) -> None:
        """Restore a :meth:`state` (copies), checked against the storage's geometry."""
        if data is None or storage is None:
            self.clear()
            return
        self.check_state(data, storage)
        slot_of, owner = data.get("slot_of"), data.get("owner")
        size = owner.numel()
        self.slot_of, self.owner = slot_of.to("cpu", copy=True), owner.to("cpu", copy=True)
        self.next_slot = int(data.get("next_slot")) % size
        dev = storage.device  # the frames on the storage's, the bookkeeping on the CPU
        self.finals = [data.get(("finals", *k)).to(dev, copy=True) for k in self.keys]
        self.pending = [data.get(("pending", *k)).to(dev, copy=True) for k in self.keys]


def _unshifted(root: Tensor, nxt: Tensor, bdims: int, k: int) -> Tensor:
    """Elementwise: the next stack's k - 1 older frames differ from the root stack's k - 1
    newer ones (the stacks read as k frames of ``n / k`` channels). Shapes: ``[*B, m, *F]``."""
    c = root.shape[bdims] // k
    m = root.shape[bdims] - c
    return nxt.narrow(bdims, 0, m) != root.narrow(bdims, c, m)


def _streams_first(x: Tensor, batch_dims: int, num_streams: int) -> Tensor:
    """A batch entry as ``[S, T, ...]``: ``[S, T]`` as it is, ``[S]`` one step per stream,
    ``[T]`` steps of the single stream."""
    if batch_dims == 2:
        return x
    return x.unsqueeze(1) if num_streams > 1 or x.shape[0] == 1 else x.unsqueeze(0)
