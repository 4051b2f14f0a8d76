"""Q-value modules: greedy Q actor keys, dueling decomposition, state-action critic."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from tdrl.modules import Dueling, QValueActor, StateActionCritic, mlp, q_mlp


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
