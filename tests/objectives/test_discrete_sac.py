"""DiscreteSACLoss: every term by hand (Christodoulou 2019 eqs. 10-12), gradients, interop."""

from __future__ import annotations

import math

import pytest
import torch
from offpolicy_data import all_params_have_grad, linear, no_param_has_grad, transitions
from tensordict.nn import TensorDictModule

from tdrl.modules import CategoricalActor, EnsembleCritic, EnsembleMLP
from tdrl.objectives import DiscreteSACLoss

OBS, N, GAMMA = 3, 3, 0.9
W0 = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])  # Q_0(s) = s
W1 = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.5, 0.5, 0.5]])


def make_loss(**kwargs) -> DiscreteSACLoss:
    policy = CategoricalActor(linear([[0.5, 0.0, 0.0], [0.0, -1.0, 0.0], [0.2, 0.2, 0.2]]))
    q = EnsembleCritic(EnsembleMLP(OBS, N, (), num_members=2), in_keys=("observation",),
                       out_key="action_value")  # fmt: skip
    with torch.no_grad():  # EnsembleLinear weights are [E, in, out]
        q.net.output.weight.copy_(torch.stack([W0.T, W1.T]))
        q.net.output.bias.zero_()
    return DiscreteSACLoss(policy, q, gamma=GAMMA, **kwargs)


def by_hand(obs: torch.Tensor, loss: DiscreteSACLoss):
    logits = obs @ loss.actor_network.net.weight.T
    log_pi = torch.log_softmax(logits, -1)
    min_q = torch.minimum(obs @ W0.T, obs @ W1.T)
    return log_pi, min_q


def test_every_term_by_hand():
    loss = make_loss(alpha_init=0.5)
    td = transitions(4, OBS, num_actions=N, terminated=[False, True, False, False],
                     truncated=[False, False, True, False])  # fmt: skip
    alpha = 0.5
    next_log_pi, next_min_q = by_hand(td["next", "observation"], loss)
    next_v = (next_log_pi.exp() * (next_min_q - alpha * next_log_pi)).sum(-1)
    not_term = torch.tensor([1.0, 0.0, 1.0, 1.0])
    target = td["next", "reward"].squeeze(-1) + GAMMA * not_term * next_v
    obs, action = td["observation"], td["action"]
    q0 = (obs @ W0.T).gather(-1, action[:, None]).squeeze(-1)
    q1 = (obs @ W1.T).gather(-1, action[:, None]).squeeze(-1)
    log_pi, min_q = by_hand(obs, loss)
    pi = log_pi.exp()
    target_entropy = 0.98 * math.log(N)
    out = loss(td)
    torch.testing.assert_close(out["loss_qvalue"], ((q0 - target) ** 2 + (q1 - target) ** 2).mean())
    torch.testing.assert_close(out["loss_actor"], (pi * (alpha * log_pi - min_q)).sum(-1).mean())
    neg_entropy = (pi * log_pi).sum(-1)
    alpha_loss = (-math.log(alpha) * (neg_entropy + target_entropy)).mean()
    torch.testing.assert_close(out["loss_alpha"], alpha_loss)
    torch.testing.assert_close(out["entropy"], -neg_entropy.mean())
    torch.testing.assert_close(
        out["td_error"], torch.maximum((q0 - target).abs(), (q1 - target).abs())
    )


def test_gradients_reach_exactly_the_intended_parameters():
    loss = make_loss()
    td = transitions(6, OBS, num_actions=N)
    for name, owner in (("loss_actor", loss.actor_network), ("loss_qvalue", loss.qvalue_network)):
        loss.zero_grad(set_to_none=True)
        loss(td)[name].backward()
        other = loss.qvalue_network if owner is loss.actor_network else loss.actor_network
        assert all_params_have_grad(owner) and no_param_has_grad(other), name
        assert loss.log_alpha.grad is None and no_param_has_grad(loss.target_qvalue_network)
    loss.zero_grad(set_to_none=True)
    loss(td)["loss_alpha"].backward()
    assert loss.log_alpha.grad is not None
    assert no_param_has_grad(loss.actor_network) and no_param_has_grad(loss.qvalue_network)


def test_accepts_torchrl_actor_and_single_critic():
    from torchrl.modules import MLP, ProbabilisticActor, ValueOperator
    from torchrl.modules.distributions import OneHotCategorical

    torch.manual_seed(0)
    policy = ProbabilisticActor(
        TensorDictModule(MLP(in_features=OBS, out_features=N, num_cells=[8]),
                         in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=OneHotCategorical,
    )  # fmt: skip
    q = ValueOperator(MLP(in_features=OBS, out_features=N, num_cells=[8]),
                      in_keys=["observation"], out_keys=["action_value"])  # fmt: skip
    loss = DiscreteSACLoss(policy, q, num_actions=N)
    td = transitions(8, OBS, num_actions=N)
    td["action"] = torch.nn.functional.one_hot(td["action"], N)  # TorchRL's one-hot actions
    out = loss(td)
    (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()
    assert all_params_have_grad(policy) and all_params_have_grad(loss.qvalue_network)


def test_bad_actions_raise():
    loss = make_loss()
    td = transitions(4, OBS, num_actions=N)
    td["action"] = torch.tensor([0, 1, 7, 2])
    with pytest.raises(ValueError, match="'action' holds indices outside"):
        loss(td)
    td["action"] = torch.zeros(4, N + 1)
    with pytest.raises(ValueError, match=rf"or one-hot \(4, {N}\), got \(4, {N + 1}\)"):
        loss(td)


def test_a_masked_action_gives_finite_losses_and_gradients_at_any_alpha():
    # A masked logit is the dtype's minimum: alpha * log_pi overflows for alpha > 1, and
    # pi * log_pi would be 0 * inf. The masked action must count as 0 log 0 = 0.
    from torch import nn

    torch.manual_seed(0)
    B, n = 6, 4
    mask = torch.ones(B, n, dtype=torch.bool)
    mask[:, 3] = False
    td = transitions(B, OBS, num_actions=3)
    td["action_mask"] = mask
    td["next", "action_mask"] = mask
    for alpha in (0.5, 1.0, 2.0, 50.0):
        actor = CategoricalActor(nn.Linear(OBS, n), mask_key="action_mask")
        q = EnsembleCritic(EnsembleMLP(OBS, n, (8,), num_members=2), in_keys=("observation",),
                           out_key="action_value")  # fmt: skip
        loss = DiscreteSACLoss(actor, q, num_actions=n, alpha_init=alpha, gamma=GAMMA)
        out = loss(td)
        for key in ("loss_actor", "loss_qvalue", "loss_alpha", "td_error"):
            assert torch.isfinite(out[key]).all(), (alpha, key)
        (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()
        assert all(torch.isfinite(p.grad).all() for p in loss.parameters() if p.grad is not None)
        # the masked action adds nothing: the same loss as the three allowed actions alone
        logits = actor.net(td["observation"])[:, :3]
        pi, log_pi = torch.softmax(logits, -1), torch.log_softmax(logits, -1)
        min_q = q.values(td.select("observation")).min(0).values[:, :3].detach()
        expected = (pi * (alpha * log_pi - min_q)).sum(-1).mean()
        torch.testing.assert_close(out["loss_actor"], expected, rtol=1e-5, atol=1e-5)
