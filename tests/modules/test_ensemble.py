"""Critic ensembles: one batched call equals a per-member loop; independent members."""

from __future__ import annotations

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
