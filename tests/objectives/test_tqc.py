"""TQCLoss against its definition (Kuznetsov et al. 2020), written out with explicit loops: the
pooled, sorted and truncated target; the quantile Huber loss over every critic, atom and target
atom; the actor's mean over all atoms; and the inputs it refuses."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from tdrl.envs import make_vec_env
from tdrl.modules import q_ensemble, tanh_gaussian_actor
from tdrl.objectives import TQCLoss
from tdrl.objectives.offpolicy import rsample_and_log_prob

N, M, D, B = 3, 5, 2, 6


@pytest.fixture(scope="module")
def specs():
    with make_vec_env("Pendulum-v1", 1) as env:
        return env.observation_spec, env.action_spec


def make_loss(specs, drop=D, **kwargs):
    torch.manual_seed(0)
    actor = tanh_gaussian_actor(*specs, (8,))
    critic = q_ensemble(*specs, (8,), N, num_outputs=M)
    return TQCLoss(actor, critic, top_quantiles_to_drop=drop, **kwargs)


def make_batch(terminated=(False,) * B) -> TensorDict:
    gen = torch.Generator().manual_seed(1)
    return TensorDict(
        {
            "observation": torch.randn(B, 3, generator=gen),
            "action": torch.rand(B, 1, generator=gen) * 4 - 2,
            "next": {
                "observation": torch.randn(B, 3, generator=gen),
                "reward": torch.randn(B, 1, generator=gen),
                "terminated": torch.tensor(terminated).view(B, 1),
                "truncated": torch.zeros(B, 1, dtype=torch.bool),
                "done": torch.tensor(terminated).view(B, 1),
            },
        },
        batch_size=[B],
    )


def atoms(critic, observation, action) -> list[list[list[float]]]:
    """Z_n,m(s_b, a_b) as nested lists [n][b][m], one critic member at a time."""
    td = TensorDict({"observation": observation, "action": action}, batch_size=[B])
    values = critic.values(td)  # [N, B, M]
    return [[[float(values[n, b, m]) for m in range(M)] for b in range(B)] for n in range(N)]


def reference_target(loss, batch, next_action, next_log_prob):
    alpha = float(loss.alpha)
    z = atoms(loss.target_qvalue_network, batch["next", "observation"], next_action)
    k = N * (M - D)
    out = []
    for b in range(B):
        pooled = sorted(z[n][b][m] for n in range(N) for m in range(M))[:k]
        r = float(batch["next", "reward"][b])
        done = bool(batch["next", "terminated"][b])
        out.append(
            [r + (0.0 if done else 0.99 * (x - alpha * float(next_log_prob[b]))) for x in pooled]
        )
    return out


def rho(tau: float, u: float, kappa: float = 1.0) -> float:
    huber = 0.5 * u * u if abs(u) <= kappa else kappa * (abs(u) - 0.5 * kappa)
    return abs(tau - (1.0 if u < 0 else 0.0)) * huber / kappa


def draw(loss, batch, seed=7):
    """a' ~ pi(.|s') as the loss draws it (the same generator state), and its log-prob."""
    torch.manual_seed(seed)
    dist = loss.actor_network.get_dist(batch["next"].select("observation"))
    return rsample_and_log_prob(dist)


@pytest.mark.parametrize("terminated", [(False,) * B, (True, False, True, False, False, True)])
def test_the_target_pools_sorts_and_drops_the_top_atoms(specs, terminated):
    loss, batch = make_loss(specs), make_batch(terminated)
    next_action, next_log_prob = draw(loss, batch)
    want = reference_target(loss, batch, next_action.detach(), next_log_prob.detach())
    torch.manual_seed(7)
    got = loss.value_target(batch)
    assert got.shape == (B, N * (M - D))
    torch.testing.assert_close(got, torch.tensor(want), rtol=1e-5, atol=1e-5)
    for b, done in enumerate(terminated):  # a terminated step's target is the reward alone
        if done:
            assert torch.all(got[b] == batch["next", "reward"][b])


def test_the_critic_loss_is_the_mean_quantile_huber_over_critics_atoms_and_targets(specs):
    loss, batch = make_loss(specs), make_batch()
    next_action, next_log_prob = draw(loss, batch)
    y = reference_target(loss, batch, next_action.detach(), next_log_prob.detach())
    z = atoms(loss.qvalue_network, batch["observation"], batch["action"])
    taus = [(2 * m + 1) / (2 * M) for m in range(M)]
    per_sample = []
    for b in range(B):
        total = 0.0
        for n in range(N):
            for m in range(M):
                for target in y[b]:
                    total += rho(taus[m], target - z[n][b][m])
        per_sample.append(total / (N * M * len(y[b])))
    torch.manual_seed(7)
    got, td_error = loss.qvalue_loss(batch)
    assert math.isclose(float(got), sum(per_sample) / B, rel_tol=1e-5)
    means = [[sum(z[n][b]) / M for b in range(B)] for n in range(N)]
    want_td = [max(abs(means[n][b] - sum(y[b]) / len(y[b])) for n in range(N)) for b in range(B)]
    torch.testing.assert_close(td_error, torch.tensor(want_td), rtol=1e-5, atol=1e-5)


def test_the_actor_maximizes_the_mean_of_every_atom_and_only_moves_the_actor(specs):
    loss, batch = make_loss(specs), make_batch()
    torch.manual_seed(3)
    dist = loss.actor_network.get_dist(batch.select("observation"))
    action, log_prob = rsample_and_log_prob(dist)
    z = atoms(loss.qvalue_network, batch["observation"], action.detach())
    alpha = float(loss.alpha)
    want = (
        sum(
            alpha * float(log_prob[b])
            - sum(z[n][b][m] for n in range(N) for m in range(M)) / (N * M)
            for b in range(B)
        )
        / B
    )
    torch.manual_seed(3)
    got, _ = loss.actor_loss(batch)
    assert math.isclose(float(got), want, rel_tol=1e-5)
    got.backward()
    assert all(p.grad is None for p in loss.qvalue_network.parameters())
    assert any(
        p.grad is not None and p.grad.abs().sum() > 0 for p in loss.actor_network.parameters()
    )


def test_no_drop_keeps_every_atom(specs):
    loss = make_loss(specs, drop=0)
    assert loss.value_target(make_batch()).shape == (B, N * M)


def test_bad_settings_are_named(specs):
    with pytest.raises(
        ValueError, match=r"top_quantiles_to_drop must be a whole number in \[0, 5\).*got 5"
    ):
        make_loss(specs, drop=5)
    with pytest.raises(ValueError, match=r"in \[0, 5\).*got -1"):
        make_loss(specs, drop=-1)
    with pytest.raises(ValueError, match="got True"):
        make_loss(specs, drop=True)
    with pytest.raises(ValueError, match="kappa must be finite and >= 0, got nan"):
        make_loss(specs, kappa=float("nan"))
    actor = tanh_gaussian_actor(*specs, (8,))
    with pytest.raises(ValueError, match="must output M >= 2 quantiles each, got 1"):
        TQCLoss(actor, q_ensemble(*specs, (8,), 2))
    from tdrl.modules import StateActionCritic, mlp

    with pytest.raises(TypeError, match="must be an EnsembleCritic"):
        TQCLoss(actor, StateActionCritic(mlp(4, 5, (8,))))
    # SACLoss's other options would be taken and ignored (TQC's loss is the quantile Huber, its
    # targets always delayed): they are named instead
    critic = q_ensemble(*specs, (8,), 2, num_outputs=M)
    with pytest.raises(TypeError, match=r"unexpected options \['delay_qvalue', 'loss_function'\]"):
        TQCLoss(actor, critic, loss_function="smooth_l1", delay_qvalue=False)
    assert TQCLoss(actor, critic, alpha_init=0.5, gamma=0.9).gamma == 0.9  # the entropy options
