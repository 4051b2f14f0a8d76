"""QMixLoss: QMIX's mixer is monotonic in every agent's value, VDN's is the sum, the target is
the team's Bellman target written out (a truncated step bootstraps, a terminal one does not),
and a batch or network with another agent count is refused by name."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchrl.modules import MultiAgentMLP, QMixer, VDNMixer

from tdrl.collectors import MultiAgentCollector
from tdrl.data import transitions
from tdrl.envs import make_vec_env
from tdrl.modules import OnGroup, QValueActor
from tdrl.objectives import QMixLoss

pytest.importorskip("mpe2")
A = "agents"


def _setup(mixer_kind: str = "qmix", n_agents: int = 3):
    torch.manual_seed(0)
    env = make_vec_env("mpe2/simple_spread_v3", 2, seed=0, N=3, max_cycles=4)
    net = MultiAgentMLP(18, 5, 3, centralized=False, share_params=True, num_cells=[16],
                        activation_class=nn.Tanh)  # fmt: skip
    local = OnGroup(QValueActor(net))
    mixer = QMixer((54,), 8, n_agents, device="cpu") if mixer_kind == "qmix" else VDNMixer(3, "cpu")
    loss = QMixLoss(local, mixer, n_agents=n_agents, gamma=0.9,
                    state_key="state" if mixer_kind == "qmix" else None)  # fmt: skip
    batch = MultiAgentCollector(env, None, 2 * 6).rollout()
    batch["next", "reward"] = batch["next", A, "reward"].mean(-2)
    return loss, transitions(batch).reshape(-1)


def test_qmix_is_monotonic_in_every_agent_value_and_vdn_is_their_sum():
    loss, batch = _setup("qmix")
    optimizer = torch.optim.Adam(loss.parameters(), lr=1e-2)
    for _ in range(20):  # also after training moved the hypernetworks
        optimizer.zero_grad()
        loss(batch)["loss"].backward()
        optimizer.step()
    chosen = torch.randn(64, 3, 1, requires_grad=True) * 5
    state = torch.randn(64, 54) * 3
    (grad,) = torch.autograd.grad(loss.mixer(chosen, state).sum(), chosen)
    assert (grad >= 0).all() and (grad > 0).any()
    vdn, _ = _setup("vdn")
    values = torch.randn(10, 3, 1)
    torch.testing.assert_close(vdn.mixer(values), values.sum(-2))


def test_the_target_is_the_team_bellman_target_written_out():
    loss, batch = _setup("qmix")
    # step 3 of each env is the time limit (truncated): it bootstraps; mark one terminal instead
    batch["next", "terminated"][0] = True
    target = loss.value_target(batch)
    with torch.no_grad():
        nxt = batch["next"]
        values = loss.target_value_network(nxt.clone())[A, "action_value"]  # [B, 3, 5]
        best = values.max(-1, keepdim=True).values
        mixed = loss.target_mixer(best, nxt["state"]).squeeze(-1)
    reward = batch["next", "reward"].squeeze(-1)
    keep = (~batch["next", "terminated"].squeeze(-1)).float()
    torch.testing.assert_close(target, reward + 0.9 * keep * mixed)
    assert target[0] == reward[0]  # terminal: no bootstrap
    truncated = batch["next", "truncated"].squeeze(-1)
    assert truncated.any() and (target[truncated] != reward[truncated]).all()


def test_another_agent_count_is_refused_naming_the_key():
    loss, batch = _setup("qmix", n_agents=4)
    with pytest.raises(ValueError, match=r"\('agents', 'action_value'\) has shape \(12, 3, 5\); "
                                         r"the mixer mixes 4 agents"):  # fmt: skip
        loss(batch)
    loss, batch = _setup("qmix")
    two = batch.clone()
    two.set(A, batch[A][:, :2])  # a batch of two agents
    with pytest.raises(ValueError, match=r"\('agents', 'mask'\) must be a bool \[12, 3\] mask, "
                                         r"got torch.bool \[12, 2\]"):  # fmt: skip
        loss(two)
    two = batch.clone()
    two[A, "action"] = batch[A, "action"].float()
    with pytest.raises(ValueError, match=r"\('agents', 'action'\) must be an int64 index of shape "
                                         r"\(12, 3\), got \(12, 3\) torch.float32"):  # fmt: skip
        loss(two)


def test_on_a_masked_env_the_policy_and_the_target_keep_to_the_valid_actions():
    from tensordict.nn import TensorDictSequential

    from tdrl.envs import PettingZooVecEnv
    from tdrl.modules import EpsilonGreedy
    from tests.tiny_envs import MaskedAgents

    torch.manual_seed(0)
    env = PettingZooVecEnv(MaskedAgents, 2, seed=0)  # a forbidden action raises in the env
    net = MultiAgentMLP(2, 3, 2, centralized=False, share_params=True, num_cells=[8])
    greedy = OnGroup(QValueActor(net, mask_key="action_mask"))
    explore = OnGroup(EpsilonGreedy(3, eps_init=0.5, eps_end=0.5, mask_key="action_mask"))
    batch = MultiAgentCollector(env, TensorDictSequential(greedy, explore), 2 * 8).rollout()
    batch["next", "reward"] = batch["next", A, "reward"].mean(-2)
    batch = transitions(batch).reshape(-1)
    loss = QMixLoss(greedy, VDNMixer(2, "cpu"), n_agents=2, state_key=None, gamma=0.9)
    target = loss.value_target(batch)
    with torch.no_grad():
        values = loss.target_value_network(batch["next"].clone())[A, "action_value"]
        valid = batch["next", A, "action_mask"]
        best = values.masked_fill(~valid, float("-inf")).max(-1).values.sum(-1)
        assert (best != values.max(-1).values.sum(-1)).any()  # some best actions are forbidden
    keep = (~batch["next", "terminated"].squeeze(-1)).float()
    torch.testing.assert_close(target, batch["next", "reward"].squeeze(-1) + 0.9 * keep * best)


def test_an_absent_agent_adds_nothing_to_the_team_value_or_its_target():
    loss, batch = _setup("vdn")  # VDN: Q_tot is the sum, so the reference is a written-out sum
    batch[A, "mask"][0, 1] = False  # agent 1 has left by sample 0's step
    batch["next", A, "terminated"][1, 2] = True  # agent 2 ends its episode at sample 1
    out = loss(batch)
    with torch.no_grad():
        values = loss.value_network(batch.clone())[A, "action_value"]
        chosen = values.gather(-1, batch[A, "action"].unsqueeze(-1)).squeeze(-1)  # [B, 3]
        nxt = loss.target_value_network(batch["next"].clone())[A, "action_value"]
        best = nxt.max(-1).values  # [B, 3]
    present = batch[A, "mask"].float()
    # at s': the agents present at s and not terminated on their own; an episode's time limit
    # (next mask False for all) still bootstraps
    next_present = present * (~batch["next", A, "terminated"].squeeze(-1)).float()
    assert (~batch["next", A, "mask"]).any() and next_present[1, 2] == 0
    q_tot = (chosen * present).sum(-1)
    keep = (~batch["next", "terminated"].squeeze(-1)).float()
    target = batch["next", "reward"].squeeze(-1) + 0.9 * keep * (best * next_present).sum(-1)
    torch.testing.assert_close(out["loss"], ((q_tot - target) ** 2).mean())
    # the absent agent's value is left out of the sum
    assert q_tot[0] == chosen[0, 0] + chosen[0, 2]
    bad = batch.clone()
    bad[A, "mask"] = bad[A, "mask"].int()
    with pytest.raises(ValueError, match=r"mask'\) must be a bool \[12, 3\] mask, got torch.int32"):
        loss(bad)


def test_parameters_come_online_first_then_targets_and_no_delay_means_no_copies():
    """The online networks' parameters, then the target copies': the order an optimizer built
    on ``loss.parameters()`` keeps its state in (checkpoints load it by position)."""
    loss, _ = _setup()
    order = []
    for name, _ in loss.named_parameters():
        part = name.split(".")[0]
        if part not in order:
            order.append(part)
    assert order == ["value_network", "mixer", "target_value_network", "target_mixer"]
    local, mixer = loss.value_network, loss.mixer
    plain = QMixLoss(local, mixer, n_agents=3, delay_value=False, gamma=0.9)
    assert plain.target_value_network is local and plain.target_mixer is mixer
    assert plain.target_pairs() == []  # nothing for a target update to copy
    assert len(list(plain.parameters())) == len(list(local.parameters())) + len(
        list(mixer.parameters())
    )
    with pytest.raises(ValueError, match="double_dqn=True needs delay_value=True"):
        QMixLoss(local, mixer, n_agents=3, delay_value=False, double_dqn=True)
