"""TD3Loss: target policy smoothing, twin minimum, first-critic actor loss, interop."""

from __future__ import annotations

import warnings

import pytest
import torch
from offpolicy_data import (
    all_params_have_grad,
    check_actor_critic_gradients,
    linear,
    no_param_has_grad,
    transitions,
)
from tensordict.nn import TensorDictModule

from tdrl.modules import DeterministicActor, EnsembleCritic, EnsembleMLP, StateActionCritic, mlp
from tdrl.objectives import SoftUpdate, TD3Loss

OBS, GAMMA = 3, 0.9


def linear_actor() -> DeterministicActor:
    """mu(s) = 2 tanh(s_0): one action in [-2, 2]."""
    return DeterministicActor(linear([[1.0, 0.0, 0.0]]), 1, action_low=-2.0, action_high=2.0)


def critic(q0: tuple[float, float], q1: tuple[float, float]) -> EnsembleCritic:
    """Q_e(s, a) = slope_e * a + bias_e for the given ``(slope, bias)`` of each member."""
    net = EnsembleCritic(EnsembleMLP(OBS + 1, 1, (), num_members=2))
    with torch.no_grad():
        net.net.output.weight.zero_()
        net.net.output.weight[:, OBS, 0] = torch.tensor([q0[0], q1[0]])
        net.net.output.bias.copy_(torch.tensor([q0[1], q1[1]]).view(2, 1, 1))
    return net


def test_target_by_hand_without_noise_uses_twin_minimum_and_episode_ends():
    loss = TD3Loss(linear_actor(), critic((1.0, 0.0), (-1.0, 0.5)), gamma=GAMMA, noise_clip=0.0)
    td = transitions(4, OBS, 1, terminated=[False, True, False, False],
                     truncated=[False, False, True, False])  # fmt: skip
    a = 2 * torch.tanh(td["next", "observation"][:, 0])
    reward = td["next", "reward"].squeeze(-1)
    not_term = torch.tensor([1.0, 0.0, 1.0, 1.0])
    expected = reward + GAMMA * not_term * torch.minimum(a, 0.5 - a)
    torch.testing.assert_close(loss.value_target(td), expected)


def test_target_policy_smoothing_noise_is_clipped_and_bounded():
    # Identical members Q = a reveal the smoothed target action: a' = (y - r) / gamma.
    loss = TD3Loss(linear_actor(), critic((1.0, 0.0), (1.0, 0.0)), gamma=GAMMA,
                   policy_noise=1.0, noise_clip=0.1)  # fmt: skip
    td = transitions(256, OBS, 1, seed=3)
    mu = 2 * torch.tanh(td["next", "observation"][:, 0])
    smoothed = (loss.value_target(td) - td["next", "reward"].squeeze(-1)) / GAMMA
    deviation = smoothed - mu
    half = 2.0  # noise is in half-range units: |noise| <= 0.1 * 2
    assert deviation.abs().max() <= 0.1 * half + 1e-5
    assert deviation.abs().max() > 0.1 * half * 0.9  # the clip is reached with sigma = 1
    assert smoothed.abs().max() <= 2.0 + 1e-6


def test_actor_loss_uses_the_first_critic():
    loss = TD3Loss(linear_actor(), critic((1.0, 0.0), (-3.0, 0.0)), gamma=GAMMA)
    td = transitions(5, OBS, 1)
    mu = 2 * torch.tanh(td["observation"][:, 0])
    torch.testing.assert_close(loss.actor_loss(td), -mu.mean())


def test_gradients_reach_exactly_the_intended_parameters():
    torch.manual_seed(0)
    policy = DeterministicActor(mlp(OBS, 2, (16,)), 2)
    q = EnsembleCritic(EnsembleMLP(OBS + 2, 1, (16,), num_members=2))
    loss = TD3Loss(policy, q)
    check_actor_critic_gradients(loss, transitions(8, OBS, 2), policy, q, "loss_qvalue")
    assert no_param_has_grad(policy)
    # The actor-loss path only reaches member 0 through Q_0, the critic loss reaches both.
    assert all_params_have_grad(q)
    assert no_param_has_grad(loss.target_actor_network)
    assert no_param_has_grad(loss.target_qvalue_network)
    pairs = loss.target_pairs()
    assert [online for online, _ in pairs] == [policy, loss.qvalue_network]
    SoftUpdate(loss, tau=0.5).step()


def test_tdrl_td3_accepts_torchrl_actor_and_critic():
    from torchrl.modules import MLP, Actor, ValueOperator

    torch.manual_seed(0)
    policy = Actor(
        torch.nn.Sequential(MLP(in_features=OBS, out_features=2, num_cells=[16]), torch.nn.Tanh())
    )
    q = ValueOperator(MLP(in_features=OBS + 2, out_features=1, num_cells=[16]),
                      in_keys=["observation", "action"])  # fmt: skip
    loss = TD3Loss(policy, q, bounds=(-1.0, 1.0))
    td = transitions(8, OBS, 2)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
    before = [p.clone() for p in loss.parameters() if p.requires_grad]
    out = loss(td)
    (out["loss_actor"] + out["loss_qvalue"]).backward()
    optim.step()
    after = [p for p in loss.parameters() if p.requires_grad]
    assert all(not torch.equal(a, b) for a, b in zip(after, before, strict=True))


def test_torchrl_td3_accepts_tdrl_modules():
    from torchrl.objectives import TD3Loss as TorchRLTD3Loss

    torch.manual_seed(0)
    policy = DeterministicActor(mlp(OBS, 2, (16,)), 2)
    q = StateActionCritic(mlp(OBS + 2, 1, (16,)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss = TorchRLTD3Loss(policy, q, bounds=(-1.0, 1.0))
        loss.make_value_estimator(gamma=GAMMA)
        optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
        out = loss(transitions(8, OBS, 2))
    (out["loss_actor"] + out["loss_qvalue"]).backward()
    before = [p.clone() for p in policy.parameters()]
    optim.step()
    assert all(not torch.equal(a, b) for a, b in zip(policy.parameters(), before, strict=True))


def test_missing_bounds_and_keys_raise():
    q = critic((1.0, 0.0), (1.0, 0.0))
    plain = TensorDictModule(torch.nn.Linear(OBS, 1), in_keys=["observation"], out_keys=["action"])
    with pytest.raises(ValueError, match="bounds"):
        TD3Loss(plain, q)
    loss = TD3Loss(linear_actor(), q)
    td = transitions(4, OBS, 1)
    del td["action"]
    with pytest.raises(KeyError, match="'action'"):
        loss(td)


def test_shared_options_take_their_defaults_and_refuse_unknown_names():
    loss = TD3Loss(linear_actor(), critic((1.0, 0.0), (1.0, 0.0)))
    assert (loss.num_qvalue_nets, loss.delay_actor, float(loss.gamma)) == (2, True, 0.99)
    assert loss.target_actor_network is not loss.actor_network
    changed = TD3Loss(linear_actor(), critic((1.0, 0.0), (1.0, 0.0)), delay_actor=False, gamma=0.5)
    assert changed.target_actor_network is changed.actor_network and changed.gamma == 0.5
    with pytest.raises(TypeError, match="delay_value"):
        TD3Loss(linear_actor(), critic((1.0, 0.0), (1.0, 0.0)), delay_value=True)  # type: ignore[call-arg]
