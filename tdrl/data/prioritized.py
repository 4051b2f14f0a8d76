"""Prioritized experience replay (Schaul et al. 2015, arXiv 1511.05952), proportional variant."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torch import Tensor

from tdrl import keys
from tdrl.data.replay_buffer import ReplayBuffer
from tdrl.data.storage import NestedKey, StreamStorage
from tdrl.data.sum_tree import SumTree

__all__ = ["PrioritizedReplayBuffer"]


def _numpy(x: Tensor | np.ndarray | Any, name: str) -> np.ndarray:
    if isinstance(x, Mapping | TensorDictBase):  # numpy would iterate its keys
        raise TypeError(
            f"update_priority: {name} must be a tensor or array, got {type(x).__name__}; "
            f"pass a sample's {name!r} entry"
            + (" (sample['index'])" if name == "index" else " (e.g. |td_error|)")
        )
    if isinstance(x, Tensor):
        if x.dtype == torch.bfloat16:  # numpy has no bfloat16
            x = x.float()
        # .numpy() directly when it can: detach and cpu would each cost about as much again
        x = x.numpy() if x.is_cpu and not x.requires_grad else x.detach().cpu().numpy()
    return np.asarray(x).reshape(-1)


class PrioritizedReplayBuffer(ReplayBuffer):
    """Replay buffer sampling item i with ``P(i) = p_i^alpha / sum_j p_j^alpha``.

    ``p_i = |priority_i| + eps`` after :meth:`update_priority`; new items get the largest
    ``p`` seen so far (1 at first), so each is replayed at least once with high probability
    (Schaul et al., Alg. 1). Samples carry ``"priority_weight"`` (TorchRL's key, which its losses
    read), ``w_i = (N P(i))^-beta / max_j w_j = (p_i^alpha / min_j p_j^alpha)^-beta`` with the
    max over all stored items. ``beta`` may be changed between calls (annealing). Other
    arguments as :class:`ReplayBuffer` (n-step sampling applies to the sampled roots).

    Shapes:
        ``sample(B)["priority_weight"]`` ``[B]`` float32;
        ``update_priority(index [B], priority [B])``.
    """

    def __init__(
        self, capacity: int, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6, **kwargs: Any
    ):
        super().__init__(capacity, **kwargs)
        if not (alpha >= 0 and beta >= 0):  # False for NaN
            raise ValueError(f"alpha and beta must be >= 0, got {alpha}, {beta}")
        if not eps > 0:
            # With eps = 0 a priority of 0 (a TD error of exactly 0) can leave every item at
            # probability 0: sampling would divide by a zero total.
            raise ValueError(f"eps must be > 0 (it keeps every priority positive), got {eps}")
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self.max_priority = 1.0
        self._tree: SumTree | None = None

    def _set_storage(self, storage: StreamStorage) -> None:
        super()._set_storage(storage)
        self._tree = SumTree(storage.capacity)

    _hooked = True
    _prioritized = True

    def _written(self, steps: int) -> None:
        s = self._storage
        assert s is not None and self._tree is not None
        S, length = s.num_streams, s.length
        m = min(steps, length)  # only the newest `length` steps of a long batch survive
        positions = (s.cursor - m + np.arange(m)) % length
        index = (positions[:, None] * S + np.arange(S)).reshape(-1)
        self._tree.update(index, np.full(index.shape, self.max_priority**self.alpha))

    def _sample_index(self, batch_size: int) -> tuple[Tensor, dict[NestedKey, Tensor]]:
        assert self._tree is not None
        index, weight = self._tree.sample(self.rng.random(batch_size), len(self), self.beta)
        return (
            torch.from_numpy(index).to(self.device, non_blocking=True),
            {keys.PRIORITY_WEIGHT: torch.from_numpy(weight).to(self.device, non_blocking=True)},
        )

    def update_priority(self, index: Tensor | np.ndarray, priority: Tensor | np.ndarray) -> None:
        """Set the priorities of the items at flat ``index`` (as returned in ``"index"``).

        ``priority`` is typically ``|td_error|``; each must be finite and >= 0, else a
        ValueError names the entry (and nothing is updated).
        """
        index_np = _numpy(index, "index")
        if index_np.dtype.kind not in "iu":
            raise TypeError(
                f"update_priority: index must hold integers (the 'index' of a sample), got "
                f"{index_np.dtype}"
            )
        index_np = index_np.astype(np.int64, copy=False)
        priority_np = _numpy(priority, "priority")
        if priority_np.dtype != np.float32:  # the kernel reads float32 or float64
            priority_np = priority_np.astype(np.float64, copy=False)
        if index_np.shape != priority_np.shape:
            raise ValueError(f"{index_np.size} indices but {priority_np.size} priorities")
        assert self._tree is not None or index_np.size == 0 or len(self) == 0
        if self._tree is None:
            if index_np.size:
                raise IndexError("the buffer is empty: no priority to update")
            return
        bad, top = self._tree.check_and_update(
            index_np, priority_np, len(self), self.alpha, self.eps
        )
        if bad >= 0:
            if not 0 <= index_np[bad] < len(self):
                raise IndexError(
                    f"index[{bad}] = {index_np[bad]} is not a stored item "
                    f"(buffer holds {len(self)})"
                )
            p = float(priority_np[bad])
            if 0 <= p < np.inf:
                raise ValueError(
                    f"priority[{bad}] = {p} (index {index_np[bad]}) is too large: (p + eps)^alpha "
                    f"must stay at most {self._tree.largest_leaf:.4g}, so that the float32 sum "
                    f"of {self._tree.capacity} items stays finite"
                )
            raise ValueError(
                f"priorities must be finite and >= 0: priority[{bad}] = {priority_np[bad]} "
                f"(index {index_np[bad]})"
            )
        self.max_priority = max(self.max_priority, top)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["max_priority"] = self.max_priority
        if self._tree is not None:
            # the written items' priorities (the rest are empty): a partly filled buffer saves
            # its filled part only
            state[keys.PRIORITY] = torch.from_numpy(self._tree.leaves()[: len(self)])
        return state

    def _check_state(self, state: dict[str, Any], storage: StreamStorage | None) -> None:
        if "max_priority" not in state:
            raise KeyError("state has no 'max_priority': it was not saved by a prioritized buffer")
        if storage is not None:
            priority = state.get(keys.PRIORITY)
            written = storage.size * storage.num_streams
            if priority is None or tuple(np.shape(priority)) not in {
                (storage.capacity,),
                (written,),
            }:
                both = f" (or {storage.capacity})" if written != storage.capacity else ""
                raise ValueError(
                    f"state {keys.PRIORITY!r}: expected {written} leaf priorities{both}, got "
                    f"{None if priority is None else tuple(np.shape(priority))}"
                )

    def _clear_storage(self) -> None:
        super()._clear_storage()
        self._tree = None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.max_priority = float(state["max_priority"])
        if self._tree is not None:
            self._tree.load_leaves(np.asarray(state[keys.PRIORITY]), len(self))
