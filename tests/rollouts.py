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


def transitions(
    n: int,
    obs_dim: int,
    *,
    num_actions: int | None = None,
    action_dim: int = 1,
    terminal_rate: float = 0.0,
    seed: int = 0,
) -> TensorDict:
    """A flat ``[n]`` batch of random transitions in TorchRL's layout: index actions below
    ``num_actions``, else actions in ``[-1, 1]^action_dim``; each step terminated with
    probability ``terminal_rate``, none truncated."""
    g = torch.Generator().manual_seed(seed)
    if num_actions is not None:
        action = torch.randint(num_actions, (n,), generator=g)
    else:
        action = torch.rand(n, action_dim, generator=g) * 2 - 1
    observation = torch.randn(n, obs_dim, generator=g)
    next_observation = torch.randn(n, obs_dim, generator=g)
    reward = torch.randn(n, 1, generator=g)
    terminated = torch.zeros(n, 1, dtype=torch.bool)
    if terminal_rate > 0:
        terminated = torch.rand(n, 1, generator=g) < terminal_rate
    return TensorDict(
        {
            "observation": observation,
            "action": action,
            "next": {
                "observation": next_observation,
                "reward": reward,
                "terminated": terminated,
                "truncated": torch.zeros(n, 1, dtype=torch.bool),
                "done": terminated.clone(),
            },
        },
        batch_size=[n],
    )
