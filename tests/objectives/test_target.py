"""Target networks: frozen copies, exact soft updates by tau, hard updates."""

from __future__ import annotations

import pytest
import torch
from offpolicy_data import transitions
from torch import nn

from tdrl.modules import EnsembleCritic, EnsembleMLP, TanhGaussianActor, mlp
from tdrl.objectives import SACLoss, SoftUpdate, hard_update_, make_target, soft_update_


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))


def test_make_target_is_a_frozen_equal_copy():
    online = net()
    target = make_target(online)
    for p, p_t in zip(online.parameters(), target.parameters(), strict=True):
        assert torch.equal(p, p_t) and p is not p_t
        assert p.requires_grad and not p_t.requires_grad


def test_soft_update_moves_by_exactly_tau():
    online, tau = net(), 0.05
    target = make_target(online)
    with torch.no_grad():
        for p in online.parameters():
            p.add_(torch.randn_like(p))
        online[1].running_mean.fill_(3.0)
    before = [p.clone() for p in target.parameters()]
    soft_update_(target, online, tau)
    for p, p_t, old in zip(online.parameters(), target.parameters(), before, strict=True):
        torch.testing.assert_close(p_t, tau * p + (1 - tau) * old, rtol=1e-6, atol=1e-6)
        # The step is tau of the gap, elementwise.
        torch.testing.assert_close(p_t - old, tau * (p - old), rtol=1e-6, atol=1e-6)
    assert torch.equal(target[1].running_mean, online[1].running_mean)


def test_soft_update_limits_and_hard_update():
    online = net()
    target = make_target(online)
    with torch.no_grad():
        for p in online.parameters():
            p.add_(1.0)
    frozen_copy = [p.clone() for p in target.parameters()]
    soft_update_(target, online, 0.0)
    assert all(torch.equal(a, b) for a, b in zip(target.parameters(), frozen_copy, strict=True))
    hard_update_(target, online)
    assert all(
        torch.equal(a, b) for a, b in zip(target.parameters(), online.parameters(), strict=True)
    )
    with pytest.raises(ValueError, match="tau"):
        soft_update_(target, online, 1.5)


def test_targets_get_no_gradient_in_a_training_step_and_move_by_tau():
    torch.manual_seed(0)
    actor = TanhGaussianActor(mlp(3, 4, (16,)), 2)
    critic = EnsembleCritic(EnsembleMLP(5, 1, (16,), num_members=2))
    loss = SACLoss(actor, critic)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
    updater = SoftUpdate(loss, tau=0.1)
    target_before = [p.clone() for p in loss.target_qvalue_network.parameters()]
    out = loss(transitions())
    (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()
    assert all(p.grad is None for p in loss.target_qvalue_network.parameters())
    optim.step()
    # The optimiser left the targets alone; only the soft update moves them.
    assert all(
        torch.equal(a, b)
        for a, b in zip(loss.target_qvalue_network.parameters(), target_before, strict=True)
    )
    updater.step()
    for p, p_t, old in zip(
        critic.parameters(), loss.target_qvalue_network.parameters(), target_before, strict=True
    ):
        torch.testing.assert_close(p_t, 0.1 * p + 0.9 * old, rtol=1e-6, atol=1e-6)


def test_soft_update_eps_spelling():
    loss = SACLoss(
        TanhGaussianActor(mlp(3, 4, (8,)), 2),
        EnsembleCritic(EnsembleMLP(5, 1, (8,), num_members=2)),
    )
    assert SoftUpdate(loss, eps=0.995).tau == pytest.approx(0.005)
    with pytest.raises(ValueError, match="exactly one"):
        SoftUpdate(loss, tau=0.1, eps=0.9)


@pytest.mark.parametrize("discount", ["float", "tensor"])
def test_bellman_target_equals_td0_return(discount):
    # bellman_target writes td0_return's "bootstrap" TD(0) out on the update hot path.
    from tdrl.objectives.offpolicy import bellman_target
    from tdrl.ops import td0_return

    g = torch.Generator().manual_seed(0)
    reward, next_value = torch.randn(64, generator=g), torch.randn(64, generator=g)
    next_value[3] = float("inf")  # a terminated step's V(s') is replaced, not multiplied by 0
    terminated = torch.rand(64, generator=g) < 0.3
    terminated[3] = True
    gamma = 0.99 if discount == "float" else 0.99 ** torch.randint(1, 4, (64,), generator=g)
    expected = td0_return(reward, next_value, terminated, gamma=gamma, time_dim=-1)
    got = bellman_target(reward, next_value, terminated, gamma)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize("update", ["hard", "soft"])
def test_target_updates_copy_weights_but_the_target_keeps_its_own_noise(update):
    # Rainbow: the target network draws its own noise. reset_noise(loss) draws for both nets;
    # an update that copied the noise buffers too would hand the target the online draw (on
    # every step under a soft update).
    from tdrl.modules import CategoricalQValueActor, NoisyLinear, reset_noise, to_noisy
    from tdrl.objectives import C51Loss, HardUpdate

    torch.manual_seed(0)
    body = to_noisy(nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.Linear(8, 2 * 5)))
    loss = C51Loss(CategoricalQValueActor(body, 2, v_min=-1.0, v_max=1.0, num_atoms=5))
    online, target = loss.value_network, loss.target_value_network
    with torch.no_grad():
        for p in online.parameters():
            p.add_(torch.randn_like(p))
        body[1].running_mean.fill_(2.0)
    assert reset_noise(loss) == 4  # two noisy layers in each network
    drawn = {n: b.clone() for n, b in target.named_buffers() if "eps" in n}
    if update == "hard":
        HardUpdate(loss, value_network_update_interval=1).step()
    else:
        SoftUpdate(loss, tau=1.0).step()  # tau 1: the weights become the online ones exactly
    for p, p_t in zip(online.parameters(), target.parameters(), strict=True):
        torch.testing.assert_close(p_t, p, rtol=0, atol=0)
    online_buffers = dict(online.named_buffers())
    for name, b_t in target.named_buffers():
        if "eps" in name:  # the target's own draw, unchanged and unlike the online one
            assert torch.equal(b_t, drawn[name]) and not torch.equal(b_t, online_buffers[name])
        else:  # statistics are state: copied
            assert torch.equal(b_t, online_buffers[name]), name
    assert sum(isinstance(m, NoisyLinear) for m in target.modules()) == 2


def test_the_sac_actor_gradient_through_a_critic_without_hidden_layers():
    # the frozen-min backward of an ensemble critic (the gradient of the minimizing member
    # only) also handles a purely linear critic, and equals the plain minimum's gradient
    from tdrl.modules import TanhGaussianActor
    from tdrl.objectives.offpolicy import critic_values

    torch.manual_seed(0)
    actor = TanhGaussianActor(mlp(3, 4, (8,)), 2)
    critic = EnsembleCritic(EnsembleMLP(5, 1, (), num_members=2))
    loss = SACLoss(actor, critic)
    td = transitions(6, 3, 2)
    torch.manual_seed(1)
    loss(td)["loss_actor"].backward()
    fast = [p.grad.clone() for p in actor.parameters()]
    actor.zero_grad(set_to_none=True)
    torch.manual_seed(1)  # replay the draws: the target's next action, then the actor's
    loss.value_target(td)
    action, log_prob = loss._sample(td)
    q = critic_values(critic, td.select("observation"), action, "action").min(dim=0).values
    (loss.alpha.detach() * log_prob - q).mean().backward()
    for got, want in zip(fast, (p.grad for p in actor.parameters()), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
