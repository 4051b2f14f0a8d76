"""C51Loss and QRDQNLoss against references computed sample by sample from the papers'
definitions; terminated vs truncated rows; double selection; frozen targets; PER weights."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from tdrl.modules import CategoricalQValueActor, IQNQValueActor, QuantileQValueActor
from tdrl.objectives import C51Loss, IQNLoss, QRDQNLoss

GAMMA = 0.9
A, K, N = 2, 5, 4  # actions, atoms, quantiles


def batch(terminated, truncated, seed=0) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    B = len(terminated)
    td = TensorDict(
        {
            "observation": torch.randn(B, 3, generator=g),
            "action": torch.randint(0, A, (B,), generator=g),
            ("next", "observation"): torch.randn(B, 3, generator=g),
            ("next", "reward"): torch.randn(B, 1, generator=g),
            ("next", "terminated"): torch.tensor(terminated).view(B, 1),
            ("next", "truncated"): torch.tensor(truncated).view(B, 1),
        },
        batch_size=[B],
    )
    td["next", "done"] = td["next", "terminated"] | td["next", "truncated"]
    return td


def c51(seed=0) -> CategoricalQValueActor:
    torch.manual_seed(seed)
    return CategoricalQValueActor(nn.Linear(3, A * K), A, v_min=-2.0, v_max=2.0, num_atoms=K)


def c51_reference(loss: C51Loss, td: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample cross-entropy and expected target, one sample and one atom at a time."""
    online, target_net = loss.value_network, loss.target_value_network
    z = online.atoms.tolist()
    dz = z[1] - z[0]
    ce, expected = [], []
    for b in range(td.shape[0]):
        with torch.no_grad():
            logits_next = target_net.net(td["next", "observation"][b]).view(A, K)
            p_next = torch.softmax(logits_next, -1)
            q_next = [sum(p_next[a, j].item() * z[j] for j in range(K)) for a in range(A)]
            if loss.double_dqn:
                online_next = torch.softmax(online.net(td["next", "observation"][b]).view(A, K), -1)
                q_sel = [sum(online_next[a, j].item() * z[j] for j in range(K)) for a in range(A)]
            else:
                q_sel = q_next
        best = max(range(A), key=lambda a: q_sel[a])
        m = [0.0] * K
        r, done = td["next", "reward"][b].item(), td["next", "terminated"][b].item()
        for j in range(K):
            tz = min(max(r + (0.0 if done else GAMMA) * z[j], z[0]), z[-1])
            pos = (tz - z[0]) / dz
            lo, hi = int(pos // 1), -int(-pos // 1)
            mass = p_next[best, j].item()
            if lo == hi:
                m[lo] += mass
            else:
                m[lo] += mass * (hi - pos)
                m[hi] += mass * (pos - lo)
        log_p = torch.log_softmax(online.net(td["observation"][b]).view(A, K), -1)[td["action"][b]]
        ce.append(-sum(m[j] * log_p[j] for j in range(K)))
        expected.append(sum(m[j] * z[j] for j in range(K)))
    return torch.stack(ce), torch.tensor(expected)


@pytest.mark.parametrize("double_dqn", [False, True])
def test_c51_matches_the_reference_at_terminated_and_truncated_rows(double_dqn):
    loss = C51Loss(c51(), gamma=GAMMA, double_dqn=double_dqn)
    with torch.no_grad():  # a target network that differs from the online one
        for p in loss.target_value_network.parameters():
            p.add_(0.3 * torch.randn_like(p))
    td = batch([False, True, False, False], [False, False, True, False])
    out = loss(td)
    ce, expected = c51_reference(loss, td)
    torch.testing.assert_close(out["td_error"], ce.detach())
    torch.testing.assert_close(out["loss"], ce.mean())
    torch.testing.assert_close(out["value_target"], expected.mean())


def test_terminated_changes_exactly_its_row_and_truncated_bootstraps():
    loss = C51Loss(c51(), gamma=GAMMA)
    cut = loss(batch([False, False, False], [False, True, False]))["td_error"]
    ordinary = loss(batch([False, False, False], [False, False, False]))["td_error"]
    terminal = loss(batch([False, True, False], [False, False, False]))["td_error"]
    torch.testing.assert_close(cut, ordinary)  # a time limit bootstraps like an ordinary step
    assert terminal[1] != ordinary[1]
    torch.testing.assert_close(terminal[[0, 2]], ordinary[[0, 2]])


@pytest.mark.parametrize("make", ["c51", "qr"])
def test_gradients_reach_only_the_online_network_and_weights_scale(make):
    if make == "c51":
        loss = C51Loss(c51(), gamma=GAMMA)
    else:
        torch.manual_seed(0)
        loss = QRDQNLoss(QuantileQValueActor(nn.Linear(3, A * N), A, num_quantiles=N), gamma=GAMMA)
    td = batch([False, True, False], [False, False, True])
    loss(td)["loss"].backward()
    assert all(
        p.grad is not None and p.grad.abs().sum() > 0 for p in loss.value_network.parameters()
    )
    assert all(p.grad is None for p in loss.target_value_network.parameters())
    per_sample = loss(td)["td_error"]
    td["priority_weight"] = torch.tensor([0.0, 2.0, 1.0])
    torch.testing.assert_close(loss(td)["loss"], (per_sample * td["priority_weight"]).mean())


def test_qrdqn_matches_the_reference():
    torch.manual_seed(1)
    actor = QuantileQValueActor(nn.Linear(3, A * N), A, num_quantiles=N)
    loss = QRDQNLoss(actor, gamma=GAMMA, kappa=1.0)
    td = batch([False, True, False], [False, False, True], seed=3)
    out = loss(td)
    taus = [(i + 0.5) / N for i in range(N)]
    expected = []
    for b in range(3):
        with torch.no_grad():
            next_q = loss.target_value_network.net(td["next", "observation"][b]).view(A, N)
        best = int(next_q.mean(-1).argmax())
        r, done = td["next", "reward"][b].item(), td["next", "terminated"][b].item()
        target = [r + (0.0 if done else GAMMA * next_q[best, j].item()) for j in range(N)]
        theta = actor.net(td["observation"][b]).view(A, N)[td["action"][b]]
        total = 0.0
        for i in range(N):
            for j in range(N):
                u = target[j] - theta[i]
                huber = 0.5 * u**2 if abs(u.item()) <= 1 else abs(u) - 0.5
                total = total + abs(taus[i] - float(u.item() < 0)) * huber / N
        expected.append(total)
    torch.testing.assert_close(out["td_error"], torch.stack(expected).detach())
    torch.testing.assert_close(out["loss"], torch.stack(expected).mean())


def test_actor_writes_expected_values_and_names_a_wrong_network():
    actor = c51()
    td = actor(TensorDict({"observation": torch.randn(4, 3)}, batch_size=[4]))
    probs = actor.log_probs(td).exp()
    torch.testing.assert_close(probs.sum(-1), torch.ones(4, A))
    torch.testing.assert_close(td["action_value"], (probs * actor.atoms).sum(-1))
    torch.testing.assert_close(td["action"], td["action_value"].argmax(-1))
    bad = CategoricalQValueActor(nn.Linear(3, 7), A, num_atoms=K)
    with pytest.raises(
        ValueError, match="gives 7 outputs per observation, expected num_actions x 5"
    ):
        bad(TensorDict({"observation": torch.randn(4, 3)}, batch_size=[4]))
    with pytest.raises(ValueError, match="v_min"):
        CategoricalQValueActor(nn.Linear(3, 4), 2, v_min=1.0, v_max=-1.0, num_atoms=2)
    with pytest.raises(ValueError, match="num_quantiles must be >= 1"):
        QuantileQValueActor(nn.Linear(3, 4), 2, num_quantiles=0)


def iqn_actor(features=6, cosines=4) -> IQNQValueActor:
    torch.manual_seed(2)
    return IQNQValueActor(
        nn.Linear(3, features), nn.Linear(features, A), A, features, num_cosines=cosines
    )


def test_iqn_quantiles_follow_the_cosine_embedding():
    actor = iqn_actor()
    td = TensorDict({"observation": torch.randn(2, 3)}, batch_size=[2])
    taus = torch.tensor([[0.1, 0.7, 0.9], [0.5, 0.2, 0.3]])
    out = actor.quantiles(td, taus)  # [B, A, N]
    for b in range(2):
        psi = actor.feature_net(td["observation"][b])
        for n in range(3):
            basis = torch.tensor([math.cos(math.pi * i * taus[b, n].item()) for i in range(4)])
            phi = torch.relu(actor.embedding(basis))
            torch.testing.assert_close(out[b, :, n], actor.head(psi * phi))


def test_iqn_loss_matches_the_reference_with_its_drawn_fractions():
    actor = iqn_actor()
    loss = IQNLoss(actor, gamma=GAMMA, num_taus=3, num_target_taus=5)
    td = batch([False, True, False], [False, False, True], seed=4)
    torch.manual_seed(11)
    out = loss(td)
    torch.manual_seed(11)  # the loss draws the target fractions first, then the online ones
    target_taus, taus = torch.rand(3, 5), torch.rand(3, 3)
    expected = []
    for b in range(3):
        one = td[b : b + 1]
        with torch.no_grad():
            next_q = loss.target_value_network.quantiles(one["next"], target_taus[b : b + 1])[0]
        best = int(next_q.mean(-1).argmax())
        r, done = td["next", "reward"][b].item(), td["next", "terminated"][b].item()
        target = [r + (0.0 if done else GAMMA * next_q[best, j].item()) for j in range(5)]
        theta = actor.quantiles(one, taus[b : b + 1])[0, td["action"][b]]
        total = 0.0
        for i in range(3):
            for j in range(5):
                u = target[j] - theta[i]
                huber = 0.5 * u**2 if abs(u.item()) <= 1 else abs(u) - 0.5
                total = total + abs(taus[b, i].item() - float(u.item() < 0)) * huber / 5
        expected.append(total)
    torch.testing.assert_close(out["td_error"], torch.stack(expected).detach())
    out["loss"].backward()
    assert actor.embedding.weight.grad is not None and actor.embedding.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in loss.target_value_network.parameters())


def test_iqn_greedy_evaluation_is_repeatable():
    from tensordict.nn import InteractionType, set_interaction_type

    actor = iqn_actor()
    td = TensorDict({"observation": torch.randn(4, 3)}, batch_size=[4])
    with set_interaction_type(InteractionType.DETERMINISTIC):
        torch.testing.assert_close(actor.action_values(td), actor.action_values(td))
    assert not torch.allclose(actor.action_values(td), actor.action_values(td))  # sampled taus
