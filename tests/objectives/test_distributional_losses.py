"""C51Loss and QRDQNLoss against references computed sample by sample from the papers'
definitions; terminated vs truncated rows; double selection; frozen targets; PER weights."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from tdrl.modules import (
    CategoricalQValueActor,
    FQFQValueActor,
    IQNQValueActor,
    QuantileQValueActor,
)
from tdrl.objectives import C51Loss, FQFLoss, IQNLoss, QRDQNLoss

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


def fqf_actor(features=6, cosines=4, fractions=4) -> FQFQValueActor:
    torch.manual_seed(3)
    actor = FQFQValueActor(
        nn.Linear(3, features), nn.Linear(features, A), A, features, num_cosines=cosines,
        num_fractions=fractions,
    )  # fmt: skip
    nn.init.normal_(actor.fraction_net.weight)  # uneven proposals, so the test can tell them apart
    return actor


def test_fqf_fractions_partition_the_unit_interval_and_weigh_the_quantiles():
    actor = fqf_actor()
    td = TensorDict({"observation": torch.randn(3, 3)}, batch_size=[3])
    psi = actor.features(td)
    tau, tau_hat, entropy = actor.fractions(psi)
    for b in range(3):
        logits = actor.fraction_net(psi[b]).tolist()
        q = [math.exp(x) / sum(math.exp(y) for y in logits) for x in logits]
        edges = [0.0] + [sum(q[: i + 1]) for i in range(3)] + [1.0]
        torch.testing.assert_close(tau[b], torch.tensor(edges))
        hats = [(edges[i] + edges[i + 1]) / 2 for i in range(4)]
        torch.testing.assert_close(tau_hat[b], torch.tensor(hats))
        torch.testing.assert_close(entropy[b], torch.tensor(-sum(p * math.log(p) for p in q)))
        z = actor.quantiles(td[b : b + 1], tau_hat[b : b + 1])[0]  # [A, N]
        expected = [sum((edges[i + 1] - edges[i]) * z[a, i] for i in range(4)) for a in range(A)]
        torch.testing.assert_close(actor.action_values(td)[b], torch.stack(expected))
    assert (tau[:, 1:] > tau[:, :-1]).all()


def fqf_reference(loss: FQFLoss, td: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample quantile loss and fraction term, one sample at a time (Algorithm 1)."""
    actor, target_net = loss.value_network, loss.target_value_network
    quantile_terms, fraction_terms = [], []
    for b in range(td.shape[0]):
        one = td[b : b + 1]
        with torch.no_grad():
            next_tau, next_hat, _ = actor.fractions(actor.features(one["next"]))
            z_next = target_net.quantiles(one["next"], next_hat)[0]  # [A, N]
            widths = (next_tau[0, 1:] - next_tau[0, :-1]).tolist()
            q_next = [sum(widths[i] * z_next[a, i].item() for i in range(4)) for a in range(A)]
            best = max(range(A), key=lambda a: q_next[a])
        r, done = td["next", "reward"][b].item(), td["next", "terminated"][b].item()
        target = [r + (0.0 if done else GAMMA * z_next[best, j].item()) for j in range(4)]
        tau, hat, _ = actor.fractions(actor.features(one))
        a = int(td["action"][b])
        theta = actor.quantiles(one, hat.detach())[0, a]
        total = 0.0
        for i in range(4):
            for j in range(4):
                u = target[j] - theta[i]
                huber = 0.5 * u**2 if abs(u.item()) <= 1 else abs(u) - 0.5
                total = total + abs(hat[0, i].item() - float(u.item() < 0)) * huber / 4
        quantile_terms.append(total)
        with torch.no_grad():  # Proposition 1: dW1/dtau_i = 2 Z(tau_i) - Z(hat_i) - Z(hat_{i-1})
            z_tau = actor.quantiles(one, tau[:, 1:-1])[0, a]
            g = [2 * z_tau[i - 1] - theta[i] - theta[i - 1] for i in range(1, 4)]
        fraction_terms.append(sum(g[i - 1].detach() * tau[0, i] for i in range(1, 4)))
    return torch.stack(quantile_terms), torch.stack(fraction_terms)


def test_fqf_loss_matches_algorithm_one_and_splits_its_gradients():
    actor = fqf_actor()
    loss = FQFLoss(actor, gamma=GAMMA)
    td = batch([False, True, False], [False, False, True], seed=5)  # terminated, truncated rows
    out = loss(td)
    quantile, fraction = fqf_reference(loss, td)
    torch.testing.assert_close(out["td_error"], quantile.detach())
    torch.testing.assert_close(out["loss"], quantile.mean() + fraction.mean())
    out["loss"].backward()
    got = {n: p.grad.clone() for n, p in actor.named_parameters()}
    actor.zero_grad()
    # The fraction term alone moves the proposal network and nothing else ...
    fraction.mean().backward()
    for name, p in actor.named_parameters():
        if name.startswith("fraction_net"):
            torch.testing.assert_close(got[name], p.grad)
            assert p.grad.abs().sum() > 0
        else:
            assert p.grad is None or p.grad.abs().sum() == 0
    # ... and the quantile term moves everything but it; the target network stays frozen.
    actor.zero_grad()
    quantile.mean().backward()
    for name, p in actor.named_parameters():
        if not name.startswith("fraction_net"):
            torch.testing.assert_close(got[name], p.grad)
    assert all(p.grad is None for p in loss.target_value_network.parameters())


def test_fqf_fraction_gradient_is_the_w1_derivative():
    # Proposition 1 on a known quantile function F^-1(w) = w^3: the finite-difference derivative
    # of W1(tau) = sum_i int_{tau_i}^{tau_{i+1}} |F^-1(w) - F^-1(hat_i)| dw matches 2 F^-1(tau_i)
    # - F^-1(hat_i) - F^-1(hat_{i-1}), the g_i that FQFLoss multiplies tau_i by.
    def inv(w: float) -> float:
        return w**3

    def w1(tau: list[float]) -> float:
        total, steps = 0.0, 4000
        for lo, hi in zip(tau[:-1], tau[1:], strict=True):
            hat, width = (lo + hi) / 2, (hi - lo) / steps
            total += sum(abs(inv(lo + (k + 0.5) * width) - inv(hat)) * width for k in range(steps))
        return total

    tau = [0.0, 0.2, 0.45, 0.8, 1.0]
    for i in (1, 2, 3):
        up, down = list(tau), list(tau)
        up[i] += 1e-4
        down[i] -= 1e-4
        numeric = (w1(up) - w1(down)) / 2e-4
        hat_i, hat_prev = (tau[i] + tau[i + 1]) / 2, (tau[i - 1] + tau[i]) / 2
        assert numeric == pytest.approx(2 * inv(tau[i]) - inv(hat_i) - inv(hat_prev), abs=1e-4)


def test_fqf_bad_arguments_are_named():
    with pytest.raises(ValueError, match="num_fractions must be >= 1, got 0"):
        FQFQValueActor(nn.Linear(3, 4), nn.Linear(4, A), A, 4, num_fractions=0)
    with pytest.raises(ValueError, match="entropy_coeff must be >= 0"):
        FQFLoss(fqf_actor(), entropy_coeff=-1.0)


def test_dqn_options_they_do_not_use_are_refused_by_name():
    assert (
        QRDQNLoss(QuantileQValueActor(nn.Linear(3, A * N), A, num_quantiles=N)).double_dqn is False
    )
    with pytest.raises(TypeError, match="C51Loss got unexpected options \\['loss_function'\\]"):
        C51Loss(c51(), loss_function="smooth_l1")  # type: ignore[call-arg]
