"""Q-value modules: greedy Q actor keys, dueling decomposition, state-action critic."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.modules import (
    CategoricalQValueActor,
    Dueling,
    QValueActor,
    StateActionCritic,
    mlp,
    q_mlp,
)


def test_q_actor_writes_greedy_action_and_values():
    torch.manual_seed(0)
    actor = QValueActor(q_mlp(4, 3, (16,)))
    td = TensorDict(observation=torch.randn(5, 4), batch_size=[5])
    out = actor(td)
    assert out is td and set(actor.out_keys) <= set(td.keys())
    values = actor.net(td["observation"])
    assert torch.equal(td["action_value"], values)
    assert torch.equal(td["action"], values.argmax(-1)) and td["action"].dtype == torch.int64
    assert torch.equal(td["chosen_action_value"], values.max(-1, keepdim=True).values)


def test_dueling_is_value_plus_centred_advantage():
    torch.manual_seed(0)
    net = q_mlp(4, 3, (16, 16), dueling=True)
    assert isinstance(net, Dueling)
    x = torch.randn(7, 4)
    features = net.trunk(x)
    value, advantage = net.value_head(features), net.advantage_head(features)
    q = net(x)
    torch.testing.assert_close(q, value + advantage - advantage.mean(-1, keepdim=True))
    # The mean over actions of Q is V: the identifiability constraint of Wang et al. (eq. 9).
    torch.testing.assert_close(q.mean(-1, keepdim=True), value)
    q.sum().backward()
    assert all(p.grad is not None for p in net.parameters())


def test_distributional_dueling_centres_the_advantage_per_atom():
    # Rainbow's head: logits[a, j] = V[j] + A[a, j] - mean_a A[a, j], checked element by element.
    torch.manual_seed(0)
    n, atoms = 3, 5
    net = q_mlp(4, n, (16, 16), dueling=True, atoms=atoms)
    x = torch.randn(7, 4)
    features = net.trunk(x)
    value, advantage = net.value_head(features), net.advantage_head(features)
    assert value.shape == (7, atoms) and advantage.shape == (7, n * atoms)
    logits = net(x)
    assert logits.shape == (7, n * atoms)
    for a in range(n):
        for j in range(atoms):
            mean_adv = sum(advantage[:, b * atoms + j] for b in range(n)) / n
            expected = value[:, j] + advantage[:, a * atoms + j] - mean_adv
            torch.testing.assert_close(logits[:, a * atoms + j], expected)
    # In a C51 actor every action's atoms form a distribution, and every parameter learns.
    actor = CategoricalQValueActor(net, n, v_min=0.0, v_max=10.0, num_atoms=atoms)
    td = TensorDict(observation=x, batch_size=[7])
    probs = actor.log_probs(td).exp()
    torch.testing.assert_close(probs.sum(-1), torch.ones(7, n))
    actor(td)["chosen_action_value"].sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in net.parameters())
    with pytest.raises(ValueError, match="atoms must be >= 1, got 0"):
        Dueling(torch.nn.Identity(), torch.nn.Identity(), torch.nn.Identity(), atoms=0)


def test_state_action_critic_concatenates_inputs():
    torch.manual_seed(0)
    critic = StateActionCritic(mlp(5, 1, (8,)))
    td = TensorDict(observation=torch.randn(6, 3), action=torch.randn(6, 2), batch_size=[6])
    critic(td)
    expected = critic.net(torch.cat([td["observation"], td["action"]], -1))
    assert torch.equal(td["state_action_value"], expected)


def test_bad_inputs_name_the_key():
    actor = QValueActor(q_mlp(4, 3, (8,)))
    with pytest.raises(KeyError, match="observation"):
        actor(TensorDict(obs=torch.randn(2, 4), batch_size=[2]))
    with pytest.raises(ValueError, match="observation.*shape"):
        actor(TensorDict(observation=torch.randn(2, 5), batch_size=[2]))
    critic = StateActionCritic(mlp(5, 2, (8,)))
    td = TensorDict(observation=torch.randn(2, 3), action=torch.randn(2, 2), batch_size=[2])
    with pytest.raises(ValueError, match="trailing dim of 1"):
        critic(td)
    with pytest.raises(KeyError, match="action"):
        critic(TensorDict(observation=torch.randn(2, 3), batch_size=[2]))
