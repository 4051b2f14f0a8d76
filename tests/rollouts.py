"""Small rollouts the tests make: TorchRL's ``[N, T]`` layout in Pendulum's shapes."""

from __future__ import annotations

import torch
from tensordict import TensorDict


def rollout(streams: int = 2, steps: int = 6) -> TensorDict:
    """A ``[streams, steps]`` rollout of random values, every third step terminated."""
    g = torch.Generator().manual_seed(0)
    terminated = (torch.arange(steps) % 3 == 2).expand(streams, steps).unsqueeze(-1)
    false = torch.zeros(streams, steps, 1, dtype=torch.bool)
    return TensorDict(
        {
            "observation": torch.randn(streams, steps, 3, generator=g),
            "action": torch.rand(streams, steps, 1, generator=g),
            "next": {
                "observation": torch.randn(streams, steps, 3, generator=g),
                "reward": torch.randn(streams, steps, 1, generator=g),
                "terminated": terminated.clone(),
                "truncated": false,
                "done": terminated.clone(),
            },
        },
        batch_size=[streams, steps],
    )
