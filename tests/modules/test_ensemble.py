"""Critic ensembles: one batched call equals a per-member loop; independent members."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from tdrl.modules import EnsembleCritic, EnsembleLinear, EnsembleMLP
from tdrl.objectives import ModuleEnsemble, as_ensemble


def member_forward(net: EnsembleMLP, e: int, x: torch.Tensor) -> torch.Tensor:
    """Reference: member e as plain matrix products, one layer at a time."""
    for layer in net.hidden:
        x = torch.relu(x @ layer.weight[e] + layer.bias[e, 0])
    return x @ net.output.weight[e] + net.output.bias[e, 0]


def test_batched_ensemble_equals_a_loop_over_members():
    torch.manual_seed(0)
    net = EnsembleMLP(5, 2, (16, 8), num_members=3)
    x = torch.randn(4, 6, 5)
    out = net(x)
    assert out.shape == (3, 4, 6, 2)
    for e in range(3):
        torch.testing.assert_close(out[e], member_forward(net, e, x))


def test_members_are_initialised_independently_and_train_independently():
    torch.manual_seed(0)
    net = EnsembleMLP(5, 1, (8,), num_members=2)
    assert not torch.equal(net.hidden[0].weight[0], net.hidden[0].weight[1])
    net(torch.randn(3, 5))[1].sum().backward()  # only member 1's output
    for p in net.parameters():
        assert p.grad[0].abs().sum() == 0 and p.grad[1].abs().sum() > 0


def test_orthogonal_init_per_member():
    layer = EnsembleLinear(16, 8, 3, init="orthogonal", gain=2.0)
    for w in layer.weight:  # [in, out]: its columns are orthogonal with norm = gain
        torch.testing.assert_close(w.T @ w, 4.0 * torch.eye(8), atol=1e-5, rtol=0)
    assert layer.bias.abs().sum() == 0


def test_ensemble_critic_keys_and_layout():
    torch.manual_seed(0)
    critic = EnsembleCritic(EnsembleMLP(5, 1, (8,), num_members=2))
    td = TensorDict(observation=torch.randn(4, 3), action=torch.randn(4, 2), batch_size=[4])
    values = critic.values(td)
    assert values.shape == (2, 4, 1) and "state_action_value" not in td.keys()
    critic(td)
    assert torch.equal(td["state_action_value"], values.movedim(0, -2))


def test_module_ensemble_matches_its_members():
    torch.manual_seed(0)
    single = TensorDictModule(
        nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1)),
        in_keys=["observation", "action"],
        out_keys=["state_action_value"],
    )
    single.module = _Cat(single.module)
    ensemble = as_ensemble(single, 3)
    assert isinstance(ensemble, ModuleEnsemble) and ensemble.num_members == 3
    td = TensorDict(observation=torch.randn(4, 3), action=torch.randn(4, 2), batch_size=[4])
    values = ensemble.values(td)
    assert values.shape == (3, 4, 1)
    torch.testing.assert_close(values[0], single(td.clone())["state_action_value"])
    assert not torch.allclose(values[0], values[1])
    values.sum().backward()
    assert all(p.grad is not None for p in ensemble.parameters())


class _Cat(nn.Module):
    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([observation, action], -1))


class _PlainReLU(nn.ReLU):
    """An out-of-place ReLU that EnsembleMLP and mlp do not recognise as nn.ReLU."""


def test_in_place_relu_gives_the_same_values_and_gradients():
    # EnsembleMLP and mlp apply nn.ReLU in place; an out-of-place ReLU must give the same
    # numbers, forward and backward (for the parameters and for the input).
    from tdrl.modules import mlp

    def run(activation: type[nn.Module], ensemble: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        if ensemble:
            net: nn.Module = EnsembleMLP(5, 1, (16, 16), num_members=3, activation=activation)
        else:
            net = mlp(5, 2, (16, 16), activation=activation)
        assert any(isinstance(m, nn.ReLU) and m.inplace for m in net.modules()) == (
            activation is nn.ReLU and not ensemble
        )
        x = torch.randn(7, 5, generator=torch.Generator().manual_seed(1), requires_grad=True)
        out = net(x)
        out.square().sum().backward()
        return [out.detach(), x.grad, *(p.grad for p in net.parameters())]

    for ensemble in (True, False):
        fast, plain = run(nn.ReLU, ensemble), run(_PlainReLU, ensemble)
        assert all(torch.equal(a, b) for a, b in zip(fast, plain, strict=True))


@pytest.mark.parametrize("members", [2, 3])
@pytest.mark.parametrize("how", ["min", "first"])
def test_reduced_equals_plain(members: int, how: str) -> None:
    # EnsembleMLP.reduced computes only what an actor loss needs (the parameters frozen, the
    # gradient to the input): the values and the input's gradient must be those of the plain
    # expressions, self(x).min(0).values and self(x)[0], whichever member wins each row.
    torch.manual_seed(0)
    net = EnsembleMLP(9, 1, (64, 32), num_members=members)
    x = 3 * torch.randn(256, 9, generator=torch.Generator().manual_seed(1))
    weight = torch.randn(256, 1, generator=torch.Generator().manual_seed(2))
    net.requires_grad_(False)
    net.output.bias.zero_()  # no member lies below the others everywhere

    def run(fast: bool) -> tuple[torch.Tensor, torch.Tensor]:
        xi = x.clone().requires_grad_(True)
        out = net.reduced(xi, how) if fast else net(xi)
        if not fast:
            out = out.min(dim=0).values if how == "min" else out[0]
        (out * weight).sum().backward()
        assert xi.grad is not None
        return out.detach(), xi.grad

    (value, grad), (plain_value, plain_grad) = run(True), run(False)
    assert value.shape == (256, 1)
    assert torch.equal(value, plain_value)
    torch.testing.assert_close(grad, plain_grad, rtol=1e-6, atol=1e-7)  # gemm row blocking
    if how == "min":  # every member wins some rows, so each backward branch ran
        winners = net(x).argmin(0).unique()
        assert winners.numel() == members


def test_reduced_keeps_parameter_gradients_when_not_frozen() -> None:
    # With trainable parameters, reduced is the plain expression (autograd's backward): the
    # members' parameters get their gradients.
    torch.manual_seed(0)
    net = EnsembleMLP(4, 1, (8,), num_members=2)
    net.reduced(torch.randn(16, 4, requires_grad=True), "min").sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in net.parameters())
    with pytest.raises(ValueError, match="'min' or 'first'"):
        net.reduced(torch.randn(3, 4), "max")  # type: ignore[arg-type]


def test_sac_and_td3_actor_losses_through_reduced_values() -> None:
    # The losses' actor gradients through EnsembleCritic.reduced_values equal those through a
    # critic without it (a ModuleEnsemble-like wrapper that only has values()).
    from tdrl.modules import DeterministicActor, TanhGaussianActor, mlp
    from tdrl.objectives import SACLoss, TD3Loss

    class ValuesOnly(nn.Module):
        def __init__(self, critic: EnsembleCritic) -> None:
            super().__init__()
            self.critic, self.in_keys, self.out_keys = critic, critic.in_keys, critic.out_keys
            self.num_members = critic.num_members

        def forward(self, td: TensorDict) -> TensorDict:
            return self.critic(td)

        def values(self, td: TensorDict) -> torch.Tensor:
            return self.critic.values(td)

    g = torch.Generator().manual_seed(0)
    batch = TensorDict(
        {"observation": torch.randn(64, 5, generator=g), "action": torch.rand(64, 2, generator=g)},
        batch_size=[64],
    )
    for kind in ("sac", "td3"):
        grads = []
        for wrap in (False, True):
            torch.manual_seed(0)
            critic = EnsembleCritic(EnsembleMLP(7, 1, (32, 32), num_members=2))
            if kind == "sac":
                actor = TanhGaussianActor(mlp(5, 4, (32,)), 2)
                loss = SACLoss(actor, ValuesOnly(critic) if wrap else critic, action_dim=2)
            else:
                actor = DeterministicActor(mlp(5, 2, (32,)), 2)
                loss = TD3Loss(actor, ValuesOnly(critic) if wrap else critic)
            torch.manual_seed(1)
            value, _ = (
                loss.actor_loss(batch.clone())
                if kind == "sac"
                else (loss.actor_loss(batch.clone()), None)
            )
            value.backward()
            grads.append([p.grad.clone() for p in actor.parameters()])
            assert all(p.grad is None for p in critic.parameters())
        for a, b in zip(*grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
