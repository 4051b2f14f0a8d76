"""MADDPGLoss: the per-agent target written out (a terminated agent does not bootstrap, a
truncated one does), the actor loss moves only the actors and the critic loss only the critics,
and the critic is centralized: an agent's value moves with the other agents' actions."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchrl.modules import MultiAgentMLP

from tdrl.collectors import MultiAgentCollector
from tdrl.data import transitions
from tdrl.envs import make_vec_env
from tdrl.modules import OnGroup, StateActionCritic
from tdrl.modules.deterministic import DeterministicActor
from tdrl.objectives import MADDPGLoss

pytest.importorskip("vmas")
A = "agents"


def _setup():
    torch.manual_seed(0)
    env = make_vec_env("vmas/navigation", 2, seed=0, n_agents=3, max_steps=4)
    obs = env.observation_spec[A, "observation"].shape[-1]

    def mlp(inputs: int, outputs: int, centralized: bool) -> MultiAgentMLP:
        return MultiAgentMLP(inputs, outputs, 3, centralized=centralized, share_params=True,
                             num_cells=[16], activation_class=nn.Tanh)  # fmt: skip

    actor = OnGroup(DeterministicActor(mlp(obs, 2, False), 2))
    critic = OnGroup(StateActionCritic(mlp(obs + 2, 1, True), in_keys=("observation", "action")))
    batch = transitions(MultiAgentCollector(env, None, 2 * 6).rollout()).reshape(-1)
    return MADDPGLoss(actor, critic, gamma=0.9), batch


def test_the_per_agent_target_is_written_out_and_honours_each_agents_flags():
    loss, batch = _setup()
    batch["next", A, "terminated"][0, 1] = True  # agent 1 of sample 0 ends its episode
    target = loss.value_target(batch)
    with torch.no_grad():
        nxt = batch["next"].clone()
        nxt[A, "action"] = loss.target_actor_network(nxt.clone())[A, "action"]
        next_q = loss.target_value_network(nxt)[A, "state_action_value"]
    reward, terminated = batch["next", A, "reward"], batch["next", A, "terminated"]
    torch.testing.assert_close(target, reward + 0.9 * (~terminated).float() * next_q)
    assert target[0, 1] == reward[0, 1] and target[0, 0] != reward[0, 0]
    truncated = batch["next", A, "truncated"]
    assert truncated.any() and (target[truncated] != reward[truncated]).all()  # bootstrapped


def test_each_loss_moves_only_its_own_networks():
    loss, batch = _setup()
    out = loss(batch)
    out["loss_actor"].backward(retain_graph=True)
    assert all(p.grad is None or (p.grad == 0).all() for p in loss.value_network.parameters())
    assert any(
        p.grad is not None and p.grad.abs().sum() > 0 for p in loss.actor_network.parameters()
    )
    loss.zero_grad()
    out["loss_value"].backward()
    assert all(p.grad is None or (p.grad == 0).all() for p in loss.actor_network.parameters())
    assert out["td_error"].shape == (12,)


def test_the_critic_of_an_agent_reads_the_other_agents_actions():
    loss, batch = _setup()
    td = batch[:4].clone()
    before = loss.value_network(td.clone())[A, "state_action_value"][:, 0]
    td[A, "action"][:, 2] += 0.5  # agent 2 acts otherwise
    after = loss.value_network(td)[A, "state_action_value"][:, 0]
    assert not torch.allclose(before, after)


def test_an_absent_agents_steps_carry_no_loss_and_no_gradient():
    loss, batch = _setup()
    batch[A, "mask"][:6, 2] = False  # agent 2 is gone from the first six samples
    out = loss(batch)
    with torch.no_grad():
        q = loss.value_network(batch.clone())[A, "state_action_value"]
        squared = (q - loss.value_target(batch)) ** 2  # [B, 3, 1]
    present = batch[A, "mask"]
    torch.testing.assert_close(out["loss_value"], squared[present].mean())
    params = [p for p in loss.parameters() if p.requires_grad]  # not the target copies
    grads = torch.autograd.grad(out["loss_value"] + out["loss_actor"], params, allow_unused=True)
    batch["next", A, "reward"][:6, 2] = 1e6  # the absent agent's reward: no effect
    again = loss(batch)
    torch.testing.assert_close(again["loss_value"], out["loss_value"])
    total = again["loss_value"] + again["loss_actor"]
    after = torch.autograd.grad(total, params, allow_unused=True)
    for g, h in zip(grads, after, strict=True):
        assert (g is None) == (h is None) and (g is None or torch.equal(g, h))


def test_an_absent_agents_actor_gets_no_gradient_through_the_other_agents_critics():
    """The critic reads the joint action: an absent agent's own actor output must not stand in
    it, or the present agents' Q values would move that actor."""
    loss, batch = _setup()
    obs = batch[A, "observation"].shape[-1]
    own = MultiAgentMLP(obs, 2, 3, centralized=False, share_params=False, num_cells=[16],
                        activation_class=nn.Tanh)  # fmt: skip
    loss = MADDPGLoss(OnGroup(DeterministicActor(own, 2)), loss.value_network, gamma=0.9)
    batch[A, "mask"][:, 2] = False  # agent 2 is gone from every sample
    loss(batch)["loss_actor"].backward()
    grads = [p.grad for p in own.parameters()]  # stacked per agent: [3, ...]
    assert all(g is not None for g in grads)
    assert all((g[2] == 0).all() for g in grads) and any(g[0].abs().sum() > 0 for g in grads)
