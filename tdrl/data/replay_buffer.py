"""Replay buffer on preallocated TensorDict storage: uniform, n-step, slice sampling; save/load."""

from __future__ import annotations

import json
import math
import numbers
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torch import Tensor

from tdrl import _fast, keys
from tdrl._fast.tdict import entries
from tdrl.data import sampling
from tdrl.data.frames import FrameStore
from tdrl.data.integrity import check_files, ensure_free_space, file_records
from tdrl.data.storage import NestedKey, StreamStorage, _spell
from tdrl.keyed import check_counts
from tdrl.ops._common import check_discount

__all__ = ["ReplayBuffer"]


class ReplayBuffer:
    """Circular replay buffer of TensorDict transitions, stored per env stream.

    ``extend(td)`` takes ``[S]`` batches (one step of each of ``S`` env streams, SB3's and
    Tianshou's vector-buffer convention) or ``[S, T]`` rollouts (the collector layout:
    docs/design.md, "Data").
    ``num_streams=None`` infers ``S`` from the first batch: ``[N, T] -> N``, a 1-D ``[T]`` batch
    -> 1 stream of T consecutive steps (a TorchRL collector over one env). Each stream keeps
    ``capacity // S`` steps; a batch longer than that keeps its newest steps.

    ``sample(B)`` returns ``[B]`` transitions with their flat ``"index"``; with ``n_steps > 1``
    each is an n-step transition (see :meth:`sample`). ``sample_slices`` returns ``[B, L]``
    sequences inside one episode. ``generator`` (seed or ``np.random.Generator``) makes
    sampling reproducible: slices and priorities draw from it, uniform indices from a
    ``torch.Generator`` seeded from it (both are in :meth:`sampler_state`). ``storage_path``:
    keep the stored tensors in memory-mapped files in that folder instead of RAM (buffers
    larger than memory; the same API and samples).

    ``frame_keys`` (pixels): those observation entries arrive as stacks of ``frame_stack``
    frames on their first feature axis (``[*B, k * C, H, W]``, what ``tdrl.envs`` pixel envs
    with ``frame_stack=k`` return); each step's newest frame is stored once and the
    ``("next", ...)`` twins are not stored at all: both stacks are rebuilt at sampling
    (:mod:`tdrl.data.frames`), so a transition costs one frame instead of 2k. Samples and
    slices carry the same stacks the env gave, except at a stream's k-1 oldest stored steps
    once the ring has overwritten their episode's earlier frames: there the oldest stored frame
    repeats (as at an episode start). ``storage`` shows the single stored frames. A batch whose
    stacks do not shift by one frame a step (the env stacks another number of frames) is
    refused.

    ``on_nonfinite``: ``"raise"`` (default): ``extend`` refuses a batch with a NaN or infinite
    float entry, naming the key (one fused check per batch, as ``Collector(on_nonfinite=...)``
    does); ``"ignore"``: no check.

    ``transform``: applied to every sample and slice batch before it is returned (TorchRL's
    ``ReplayBuffer(transform=...)``), e.g. ``CatKeys.transitions`` writing a dict observation's
    network input.

    Shapes:
        storage leaves ``[capacity // S, S, *F]``; ``sample(B) -> [B]``; slices ``[B, L]``.
    """

    def __init__(
        self,
        capacity: int,
        *,
        device: torch.device | str = "cpu",
        num_streams: int | None = None,
        n_steps: int = 1,
        gamma: float = 0.99,
        generator: np.random.Generator | int | None = None,
        storage_path: str | Path | None = None,
        frame_keys: Sequence[NestedKey] | None = None,
        frame_stack: int = 1,
        on_nonfinite: Literal["raise", "ignore"] = "raise",
        transform: Callable[[TensorDict], TensorDict] | None = None,
    ):
        check_counts(type(self).__name__, capacity=capacity)
        if n_steps < 1 or n_steps > capacity:
            raise ValueError(f"n_steps must be in [1, capacity={capacity}], got {n_steps}")
        check_discount("gamma", gamma)
        self.on_nonfinite = on_nonfinite  # checked by its setter
        self.transform = transform
        self._capacity = capacity
        self.device = torch.device(device)
        self._num_streams = num_streams
        self.n_steps = n_steps
        self.gamma = gamma
        self.rng = (
            generator
            if isinstance(generator, np.random.Generator)
            else np.random.default_rng(generator)
        )
        # Uniform indices: torch.randint on its own generator, not numpy's: a whole DQN update
        # step (benchmarks/updates.py) is a few percent faster, more than the draw alone saves
        # (cache effects, presumably).
        self.index_generator = torch.Generator().manual_seed(int(self.rng.integers(2**62)))
        self._storage: StreamStorage | None = None
        # Disk-backed storage: the leaves live in memory-mapped files under this folder.
        self.storage_path = storage_path
        if frame_keys is None and frame_stack != 1:
            raise ValueError(
                f"frame_stack={frame_stack} needs frame_keys (the entries holding the frames)"
            )
        self._frames = None if frame_keys is None else FrameStore(frame_keys, frame_stack)

    @property
    def on_nonfinite(self) -> Literal["raise", "ignore"]:
        """``"raise"``: ``extend`` refuses a batch with a NaN or infinite float entry; ``"ignore"``:
        it stores it. May be changed at any time: the storage's fast writes follow."""
        return self._on_nonfinite

    @on_nonfinite.setter
    def on_nonfinite(self, value: Literal["raise", "ignore"]) -> None:
        if value not in ("raise", "ignore"):
            raise ValueError(f"on_nonfinite must be 'raise' or 'ignore', got {value!r}")
        self._on_nonfinite = value
        storage = getattr(self, "_storage", None)  # None while __init__ runs
        if storage is not None:
            storage.check_finite = value == "raise"

    # --- writing ---------------------------------------------------------------------------
    def extend(self, td: TensorDictBase) -> None:
        """Append a ``[S]`` batch or a ``[S, T]`` rollout at the write cursor."""
        # The fast writer first (a layout the checked path validated for this storage): the
        # per-step add of 8 envs is a few microseconds, and each Python operation before it is
        # a percent of it (benchmarks/buffers.py times it against SB3's add). It checks
        # finiteness itself, on the leaves it fetches anyway; a frame store splits batches
        # before writing, so it never takes this path.
        storage = self._storage
        if storage is not None and self._frames is None:
            writer = storage.fast_writers.get(td.batch_size)
            if writer is not None and _fast.enabled():
                steps = writer(td)
                if steps is not None and steps > 0:  # else nothing was written
                    if self._hooked:
                        self._written(steps)
                    return
        check = self.on_nonfinite == "raise"
        if check:
            _check_finite(td)  # raises, naming the entry (before anything is allocated)
        if self._frames is not None:
            self._extend_frames(self._frames, td)
            return
        if storage is None:
            storage = self._allocate(td)
        steps = storage.write(td)
        if steps and self._hooked:
            self._written(steps)

    # Whether a subclass needs :meth:`_written`: the plain buffer skips the call (a few percent
    # of an ``extend``, the per-step add that benchmarks/buffers.py times against SB3).
    _hooked = False

    def _written(self, steps: int) -> None:
        """Hook after ``steps`` time steps were written, ending before the cursor."""

    def flags_changed(self) -> None:
        """Call after editing stored done flags in place (:func:`tdrl.data.truncate_streams`
        does): a buffer that indexes episodes (hindsight replay) finds them again."""

    def _extend_frames(self, frames: FrameStore, td: TensorDictBase) -> None:
        """:meth:`extend` of a frame-efficient buffer: checked and split before anything is
        written, then the next frames of the written steps are recorded."""
        storage = self._storage
        num_streams = self._streams_of(td) if storage is None else storage.num_streams
        if storage is not None:
            storage.steps_of(td)  # the batch size fits the streams
        stored = frames.split(td, num_streams, storage)
        if storage is None:
            storage = self._allocate(stored)
        cursor = storage.cursor
        steps = storage.write(stored)
        if steps:
            frames.written(storage, cursor, steps)
            if self._hooked:
                self._written(steps)

    def _streams_of(self, td: TensorDictBase) -> int:
        if td.batch_dims not in (1, 2):
            raise ValueError(
                f"expected a [N] batch or a [N, T] rollout, got batch size {tuple(td.batch_size)}"
            )
        if self._num_streams is not None:
            return self._num_streams
        return td.batch_size[0] if td.batch_dims == 2 else 1

    def _allocate(self, td: TensorDictBase) -> StreamStorage:
        streams = self._streams_of(td)
        storage = StreamStorage(self._capacity, streams, self.device, path=self.storage_path)
        storage.check_finite = self.on_nonfinite == "raise"
        if self.n_steps > storage.length:
            raise ValueError(
                f"n_steps={self.n_steps} exceeds the {storage.length} steps a stream holds"
            )
        storage.steps_of(td)  # a clear error before allocating
        storage.allocate(td, td.batch_dims)
        self._set_storage(storage)
        return storage

    def _set_storage(self, storage: StreamStorage) -> None:
        self._storage = storage

    # --- geometry --------------------------------------------------------------------------
    def __len__(self) -> int:
        s = self._storage
        return 0 if s is None else s.size * s.num_streams

    @property
    def capacity(self) -> int:
        return self._capacity if self._storage is None else self._storage.capacity

    @property
    def num_streams(self) -> int | None:
        return self._num_streams if self._storage is None else self._storage.num_streams

    @property
    def storage(self) -> TensorDict:
        """The stored data as a ``[capacity // S, S]`` TensorDict of views (not a copy)."""
        s = self._require(1)
        return s.assemble(list(s.leaves), torch.Size(s.leaves[0].shape[:2]))

    @property
    def stream_storage(self) -> StreamStorage | None:
        """The storage object (its geometry: cursor, size, length, streams), None before the
        first ``extend``."""
        return self._storage

    def is_newest(self, index: Tensor) -> Tensor:
        """Whether each flat ``index`` is the newest stored step of its stream (a padded slice
        that keeps it was cut by the data's end, not by its episode's)."""
        storage = self._require(1)
        return storage.ahead(index // storage.num_streams) == 1

    def _require(self, batch_size: int) -> StreamStorage:
        if self._storage is None or self._storage.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer: call extend() first")
        if (
            isinstance(batch_size, bool)
            or not isinstance(batch_size, numbers.Integral)
            or batch_size < 1
        ):
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        return self._storage

    # --- sampling --------------------------------------------------------------------------
    _prioritized = False  # draws its items by priority (PrioritizedReplayBuffer)

    def _sample_index(self, batch_size: int) -> tuple[Tensor, dict[NestedKey, Tensor]]:
        assert self._storage is not None
        return sampling.uniform_index(self._storage, self.index_generator, batch_size), {}

    def sample(self, batch_size: int) -> TensorDict:
        """``[B]`` transitions with ``"index"`` (flat storage index ``p * S + s``).

        With ``n_steps = n > 1``: the root entries are those of step t; ``("next", ...)`` are
        those of step ``t + k - 1`` (the real next observation after k steps, its flags);
        ``("next", "reward")`` is ``sum_{i<k} gamma^i r_{t+i}``; ``"steps_to_next_obs"`` is k and
        ``"gamma"`` is ``gamma^k`` (TorchRL's MultiStep names), where k stops after a done step,
        after n steps, or at the newest stored step of the stream (bootstrap; unwritten or stale
        steps are never read). Equal to :func:`tdrl.ops.nstep.nstep_return` on the stream.
        """
        storage = self._require(batch_size)
        index, extra = self._sample_index(batch_size)
        if self.n_steps == 1:
            leaves = storage.gather(index)
        else:
            leaves, more = sampling.nstep_leaves(storage, index, self.n_steps, self.gamma)
            extra.update(more)
        out = storage.assemble(leaves, torch.Size([batch_size]))
        extra[keys.INDEX] = index
        if _fast.enabled():  # root-level tensors of batch size [B]: tensordict's checks repeat ours
            entries(out).update(extra)  # type: ignore[arg-type]  # plain string keys
        else:
            out.update(extra)
        if self._frames is not None:
            last = index
            if self.n_steps > 1:  # the n-step sample's next entries are those of step t + k - 1
                last = storage.advance(index, extra[keys.STEPS_TO_NEXT_OBS].squeeze(-1) - 1)
            self._frames.fill(storage, out, index, last)
        out = self._sampled(out)
        return out if self.transform is None else self.transform(out)

    def _sampled(self, out: TensorDict) -> TensorDict:
        """Hook on a :meth:`sample` batch before the transform (hindsight relabelling)."""
        return out

    def sample_slices(
        self,
        batch_size: int,
        slice_len: int,
        *,
        frame_stack: int = 1,
        observation_keys: list[NestedKey] | None = None,
        pad: bool = False,
    ) -> TensorDict:
        """``[B, L]`` sequences of consecutive steps of one stream inside one episode.

        A slice never crosses an episode end (only its last step may be done) nor the newest
        stored step. Its last step is marked ``("next", "truncated")`` and ``("next", "done")``
        when the episode goes on, so no estimator leaks past it (docs/design.md, "Episode
        ends"). Episodes shorter than L are never sampled. ``frame_stack = k > 1`` replaces each
        observation entry (``observation_keys``, default: every root entry with a
        ``("next", ...)`` twin, so the keys of a dict observation each) and its ``("next", ...)``
        twin by the last k observations ``[B, L, k, *obs]`` (oldest first), repeating the
        episode's first observation instead of reaching into the previous episode. ``"index"``
        is ``[B, L]``.
        A frame-efficient buffer (``frame_keys``) returns its own stacks, in the env's layout,
        and takes no ``frame_stack`` here.

        ``pad=True`` (R2D2's sequences, Kapturowski et al. 2019): a slice starts at any stored
        step, drawn uniformly, so an episode's last steps are replayed as often as its others
        and short episodes too. Its own episode's steps come first; ``"mask"`` ``[B, L]`` is
        False on the steps after its end (the next episode's or unwritten ones: padding that
        a loss must leave out). The last kept step is done: the episode's end, or marked
        truncated where the slice cuts it (also at the newest stored step). Starts are drawn as
        :meth:`sample` draws items: a prioritized buffer draws them by priority and adds each
        slice's ``"priority_weight"`` at every step; ``update_priority(slices["index"][:, 0],
        ...)`` sets a start's priority (R2D2's prioritized sequence replay).
        """
        if pad and (frame_stack != 1 or self._frames is not None):
            raise ValueError("pad=True slices take no frame stacks (frame_stack, frame_keys)")
        if pad:  # the starts as sample() draws its items (a prioritized buffer: by priority)
            storage = self._require(batch_size)
            start, extra = self._sample_index(batch_size)
            out = sampling.padded_slices(storage, start, slice_len)
            for key, value in extra.items():  # per slice [B] -> per step [B, L]
                out.set(key, value.unsqueeze(1).expand(batch_size, slice_len))
            return out if self.transform is None else self.transform(out)
        if self._prioritized:
            raise ValueError(
                "a prioritized buffer draws slice starts by priority only with pad=True "
                "(R2D2's padded sequences); sample_slices(..., pad=False) would ignore them"
            )
        storage = self._require(batch_size)
        if self._frames is not None and frame_stack != 1:
            raise ValueError(
                f"this buffer stacks its frame_keys itself (frame_stack={self._frames.k} at "
                f"construction); sample_slices(frame_stack={frame_stack}) is for other buffers"
            )
        out = sampling.sample_slices(
            storage,
            self.rng,
            batch_size,
            slice_len,
            frame_stack=frame_stack,
            observation_keys=observation_keys,
        )
        if self._frames is not None:
            index = out.get(keys.INDEX)
            self._frames.fill(storage, out, index, index)
        return out if self.transform is None else self.transform(out)

    # --- state -----------------------------------------------------------------------------
    def sampler_state(self) -> dict[str, Any]:
        """The state of both generators (what the next samples depend on besides the data), as
        JSON-ready values (the torch generator's state bytes as hex) for :meth:`save`."""
        index = self.index_generator.get_state().numpy().tobytes().hex()
        return {"numpy": self.rng.bit_generator.state, "index": index}

    def load_sampler_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`sampler_state`; a numpy state alone (saved before the index generator
        existed) sets the numpy generator and leaves the index generator as it is."""
        if "numpy" not in state:
            self.rng.bit_generator.state = state
            return
        try:
            index = torch.frombuffer(bytearray.fromhex(state["index"]), dtype=torch.uint8)
            torch.Generator().set_state(index)  # checked on a spare before it is used
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"sampler state: unusable 'index' generator state: {err}") from None
        self.rng.bit_generator.state = state["numpy"]
        self.index_generator.set_state(index)

    def state_dict(self) -> dict[str, Any]:
        """Geometry, cursor, sampler state and the storage TensorDict (views, not a copy)."""
        s = self._storage
        return {
            "capacity": self._capacity,
            "num_streams": self.num_streams,
            "cursor": 0 if s is None else s.cursor,
            "size": 0 if s is None else s.size,
            "rng": self.sampler_state(),
            "storage": None if s is None else self.storage,
            "frames": None if self._frames is None else self._frames.state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Copy a :meth:`state_dict` into this buffer (the capacity must match); a state saved
        empty empties the buffer. Everything is checked before anything changes."""
        if state["capacity"] != self._capacity:
            raise ValueError(
                f"state has capacity {state['capacity']}, this buffer {self._capacity}"
            )
        data, storage, frames = state["storage"], None, state.get("frames")
        saved_with = frames is not None  # an empty buffer saves no frames, with them or not
        if data is not None and saved_with != (self._frames is not None):
            raise ValueError(
                f"state was saved {'with' if saved_with else 'without'} frame_keys; this buffer "
                f"is built {'without' if saved_with else 'with'} them"
            )
        # A memory-mapped state is built in a folder of its own inside storage_path and moved
        # in only once every check passed: the files of the storage in use stay as they are.
        staging = None if self.storage_path is None else Path(self.storage_path) / ".loading"
        try:
            if data is not None:
                storage = self._storage_from_state(data, state, staging)
            self._check_state(state, storage)
            if self._frames is not None and storage is not None:
                self._frames.check_state(frames, storage)
            self.load_sampler_state(state["rng"])  # checked, then set
        except BaseException:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
            raise
        if storage is not None and staging is not None:
            storage.move_files(self.storage_path)  # type: ignore[arg-type]
        if self._frames is not None:
            self._frames.load(frames if storage is not None else None, storage)
        if storage is None:
            self._clear_storage()
        else:
            self._set_storage(storage)

    def _storage_from_state(
        self, data: TensorDictBase, state: dict[str, Any], path: Path | None
    ) -> StreamStorage:
        storage = StreamStorage(self._capacity, int(state["num_streams"]), self.device, path=path)
        storage.check_finite = self.on_nonfinite == "raise"
        rows = (storage.length, int(state["size"]))  # all rows, or the filled ones (save())
        if data.batch_dims != 2 or tuple(data.batch_size) not in {
            (n, storage.num_streams) for n in rows
        }:
            raise ValueError(
                f"state storage has batch size {tuple(data.batch_size)}, expected "
                f"{(storage.length, storage.num_streams)} (or its filled {rows[1]} rows)"
            )
        storage.allocate(data, 2)
        filled = data.batch_size[0]
        for k, leaf in zip(storage.keys, storage.leaves, strict=False):
            leaf[:filled].copy_(data.get(_spell(k)))
        storage.cursor, storage.size = int(state["cursor"]), int(state["size"])
        return storage

    def _check_state(self, state: dict[str, Any], storage: StreamStorage | None) -> None:
        """Hook of :meth:`load_state_dict`: raise before anything changes if a subclass's part
        of ``state`` does not fit ``storage`` (the one to be loaded; None: empty)."""

    def _clear_storage(self) -> None:
        self._storage = None

    def save(self, path: str | Path) -> None:
        """Write the buffer to directory ``path``: tensors memory-mapped, scalars as JSON, with
        the dtype and shape of every stored leaf and the size and SHA-256 of every file, which
        :meth:`load` checks."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = self.state_dict()
        tensors = {k: v for k, v in state.items() if isinstance(v, (Tensor, TensorDictBase))}
        meta = {k: v for k, v in state.items() if k not in tensors and v is not None}
        storage = tensors.get("storage")
        if isinstance(storage, TensorDictBase) and state["size"] < storage.batch_size[0]:
            # Before the ring fills, the rows [0, size) are all it holds: a checkpoint early in a
            # run with a large buffer writes those, not the whole preallocated capacity.
            tensors["storage"] = storage[: state["size"]]
        meta["kind"] = type(self).__name__
        if tensors:
            data = TensorDict(tensors, batch_size=[])
            # The leaves are written through memory maps: a full disk would kill the process
            # with SIGBUS, so the space is checked first and a shortfall is an OSError.
            ensure_free_space(path, sum(v.nbytes for v in data.values(True, True)))
            data.memmap(path / "tensors", existsok=True)
            meta["leaves"] = {
                "/".join(_path_of(k)): {"dtype": str(v.dtype), "shape": list(v.shape)}
                for k, v in data.items(include_nested=True, leaves_only=True)
            }
            meta["files"] = file_records(path / "tensors")
        (path / "meta.json").write_text(json.dumps(meta))

    def load(self, path: str | Path) -> None:
        """Load what :meth:`save` wrote; the data are copied into this buffer's storage.

        Checked first, each with an error naming the file or value at fault: the kind of buffer,
        the counters' ranges, every file's presence, size and SHA-256, every leaf's dtype and
        shape. Nothing is unpickled (a crafted file cannot run code).
        """
        path = Path(path)
        where = f"replay buffer at {str(path)!r}"
        try:
            state: dict[str, Any] = json.loads((path / "meta.json").read_text())
        except (OSError, ValueError) as err:
            raise ValueError(f"{where}: unreadable meta.json: {err}") from None
        kind = state.get("kind", type(self).__name__)
        if kind != type(self).__name__:
            raise ValueError(
                f"{where} was saved by a {kind}; it cannot be loaded into a "
                f"{type(self).__name__} (a prioritized buffer needs the priorities of its own)"
            )
        self._check_counters(state, where)
        state["storage"] = None
        if (path / "tensors").exists():
            check_files(path / "tensors", state.get("files", {}), where)
            try:
                tensors = TensorDict.load_memmap(path / "tensors", allow_pickle=False)
            except (RuntimeError, ValueError, OSError, KeyError) as err:
                raise ValueError(f"{where}: cannot load its tensors safely: {err}") from None
            for name, leaf in state.get("leaves", {}).items():
                key = tuple(name.split("/"))
                value = tensors.get(key, None)
                if value is None:
                    raise ValueError(f"{where}: leaf {name!r} is missing")
                if str(value.dtype) != leaf["dtype"] or list(value.shape) != leaf["shape"]:
                    raise ValueError(
                        f"{where}: leaf {name!r} is {value.dtype} {tuple(value.shape)}, saved as "
                        f"{leaf['dtype']} {tuple(leaf['shape'])}"
                    )
            state.update({k: tensors.get(k) for k in tensors.keys()})
        self.load_state_dict(state)

    def _check_counters(self, state: dict[str, Any], where: str) -> None:
        try:
            capacity, streams = int(state["capacity"]), state.get("num_streams")
            cursor, size = int(state["cursor"]), int(state["size"])
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{where}: meta.json lacks a counter: {err}") from None
        if capacity != self._capacity:
            raise ValueError(f"{where} has capacity {capacity}, this buffer {self._capacity}")
        if streams is None:
            if cursor or size:
                raise ValueError(f"{where}: counters without storage")
            return
        streams = int(streams)
        if not 1 <= streams <= capacity:
            raise ValueError(f"{where}: num_streams={streams} is out of range [1, {capacity}]")
        length = capacity // streams
        if not 0 <= cursor < length or not 0 <= size <= length:
            raise ValueError(
                f"{where}: cursor={cursor} / size={size} out of range for {length} steps per stream"
            )
        if size < length and cursor != size:
            raise ValueError(
                f"{where}: cursor={cursor} must equal size={size} before the ring fills"
            )


def _path_of(key: NestedKey) -> tuple[str, ...]:
    return key if isinstance(key, tuple) else (key,)


def _float_leaves(td: TensorDictBase, out: list[Tensor]) -> list[Tensor]:
    for value in td.values():  # not values(True, True): a few times slower for a small batch
        if isinstance(value, Tensor):
            if value.is_floating_point() and not value.is_meta:  # meta: the storage names it
                out.append(value)
        elif isinstance(value, TensorDictBase):
            _float_leaves(value, out)
    return out


def _check_finite(td: TensorDictBase) -> None:
    """Raise a ``ValueError`` naming the first float entry of ``td`` with a NaN or infinite value
    (its key, batch index and values).

    One fused sum over all float leaves (NaN and inf survive a sum): for a small batch the torch
    calls cost more than the data, so the leaves are concatenated and summed at once; a large
    one is summed leaf by leaf, without the copy. Only a non-finite sum (or one that overflowed)
    looks at each leaf, to name it.
    """
    floats = _float_leaves(td, [])
    size = td.batch_size.numel()
    if not floats or not size:
        return
    bdims = td.batch_dims
    total = None
    if len(floats) > 1 and size <= 1024:
        flat = [x if x.dim() == bdims + 1 else x.reshape(*td.batch_size, -1) for x in floats]
        try:
            total = float(torch.cat(flat, -1).sum())
        except RuntimeError:  # leaves on more than one device
            pass
    if total is None:
        total = sum(float(x.sum()) for x in floats)
    if math.isfinite(total):
        return
    for key, x in td.items(include_nested=True, leaves_only=True):
        if not x.is_floating_point() or x.is_meta or bool(torch.isfinite(x).all()):
            continue
        bad = (~torch.isfinite(x)).reshape(*td.batch_size, -1).any(-1)
        where = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"non-finite {key!r} at batch index {where} (batch size {tuple(td.batch_size)}): "
            f"{x[where].flatten()[:6].tolist()}; the buffer refuses the batch "
            "(ReplayBuffer(on_nonfinite='ignore') skips this check)"
        )
    # finite values whose sum overflowed: nothing to refuse
