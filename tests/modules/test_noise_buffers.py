"""The noise-buffer convention (tdrl.modules.noise): the modules that hold exploration noise name
those buffers, and the target copies skip them while copying every other buffer."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tdrl.modules import GSDEActor, NoisyLinear, OrnsteinUhlenbeckNoise
from tdrl.modules.noise import NOISE_BUFFERS, noise_buffers
from tdrl.objectives import hard_update_, make_target, soft_update_


def gsde() -> GSDEActor:
    return GSDEActor(nn.Sequential(nn.Linear(3, 4), nn.Tanh()), 4, 2)


@pytest.mark.parametrize(
    ("make", "names"),
    [
        (lambda: NoisyLinear(3, 2), ("eps_in", "eps_out")),
        (lambda: OrnsteinUhlenbeckNoise(2), ("state",)),
        (gsde, ("noise", "calls")),
    ],
)
def test_noise_holders_name_buffers_they_register(make, names):
    module = make()
    assert NOISE_BUFFERS == "noise_buffers"
    assert noise_buffers(module) == names
    local = dict(module.named_buffers(recurse=False))
    assert all(name in local for name in names)


def test_a_module_without_the_attribute_lists_none_and_the_lookup_is_not_recursive():
    assert noise_buffers(nn.Linear(2, 2)) == ()
    assert noise_buffers(nn.Sequential(NoisyLinear(3, 2))) == ()  # each submodule speaks for itself


@pytest.mark.parametrize("update", ["hard", "soft"])
def test_target_updates_copy_other_buffers_but_not_noise(update):
    torch.manual_seed(0)
    online = nn.Sequential(NoisyLinear(3, 4), nn.BatchNorm1d(4))
    target = make_target(online)
    online[0].reset_noise()
    target[0].reset_noise()
    online[1].running_mean.fill_(3.0)
    own = {name: getattr(target[0], name).clone() for name in noise_buffers(target[0])}
    if update == "hard":
        hard_update_(target, online)
    else:
        soft_update_(target, online, tau=1.0)
    torch.testing.assert_close(target[1].running_mean, online[1].running_mean, rtol=0, atol=0)
    for name, value in own.items():
        torch.testing.assert_close(getattr(target[0], name), value, rtol=0, atol=0)
        assert not torch.equal(getattr(target[0], name), getattr(online[0], name))
