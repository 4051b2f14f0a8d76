"""Offline losses by hand: behaviour cloning (deterministic, log-likelihood) and TD3+BC's
normalized actor objective."""

from __future__ import annotations

import math

import pytest
import torch
from offpolicy_data import linear, no_param_has_grad, transitions
from test_td3 import OBS, critic, linear_actor

from tdrl.modules import DeterministicActor, GaussianActor
from tdrl.objectives import BCLoss, TD3BCLoss, TD3Loss


def test_bc_deterministic_by_hand():
    actor = linear_actor()  # mu(s) = 2 tanh(s_0)
    td = transitions(4, OBS, 1)
    out = BCLoss(actor)(td)
    mu = 2 * torch.tanh(td["observation"][:, 0])
    expected = ((mu - td["action"][:, 0]) ** 2).mean()
    torch.testing.assert_close(out["loss_actor"], expected)
    torch.testing.assert_close(out["action_error"], expected)
    td["priority_weight"] = torch.tensor([1.0, 0.0, 2.0, 1.0])
    weighted = ((mu - td["action"][:, 0]) ** 2 * td["priority_weight"]).mean()
    torch.testing.assert_close(BCLoss(actor)(td)["loss_actor"], weighted)


def test_bc_log_likelihood_by_hand():
    torch.manual_seed(0)
    actor = GaussianActor(linear([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), 2, init_log_std=-0.5)
    td = transitions(5, OBS, 2)
    out = BCLoss(actor, kind="log_prob")(td)
    loc, std = td["observation"][:, :2], math.exp(-0.5)
    log_prob = (
        -0.5 * ((td["action"] - loc) / std) ** 2 - math.log(std) - 0.5 * math.log(2 * math.pi)
    ).sum(-1)
    torch.testing.assert_close(out["loss_actor"], -log_prob.mean())
    out["loss_actor"].backward()
    assert all(p.grad is not None for p in actor.parameters())
    with pytest.raises(TypeError, match="needs an actor with get_dist"):
        BCLoss(DeterministicActor(linear([[1.0, 0.0, 0.0]]), 1), kind="log_prob")


def test_td3_bc_actor_objective_by_hand_and_the_critic_loss_is_td3s():
    actor = linear_actor()
    q = critic((1.5, 0.5), (-1.0, 0.0))  # Q_0(s, a) = 1.5 a + 0.5
    td = transitions(6, OBS, 1, terminated=[False, True, False, False, False, False],
                     truncated=[False, False, True, False, False, False])  # fmt: skip
    loss = TD3BCLoss(actor, q, alpha=2.5, gamma=0.9)
    mu = 2 * torch.tanh(td["observation"][:, 0])
    q0 = 1.5 * mu + 0.5
    lmbda = 2.5 / q0.abs().mean()
    expected = (-lmbda * q0 + (mu - td["action"][:, 0]) ** 2).mean()
    torch.testing.assert_close(loss.actor_loss(td), expected)
    loss.actor_loss(td).backward()
    assert no_param_has_grad(q)  # the critic is frozen in the actor's loss
    torch.manual_seed(3)
    ours = loss.qvalue_loss(td)[0]
    torch.manual_seed(3)
    td3 = TD3Loss(actor, q, gamma=0.9).qvalue_loss(td)[0]
    torch.testing.assert_close(ours, td3)
    with pytest.raises(ValueError, match="alpha must be > 0"):
        TD3BCLoss(actor, q, alpha=0.0)


def test_expectile_loss_by_hand():
    from tdrl.ops.distributional import expectile_loss

    out = expectile_loss(torch.tensor([-1.0, 2.0, 0.0]), 0.7)
    torch.testing.assert_close(out, torch.tensor([0.3, 2.8, 0.0]))
    with pytest.raises(ValueError, match="expectile"):
        expectile_loss(torch.zeros(2), 1.0)


def test_iql_losses_by_hand_and_gradients_stay_in_their_network():
    from tdrl.modules import ValueCritic
    from tdrl.objectives import IQLLoss

    actor = GaussianActor(linear([[1.0, 0.0, 0.0]]), 1, init_log_std=-0.5)  # mu(s) = s_0
    q = critic((1.5, 0.5), (-1.0, 0.2))  # Q_0 = 1.5 a + 0.5, Q_1 = -a + 0.2
    value = ValueCritic(linear([[0.0, 1.0, 0.0]]))  # V(s) = s_1
    td = transitions(6, OBS, 1, terminated=[False, True, False, False, False, False],
                     truncated=[False, False, True, False, False, False])  # fmt: skip
    loss = IQLLoss(actor, q, value, expectile=0.7, beta=3.0, gamma=0.9)
    out = loss(td)
    a = td["action"][:, 0]
    q_min = torch.minimum(1.5 * a + 0.5, -a + 0.2)
    v = td["observation"][:, 1]
    u = q_min - v
    expected_value = (torch.where(u < 0, 0.3, 0.7) * u**2).mean()
    keep = (~td["next", "terminated"][:, 0]).float()  # truncated rows bootstrap
    y = td["next", "reward"][:, 0] + 0.9 * keep * td["next", "observation"][:, 1]
    expected_q = ((1.5 * a + 0.5 - y) ** 2 + (-a + 0.2 - y) ** 2).mean()
    std = math.exp(-0.5)
    log_prob = (
        -0.5 * ((a - td["observation"][:, 0]) / std) ** 2
        - math.log(std)
        - 0.5 * math.log(2 * math.pi)
    )
    weight = torch.exp(3.0 * u).clamp(max=100.0)
    expected_actor = -(weight * log_prob).mean()
    torch.testing.assert_close(out["loss_value"], expected_value)
    torch.testing.assert_close(out["loss_qvalue"], expected_q)
    torch.testing.assert_close(out["loss_actor"], expected_actor)
    for name, owner in (("loss_value", value), ("loss_qvalue", q), ("loss_actor", actor)):
        loss.zero_grad(set_to_none=True)
        loss(td)[name].backward()
        for module in (value, q, actor):
            touched = any(
                p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters()
            )
            assert touched == (module is owner), (name, type(module).__name__)
    assert no_param_has_grad(loss.target_qvalue_network)


def test_conservative_gap_by_hand():
    from tdrl.objectives import conservative_gap

    q_data = torch.tensor([[1.0]])  # [E=1, B=1]
    q_sampled = torch.tensor([[[0.0], [math.log(3.0)]]])  # [1, K=2, 1]
    log_density = torch.tensor([[0.0], [0.0]])
    # log(e^0 + e^log 3) - 1 = log 4 - 1
    torch.testing.assert_close(
        conservative_gap(q_data, q_sampled, log_density), torch.tensor([[math.log(4.0) - 1.0]])
    )
    # a density of 1/2 counts its sample twice: log(2 e^0 + 2 * 3) - 1 = log 8 - 1
    half = torch.full((2, 1), math.log(0.5))
    torch.testing.assert_close(
        conservative_gap(q_data, q_sampled, half), torch.tensor([[math.log(8.0) - 1.0]])
    )


@pytest.mark.parametrize("with_lagrange", [False, True])
def test_cql_adds_the_gap_to_the_critic_loss_and_learns_its_multiplier(with_lagrange):
    from tdrl.modules import EnsembleCritic, EnsembleMLP, TanhGaussianActor
    from tdrl.objectives import CQLLoss, SACLoss

    torch.manual_seed(0)
    actor = TanhGaussianActor(linear([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), 1)
    q = EnsembleCritic(EnsembleMLP(OBS + 1, 1, (8,), num_members=2))
    td = transitions(
        8, OBS, 1, terminated=[True] + [False] * 7, truncated=[False, True] + [False] * 6
    )
    loss = CQLLoss(
        actor,
        q,
        weight=2.0,
        num_random=4,
        with_lagrange=with_lagrange,
        target_action_gap=1.0,
        lagrange_init=0.5,
        gamma=0.9,
    )
    sac = SACLoss(actor, q, gamma=0.9)
    torch.manual_seed(1)
    out = loss(td)
    torch.manual_seed(1)  # replay the loss's draws: SAC's target sample, then the gap's actions
    base_q = sac.qvalue_loss(td)[0]
    gap = loss.gap(td).detach()
    if with_lagrange:
        expected_extra = 2.0 * 0.5 * (gap - 1.0).sum(0).mean()
    else:
        expected_extra = 2.0 * gap.sum(0).mean()
    torch.testing.assert_close(
        out["loss_qvalue"], base_q + expected_extra.detach(), rtol=1e-5, atol=1e-5
    )
    # a critic-only step (actor_every > 1) trains the same critic loss, the gap included
    torch.manual_seed(1)
    torch.testing.assert_close(loss.qvalue_loss(td)[0], out["loss_qvalue"], rtol=1e-6, atol=1e-6)
    assert "loss_alpha_prime" in loss.out_keys
    loss.zero_grad(set_to_none=True)
    out["loss_qvalue"].backward(retain_graph=True)
    assert all(p.grad is not None for p in q.parameters())
    if with_lagrange:
        assert loss.log_alpha_prime.grad is None  # alpha' is detached in the critic's loss
        out["loss_alpha_prime"].backward()
        # gradient ascent on alpha' * (gap - target): a gap above the target raises alpha'
        gap_minus = float((gap - 1.0).sum(0).mean())
        assert float(loss.log_alpha_prime.grad) * gap_minus < 0
        # its value: the mean over the two critics, the authors' (-q1_loss - q2_loss) * 0.5
        expected_alpha_prime = -0.5 * 2.0 * 0.5 * ((gap[0] - 1.0).mean() + (gap[1] - 1.0).mean())
        torch.testing.assert_close(
            out["loss_alpha_prime"].detach(), expected_alpha_prime, rtol=1e-5, atol=1e-6
        )
    else:
        assert float(out["loss_alpha_prime"]) == 0.0


def test_cql_deterministic_backup_drops_the_entropy_term_of_the_target():
    from tdrl.modules import EnsembleCritic, EnsembleMLP, TanhGaussianActor
    from tdrl.objectives import CQLLoss, SACLoss

    torch.manual_seed(0)
    actor = TanhGaussianActor(linear([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), 1)
    q = EnsembleCritic(EnsembleMLP(OBS + 1, 1, (8,), num_members=2))
    td = transitions(6, OBS, 1, terminated=[True] + [False] * 5, truncated=[False] * 6)
    soft = CQLLoss(actor, q, gamma=0.9, alpha_init=0.3)
    hard = CQLLoss(actor, q, gamma=0.9, alpha_init=0.3, deterministic_backup=True)
    sac = SACLoss(actor, q, gamma=0.9, alpha_init=0.3)
    for seed in (1, 2):
        torch.manual_seed(seed)
        y_soft = soft.value_target(td)
        torch.manual_seed(seed)
        y_hard = hard.value_target(td)
        torch.manual_seed(seed)
        y_sac = sac.value_target(td)
        torch.manual_seed(seed)  # the same next action and log pi, by hand
        next_action, next_log_prob = sac._sample(td["next"])
        torch.testing.assert_close(y_soft, y_sac)
        # y_soft - y_hard = gamma * (1 - terminated) * (-alpha log pi(a'|s'))
        not_term = (~td["next", "terminated"].reshape(-1)).float()
        expected = 0.9 * not_term * (-0.3 * next_log_prob.reshape(-1))
        torch.testing.assert_close(y_soft - y_hard, expected, rtol=1e-5, atol=1e-5)
    assert bool((y_soft != y_hard)[1:].all())


def test_cql_warm_up_actor_loss_is_the_data_likelihood_with_entropy_by_hand():
    from tdrl.modules import EnsembleCritic, EnsembleMLP, TanhGaussianActor
    from tdrl.objectives import CQLLoss, SACLoss

    torch.manual_seed(0)
    actor = TanhGaussianActor(linear([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), 1)
    q = EnsembleCritic(EnsembleMLP(OBS + 1, 1, (8,), num_members=2))
    td = transitions(8, OBS, 1, terminated=[True] + [False] * 7)
    warm = CQLLoss(actor, q, alpha_init=0.3, num_random=3, behavior_cloning=True)
    sac = SACLoss(actor, q, alpha_init=0.3)
    torch.manual_seed(1)
    loss_actor, log_prob = warm.actor_loss(td)
    torch.manual_seed(1)  # the same draw of a~ ~ pi(.|s)
    _, sampled_log_prob = sac._sample(td)
    # log pi(a_data|s) from the definitions: u = atanh(a), a Gaussian of mean obs[0] and
    # log-std -5 + 3.5 (tanh(obs[1]) + 1), and the tanh's Jacobian log(1 - a^2)
    a = td["action"][:, 0]
    out = actor.net(td["observation"])  # (obs[0], obs[1]), through the actor's weights
    mean, log_std = out[:, 0], -5.0 + 3.5 * (torch.tanh(out[:, 1]) + 1.0)
    u = torch.atanh(a)
    gauss = -0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    data_log_prob = gauss - torch.log(1.0 - a**2)
    expected = (0.3 * sampled_log_prob - data_log_prob).mean()
    torch.testing.assert_close(loss_actor, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(log_prob, sampled_log_prob.detach())
    # its gradient is the hand formula's, and only the actor learns from it
    params = list(actor.parameters())
    by_hand = torch.autograd.grad(expected, params)
    warm.zero_grad(set_to_none=True)
    loss_actor.backward()
    for p, g in zip(params, by_hand, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-6)
    assert no_param_has_grad(q)
    # the flag moves the actor's objective only: same draws, same critic and alpha losses;
    # switched off, the actor's loss is SAC's again
    torch.manual_seed(2)
    on = warm(td)
    warm.behavior_cloning = False
    torch.manual_seed(2)
    off = warm(td)
    for key in ("loss_qvalue", "loss_alpha", "entropy"):
        torch.testing.assert_close(on[key], off[key])
    assert not torch.allclose(on["loss_actor"], off["loss_actor"])
    torch.manual_seed(3)
    off_actor = warm.actor_loss(td)[0]
    torch.manual_seed(3)
    torch.testing.assert_close(off_actor, sac.actor_loss(td)[0])
    # two action dimensions (the log-density summed over them) and a data action on the box's
    # edge, as datasets store clipped actions: the loss and its gradient stay finite
    W = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]]
    actor2 = TanhGaussianActor(linear(W), 2)
    q2 = EnsembleCritic(EnsembleMLP(OBS + 2, 1, (8,), num_members=2))
    td2 = transitions(4, OBS, 2)
    td2["action"][0] = torch.tensor([1.0, -1.0])
    edge = CQLLoss(actor2, q2, num_random=2, behavior_cloning=True)
    loss2, log_prob2 = edge.actor_loss(td2)
    assert log_prob2.shape == (4,)
    loss2.backward()
    assert torch.isfinite(loss2)
    assert all(bool(torch.isfinite(p.grad).all()) for p in actor2.parameters())


def test_cql_takes_its_action_box_from_the_actor_or_its_arguments_and_refuses_none():
    from torch import nn

    from tdrl.modules import EnsembleCritic, EnsembleMLP, TanhGaussianActor
    from tdrl.objectives import CQLLoss

    class NoBox(nn.Module):  # an actor with get_dist but no action_low/action_high
        def __init__(self, actor):
            super().__init__()
            self.actor, self.in_keys, self.out_keys = actor, actor.in_keys, actor.out_keys

        def get_dist(self, td):
            return self.actor.get_dist(td)

        def forward(self, td):
            return self.actor(td)

    torch.manual_seed(0)
    W = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]]
    actor = TanhGaussianActor(linear(W), 2, action_low=-2.0, action_high=2.0)
    q = EnsembleCritic(EnsembleMLP(OBS + 2, 1, (8,), num_members=2))
    td = transitions(6, OBS, 2)
    td["action"] = td["action"].clamp(-2.0, 2.0)
    gaps = []
    for loss in (
        CQLLoss(actor, q, num_random=3),  # the actor's [A] box
        CQLLoss(NoBox(actor), q, num_random=3, action_low=-2.0, action_high=2.0),  # floats
    ):
        torch.manual_seed(3)
        gaps.append(loss.gap(td))
    # the same draws and the same uniform density (1/4)^2 over the 2-d box
    torch.testing.assert_close(gaps[0], gaps[1])
    with pytest.raises(ValueError, match="action_low/action_high"):
        CQLLoss(NoBox(actor), q)
    with pytest.raises(ValueError, match="action_low < action_high"):
        CQLLoss(actor, q, action_low=1.0, action_high=1.0)


def test_discrete_cql_adds_the_logsumexp_gap_by_hand():
    from tdrl.modules import QValueActor
    from tdrl.objectives import DiscreteCQLLoss, DQNLoss

    q = QValueActor(linear([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))  # Q(s, .) = s[:2]
    td = transitions(5, OBS, num_actions=2, terminated=[False, True, False, False, False])
    td["priority_weight"] = torch.tensor([1.0, 2.0, 0.5, 1.0, 0.0])
    out = DiscreteCQLLoss(q, weight=3.0, gamma=0.9)(td)
    base = DQNLoss(q, gamma=0.9)(td)
    s = td["observation"][:, :2]
    gap = torch.log(s.exp().sum(-1)) - s.gather(1, td["action"].view(-1, 1)).squeeze(1)
    expected = 0.5 * base["loss"] + 3.0 * (gap * td["priority_weight"]).mean()  # eq. 4's 1/2
    torch.testing.assert_close(out["loss"], expected)
    torch.testing.assert_close(out["td_error"], base["td_error"])  # priorities: DQN's
    with pytest.raises(ValueError, match="weight must be >= 0"):
        DiscreteCQLLoss(q, weight=-1.0)


@pytest.mark.parametrize("advantage", ["mean", "max"])
@pytest.mark.parametrize("mode", ["binary", "exp"])
def test_crr_losses_by_hand(mode, advantage):
    from tdrl.objectives import CRRLoss

    actor = GaussianActor(linear([[1.0, 0.0, 0.0]]), 1, init_log_std=-0.5)  # mu(s) = s_0
    q = critic((1.5, 0.5), (-1.0, 0.2))  # min_e Q_e(s, a) = min(1.5 a + 0.5, 0.2 - a)
    td = transitions(5, OBS, 1, terminated=[False, True, False, False, False],
                     truncated=[False, False, True, False, False])  # fmt: skip
    loss = CRRLoss(actor, q, mode=mode, advantage=advantage, beta=0.5, num_samples=3, gamma=0.9)
    torch.manual_seed(4)
    out = loss(td)

    def q_min(a):
        return torch.minimum(1.5 * a + 0.5, 0.2 - a)

    def sampled_values(states):  # the loss's draws, replayed: 3 actions per state, [3, 5]
        repeated = states.select("observation").unsqueeze(0).expand(3, 5).reshape(15)
        return q_min(actor.get_dist(repeated).sample().view(3, 5))

    torch.manual_seed(4)
    next_value = sampled_values(td["next"]).mean(0)  # the target first (always the mean)
    drawn = sampled_values(td)
    baseline = drawn.mean(0) if advantage == "mean" else drawn.max(0).values
    keep = (~td["next", "terminated"][:, 0]).float()
    y = td["next", "reward"][:, 0] + 0.9 * keep * next_value
    a = td["action"][:, 0]
    expected_q = ((1.5 * a + 0.5 - y) ** 2 + (0.2 - a - y) ** 2).mean()
    advantage = q_min(a) - baseline
    f = (advantage > 0).float() if mode == "binary" else torch.exp(advantage / 0.5).clamp(max=20.0)
    std = math.exp(-0.5)
    log_prob = (
        -0.5 * ((a - td["observation"][:, 0]) / std) ** 2
        - math.log(std)
        - 0.5 * math.log(2 * math.pi)
    )
    torch.testing.assert_close(out["loss_qvalue"], expected_q)
    torch.testing.assert_close(out["loss_actor"], -(f * log_prob).mean())


def test_td3_bc_names_a_data_action_of_another_shape():
    # [B] against the actor's [B, 1] would broadcast the behaviour-cloning term to [B, B]
    td = transitions(4, OBS, 1)
    td["action"] = td["action"][:, 0]
    with pytest.raises(ValueError, match=r"TD3BCLoss: the actor's 'action' has shape \(4, 1\)"):
        TD3BCLoss(linear_actor(), critic((1.5, 0.5), (-1.0, 0.0))).actor_loss(td)


def test_iql_and_crr_leave_the_callers_batch_alone_and_refuse_a_non_positive_max_weight():
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torch import nn
    from torchrl.modules import ProbabilisticActor, TanhNormal

    from tdrl.modules import EnsembleCritic, EnsembleMLP, ValueCritic
    from tdrl.objectives import CRRLoss, IQLLoss

    # TorchRL's actor writes "loc" and "scale" into what it is given
    net = nn.Sequential(nn.Linear(OBS, 2), NormalParamExtractor())
    actor = ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["loc", "scale"]), in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
    )  # fmt: skip
    q = EnsembleCritic(EnsembleMLP(OBS + 1, 1, (8,), num_members=2))
    value = ValueCritic(nn.Linear(OBS, 1))
    for loss in (IQLLoss(actor, q, value), CRRLoss(actor, q)):
        td = transitions(5, OBS, 1)
        before = set(td.keys(True, True))
        loss(td)
        assert set(td.keys(True, True)) == before, type(loss).__name__
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match=f"max_weight must be > 0, got {bad}"):
            IQLLoss(actor, q, value, max_weight=bad)
        with pytest.raises(ValueError, match=f"max_weight must be > 0, got {bad}"):
            CRRLoss(actor, q, max_weight=bad)
    with pytest.raises(ValueError, match="advantage must be 'mean' or 'max', got 'min'"):
        CRRLoss(actor, q, advantage="min")


def test_discrete_cql_is_torchrls_discrete_cql():
    # TorchRL's DiscreteCQLLoss: 0.5 * its DQN distance + the logsumexp gap (eq. 4's weights);
    # episode ends of every kind in the batch
    from test_distributional_losses import batch
    from torch import nn
    from torchrl.objectives import DiscreteCQLLoss as TorchRLDiscreteCQLLoss

    from tdrl.modules import QValueActor
    from tdrl.objectives import DiscreteCQLLoss

    torch.manual_seed(0)
    q = QValueActor(nn.Linear(3, 2))
    td = batch([False, True, False, False, True, False], [False, False, True, False, True, False])
    ours = DiscreteCQLLoss(q, weight=1.0, delay_value=False, gamma=0.9)(td.clone())["loss"]
    reference = TorchRLDiscreteCQLLoss(q, action_space="categorical", delay_value=False)
    reference.make_value_estimator(gamma=0.9)
    theirs = reference(td.clone())
    torch.testing.assert_close(ours, theirs["loss_qvalue"] + theirs["loss_cql"])
