"""Actors, critic, MLP and distributions: keys, interaction types, log-probs, gradients, errors."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type
from torch import nn
from torch.distributions import Independent, Normal, kl_divergence
from torchrl.envs.utils import ExplorationType, set_exploration_type

from tdrl.modules import (
    Categorical,
    CategoricalActor,
    GaussianActor,
    IndependentNormal,
    TanhGaussianActor,
    TanhNormal,
    ValueCritic,
    mlp,
)

OBS, ACT = 5, 2


def batch(n: int = 7) -> TensorDict:
    return TensorDict(observation=torch.randn(n, OBS), batch_size=[n])


def test_mlp_orthogonal_gains() -> None:
    net = mlp(OBS, 3, (16, 16), hidden_gain=math.sqrt(2), output_gain=0.01)
    first, last = net[0].weight, net[-1].weight
    # Orthogonal rows scaled by the gain: W W^T = gain^2 I (16 rows of 5 columns: W^T W instead).
    torch.testing.assert_close(first.T @ first, 2.0 * torch.eye(OBS), atol=1e-5, rtol=0)
    torch.testing.assert_close(last @ last.T, 1e-4 * torch.eye(3), atol=1e-7, rtol=0)
    assert all(
        float(layer.bias.detach().abs().max()) == 0 for layer in net if isinstance(layer, nn.Linear)
    )


@pytest.mark.parametrize("kind", ["gaussian", "tanh", "categorical"])
def test_keys_written_and_interaction_types(kind: str) -> None:
    torch.manual_seed(0)
    if kind == "gaussian":
        actor = GaussianActor(mlp(OBS, ACT), ACT, action_low=-2.0, action_high=[1.0, 3.0])
    elif kind == "tanh":
        actor = TanhGaussianActor(mlp(OBS, 2 * ACT), ACT, action_low=-2.0, action_high=2.0)
    else:
        actor = CategoricalActor(mlp(OBS, 4))
    td = batch()
    out = actor(td)
    assert out is td and set(actor.out_keys) <= set(td.keys())
    assert td["action_log_prob"].shape == (7,)
    dist = actor.get_dist(td)
    deterministic = dist.deterministic_sample
    torch.testing.assert_close(td["action"], deterministic)  # default: DETERMINISTIC
    with set_interaction_type(InteractionType.DETERMINISTIC):
        torch.testing.assert_close(actor(batch())["action"].shape, deterministic.shape)
    with set_exploration_type(ExplorationType.RANDOM):
        samples = torch.stack([actor(td.clone())["action"] for _ in range(5)])
    assert not torch.equal(samples[0], samples[1])
    torch.testing.assert_close(td["action_log_prob"], dist.log_prob(td["action"]))
    if kind == "gaussian":
        torch.testing.assert_close(deterministic, td["loc"])
    if kind == "categorical":
        torch.testing.assert_close(deterministic, td["logits"].argmax(-1))


def test_gaussian_rescaling_log_prob_is_exact() -> None:
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
    actor = GaussianActor(mlp(OBS, ACT), ACT, init_log_std=-0.3, action_low=low, action_high=high)
    td = batch()
    with set_interaction_type(InteractionType.RANDOM):
        actor(td)
    raw_loc = actor.net(td["observation"])
    mid, half = (high + low) / 2, (high - low) / 2
    reference = Independent(Normal(mid + half * raw_loc, half * math.exp(-0.3)), 1)
    torch.testing.assert_close(td["loc"], reference.mean)
    torch.testing.assert_close(td["action_log_prob"], reference.log_prob(td["action"]))
    # A state-dict round trip restores the learned parameters; bounds are configuration.
    assert set(actor.state_dict()) == {"log_std"} | {f"net.{k}" for k in actor.net.state_dict()}


def test_tanh_normal_density_and_torchrl_agreement() -> None:
    from torchrl.modules import TanhNormal as TorchRLTanhNormal

    loc, scale = torch.tensor([[0.3, -1.0]]), torch.tensor([[0.5, 2.0]])
    low, high = torch.tensor([-1.0, 0.0]), torch.tensor([3.0, 2.0])
    dist = TanhNormal(loc, scale, low, high)
    action = dist.sample((50,))
    assert bool(((action > low) & (action < high)).all())
    reference = TorchRLTanhNormal(loc, scale, low=low, high=high)
    torch.testing.assert_close(dist.log_prob(action), reference.log_prob(action), atol=1e-4, rtol=0)
    # The 1-D density integrates to 1 over (low, high): the Jacobian term is right.
    one = TanhNormal(torch.tensor([[0.4]]), torch.tensor([[0.7]]), -2.0, 3.0)
    grid = torch.linspace(-2.0, 3.0, 200_001)[1:-1].unsqueeze(-1).unsqueeze(-1)
    density = one.log_prob(grid).exp().squeeze()
    assert abs(float(torch.trapezoid(density, dx=5.0 / 200_000)) - 1.0) < 2e-3


def test_tanh_normal_stable_when_saturated() -> None:
    loc = torch.tensor([[30.0, -30.0]], requires_grad=True)
    log_std = torch.zeros(1, 2, requires_grad=True)
    dist = TanhNormal(loc, log_std.exp())
    action, log_prob = dist.rsample_and_log_prob()
    assert bool(((action > -1) & (action < 1)).all())
    (log_prob.sum() + dist.log_prob(action.detach()).sum()).backward()
    assert torch.isfinite(log_prob).all() and torch.isfinite(loc.grad).all()
    assert torch.isfinite(log_std.grad).all()


def test_kl_registered() -> None:
    p = IndependentNormal(torch.randn(4, 3), torch.rand(4, 3) + 0.1)
    q = IndependentNormal(torch.randn(4, 3), torch.rand(4, 3) + 0.1)
    reference = kl_divergence(
        Independent(Normal(p.loc, p.scale), 1), Independent(Normal(q.loc, q.scale), 1)
    )
    torch.testing.assert_close(kl_divergence(p, q), reference)
    tp, tq = TanhNormal(p.loc, p.scale), TanhNormal(q.loc, q.scale)
    torch.testing.assert_close(kl_divergence(tp, tq), reference)


def test_entropy_gradient_reaches_only_log_std() -> None:
    actor = GaussianActor(mlp(OBS, ACT), ACT)
    actor.get_dist(batch()).entropy().mean().backward()
    assert actor.log_std.grad is not None and bool(actor.log_std.grad.abs().sum() > 0)
    assert all(p.grad is None for p in actor.net.parameters())


def test_critic_shapes_and_errors() -> None:
    critic = ValueCritic(mlp(OBS, 1))
    td = TensorDict(observation=torch.randn(3, 4, OBS), batch_size=[3, 4])
    assert critic(td)["state_value"].shape == (3, 4, 1)
    with pytest.raises(ValueError, match="trailing dim of 1"):
        ValueCritic(mlp(OBS, 2))(batch())
    with pytest.raises(KeyError, match="'observation'"):
        critic(TensorDict(obs=torch.randn(3, OBS), batch_size=[3]))
    with pytest.raises(ValueError, match=r"'observation' of shape \(3, 4\)"):
        critic(TensorDict(observation=torch.randn(3, 4), batch_size=[3]))
    with pytest.raises(KeyError, match="'pixels'"):
        GaussianActor(mlp(OBS, ACT), ACT, in_key="pixels").get_dist(batch())
    with pytest.raises(ValueError, match="2 \\* action_dim"):
        TanhGaussianActor(mlp(OBS, ACT), ACT)(batch())
    with pytest.raises(ValueError, match="high > low"):
        GaussianActor(mlp(OBS, ACT), ACT, action_low=1.0, action_high=-1.0)


def test_categorical_matches_torch_and_samples_softmax() -> None:
    torch.manual_seed(0)
    logits = torch.randn(4, 5) * 2
    ours = Categorical(logits=logits)
    ref = torch.distributions.Categorical(logits=logits)
    action = torch.tensor([0, 4, 2, 1])
    torch.testing.assert_close(ours.log_prob(action), ref.log_prob(action))
    torch.testing.assert_close(ours.entropy(), ref.entropy())
    torch.testing.assert_close(ours.probs, ref.probs)
    assert torch.equal(ours.deterministic_sample, logits.argmax(-1))
    assert torch.equal(ours.mode, ref.mode)
    # Sample shapes and broadcast values fall back to torch's code paths.
    assert ours.sample((3,)).shape == (3, 4)
    torch.testing.assert_close(
        ours.log_prob(action.expand(2, 4)), ref.log_prob(action.expand(2, 4))
    )
    torch.testing.assert_close(
        torch.distributions.kl_divergence(ours, Categorical(logits=logits.flip(-1))),
        torch.distributions.kl_divergence(
            ref, torch.distributions.Categorical(logits=logits.flip(-1))
        ),
    )
    # Gumbel-max draws follow softmax(logits): chi-square over 20,000 draws of one row
    # (4 degrees of freedom; 18.5 is the 0.999 quantile).
    row = Categorical(logits=logits[:1].expand(20_000, 5))
    counts = torch.bincount(row.sample(), minlength=5).double()
    expected = 20_000 * ref.probs[0].double()
    assert float(((counts - expected) ** 2 / expected).sum()) < 18.5


def test_categorical_masked_action_entropy_is_finite() -> None:
    logits = torch.tensor([[0.0, -float("inf"), 1.0]])
    dist = Categorical(logits=logits)
    ref = torch.distributions.Categorical(logits=logits)
    torch.testing.assert_close(dist.entropy(), ref.entropy())
    assert int(dist.sample().item()) != 1
    assert torch.isneginf(dist.log_prob(torch.tensor([1])))


@pytest.mark.parametrize("bounds", [(-1.0, 1.0), (-2.0, 3.0)])
def test_tanh_normal_rsample_log_prob_is_the_density_of_the_sample(bounds) -> None:
    # rsample_and_log_prob scores the pre-tanh sample in closed form (the noise is the
    # standardised value): the same numbers as torch's Normal at u plus the tanh Jacobian, for
    # number bounds and the same bounds as tensors, and the same gradients.
    low, high = bounds
    loc = torch.randn(5, 3, generator=torch.Generator().manual_seed(0)).requires_grad_()
    log_std = (0.3 * torch.randn(5, 3, generator=torch.Generator().manual_seed(1))).requires_grad_()
    results = []
    for b_low, b_high in [(low, high), (torch.full((3,), low), torch.full((3,), high))]:
        torch.manual_seed(2)
        dist = TanhNormal(loc, log_std.exp(), b_low, b_high, log_scale=log_std)
        action, log_prob = dist.rsample_and_log_prob()
        torch.manual_seed(2)
        u = loc + torch.randn(5, 3) * log_std.exp()
        half = (high - low) / 2
        reference = (
            Normal(loc, log_std.exp()).log_prob(u)
            - torch.log1p(-torch.tanh(u).square())
            - math.log(half)
        ).sum(-1)
        torch.testing.assert_close(log_prob, reference, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(action, low + half * (torch.tanh(u) + 1), atol=1e-6, rtol=0)
        grads = torch.autograd.grad(log_prob.sum() + action.sum(), [loc, log_std])
        results.append((action.detach(), log_prob.detach(), *grads))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
