"""C51's projection and the quantile Huber loss, against hand-computed cases and references
written from the papers' definitions (explicit loops)."""

from __future__ import annotations

import pytest
import torch

from tdrl.ops import InputError
from tdrl.ops.distributional import categorical_projection, quantile_huber_loss, support


def test_projection_by_hand():
    atoms = torch.tensor([-1.0, 0.0, 1.0])
    probs = torch.tensor([[0.2, 0.5, 0.3]] * 4)
    reward = torch.tensor([0.5, 0.25, 0.0, -3.0])
    terminated = torch.tensor([False, True, False, False])
    discount = torch.tensor([1.0, 1.0, 0.5, 1.0])
    out = categorical_projection(probs, reward, terminated, atoms, discount=discount)
    expected = torch.tensor(
        [
            [0.1, 0.35, 0.55],  # Tz = -0.5, 0.5, 1.5 -> clipped to 1
            [0.0, 0.75, 0.25],  # terminated: all mass at r = 0.25
            [0.1, 0.75, 0.15],  # Tz = -0.5, 0 (on an atom: all to it), 0.5
            [1.0, 0.0, 0.0],  # every Tz below v_min
        ]
    )
    torch.testing.assert_close(out, expected)


def projection_reference(probs, reward, terminated, atoms, discount):
    """Bellemare et al. 2017, Algorithm 1, atom by atom (with the mass of an exact landing kept)."""
    B, K = probs.shape
    v_min, v_max = float(atoms[0]), float(atoms[-1])
    dz = (v_max - v_min) / (K - 1)
    out = torch.zeros(B, K, dtype=torch.float64)
    for i in range(B):
        for j in range(K):
            bootstrap = 0.0 if terminated[i] else float(discount[i])
            tz = min(max(float(reward[i]) + bootstrap * float(atoms[j]), v_min), v_max)
            b = (tz - v_min) / dz
            lo, hi = int(b // 1), -int(-b // 1)
            if lo == hi:
                out[i, lo] += float(probs[i, j])
            else:
                out[i, lo] += float(probs[i, j]) * (hi - b)
                out[i, hi] += float(probs[i, j]) * (b - lo)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_projection_matches_the_algorithm_and_conserves_mass(seed):
    g = torch.Generator().manual_seed(seed)
    B, K = 16, 11
    atoms = support(-5.0, 5.0, K).double()
    probs = torch.softmax(torch.randn(B, K, generator=g, dtype=torch.float64), -1)
    reward = torch.randn(B, generator=g, dtype=torch.float64) * 3
    terminated = torch.rand(B, generator=g) < 0.3
    discount = 0.99 ** torch.randint(1, 4, (B,), generator=g).double()
    out = categorical_projection(probs, reward, terminated, atoms, discount=discount)
    torch.testing.assert_close(
        out, projection_reference(probs, reward, terminated, atoms, discount)
    )
    torch.testing.assert_close(out.sum(-1), torch.ones(B, dtype=torch.float64))
    assert (out >= 0).all()


def test_terminated_rows_differ_and_truncated_rows_bootstrap():
    # The op sees no truncated flag: a truncated step bootstraps like an ordinary one, from its
    # real final observation's distribution; only terminated stops the bootstrap.
    atoms = support(-2.0, 2.0, 5)
    probs = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]]).repeat(2, 1)  # Z(s') = 2 surely
    reward = torch.zeros(2)
    running = categorical_projection(
        probs, reward, torch.tensor([False, False]), atoms, discount=0.5
    )
    ended = categorical_projection(probs, reward, torch.tensor([False, True]), atoms, discount=0.5)
    torch.testing.assert_close(running[1], torch.tensor([0.0, 0.0, 0.0, 1.0, 0.0]))  # at 1
    torch.testing.assert_close(ended[1], torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0]))  # at r = 0
    torch.testing.assert_close(running[0], ended[0])
    # a terminated row's next distribution is not read: a NaN there (an inf s') stays out
    broken = probs.clone()
    broken[1] = float("nan")
    nan_ended = categorical_projection(
        broken, reward, torch.tensor([False, True]), atoms, discount=0.5
    )
    torch.testing.assert_close(nan_ended, ended)


def test_bad_supports_and_shapes_name_the_argument():
    with pytest.raises(InputError, match="v_min: must be < v_max"):
        support(1.0, 1.0, 51)
    with pytest.raises(InputError, match="num_atoms: must be >= 2"):
        support(-1.0, 1.0, 1)
    atoms = support(-1.0, 1.0, 3)
    with pytest.raises(InputError, match="next_probs"):
        categorical_projection(
            torch.ones(2, 4), torch.zeros(2), torch.zeros(2, dtype=torch.bool), atoms, discount=0.9
        )
    with pytest.raises(InputError, match="terminated: must be bool"):
        categorical_projection(
            torch.ones(2, 3) / 3, torch.zeros(2), torch.zeros(2), atoms, discount=0.9
        )


def quantile_reference(quantiles, target, taus, kappa):
    """Dabney et al. 2017, eq. 10: sum over i, mean over j, by explicit loops."""
    B, N = quantiles.shape
    M = target.shape[1]
    out = torch.zeros(B, dtype=torch.float64)
    for b in range(B):
        for i in range(N):
            tau = float(taus[b, i] if taus.dim() == 2 else taus[i])
            for j in range(M):
                u = float(target[b, j] - quantiles[b, i])
                if kappa == 0:
                    loss = abs(u)
                elif abs(u) <= kappa:
                    loss = 0.5 * u * u / kappa
                else:
                    loss = abs(u) - 0.5 * kappa
                out[b] += abs(tau - (1.0 if u < 0 else 0.0)) * loss / M
    return out


@pytest.mark.parametrize("kappa", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("per_sample_taus", [False, True])
def test_quantile_huber_matches_its_definition(kappa, per_sample_taus):
    g = torch.Generator().manual_seed(int(kappa * 10) + per_sample_taus)
    B, N, M = 5, 4, 6
    quantiles = torch.randn(B, N, generator=g, dtype=torch.float64)
    target = torch.randn(B, M, generator=g, dtype=torch.float64) * 2
    taus = (
        torch.rand(B, N, generator=g, dtype=torch.float64)
        if per_sample_taus
        else (torch.arange(N) + 0.5).double() / N
    )
    out = quantile_huber_loss(quantiles, target, taus, kappa=kappa)
    torch.testing.assert_close(out, quantile_reference(quantiles, target, taus, kappa))


def test_quantile_huber_by_hand():
    one = torch.tensor
    # u = 2 > kappa = 1: L = 1.5, weight |0.5 - 0| = 0.5
    assert quantile_huber_loss(one([[0.0]]), one([[2.0]]), one([0.5])).item() == pytest.approx(0.75)
    # kappa = 0: u = -1, weight |0.25 - 1| = 0.75
    assert quantile_huber_loss(
        one([[1.0]]), one([[0.0]]), one([0.25]), kappa=0.0
    ).item() == pytest.approx(0.75)


def test_minimizing_the_quantile_loss_finds_the_quantile():
    samples = torch.arange(10.0).unsqueeze(0)  # 0, 1, ..., 9
    taus = torch.tensor([0.05, 0.35, 0.95])
    theta = torch.zeros(1, 3, requires_grad=True)
    opt = torch.optim.SGD([theta], lr=0.05)
    for _ in range(3000):
        opt.zero_grad()
        quantile_huber_loss(theta, samples, taus, kappa=0.0).sum().backward()
        opt.step()
    # the tau-quantiles of 10 equally likely values: within one step of 0, 3 and 9
    assert theta.detach()[0].tolist() == pytest.approx([0.0, 3.0, 9.0], abs=1.0)
    assert 2.0 <= theta[0, 1].item() <= 4.0


def test_quantile_bad_input():
    with pytest.raises(InputError, match="kappa: must be >= 0"):
        quantile_huber_loss(
            torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([0.25, 0.75]), kappa=-1
        )
    with pytest.raises(InputError, match="taus"):
        quantile_huber_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([0.5]))
