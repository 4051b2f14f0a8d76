"""actor_critic's init and action-units options (ortho_init, rescale_actions): SB3's
``ortho_init=False`` and unsquashed Gaussian policies, as the zoo's recurrent PPO uses them."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tdrl.envs import make_vec_env
from tdrl.modules import actor_critic

NETWORKS = [
    dict(),
    dict(sde_sample_freq=4),
    dict(recurrent="lstm", recurrent_critic=True, sde_sample_freq=4, hidden_sizes=(64,)),
]


def build(env_id: str = "Pendulum-v1", seed: int = 0, **options):  # type: ignore[no-untyped-def]
    with make_vec_env(env_id, 2, seed=0) as env:
        torch.manual_seed(seed)
        actor, critic, _ = actor_critic(env.observation_spec, env.action_spec, **options)
    return actor, critic


def linears(*modules: nn.Module) -> list[nn.Linear]:
    return [m for module in modules for m in module.modules() if isinstance(m, nn.Linear)]


@pytest.mark.parametrize("options", NETWORKS)
def test_orthogonal_init_by_default_and_pytorch_default_without_it(options: dict) -> None:
    ortho = linears(*build(**options))
    default = linears(*build(**options, ortho_init=False))
    assert len(ortho) == len(default) >= 3
    # orthogonal: zero biases, and a policy head of gain 0.01 (rows of norm 0.01)
    assert all(bool((layer.bias == 0).all()) for layer in ortho)
    heads = [layer for layer in ortho if layer.out_features == 1 and layer.in_features == 64]
    assert any(torch.allclose(h.weight.norm(dim=1), torch.tensor([0.01]), atol=1e-6) for h in heads)
    # PyTorch's default (Kaiming-uniform with a = sqrt 5): weights and biases uniform in
    # +-1/sqrt(fan_in), and nonzero biases
    for layer in default:
        layer.requires_grad_(False)
        bound = 1 / math.sqrt(layer.in_features)
        assert float(layer.weight.abs().max()) <= bound
        assert float(layer.bias.abs().max()) <= bound
        assert bool((layer.bias != 0).all())
        assert float(layer.weight.abs().max()) > 0.5 * bound  # not the 0.01-gain head


@pytest.mark.parametrize("options", NETWORKS)
def test_without_rescaling_the_gaussian_acts_in_the_env_units(options: dict) -> None:
    # Pendulum's torque is in [-2, 2]: rescaled, loc and scale are twice the unrescaled ones
    # (the same parameters: the bounds draw no random numbers).
    rescaled, _ = build(**options)
    plain, _ = build(**options, rescale_actions=False)
    torch.testing.assert_close(rescaled.state_dict(), plain.state_dict())
    with make_vec_env("Pendulum-v1", 2, seed=0) as env:
        batch = env.reset()
    if "recurrent" in options:
        batch = batch.update(
            {
                "is_init": torch.ones(2, 1, dtype=torch.bool),
                "recurrent_state_h": torch.zeros(2, 1, 64),
                "recurrent_state_c": torch.zeros(2, 1, 64),
            }
        )
    with torch.no_grad():
        a, b = rescaled.get_dist(batch.clone()), plain.get_dist(batch.clone())
    assert float(b.loc.abs().max()) > 0
    torch.testing.assert_close(a.loc, 2 * b.loc)
    torch.testing.assert_close(a.scale, 2 * b.scale)


def test_discrete_policies_take_both_options() -> None:
    actor, critic = build("CartPole-v1", ortho_init=False, rescale_actions=False)
    assert all(bool((layer.bias != 0).all()) for layer in linears(actor, critic))
