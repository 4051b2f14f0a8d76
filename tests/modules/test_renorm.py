"""BatchRenorm against its formula (Ioffe 2017), written per feature with Python floats: the
running-statistics path, plain batch norm through the warm-up, the clipped r and d after it, the
linear relaxation of r_max/d_max, the running updates, and when the layer learns; the ensemble
options of EnsembleMLP (per-member statistics, dropout, LayerNorm)."""

from __future__ import annotations

import math

import pytest
import torch

from tdrl.modules import BatchRenorm, EnsembleMLP, batch_statistics

F_, B = 3, 5


def columns(x: torch.Tensor) -> list[list[float]]:
    return [[float(x[b, f]) for b in range(x.shape[0])] for f in range(x.shape[1])]


def stats(col: list[float]) -> tuple[float, float, float]:
    """mean, biased and unbiased variance of one feature."""
    n = len(col)
    mean = sum(col) / n
    ss = sum((v - mean) ** 2 for v in col)
    return mean, ss / n, ss / (n - 1)


def layer(**kwargs) -> BatchRenorm:
    torch.manual_seed(0)
    m = BatchRenorm(F_, **kwargs)
    with torch.no_grad():  # non-trivial affine and running statistics
        m.scale.copy_(torch.tensor([[1.5, 0.5, 2.0]]))
        m.bias.copy_(torch.tensor([[0.1, -0.2, 0.3]]))
        m.running_mean.copy_(torch.tensor([[0.5, -1.0, 2.0]]))
        m.running_var.copy_(torch.tensor([[0.25, 4.0, 0.01]]))
    return m


def batch(seed=1) -> torch.Tensor:
    return torch.randn(B, F_, generator=torch.Generator().manual_seed(seed)) * 2 + 0.5


def test_outside_batch_statistics_it_normalizes_with_the_running_ones_and_learns_nothing():
    m, x = layer(), batch()
    m.train()  # the module's training mode does not make it learn
    y = m(x).detach()
    eps = m.eps
    for f, col in enumerate(columns(x)):
        mu, var = float(m.running_mean[0, f]), float(m.running_var[0, f])
        for b, v in enumerate(col):
            want = (v - mu) / math.sqrt(var + eps) * float(m.scale.detach()[0, f]) + float(
                m.bias.detach()[0, f]
            )
            assert float(y[b, f]) == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert int(m.steps) == 0
    torch.testing.assert_close(m.running_mean, torch.tensor([[0.5, -1.0, 2.0]]))


@pytest.mark.parametrize("steps", [0, 3])
def test_during_the_warmup_it_is_batch_norm_and_the_running_statistics_move(steps):
    m, x = layer(warmup_steps=4, momentum=0.1), batch()
    m.steps.fill_(steps)
    old_mean, old_var = m.running_mean.clone(), m.running_var.clone()
    with batch_statistics(m):
        y = m(x).detach()
    for f, col in enumerate(columns(x)):
        mean, var, unbiased = stats(col)
        for b, v in enumerate(col):
            want = (v - mean) / math.sqrt(var + m.eps) * float(m.scale.detach()[0, f]) + float(
                m.bias.detach()[0, f]
            )
            assert float(y[b, f]) == pytest.approx(want, rel=1e-5, abs=1e-5)
        mu0, var0 = float(old_mean[0, f]), float(old_var[0, f])
        assert float(m.running_mean[0, f]) == pytest.approx(mu0 + 0.1 * (mean - mu0), rel=1e-5)
        assert float(m.running_var[0, f]) == pytest.approx(var0 + 0.1 * (unbiased - var0), rel=1e-5)
    assert int(m.steps) == steps + 1
    assert not m.learning  # only inside the block


def test_after_the_warmup_r_and_d_are_clipped_and_carry_no_gradient():
    m, x = layer(warmup_steps=2, r_max=1.5, d_max=0.5), batch().requires_grad_(True)
    m.steps.fill_(2)
    with torch.no_grad():  # feature 1's r inside the clip, the others' outside it
        m.running_var.copy_(torch.tensor([[0.25, 1.0, 0.01]]))
    mu_run, var_run = m.running_mean.clone(), m.running_var.clone()
    with batch_statistics(m):
        y = m(x)
    clipped, r_free = set(), set()
    for f, col in enumerate(columns(x.detach())):
        mean, var, _ = stats(col)
        sigma_b = math.sqrt(var + m.eps)
        sigma = math.sqrt(float(var_run[0, f]) + m.eps)
        r_raw, d_raw = sigma_b / sigma, (mean - float(mu_run[0, f])) / sigma
        r = min(max(r_raw, 1 / 1.5), 1.5)
        d = min(max(d_raw, -0.5), 0.5)
        clipped |= {f for raw, c in ((r_raw, r), (d_raw, d)) if raw != c}
        r_free |= {f} if r_raw == r else set()
        for b, v in enumerate(col):
            want = ((v - mean) / sigma_b * r + d) * float(m.scale.detach()[0, f]) + float(
                m.bias.detach()[0, f]
            )
            assert float(y.detach()[b, f]) == pytest.approx(want, rel=1e-5, abs=1e-5)
    assert clipped and r_free, "the batch should hit a clip, and leave some r free"
    # The gradient of sum(y * g) treats r and d as constants: each feature is batch norm's
    # gradient scaled by r (d drops out), g the upstream gradient.
    g = torch.randn(B, F_, generator=torch.Generator().manual_seed(3))
    (y * g).sum().backward()
    for f, col in enumerate(columns(x.detach())):
        mean, var, _ = stats(col)
        sigma_b = math.sqrt(var + m.eps)
        sigma = math.sqrt(float(var_run[0, f]) + m.eps)
        r = min(max(sigma_b / sigma, 1 / 1.5), 1.5)
        gs = [float(g[b, f]) * float(m.scale.detach()[0, f]) * r for b in range(B)]
        x_hat = [(v - mean) / sigma_b for v in col]
        g_mean = sum(gs) / B
        gx_mean = sum(a * h for a, h in zip(gs, x_hat, strict=True)) / B
        for b in range(B):
            want = (gs[b] - g_mean - x_hat[b] * gx_mean) / sigma_b
            assert float(x.grad[b, f]) == pytest.approx(want, rel=1e-4, abs=1e-5)


def test_the_clips_relax_linearly_after_the_warmup():
    m = BatchRenorm(2, warmup_steps=10, relax_steps=20, r_max=3.0, d_max=5.0)
    for steps, want in [(0, (1.0, 0.0)), (9, (1.0, 0.0)), (10, (1.0, 0.0)), (20, (2.0, 2.5)),
                        (30, (3.0, 5.0)), (100, (3.0, 5.0))]:  # fmt: skip
        m.steps.fill_(steps)
        assert m.clips() == pytest.approx(want)
    hard = BatchRenorm(2, warmup_steps=10)  # sb3-contrib's: at once
    hard.steps.fill_(10)
    assert hard.clips() == (3.0, 5.0)


def test_bad_settings_and_inputs_are_named():
    with pytest.raises(ValueError, match=r"momentum must be in \(0, 1\], got 0"):
        BatchRenorm(2, momentum=0.0)
    with pytest.raises(ValueError, match="r_max >= 1"):
        BatchRenorm(2, r_max=0.5)
    m = BatchRenorm(2)
    with pytest.raises(ValueError, match=r"input has 3 features \(shape \(4, 3\)\)"):
        m(torch.zeros(4, 3))
    with batch_statistics(m), pytest.raises(ValueError, match=r"at least 2 rows.*\(1, 2\)"):
        m(torch.zeros(1, 2))
    with batch_statistics(m), pytest.raises(ValueError, match=r"at least 2 rows.*\(2,\)"):
        m(torch.zeros(2))
    assert m(torch.zeros(2)).shape == (2,)  # one unbatched row keeps its shape
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got 1.0"):
        EnsembleMLP(3, 1, (4,), dropout=1.0)


def test_each_ensemble_member_keeps_its_own_statistics():
    torch.manual_seed(0)
    net = EnsembleMLP(F_, 1, (4,), num_members=2, batch_renorm={"momentum": 0.5})
    x = torch.randn(2, B, F_) * torch.tensor([1.0, 3.0]).view(2, 1, 1)  # per-member inputs
    with batch_statistics(net):
        net.hidden[0](net.renorms[0](x), False)
    for e in range(2):
        for f, col in enumerate(columns(x[e])):
            mean, _, unbiased = stats(col)
            assert float(net.renorms[0].running_mean[e, 0, f]) == pytest.approx(
                0.5 * mean, abs=1e-6
            )
            assert float(net.renorms[0].running_var[e, 0, f]) == pytest.approx(
                0.5 + 0.5 * unbiased, rel=1e-5
            )
    # A shared [B, F] input gives every member the same statistics, and the shapes stay.
    with batch_statistics(net):
        assert net(torch.randn(B, F_)).shape == (2, B, 1)
        assert net(torch.randn(4, B, F_)).shape == (2, 4, B, 1)


def test_dropout_acts_in_training_mode_only_and_layer_norm_is_per_member():
    torch.manual_seed(0)
    net = EnsembleMLP(F_, 2, (64,), num_members=2, dropout=0.5, layer_norm=True)
    x = torch.randn(B, F_)
    assert not torch.equal(net(x), net(x))  # fresh dropout masks
    net.eval()
    torch.testing.assert_close(net(x), net(x))
    norm = net.norms[0]
    with torch.no_grad():
        norm.weight.copy_(torch.rand_like(norm.weight) + 0.5)
        norm.bias.copy_(torch.randn_like(norm.bias))
    h = torch.randn(2, B, 64)
    out = norm(h).detach()
    for e in range(2):
        for b in range(B):
            row = [float(v) for v in h[e, b]]
            mean = sum(row) / 64
            var = sum((v - mean) ** 2 for v in row) / 64
            for j in (0, 17, 63):
                want = (
                    (row[j] - mean) / math.sqrt(var + 1e-5) * float(norm.weight.detach()[e, 0, j])
                )
                want += float(norm.bias.detach()[e, 0, j])
                assert float(out[e, b, j]) == pytest.approx(want, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("p", [0.01, 0.05])
def test_cpu_dropout_drops_each_element_independently_with_probability_p(p):
    from tdrl.modules.ensembles import dropout

    torch.manual_seed(0)
    n, draws = 4000, 500
    zeros = []
    for _ in range(draws):
        x = torch.ones(n, requires_grad=True)
        y = dropout(x, p)
        kept = y != 0
        torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / (1 - p)))
        y.sum().backward()  # the gradient is the mask
        torch.testing.assert_close(x.grad, y.detach())
        zeros.append(n - int(kept.sum()))
    mean = sum(zeros) / draws
    var = sum((z - mean) ** 2 for z in zeros) / (draws - 1)
    # Binomial(n, p): mean n p, variance n p (1 - p); 5 standard errors of each estimate
    assert abs(mean - n * p) < 5 * math.sqrt(n * p * (1 - p) / draws)
    assert abs(var / (n * p * (1 - p)) - 1) < 5 * math.sqrt(2 / (draws - 1))
    # every position is dropped alike: the first and the last tenth as often as the middle
    counts = torch.zeros(n)
    for _ in range(draws):
        counts += (dropout(torch.ones(n), p) == 0).float()
    tenths = counts.view(10, -1).sum(1) / (draws * n / 10)
    assert (tenths - p).abs().max() < 6 * math.sqrt(p / (draws * n / 10))
