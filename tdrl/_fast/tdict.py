"""TensorDict construction and entry access without tensordict's per-call checks.

Twin of ``tensordict.TensorDict(source, batch_size=..., device=...)`` and of ``td.set(key, value)``
on root keys, for callers that built every leaf themselves with the right batch size and device:
the checks would only repeat theirs. Equality with the checked constructor is
proven by the tests of each caller (parametrized over the ``fast_mode`` fixture).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

__all__ = ["entries", "new_unchecked"]


def new_unchecked(
    source: dict[str, Any], batch_size: torch.Size, device: torch.device | None = None
) -> TensorDict:
    """``TensorDict(source, batch_size=batch_size, device=device)``, unchecked.

    ``source`` maps plain string keys to tensors or TensorDicts that already have
    ``batch_size`` as their leading dims (and live on ``device``, when given).
    """
    return TensorDict._new_unsafe(source, batch_size=batch_size, device=device)


def entries(td: TensorDict) -> dict[str, Any]:
    """The dict of ``td``'s own (root) entries, for reads and writes without key resolution.

    A write must keep the TensorDict's invariants: a tensor whose leading dims are
    ``td.batch_size``, on ``td.device``.
    """
    return td._tensordict
