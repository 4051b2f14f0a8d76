"""The gradient step (tdrl.trainers.optim) and its fast twins (tdrl._fast.optim): bitwise the
numbers of torch's optimizer.step(), zero_grad() and clip_grad_norm_, with the fast paths on and
off (the fast_mode fixture)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from tdrl._fast.optim import adam_step
from tdrl.trainers.optim import clip_grad_norm_, linear_decay, optimizer_step


def grads_of(net: nn.Module, scale: float) -> None:
    g = torch.Generator().manual_seed(1)
    for p in net.parameters():
        p.grad = scale * torch.randn(p.shape, generator=g).to(p.device)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 100.0])
def test_clip_grad_norm_matches_torch(scale, fast_mode, device):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
    ours, theirs = net, copy.deepcopy(net)
    grads_of(ours, scale)
    grads_of(theirs, scale)
    norm = clip_grad_norm_(ours.parameters(), 10.0)
    expected = torch.nn.utils.clip_grad_norm_(theirs.parameters(), 10.0)
    assert torch.equal(norm, expected)
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)


def test_clip_grad_norm_mixed_dtypes_and_missing_grads(fast_mode):
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


def test_optimizer_step_clips_like_torch(fast_mode):
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


def _nets_and_adams(device="cpu", **adam_kwargs):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2)).to(device)
    ref = copy.deepcopy(net)

    def adam(module: nn.Module) -> torch.optim.Adam:
        groups = [
            {"params": module[0].parameters(), "lr": 1e-2},
            {"params": module[2].parameters(), "lr": 3e-3, "weight_decay": 0.1},
        ]
        return torch.optim.Adam(groups, fused=True, **adam_kwargs)

    return net, adam(net), ref, adam(ref)


@pytest.mark.parametrize("maximize", [False, True])
def testadam_step_is_bitwise_torch_adam(maximize, device):
    # optimizer_step's lean path for a plain fused Adam: the same parameters and state as
    # optimizer.step(), step after step (the first step, which creates the state, is torch's).
    net, opt, ref, ref_opt = _nets_and_adams(device, maximize=maximize)
    g = torch.Generator().manual_seed(2)
    for i in range(5):
        x = torch.randn(8, 4, generator=g).to(device)
        if i == 0:  # no state yet: torch's step creates it
            net(x).sum().backward()
            assert not adam_step(opt) and not opt.state
        optimizer_step(net(x).square().mean(), opt)
        ref_opt.zero_grad()
        ref(x).square().mean().backward()
        ref_opt.step()
        for p, q in zip(net.parameters(), ref.parameters(), strict=True):
            assert torch.equal(p, q)
            for key in ("step", "exp_avg", "exp_avg_sq"):
                assert torch.equal(opt.state[p][key], ref_opt.state[q][key])
    assert adam_step(opt)


@pytest.mark.parametrize(
    "setup",
    ["amsgrad", "not_fused", "patched_step", "pre_hook", "tensor_lr", "other_optimizer"],
)
def testadam_step_leaves_other_cases_to_torch(setup):
    kwargs = {"amsgrad": setup == "amsgrad"}
    net, opt, *_ = _nets_and_adams(**kwargs)
    if setup == "not_fused":
        opt = torch.optim.Adam(net.parameters())
    if setup == "other_optimizer":
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
    optimizer_step(net(torch.ones(2, 4)).sum(), opt)  # creates the state
    if setup == "patched_step":  # a step wrapper other than an LR scheduler's
        opt.step = lambda *args, **kwargs: None
    if setup == "pre_hook":
        opt.register_step_pre_hook(lambda *args: None)
    if setup == "tensor_lr":
        opt.param_groups[0]["lr"] = torch.tensor(0.01)
    net(torch.ones(2, 4)).sum().backward()
    before = [p.clone() for p in net.parameters()]
    assert not adam_step(opt)
    assert all(torch.equal(p, b) for p, b in zip(net.parameters(), before, strict=True))


@pytest.mark.parametrize(
    "make_scheduler",
    [lambda o: linear_decay(o, 4), lambda o: torch.optim.lr_scheduler.StepLR(o, 1, 0.5)],
)
def test_fused_adam_with_an_lr_scheduler_is_bitwise_torch(make_scheduler, fast_mode):
    # An LR scheduler wraps optimizer.step; the fast path honours the wrapper (it records the
    # call, so the scheduler does not warn) and reads the scheduled learning rate.
    net, opt, ref, ref_opt = _nets_and_adams()
    scheduler, ref_scheduler = make_scheduler(opt), make_scheduler(ref_opt)
    g = torch.Generator().manual_seed(3)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "lr_scheduler.step() before optimizer.step()" would fail
        for _ in range(4):
            x = torch.randn(8, 4, generator=g)
            optimizer_step(net(x).square().mean(), opt)
            scheduler.step()
            ref_opt.zero_grad()
            ref(x).square().mean().backward()
            ref_opt.step()
            ref_scheduler.step()
    for p, q in zip(net.parameters(), ref.parameters(), strict=True):
        assert torch.equal(p, q)
    net(torch.ones(2, 4)).sum().backward()
    assert adam_step(opt)  # the fast path takes the scheduled optimizer


def test_clip_groups_clip_each_group_on_its_own():
    """A small actor gradient keeps its size beside a large critic gradient with clip_groups;
    one global norm shrinks it with the critic's."""

    def step(groups: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        actor, critic = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
        optimizer = torch.optim.SGD([actor, critic], lr=1.0)
        loss = actor @ torch.tensor([0.3, 0.4]) + critic @ torch.tensor([30.0, 40.0])
        clip = {"clip_groups": ([actor], [critic])} if groups else {}
        norm = optimizer_step(loss, optimizer, max_grad_norm=1.0, **clip)
        return actor.detach(), critic.detach(), norm

    actor, critic, norms = step(groups=True)
    torch.testing.assert_close(torch.linalg.vector_norm(actor), torch.tensor(0.5))  # under 1
    torch.testing.assert_close(
        torch.linalg.vector_norm(critic), torch.tensor(1.0), rtol=1e-4, atol=0
    )
    torch.testing.assert_close(norms, torch.tensor([0.5, 50.0]))
    actor, critic, _ = step(groups=False)
    assert torch.linalg.vector_norm(actor) < 0.011  # 0.5 scaled by 1 / 50.0025
    with pytest.raises(ValueError, match="clip_groups takes max_grad_norm and no parameters"):
        optimizer_step(
            torch.zeros((), requires_grad=True),
            torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0),
            clip_groups=([],),
        )
