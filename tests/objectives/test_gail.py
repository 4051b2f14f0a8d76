"""GAILLoss and gail_reward against sums written from Ho & Ermon's definitions, the gradient
penalty on a linear discriminator (whose input gradient is known), and bad input."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from tdrl.keyed import MissingKeyError
from tdrl.modules import StateActionCritic, mlp
from tdrl.objectives import GAILLoss, gail_reward

OBS, ACT = 3, 2


def discriminator(hidden=(8,)) -> StateActionCritic:
    torch.manual_seed(0)
    return StateActionCritic(mlp(OBS + ACT, 1, hidden), out_key="d_logits")


def pairs(n_expert=5, n_policy=7, seed=1) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "observation": torch.randn(n_expert, OBS, generator=g),
            "action": torch.randn(n_expert, ACT, generator=g),
            "collector_observation": torch.randn(n_policy, OBS, generator=g),
            "collector_action": torch.randn(n_policy, ACT, generator=g),
        },
        batch_size=[],
    )


def logit(d: StateActionCritic, obs: torch.Tensor, action: torch.Tensor) -> float:
    return d.net(torch.cat([obs, action])).item()


def test_loss_is_the_binary_cross_entropy_of_expert_against_policy_pairs():
    d, td = discriminator(), pairs()
    before = td.clone()
    out = GAILLoss(d)(td)
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    expert = [sig(logit(d, td["observation"][i], td["action"][i])) for i in range(5)]
    policy = [
        sig(logit(d, td["collector_observation"][i], td["collector_action"][i])) for i in range(7)
    ]
    expected = -sum(math.log(p) for p in expert) / 5 - sum(math.log(1 - p) for p in policy) / 7
    assert out["loss"].item() == pytest.approx(expected, rel=1e-5)
    assert out["discriminator_expert"].item() == pytest.approx(sum(expert) / 5, rel=1e-5)
    assert out["discriminator_policy"].item() == pytest.approx(sum(policy) / 7, rel=1e-5)
    assert out["gp_loss"].item() == 0.0
    assert (td == before).all()  # the input is not modified
    out["loss"].backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in d.parameters())


def test_gradient_penalty_of_a_linear_discriminator_is_known():
    # logit(x) = w . x + b has input gradient w everywhere: penalty = lambda (|w| - 1)^2.
    torch.manual_seed(0)
    d = StateActionCritic(nn.Linear(OBS + ACT, 1), out_key="d_logits")
    td = pairs()
    plain = GAILLoss(d)(td)["loss"]
    out = GAILLoss(d, use_grad_penalty=True, gp_lambda=4.0)(td)
    w = d.net.weight.detach().flatten()
    expected = 4.0 * (w.norm() - 1) ** 2
    torch.testing.assert_close(out["gp_loss"], expected)
    torch.testing.assert_close(out["loss"], plain + expected)
    out["loss"].backward()  # the penalty's gradient reaches the weights (create_graph)
    grad_w = d.net.weight.grad.flatten()
    d.zero_grad()
    plain.backward()
    penalty_grad = 4.0 * 2 * (w.norm() - 1) * w / w.norm()
    torch.testing.assert_close(grad_w - d.net.weight.grad.flatten(), penalty_grad)


def test_reward_is_minus_log_one_minus_d_and_ranks_expert_like_pairs_higher():
    d = discriminator()
    obs, action = torch.randn(4, 6, OBS), torch.randn(4, 6, ACT)  # a [N, T] rollout
    reward = gail_reward(d, obs, action)
    assert reward.shape == (4, 6, 1) and not reward.requires_grad
    for i, t in [(0, 0), (3, 5), (2, 1)]:
        p = 1 / (1 + math.exp(-logit(d, obs[i, t], action[i, t])))
        assert reward[i, t, 0].item() == pytest.approx(-math.log(1 - p), rel=1e-5)
    # Train the discriminator a little: expert pairs near +1, policy pairs near -1.
    expert = TensorDict(
        {"observation": torch.ones(32, OBS), "action": torch.ones(32, ACT),
         "collector_observation": -torch.ones(32, OBS), "collector_action": -torch.ones(32, ACT)},
        batch_size=[],
    )  # fmt: skip
    loss, optimizer = GAILLoss(d), torch.optim.Adam(d.parameters(), lr=1e-2)
    for _ in range(100):
        optimizer.zero_grad()
        loss(expert)["loss"].backward()
        optimizer.step()
    near_expert = gail_reward(d, torch.ones(1, OBS), torch.ones(1, ACT))
    near_policy = gail_reward(d, -torch.ones(1, OBS), -torch.ones(1, ACT))
    assert near_expert.item() > 3.0 > 0.1 > near_policy.item()


def test_keys_can_be_renamed_and_bad_input_is_named():
    d, td = discriminator(), pairs()
    loss = GAILLoss(d).set_keys(collector_observation=("policy", "observation"))
    td["policy", "observation"] = td.pop("collector_observation")
    assert loss(td)["loss"].isfinite()
    with pytest.raises(MissingKeyError, match="collector_action"):
        GAILLoss(d)(pairs().exclude("collector_action"))
    with pytest.raises(ValueError, match="not a key name"):
        GAILLoss(d).set_keys(expert=("x",))
    bad = pairs()
    bad["collector_action"] = torch.randn(6, ACT)
    with pytest.raises(ValueError, match="'collector_action' has shape \\(6, 2\\)"):
        GAILLoss(d)(bad)
    with pytest.raises(ValueError, match="must read two keys"):
        GAILLoss(mlp(OBS + ACT, 1))
    with pytest.raises(ValueError, match="gp_lambda must be finite and >= 0"):
        GAILLoss(d, gp_lambda=-1.0)


def test_a_gradient_penalty_weight_that_is_not_a_finite_non_negative_number_is_refused():
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=f"gp_lambda must be finite and >= 0, got {bad}"):
            GAILLoss(discriminator(), use_grad_penalty=True, gp_lambda=bad)
