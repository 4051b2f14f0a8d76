"""ResidualMLP against SimBa's definition (Lee et al. 2024), written with explicit loops over a
tiny network: the embedding, the pre-norm residual block with its 4x inner width, the last norm
and the head; members independent; the builders' residual option and what they refuse."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import make_vec_env
from tdrl.modules import ResidualMLP, batch_statistics, q_ensemble, tanh_gaussian_actor
from tdrl.objectives import CrossQLoss, TQCLoss


def linear(layer, e: int, x: list[float]) -> list[float]:
    """Member ``e`` of an EnsembleLinear on one row: W is [in, out] per member."""
    w, b = layer.weight.detach()[e], layer.bias.detach()[e, 0]
    return [
        sum(x[i] * float(w[i, j]) for i in range(len(x))) + float(b[j]) for j in range(w.shape[1])
    ]


def layer_norm(norm, e: int, x: list[float]) -> list[float]:
    mean = sum(x) / len(x)
    var = sum((v - mean) ** 2 for v in x) / len(x)
    w, b = norm.weight.detach()[e, 0], norm.bias.detach()[e, 0]
    return [(v - mean) / math.sqrt(var + 1e-5) * float(w[j]) + float(b[j]) for j, v in enumerate(x)]


def test_the_forward_is_simbas_definition():
    torch.manual_seed(0)
    net = ResidualMLP(3, 2, (4, 4), num_members=2)
    for norm in net.norms:  # non-trivial affine maps
        with torch.no_grad():
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(5, 3)
    got = net(x).detach()
    assert got.shape == (2, 5, 2)
    for e in range(2):
        for row in range(5):
            h = linear(net.embed, e, [float(v) for v in x[row]])
            for k in range(2):
                inner = [max(v, 0.0) for v in linear(net.up[k], e, layer_norm(net.norms[k], e, h))]
                assert len(inner) == 16  # 4x the width
                h = [a + b for a, b in zip(h, linear(net.down[k], e, inner), strict=True)]
            want = linear(net.output, e, layer_norm(net.norms[2], e, h))
            for j in range(2):
                assert float(got[e, row, j]) == pytest.approx(want[j], rel=1e-4, abs=1e-5)


def test_one_network_has_no_member_dim_and_members_are_independent():
    torch.manual_seed(0)
    single = ResidualMLP(3, 2, (8,))
    assert single(torch.randn(6, 3)).shape == (6, 2)
    assert single(torch.randn(4, 6, 3)).shape == (4, 6, 2)
    ensemble = ResidualMLP(3, 1, (8,), num_members=3)
    x = torch.randn(6, 3)
    out = ensemble(x)
    torch.testing.assert_close(ensemble(x, members=torch.tensor([2, 0])), out[[2, 0]])
    assert not torch.allclose(out[0], out[1])  # independently initialised members


def test_builders_take_the_residual_option_and_refuse_unequal_widths():
    with make_vec_env("Pendulum-v1", 1) as env:
        specs = env.observation_spec, env.action_spec
    with pytest.raises(ValueError, match=r"need one width: hidden sizes \(64, 32\)"):
        q_ensemble(*specs, (64, 32), residual=True)
    with pytest.raises(ValueError, match="no dropout or extra LayerNorm"):
        q_ensemble(*specs, (16,), residual=True, dropout=0.1)
    actor = tanh_gaussian_actor(*specs, (16,), residual=True)
    assert isinstance(actor.net, ResidualMLP)
    TQCLoss(actor, q_ensemble(*specs, (16, 16), 2, num_outputs=5, residual=True))
    # CrossQ with residual blocks: the blocks' norms are batch renorm layers
    renorm_critic = q_ensemble(*specs, (16,), residual=True, batch_renorm={"warmup_steps": 0})
    loss = CrossQLoss(tanh_gaussian_actor(*specs, (16,), residual=True), renorm_critic)
    b = 8
    batch = TensorDict(
        {
            "observation": torch.randn(b, 3),
            "action": torch.rand(b, 1) * 4 - 2,
            "next": {
                "observation": torch.randn(b, 3),
                "reward": torch.randn(b, 1),
                "terminated": torch.zeros(b, 1, dtype=torch.bool),
                "truncated": torch.zeros(b, 1, dtype=torch.bool),
                "done": torch.zeros(b, 1, dtype=torch.bool),
            },
        },
        batch_size=[b],
    )
    steps = int(renorm_critic.net.norms[0].steps)
    out = loss(batch)
    assert torch.isfinite(out["loss_qvalue"]) and int(renorm_critic.net.norms[0].steps) == steps + 1
    with batch_statistics(renorm_critic), pytest.raises(ValueError, match="member subset"):
        renorm_critic.net(torch.randn(b, 4), members=torch.tensor([0]))
