"""NoisyLinear: output changes only through its noise, none in greedy (deterministic) mode."""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import InteractionType, set_interaction_type
from torch import nn

from tdrl.modules import NoisyLinear, reset_noise


def test_noise_is_held_until_reset_and_off_in_deterministic_mode():
    torch.manual_seed(0)
    layer = NoisyLinear(4, 3)
    x = torch.randn(5, 4)
    first, again = layer(x), layer(x)
    torch.testing.assert_close(first, again)  # the same noise until the next draw
    layer.reset_noise()
    assert not torch.allclose(layer(x), first)
    mean = nn.functional.linear(x, layer.weight_mu, layer.bias_mu)
    with set_interaction_type(InteractionType.DETERMINISTIC):
        torch.testing.assert_close(layer(x), mean)
        layer.reset_noise()
        torch.testing.assert_close(layer(x), mean)  # greedy evaluation: no noise at all
    # the noise is the only difference: zero sigmas give the mean output in any mode
    with torch.no_grad():
        layer.weight_sigma.zero_()
        layer.bias_sigma.zero_()
    torch.testing.assert_close(layer(x), mean)


def test_gradients_reach_mean_and_scale_and_reset_counts_layers():
    torch.manual_seed(0)
    net = nn.Sequential(NoisyLinear(4, 8), nn.ReLU(), NoisyLinear(8, 2))
    net(torch.randn(6, 4)).sum().backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert reset_noise(net) == 2 and reset_noise(nn.Linear(2, 2)) == 0
    with pytest.raises(ValueError, match="sigma_init must be >= 0"):
        NoisyLinear(2, 2, sigma_init=-0.1)


def test_to_noisy_swaps_every_linear_and_the_policy_draws_noise_each_step():
    from tensordict import TensorDict

    from tdrl.modules import QValueActor, ResampleNoise, q_mlp, to_noisy

    torch.manual_seed(0)
    body = to_noisy(q_mlp(3, 2, (8, 8)))
    assert not any(type(m) is nn.Linear for m in body.modules())
    assert sum(isinstance(m, NoisyLinear) for m in body.modules()) == 3
    qnet = QValueActor(body)
    step = ResampleNoise(qnet)
    td = TensorDict({"observation": torch.ones(1, 3)}, batch_size=[1])
    values = []
    for _ in range(3):
        step(td)
        values.append(qnet(td.clone())["action_value"])
    assert not torch.allclose(values[0], values[1]) and not torch.allclose(values[1], values[2])


def test_to_noisy_heads_only_swaps_the_output_layer_of_each_head():
    from tdrl.modules import q_mlp, to_noisy

    def noisy_names(net: nn.Module) -> list[str]:
        return [n for n, m in net.named_modules() if isinstance(m, NoisyLinear)]

    # a dueling net: the last layer of the value stream and of the advantage stream, nothing
    # in the shared trunk or in the streams' hidden layers (Tianshou's noisy dueling heads)
    dueling = to_noisy(q_mlp(4, 2, (8, 8, 8), dueling=True, atoms=5), 0.1, heads_only=True)
    names = noisy_names(dueling)
    assert len(names) == 2
    assert names[0].startswith("value_head.") and names[1].startswith("advantage_head.")
    for name in names:
        layer = dueling.get_submodule(name)
        assert float(layer.weight_sigma.max()) == pytest.approx(0.1 / 8**0.5)  # sigma_0/sqrt(in)
    plain = sum(type(m) is nn.Linear for m in dueling.modules())
    assert plain == 4  # trunk: 2 layers; one hidden layer in each stream
    # a plain MLP: its output layer only
    mlp_net = to_noisy(q_mlp(4, 2, (8, 8)), heads_only=True)
    assert noisy_names(mlp_net) == [[n for n, m in mlp_net.named_modules()][-1]]
    for heads_only in (True, False):
        with pytest.raises(ValueError, match="cannot replace the module it is given"):
            to_noisy(nn.Linear(2, 2), heads_only=heads_only)
    # a CNN holds its dueling network as .head: both of its heads (recipes/dqn.py's pixel
    # Rainbow with --noisy-layers heads)
    from tdrl.modules import MinAtarCNN

    cnn = to_noisy(MinAtarCNN(4, 3 * 5, dueling=True, atoms=5), heads_only=True)
    names = noisy_names(cnn)
    assert len(names) == 2
    assert names[0].startswith("head.value_head.") and names[1].startswith("head.advantage_head.")
