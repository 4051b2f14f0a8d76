"""Reading and renaming the keys of a batch: one error format for every module that reads one.

Estimators, losses and modules read TensorDict entries by configurable keys (TorchRL's
``tensor_keys`` / ``set_keys``). They share these helpers, so a missing entry and a bad
``set_keys`` call read the same everywhere: :class:`MissingKeyError` (a ``KeyError``) names the
module, the key and the keys the batch has; ``set_keys`` raises ``ValueError`` (TorchRL's type)
naming the unknown names and the valid ones; :func:`check_finite` names the entry that holds a NaN
or an infinity. :func:`check_counts` does the same for a constructor's sizes and counts.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Container
from typing import Any, TypeVar

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from tdrl.keys import NEXT

__all__ = [
    "MissingKeyError",
    "check_counts",
    "check_finite",
    "next_key",
    "renamed",
    "require",
    "tracing",
]

K = TypeVar("K")


class MissingKeyError(KeyError):
    """An entry a module needs is not in the batch (a readable message, unlike ``KeyError``);
    ``key`` is the key as the module asked for it (None when not given)."""

    def __init__(self, message: str, key: NestedKey | None = None) -> None:
        super().__init__(message)
        self.key = key

    def __str__(self) -> str:
        return str(self.args[0])


def next_key(key: NestedKey) -> tuple[str, ...]:
    """``key`` under ``"next"``: ``"reward" -> ("next", "reward")``."""
    return (NEXT, *key) if isinstance(key, tuple) else (NEXT, key)


def require(td: TensorDictBase, key: NestedKey, owner: str, why: str = "") -> torch.Tensor:
    """``td[key]``, or a :class:`MissingKeyError` naming ``owner``, the key, the keys the batch
    has, and ``why`` (what to do about it) when given."""
    value = td.get(key, None)
    if value is None:
        present = sorted(map(str, td.keys(True, True)))
        hint = f"; {why}" if why else ""
        raise MissingKeyError(
            f"{owner}: missing key {key!r} in the batch (it has {present}){hint}", key
        )
    return value


def renamed(keys: K, owner: str, **names: Any) -> K:
    """``keys`` (a frozen dataclass of key names) with ``names`` replaced: what every
    ``set_keys`` does. Unknown names and values that are not keys raise ``ValueError``."""
    fields = {f.name for f in dataclasses.fields(keys)}  # type: ignore[arg-type]
    unknown = sorted(set(names) - fields)
    if unknown:
        raise ValueError(
            f"{owner}.set_keys: {unknown[0]!r} is not a key name (unknown key names {unknown}; "
            f"valid: {sorted(fields)})"
        )
    for name, key in names.items():
        if not (
            isinstance(key, str)
            or (isinstance(key, tuple) and key and all(isinstance(part, str) for part in key))
        ):
            raise ValueError(f"{owner}.set_keys: {name}={key!r} is not a str or tuple of str")
    return dataclasses.replace(keys, **names)  # type: ignore[type-var]


def check_counts(owner: str, **counts: Any) -> None:
    """Raise ``ValueError`` naming the first of ``counts`` (a size, or a number of members,
    actions, atoms, steps, samples) that is not an integer >= 1 (``"EpsilonGreedy: num_actions
    must be >= 1, got 0 (an integer count)"``). Python and numpy integers pass; bools and floats
    do not."""
    for name, value in counts.items():
        try:
            ok = not isinstance(value, bool) and operator.index(value) >= 1
        except TypeError:
            ok = False
        if not ok:
            raise ValueError(f"{owner}: {name} must be >= 1, got {value!r} (an integer count)")


def tracing() -> bool:
    """Whether this call runs inside a ``torch.compile`` trace or a CUDA graph capture (no host
    syncs allowed: value checks give way)."""
    return torch.compiler.is_compiling() or (
        torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    )


def check_finite(
    td: TensorDictBase, keys: Container[NestedKey], owner: str, hint: str = ""
) -> None:
    """Raise ``ValueError`` naming the entry of ``td`` under one of ``keys`` (as ``items(True,
    True)`` spells them: ``"observation"``, ``("next", "reward")``) that holds a NaN or an
    infinity, with how many, the first one's index and value, and ``hint``.

    Cheap enough for every loss call: the entries concatenated and summed, one host sync. A sum
    is not finite when one of its terms is not (``inf - inf`` is NaN), so only the one sum is
    tested (one concatenation and one sum cost half as much as a sum per entry for the few small
    entries of a minibatch); the entries are searched one by one only when it fails (finite
    values whose sum overflows are searched too, and pass). The entries share a device.

    Nothing is checked inside a compiled or CUDA-graph-captured step (:func:`tracing`), which
    cannot sync with the host: the buffer and the minibatcher checked those values on arrival.
    """
    if tracing():
        return
    values = [
        (key, value)
        for key, value in td.items(True, True)
        if key in keys and isinstance(value, torch.Tensor) and value.is_floating_point()
    ]
    if not values:
        return
    tensors = [value for _, value in values]
    lead = tensors[0].shape[:-1]
    if tensors[0].dim() and all(t.shape[:-1] == lead for t in tensors):  # [*B, F_i]: as they are
        joined = torch.cat(tensors, dim=-1)
    else:
        joined = torch.cat([t.reshape(-1) for t in tensors])
    if math.isfinite(joined.sum().item()):
        return
    for key, value in values:
        bad = ~torch.isfinite(value)
        if bool(bad.any()):
            index = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(
                f"{owner}: {key!r} holds {int(bad.sum())} NaN or infinite value(s) of "
                f"{value.numel()}, the first at index {index}: {value[index].item()}{hint}"
            )
