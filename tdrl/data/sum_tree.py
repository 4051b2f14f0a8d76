"""A sum tree and min tree over priorities, batched, with numba kernels.

Schaul et al. 2015 (arXiv 1511.05952), Sec. 3.3 and App. B.2.1: sampling proportional to
``p_i`` by a prefix-sum search in a binary tree whose nodes hold the sum of their children.
Batched updates and searches run in compiled loops (no Python loop over the batch); the min tree
gives ``min_i p_i`` for the importance-weight normalisation.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["SumTree"]


@numba.njit(cache=True, nogil=True)
def _update(sums: np.ndarray, mins: np.ndarray, index: np.ndarray, value: np.ndarray) -> None:
    size = sums.shape[0] // 2
    node = index + size
    for j in range(node.shape[0]):
        sums[node[j]] = value[j]
        mins[node[j]] = value[j]
    # Level by level over the whole batch (not item by item): the loads of one level are
    # independent across items, so the CPU overlaps their cache misses. Parents are recomputed
    # from their children (not by adding deltas): exact, no drift, and duplicate indices in one
    # batch are harmless (the last value wins).
    while size > 1:
        for j in range(node.shape[0]):
            parent = node[j] // 2
            left = 2 * parent
            sums[parent] = sums[left] + sums[left + 1]
            mins[parent] = min(mins[left], mins[left + 1])
            node[j] = parent
        size //= 2


@numba.njit(cache=True, nogil=True)
def _find(sums: np.ndarray, mass: np.ndarray) -> np.ndarray:
    size = sums.shape[0] // 2
    node = np.ones(mass.shape[0], dtype=np.int64)
    u = mass.copy()
    level = 1
    while level < size:  # level-major, as in _update: independent loads overlap
        for j in range(node.shape[0]):
            left = 2 * node[j]
            # Never step into an empty right subtree (u can reach it only by rounding).
            if u[j] < sums[left] or sums[left + 1] <= 0.0:
                node[j] = left
            else:
                u[j] -= sums[left]
                node[j] = left + 1
        level *= 2
    return node - size


@numba.njit(cache=True, nogil=True)
def _sample(sums: np.ndarray, mins: np.ndarray, uniform: np.ndarray, num_valid: int, beta: float):
    # find + importance weights in one compiled pass (Schaul et al. 2015, Alg. 1 line 10):
    # w_i = (N P(i))^-beta / max_j w_j = (p_i / min_j p_j)^-beta.
    size = sums.shape[0] // 2
    index = _find(sums, uniform * sums[1])
    weight = np.empty(index.shape[0], dtype=np.float32)
    for j in range(index.shape[0]):
        if index[j] >= num_valid:  # rounding guard; the valid items are a prefix
            index[j] = num_valid - 1
        weight[j] = (sums[index[j] + size] / mins[1]) ** (-beta)
    return index, weight


@numba.njit(cache=True, nogil=True)
def _check_and_update(sums, mins, index, priority, num_valid, alpha, eps):  # noqa: ANN001, ANN202
    # Returns (-1, max p) after updating, or (j, 0) for the first bad entry j without updating.
    top = 0.0
    for j in range(index.shape[0]):
        p = priority[j]
        if not (p >= 0.0 and p < np.inf) or index[j] < 0 or index[j] >= num_valid:
            return j, 0.0
        top = max(top, p + eps)
    value = (priority + eps) ** alpha
    _update(sums, mins, index, value)
    return -1, top


class SumTree:
    """Sum and min of ``capacity`` non-negative leaf values; proportional sampling.

    Empty leaves hold 0 in the sum tree and +inf in the min tree, so they are never sampled and
    never become the minimum.

    Shapes:
        ``update(index [B], value [B])``; ``find(mass [B]) -> index [B]``.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        size = 1
        while size < capacity:
            size *= 2
        self._size = size
        self.sums = np.zeros(2 * size, dtype=np.float64)
        self.mins = np.full(2 * size, np.inf, dtype=np.float64)

    def update(self, index: np.ndarray, value: np.ndarray) -> None:
        _update(
            self.sums,
            self.mins,
            np.ascontiguousarray(index, np.int64),
            np.ascontiguousarray(value, np.float64),
        )

    def sample(
        self, uniform: np.ndarray, num_valid: int, beta: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Indices drawn with probability ``leaf / total`` from ``uniform`` in [0, 1), and their
        importance weights ``(leaf / min leaf)^-beta`` (float32)."""
        return _sample(self.sums, self.mins, uniform, num_valid, beta)

    def check_and_update(
        self, index: np.ndarray, priority: np.ndarray, num_valid: int, alpha: float, eps: float
    ) -> tuple[int, float]:
        """Set leaves to ``(priority + eps)^alpha`` if every priority is finite and >= 0 and every
        index in ``[0, num_valid)``; returns ``(-1, max(priority + eps))``, or ``(j, 0)`` for the
        first bad entry j (nothing updated)."""
        return _check_and_update(self.sums, self.mins, index, priority, num_valid, alpha, eps)

    def find(self, mass: np.ndarray) -> np.ndarray:
        """Leaves where the prefix sum reaches ``mass`` (each in ``[0, total)``)."""
        return _find(self.sums, np.ascontiguousarray(mass, np.float64))

    def __getitem__(self, index: np.ndarray) -> np.ndarray:
        return self.sums[np.asarray(index) + self._size]

    @property
    def total(self) -> float:
        return float(self.sums[1])

    @property
    def min(self) -> float:
        return float(self.mins[1])

    def leaves(self) -> np.ndarray:
        """A copy of the leaf values. Shapes: ``[capacity]``."""
        return self.sums[self._size : self._size + self.capacity].copy()

    def load_leaves(self, values: np.ndarray, num_valid: int) -> None:
        """Set the leaves (those from ``num_valid`` on are empty) and rebuild the inner nodes."""
        values = np.asarray(values, dtype=np.float64)[:num_valid]
        lo = self._size
        self.sums[:] = 0.0
        self.mins[:] = np.inf
        self.sums[lo : lo + num_valid] = values
        self.mins[lo : lo + num_valid] = values
        while lo > 1:  # one vectorized pass per level
            hi, lo = lo, lo // 2
            self.sums[lo:hi] = self.sums[2 * lo : 2 * hi : 2] + self.sums[2 * lo + 1 : 2 * hi : 2]
            self.mins[lo:hi] = np.minimum(
                self.mins[2 * lo : 2 * hi : 2], self.mins[2 * lo + 1 : 2 * hi : 2]
            )
