"""Hindsight experience replay (Andrychowicz et al. 2017, arXiv 1707.01495): goals relabelled at
sampling time, with the reward recomputed by the env's own ``compute_reward``."""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torch import Tensor

from tdrl import keys
from tdrl.data.replay_buffer import ReplayBuffer
from tdrl.data.storage import StreamStorage

__all__ = ["HER_STRATEGIES", "HERReplayBuffer"]

HER_STRATEGIES = ("future", "final", "episode")
GoalFunction = Callable[[Any, Any, Any], Any]


def _numpy(x: Tensor) -> np.ndarray:
    return x.detach().cpu().numpy()


class HERReplayBuffer(ReplayBuffer):
    """A :class:`ReplayBuffer` of goal-conditioned transitions whose ``sample`` relabels goals.

    Each sampled transition ``t`` of an episode is relabelled with probability
    ``k / (k + 1)`` (``k = n_sampled_goal``: the paper's ratio of k hindsight goals per real
    one, as Stable-Baselines3's ``HerReplayBuffer``): its ``desired_goal`` and
    ``("next", "desired_goal")`` become ``("next", "achieved_goal")`` of a step ``t'`` of the
    same episode, and its reward becomes ``compute_reward(("next", "achieved_goal"), g', {})``;
    with ``compute_terminated``, ``("next", "terminated")`` becomes its value and
    ``("next", "done")`` that or the stored truncation. ``t'`` by strategy:

    - ``"future"``: uniform over ``t..end`` (never before the transition, never another episode);
    - ``"final"``: the episode's last step;
    - ``"episode"``: uniform over the whole episode, as stored.

    ``end`` is the episode's last step once it has ended, else the newest stored step of its
    stream (the steps seen so far: an unfinished episode is relabelled from those, so every
    stored transition is sampled, as in the plain buffer). ``sample`` relabels before the
    buffer's ``transform`` runs, so a dict observation's network input sees the new goal.
    Episodes are found from the stored ``("next", "done")`` flags, per env stream; a resumed
    buffer finds them again on load.

    ``extend`` checks, before anything is written, that ``compute_reward`` gives the stored
    reward on every transition of the batch (a reward function that disagrees with the env would
    relabel with the wrong reward); ``check_rewards=False`` skips it. ``sample_slices`` returns
    the stored goals. Other arguments as :class:`ReplayBuffer`; n-step returns and frame storage
    are not combined with relabelling and are refused.

    Shapes:
        as :class:`ReplayBuffer`; goals ``[*B, G]``.
    """

    _hooked = True

    def __init__(
        self,
        capacity: int,
        *,
        compute_reward: GoalFunction,
        compute_terminated: GoalFunction | None = None,
        strategy: str = "future",
        n_sampled_goal: int = 4,
        check_rewards: bool = True,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("n_steps", 1) != 1:
            raise ValueError(
                f"HERReplayBuffer samples 1-step transitions; n_steps={kwargs['n_steps']} would "
                "need every reward of the n steps relabelled"
            )
        if kwargs.get("frame_keys") is not None:
            raise ValueError("HERReplayBuffer does not store frames once (frame_keys)")
        if strategy not in HER_STRATEGIES:
            raise ValueError(f"unknown HER strategy {strategy!r}; expected one of {HER_STRATEGIES}")
        if (
            isinstance(n_sampled_goal, bool)
            or not isinstance(n_sampled_goal, numbers.Integral)
            or n_sampled_goal < 0
        ):
            raise ValueError(f"n_sampled_goal must be an int >= 0, got {n_sampled_goal!r}")
        if not callable(compute_reward):
            raise TypeError(f"compute_reward must be callable, got {compute_reward!r}")
        super().__init__(capacity, **kwargs)
        self.compute_reward: GoalFunction = compute_reward
        self.compute_terminated: GoalFunction | None = compute_terminated
        self.strategy: str = strategy
        self.n_sampled_goal: int = int(n_sampled_goal)
        self.relabel_ratio: float = self.n_sampled_goal / (self.n_sampled_goal + 1)
        self.check_rewards: bool = check_rewards
        # per stored step [L, S]: steps since its episode's first step, and steps to its last
        # (-1 while the episode goes on)
        self._since_start: np.ndarray = np.zeros((0, 0), np.int64)
        self._to_end: np.ndarray = np.zeros((0, 0), np.int64)

    # --- writing ---------------------------------------------------------------------------
    def extend(self, td: TensorDictBase) -> None:
        """:meth:`ReplayBuffer.extend`, after the goal entries and rewards are checked."""
        for key in (keys.DESIRED_GOAL, keys.NEXT_ACHIEVED_GOAL, keys.NEXT_DESIRED_GOAL):
            if td.get(key, None) is None:
                raise KeyError(
                    f"HERReplayBuffer needs a goal env's {key!r} entry; the batch has "
                    f"{sorted(str(k) for k in td.keys(True, True))}"
                )
        if self.check_rewards and td.numel():
            self._check_rewards(td)
        super().extend(td)

    def _check_rewards(self, td: TensorDictBase) -> None:
        achieved = _numpy(td.get(keys.NEXT_ACHIEVED_GOAL))
        desired = _numpy(td.get(keys.DESIRED_GOAL))
        stored = _numpy(td.get(keys.NEXT_REWARD)).reshape(-1)
        computed = self._rewards(
            achieved.reshape(stored.size, -1), desired.reshape(stored.size, -1)
        )
        bad = np.flatnonzero(~np.isclose(computed, stored, rtol=1e-5, atol=1e-6))
        if bad.size:
            i = int(bad[0])
            where = tuple(int(j) for j in np.unravel_index(i, tuple(td.batch_size)))
            raise ValueError(
                f"compute_reward(('next', 'achieved_goal'), 'desired_goal') gives {computed[i]:g} "
                f"where the env stored ('next', 'reward') {stored[i]:g} (batch item {where}, "
                f"{bad.size} of {stored.size} disagree): relabelled rewards would not be the env's"
            )

    def _rewards(self, achieved: np.ndarray, desired: np.ndarray) -> np.ndarray:
        out = np.asarray(self.compute_reward(achieved, desired, {}), dtype=np.float64)
        if out.size != achieved.shape[0]:
            raise ValueError(
                f"compute_reward returned {out.size} rewards for {achieved.shape[0]} goal pairs "
                f"(shape {out.shape}); it must be vectorized over the leading axis"
            )
        return out.reshape(-1)

    def _set_storage(self, storage: StreamStorage) -> None:
        for key in (keys.NEXT_ACHIEVED_GOAL, keys.DESIRED_GOAL, keys.NEXT_DONE):
            storage.leaf(key)  # a KeyError naming the entry, before the storage is taken
        super()._set_storage(storage)
        shape = (storage.length, storage.num_streams)
        self._since_start = np.zeros(shape, np.int64)
        self._to_end = np.full(shape, -1, np.int64)
        if storage.size:  # loaded: find the episodes of the stored steps, oldest first
            self._index(storage.oldest(), storage.size, continues=False)

    def flags_changed(self) -> None:
        """The stored done flags were edited (a stream cut by ``truncate_streams``): the
        episodes of every stored step are found again."""
        storage = self._storage
        if storage is not None and storage.size:
            self._index(storage.oldest(), storage.size, continues=False)

    def _written(self, steps: int) -> None:
        storage = self._storage
        assert storage is not None
        steps = min(steps, storage.length)
        continues = storage.size > steps  # a step before this batch is stored
        self._index((storage.cursor - steps) % storage.length, steps, continues=continues)

    def _index(self, first: int, steps: int, *, continues: bool) -> None:
        """Record the episode offsets of the ``steps`` stored steps from position ``first``."""
        storage = self._storage
        assert storage is not None
        L = storage.length
        rows = (first + np.arange(steps)) % L
        done_leaf = storage.leaves[storage.leaf(keys.NEXT_DONE)]
        done = _numpy(done_leaf[torch.as_tensor(rows)]).reshape(steps, -1).astype(bool)
        # steps since the episode's start: the row before the block continues into row 0 unless
        # it was done
        if continues:
            before = (first - 1) % L
            prev_done = _numpy(done_leaf[before]).reshape(-1).astype(bool)
            head = np.where(prev_done, 0, self._since_start[before] + 1)
        else:
            head = np.zeros(done.shape[1], np.int64)
        index = np.arange(steps)[:, None]
        starts = np.full(done.shape, -1, np.int64)
        starts[1:] = np.where(done[:-1], index[1:], -1)
        last_start = np.maximum.accumulate(starts, axis=0)
        self._since_start[rows] = np.where(last_start >= 0, index - last_start, index + head)
        # steps to the episode's last step, inside the block; -1 while it goes on
        ends = np.where(done, index, steps)
        next_end = np.minimum.accumulate(ends[::-1], axis=0)[::-1]
        self._to_end[rows] = np.where(next_end < steps, next_end - index, -1)
        # the steps before the block whose episode ends in it
        first_end = next_end[0]
        for stream in np.flatnonzero((first_end < steps) & (head > 0)):
            count = min(int(head[stream]), L - steps)
            back = np.arange(1, count + 1)
            self._to_end[(first - back) % L, stream] = int(first_end[stream]) + back

    def _terminated(self, achieved: np.ndarray, desired: np.ndarray) -> np.ndarray:
        """``compute_terminated`` per goal pair ``[n]``. A single flag for several pairs is
        ambiguous (gymnasium-robotics' mazes take one norm over the whole batch), so such a
        hook is called once per pair."""
        assert self.compute_terminated is not None
        n = len(desired)
        flags = np.asarray(self.compute_terminated(achieved, desired, {})).astype(np.bool_)
        if flags.size == 1 and n > 1:
            pairs = zip(achieved, desired, strict=True)
            return np.array([bool(self.compute_terminated(a, d, {})) for a, d in pairs])
        if flags.size != n:
            raise ValueError(
                f"compute_terminated returned {flags.size} flags for {n} goal pairs "
                f"(shape {flags.shape})"
            )
        return flags.reshape(n)

    # --- sampling --------------------------------------------------------------------------
    def _sampled(self, out: TensorDict) -> TensorDict:
        """About ``k / (k + 1)`` of a sample's transitions get a hindsight goal and its reward
        (before the buffer's transform)."""
        if self.n_sampled_goal > 0:
            self._relabel(out)
        return out

    def goal_steps(self, index: Tensor) -> Tensor:
        """For each flat storage index, the flat index of the step whose
        ``("next", "achieved_goal")`` becomes its goal under :attr:`strategy` (draws from the
        buffer's generator). Shapes: ``[B] -> [B]``."""
        storage = self._storage
        assert storage is not None
        S, L = storage.num_streams, storage.length
        flat = _numpy(index).astype(np.int64)
        position, stream = flat // S, flat % S
        to_end = self._to_end[position, stream]
        ahead = (storage.cursor - 1 - position) % L  # stored steps after this one
        end = np.where(to_end >= 0, np.minimum(to_end, ahead), ahead)
        if self.strategy == "final":
            offset = end
        elif self.strategy == "future":
            offset = self.rng.integers(0, end + 1)
        else:
            stored_before = (position - storage.oldest()) % L
            start = np.minimum(self._since_start[position, stream], stored_before)
            offset = self.rng.integers(-start, end + 1)
        steps = torch.as_tensor(offset, dtype=torch.int64, device=index.device)
        return storage.advance(index, steps)

    def _relabel(self, out: TensorDict) -> None:
        storage = self._storage
        assert storage is not None
        index = out.get(keys.INDEX)
        chosen = torch.as_tensor(self.rng.random(index.shape[0]) < self.relabel_ratio)
        if not bool(chosen.any()):
            return
        picked = index[chosen.to(index.device)]
        source = storage.flat[storage.leaf(keys.NEXT_ACHIEVED_GOAL)]
        goal = source.index_select(0, self.goal_steps(picked))
        mask = chosen.to(out.device)
        for key in (keys.DESIRED_GOAL, keys.NEXT_DESIRED_GOAL):
            value = out.get(key).clone()
            value[mask] = goal.to(value.dtype)
            out.set(key, value)
        achieved = _numpy(out.get(keys.NEXT_ACHIEVED_GOAL)[mask])
        target = _numpy(goal)
        reward = out.get(keys.NEXT_REWARD).clone()
        new = torch.as_tensor(self._rewards(achieved.reshape(len(target), -1), target))
        reward[mask] = new.to(reward.dtype).reshape(-1, *reward.shape[1:]).to(reward.device)
        out.set(keys.NEXT_REWARD, reward)
        if self.compute_terminated is None:
            return
        ended = self._terminated(achieved, target)
        terminated = out.get(keys.NEXT_TERMINATED).clone()
        value = torch.as_tensor(ended.copy()).reshape(-1, *terminated.shape[1:])
        terminated[mask] = value.to(terminated.device)
        out.set(keys.NEXT_TERMINATED, terminated)
        truncated = out.get(keys.NEXT_TRUNCATED, None)
        done = terminated if truncated is None else terminated | truncated
        out.set(keys.NEXT_DONE, done)
