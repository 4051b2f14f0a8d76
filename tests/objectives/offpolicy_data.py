"""Transition batches and hand-set networks shared by the off-policy loss tests."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn


def transitions(
    batch: int = 6,
    obs_dim: int = 3,
    action_dim: int = 2,
    *,
    num_actions: int | None = None,
    terminated: list[bool] | None = None,
    truncated: list[bool] | None = None,
    seed: int = 0,
) -> TensorDict:
    """A flat ``[B]`` batch in TorchRL's layout; discrete index actions if ``num_actions``."""
    g = torch.Generator().manual_seed(seed)
    term = torch.tensor(terminated if terminated is not None else [False] * batch)
    trunc = torch.tensor(truncated if truncated is not None else [False] * batch)
    if num_actions is None:
        action = torch.rand(batch, action_dim, generator=g) * 2 - 1
    else:
        action = torch.randint(num_actions, (batch,), generator=g)
    return TensorDict(
        {
            "observation": torch.randn(batch, obs_dim, generator=g),
            "action": action,
            ("next", "observation"): torch.randn(batch, obs_dim, generator=g),
            ("next", "reward"): torch.randn(batch, 1, generator=g),
            ("next", "terminated"): term.view(batch, 1),
            ("next", "truncated"): trunc.view(batch, 1),
            ("next", "done"): (term | trunc).view(batch, 1),
        },
        batch_size=[batch],
    )


def linear(weight: list[list[float]], bias: list[float] | None = None) -> nn.Linear:
    """An ``nn.Linear`` with the given ``[out, in]`` weight (and bias, zero if None)."""
    w = torch.tensor(weight)
    layer = nn.Linear(w.shape[1], w.shape[0])
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.bias.copy_(torch.tensor(bias) if bias is not None else torch.zeros(w.shape[0]))
    return layer


def grads_of(module: nn.Module) -> list[bool]:
    """Which parameters of ``module`` hold a non-zero gradient."""
    return [p.grad is not None and bool(p.grad.abs().sum() > 0) for p in module.parameters()]


def all_params_have_grad(module: nn.Module) -> bool:
    return all(grads_of(module))


def no_param_has_grad(module: nn.Module) -> bool:
    return not any(grads_of(module))


def check_actor_critic_gradients(loss, td, actor: nn.Module, critic: nn.Module, critic_key: str):
    """The actor loss reaches every actor parameter and no critic one; ``critic_key``'s loss
    reaches no actor parameter (which critic parameters it reaches is the caller's check)."""
    loss(td)["loss_actor"].backward()
    assert all_params_have_grad(actor) and no_param_has_grad(critic)
    loss.zero_grad(set_to_none=True)
    loss(td)[critic_key].backward()
    assert no_param_has_grad(actor)
