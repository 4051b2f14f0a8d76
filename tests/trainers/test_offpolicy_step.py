"""optimizer_step's gradient clipping: the same numbers as torch.nn.utils.clip_grad_norm_."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from tdrl.trainers import clip_grad_norm_, optimizer_step


def grads_of(net: nn.Module, scale: float) -> None:
    g = torch.Generator().manual_seed(1)
    for p in net.parameters():
        p.grad = scale * torch.randn(p.shape, generator=g)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 100.0])
def test_clip_grad_norm_matches_torch(scale):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
    ours, theirs = net, copy.deepcopy(net)
    grads_of(ours, scale)
    grads_of(theirs, scale)
    norm = clip_grad_norm_(ours.parameters(), 10.0)
    expected = torch.nn.utils.clip_grad_norm_(theirs.parameters(), 10.0)
    assert torch.equal(norm, expected)
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)


def test_clip_grad_norm_mixed_dtypes_and_missing_grads():
    def params() -> list[torch.Tensor]:
        a = torch.zeros(3, requires_grad=True)
        b = torch.zeros(2, dtype=torch.float64, requires_grad=True)
        c = torch.zeros(2, requires_grad=True)  # no gradient: skipped
        a.grad, b.grad = torch.full((3,), 3.0), torch.full((2,), 4.0, dtype=torch.float64)
        return [a, b, c]

    ours, theirs = params(), params()
    norm = clip_grad_norm_(iter(ours), 1.0)  # a one-shot iterable, as a generator would be
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    torch.testing.assert_close(norm, expected)
    for p, q in zip(ours, theirs, strict=True):
        assert (p.grad is None and q.grad is None) or torch.equal(p.grad, q.grad)
    assert float(clip_grad_norm_([ours[2]], 1.0)) == 0.0


def test_optimizer_step_clips_like_torch():
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    ref = copy.deepcopy(net)
    x = 100 * torch.randn(8, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    norm = optimizer_step(net(x).square().mean(), opt, max_grad_norm=0.5)
    ref_opt.zero_grad()
    ref(x).square().mean().backward()
    expected = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
    ref_opt.step()
    assert norm is not None and torch.equal(norm, expected)
    for p, q in zip(net.parameters(), ref.parameters(), strict=True):
        assert torch.equal(p, q)
