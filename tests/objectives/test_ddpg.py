"""DDPGLoss: one critic, target actor and critic, by-hand target."""

from __future__ import annotations

import torch
from offpolicy_data import (
    all_params_have_grad,
    check_actor_critic_gradients,
    linear,
    no_param_has_grad,
    transitions,
)

from tdrl.modules import DeterministicActor, StateActionCritic
from tdrl.objectives import DDPGLoss

OBS = 3  # observation width of the test data
GAMMA = 0.9


def test_ddpg_by_hand():
    policy = DeterministicActor(linear([[1.0, 0.0, 0.0]]), 1)  # mu(s) = tanh(s_0)
    q = StateActionCritic(linear([[0.0, 1.0, 0.0, 2.0]]))  # Q(s, a) = s_1 + 2 a
    loss = DDPGLoss(policy, q, gamma=GAMMA)
    td = transitions(4, OBS, 1, terminated=[False, True, False, False],
                     truncated=[False, False, True, False])  # fmt: skip
    nxt = td["next", "observation"]
    next_q = nxt[:, 1] + 2 * torch.tanh(nxt[:, 0])
    not_term = torch.tensor([1.0, 0.0, 1.0, 1.0])
    target = td["next", "reward"].squeeze(-1) + GAMMA * not_term * next_q
    pred = td["observation"][:, 1] + 2 * td["action"].squeeze(-1)
    out = loss(td)
    torch.testing.assert_close(out["loss_value"], ((pred - target) ** 2).mean())
    actor_q = td["observation"][:, 1] + 2 * torch.tanh(td["observation"][:, 0])
    torch.testing.assert_close(out["loss_actor"], -actor_q.mean())
    torch.testing.assert_close(out["td_error"], (pred - target).abs())


def test_ddpg_gradients_and_targets():
    policy = DeterministicActor(linear([[1.0, 0.5, 0.0]]), 1)
    q = StateActionCritic(linear([[0.3, 1.0, 0.0, 2.0]]))
    loss = DDPGLoss(policy, q)
    check_actor_critic_gradients(loss, transitions(4, OBS, 1), policy, q, "loss_value")
    assert all_params_have_grad(q) and no_param_has_grad(policy)
    assert len(loss.target_pairs()) == 2
    assert no_param_has_grad(loss.target_actor_network)
