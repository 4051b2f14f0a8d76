"""The noise-buffer convention: which buffers of a module are exploration noise, not weights.

A module lists the names of such buffers (``NoisyLinear``'s draw, an OU process's per-env state,
gSDE's noise matrix) in a class attribute named :data:`NOISE_BUFFERS`. They belong to the copy
that holds them: target updates in ``tdrl.objectives.target`` do not copy them (a target network
draws noise of its own) and weight sends in ``tdrl.collectors`` leave each worker's alone.
"""

from __future__ import annotations

import torch

__all__ = ["NOISE_BUFFERS", "noise_buffers"]


NOISE_BUFFERS = "noise_buffers"
"""The class attribute naming a module's noise buffers (``NoisyLinear``'s draw, an OU process's
state, gSDE's noise matrix): buffers that are not weights, so a target network does not copy
them and a worker does not receive them."""


def noise_buffers(module: torch.nn.Module) -> tuple[str, ...]:
    """The names (local to ``module``, not recursive) of the buffers ``module`` lists in its
    :data:`NOISE_BUFFERS` attribute; ``()`` when it lists none."""
    return tuple(getattr(module, NOISE_BUFFERS, ()))
