"""tdrl: deep reinforcement learning on TensorDicts.

``import tdrl`` loads nothing heavy: torch, tensordict and TorchRL load with the first
subpackage a program imports (``tdrl.data``, ``tdrl.objectives``, ...), so a recipe's ``--help``
answers before any of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tdrl._fast import set_fast

__version__ = "0.1.0"
__all__ = ["set_fast"]


def __getattr__(name: str) -> Any:
    if name == "set_fast":  # the one switch of the fast paths (docs/design.md, "Fast paths")
        from tdrl._fast import set_fast

        return set_fast
    raise AttributeError(f"module 'tdrl' has no attribute {name!r}")
