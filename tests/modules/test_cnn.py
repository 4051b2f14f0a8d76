"""NatureCNN and MinAtarCNN: shapes, the uint8 scaling inside, gradients, errors that name the
shape and dtype, and the actors they serve as ``net``."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from tdrl.modules import (
    CategoricalActor,
    CategoricalQValueActor,
    ImpalaCNN,
    MinAtarCNN,
    NatureCNN,
    QValueActor,
)


def frames(*shape: int, high: int = 256, seed: int = 0) -> torch.Tensor:
    return torch.randint(
        0, high, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)
    )


def test_nature_cnn_layers_and_shapes():
    net = NatureCNN(4, 6)
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (32, (8, 8), (4, 4)),
        (64, (4, 4), (2, 2)),
        (64, (3, 3), (1, 1)),
    ]
    assert net.num_features == 64 * 7 * 7  # 84 -> 20 -> 9 -> 7
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(3136, 512), (512, 6)]
    assert net(frames(3, 4, 84, 84)).shape == (3, 6)
    assert net(frames(2, 5, 4, 84, 84)).shape == (2, 5, 6)  # any leading batch dims
    assert net(frames(4, 84, 84)).shape == (6,)  # none
    assert NatureCNN(4, None)(frames(3, 4, 84, 84)).shape == (3, 512)  # the hidden features


def test_minatar_cnn_layers_and_shapes():
    net = MinAtarCNN(7, 3)
    (conv,) = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    assert (conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride) == (
        7,
        16,
        (3, 3),
        (1, 1),
    )
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(16 * 8 * 8, 128), (128, 3)]
    assert net(frames(5, 7, 10, 10, high=2)).shape == (5, 3)


def test_impala_cnn_stacks_residual_blocks_and_shapes():
    net = ImpalaCNN(3, 15)  # Procgen: 64x64 RGB, 15 actions
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    # per stack: its first convolution, then two residual blocks of two convolutions each
    assert [(c.in_channels, c.out_channels) for c in convs] == [
        (3, 16),
        *[(16, 16)] * 4,
        (16, 32),
        *[(32, 32)] * 4,
        (32, 32),
        *[(32, 32)] * 4,
    ]
    assert all(c.kernel_size == (3, 3) and c.padding == (1, 1) for c in convs)
    assert [p.stride for p in net.modules() if isinstance(p, nn.MaxPool2d)] == [2, 2, 2]
    assert net.num_features == 32 * 8 * 8  # 64 -> 32 -> 16 -> 8
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(2048, 256), (256, 15)]
    assert net(frames(2, 5, 3, 64, 64)).shape == (2, 5, 15)
    assert ImpalaCNN(4, None, frame_size=84)(frames(3, 4, 84, 84)).shape == (3, 256)
    assert ImpalaCNN(4, 3, frame_size=10, scale=1.0)(frames(2, 4, 10, 10, high=2)).shape == (2, 3)
    block = net.features[3]  # the first stack's first residual block
    with torch.no_grad():  # its last convolution silenced: the block is the identity
        block.conv1.weight.zero_()
        block.conv1.bias.zero_()
    x = torch.randn(2, 16, 32, 32)
    assert torch.equal(block(x), x)


@pytest.mark.parametrize(
    ("net", "shape", "scale"),
    [(NatureCNN(4, 6), (3, 4, 84, 84), 1 / 255), (MinAtarCNN(4, 3), (3, 4, 10, 10), 1.0)],
)
def test_uint8_frames_are_scaled_inside(net, shape, scale):
    x = frames(*shape)
    # The same layers on floats scaled by hand.
    layers = list(net.features)[1:]  # after the input check
    by_hand = net.head(nn.Sequential(*layers)(x.float() * scale))
    torch.testing.assert_close(net(x), by_hand)
    assert net.features[0].scale == pytest.approx(scale)
    # Scaling matters: a network without it gives other outputs on the same frames.
    unscaled = NatureCNN(4, 6, scale=1.0) if isinstance(net, NatureCNN) else None
    if unscaled is not None:
        unscaled.load_state_dict(net.state_dict())
        assert not torch.allclose(unscaled(x), net(x))


@pytest.mark.parametrize(
    ("net", "shape"),
    [
        (NatureCNN(4, 6), (8, 4, 84, 84)),
        (NatureCNN(4, 6, dueling=True), (8, 4, 84, 84)),
        (MinAtarCNN(4, 3), (8, 4, 10, 10)),
        (ImpalaCNN(4, 3, frame_size=10, scale=1.0), (8, 4, 10, 10)),
    ],
)
def test_gradients_reach_every_parameter(net, shape):
    net(frames(*shape, high=2 if shape[-1] == 10 else 256)).square().mean().backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_dueling_head_subtracts_the_mean_advantage():
    net = NatureCNN(4, 6, dueling=True)
    x = frames(2, 4, 84, 84)
    features = net.features(x)
    value = net.head.value_head(features)
    advantage = net.head.advantage_head(features)
    torch.testing.assert_close(net(x), value + advantage - advantage.mean(-1, keepdim=True))


def test_float_input_is_an_error_naming_shape_and_dtype():
    net = NatureCNN(4, 6)
    x = frames(2, 4, 84, 84).float() / 255
    with pytest.raises(
        TypeError,
        match=r"NatureCNN: observation must be uint8.*torch\.float32 of shape \(2, 4, 84, 84\)",
    ):
        net(x)


def test_channels_last_is_an_error_that_says_so():
    net = MinAtarCNN(4, 3)
    with pytest.raises(ValueError, match=r"torch\.uint8 of shape \(2, 10, 10, 4\).*channels last"):
        net(frames(2, 10, 10, 4, high=2))
    with pytest.raises(ValueError, match=r"\[\*B, 4, 10, 10\].*shape \(2, 6, 10, 10\)$"):
        net(frames(2, 6, 10, 10, high=2))  # wrong channel count, not HWC
    with pytest.raises(ValueError, match="too small"):
        NatureCNN(4, 6, frame_size=10)


def test_cnns_are_the_net_of_the_discrete_actors():
    obs = TensorDict({"observation": frames(5, 4, 84, 84)}, batch_size=[5])
    out = QValueActor(NatureCNN(4, 6))(obs.clone())
    assert out["action_value"].shape == (5, 6) and out["action"].dtype == torch.int64
    assert torch.equal(out["action"], out["action_value"].argmax(-1))
    c51 = CategoricalQValueActor(NatureCNN(4, 6 * 11), 6, num_atoms=11)
    assert c51(obs.clone())["action_value"].shape == (5, 6)
    small = TensorDict({"observation": frames(5, 4, 10, 10, high=2)}, batch_size=[5])
    out = CategoricalActor(MinAtarCNN(4, 3))(small)
    assert out["logits"].shape == (5, 3) and out["action"].shape == (5,)
    # A float observation reaches the CNN's check through the actor unchanged.
    with pytest.raises(TypeError, match="uint8"):
        QValueActor(NatureCNN(4, 6))(obs.apply(lambda x: x.float()))


def test_actor_critic_on_frames_shares_one_orthogonally_initialised_cnn():
    """MinAtar frames: a categorical actor and a value head on one MinAtarCNN (CleanRL's
    ppo_atari and SB3's CnnPolicy share it), gains sqrt(2) inside, 0.01 and 1 at the heads."""
    from tdrl.envs import make_vec_env
    from tdrl.modules import actor_critic

    pytest.importorskip("minatar")  # the pixels extra
    with make_vec_env("MinAtar/Breakout-v1", 2, seed=0) as env:
        actor, critic, obs_norm = actor_critic(env.observation_spec, env.action_spec)
        obs = env.reset()
    assert obs_norm is None and isinstance(actor, CategoricalActor)
    encoder = actor.net[0]
    assert isinstance(encoder, MinAtarCNN) and critic.net[0] is encoder
    conv = encoder.features[1]
    w = conv.weight.detach().reshape(conv.out_channels, -1)
    # orthogonal rows of norm sqrt(2) (16 rows of 36 inputs)
    torch.testing.assert_close(w @ w.T, 2.0 * torch.eye(16), atol=1e-4, rtol=0)
    for head, gain in ((actor.net[1], 0.01), (critic.net[1], 1.0)):
        w = head.weight.detach()
        torch.testing.assert_close(w @ w.T, gain**2 * torch.eye(w.shape[0]), atol=1e-5, rtol=0)
    out = critic(actor(obs.clone()))
    assert out["logits"].shape == (2, 3) and out["state_value"].shape == (2, 1)
    loss = out["logits"].sum() + out["state_value"].sum()
    loss.backward()
    assert conv.weight.grad is not None  # both heads train the shared CNN


@pytest.mark.parametrize("option", [{"recurrent": "lstm"}, {"sde_sample_freq": 4}])
def test_actor_critic_refuses_memory_on_frames(option):
    from tdrl.envs import make_vec_env
    from tdrl.modules import actor_critic

    pytest.importorskip("minatar")  # the pixels extra
    with make_vec_env("MinAtar/Breakout-v1", 2, seed=0) as env:
        with pytest.raises(ValueError, match="on frames is not supported"):
            actor_critic(env.observation_spec, env.action_spec, **option)


def test_actor_critic_on_frames_can_give_each_head_its_own_cnn():
    """shared_encoder=False (TRPO, PPG): the value's updates cannot move the policy."""
    from tdrl.envs import make_vec_env
    from tdrl.modules import actor_critic

    pytest.importorskip("minatar")  # the pixels extra
    with make_vec_env("MinAtar/Breakout-v1", 2, seed=0) as env:
        actor, critic, _ = actor_critic(env.observation_spec, env.action_spec, shared_encoder=False)
        obs = env.reset()
    assert isinstance(actor.net[0], MinAtarCNN) and isinstance(critic.net[0], MinAtarCNN)
    assert not {id(p) for p in actor.parameters()} & {id(p) for p in critic.parameters()}
    critic(obs.clone())["state_value"].sum().backward()
    assert all(p.grad is None for p in actor.parameters())


def _shared_trunk_loss(seed: int = 0):
    """A PPO loss over an actor and a critic that share one MinAtarCNN, and a batch for it."""
    from tdrl.modules import ValueCritic
    from tdrl.objectives import ClipPPOLoss

    torch.manual_seed(seed)
    trunk = MinAtarCNN(4, None)  # the 128 hidden features
    actor = CategoricalActor(nn.Sequential(trunk, nn.Linear(128, 3)))
    critic = ValueCritic(nn.Sequential(trunk, nn.Linear(128, 1)))
    batch = TensorDict(
        {"observation": frames(16, 4, 10, 10, high=2), "action": torch.randint(0, 3, (16,)),
         "action_log_prob": -torch.rand(16), "advantage": torch.randn(16, 1),
         "value_target": torch.randn(16, 1)},
        batch_size=[16],
    )  # fmt: skip
    return ClipPPOLoss(actor, critic, entropy_coeff=0.01), trunk, batch


def test_an_on_policy_loss_runs_a_shared_cnn_once_with_the_gradients_of_two_passes():
    from tdrl.objectives import total_loss

    loss, trunk, batch = _shared_trunk_loss()
    calls = []
    trunk.features[1].register_forward_hook(lambda *args: calls.append(1))
    grads = []
    for run in (loss, loss.forward):  # __call__ opens one_pass_per_input; forward alone does not
        loss.zero_grad()
        calls.clear()
        total_loss(run(batch)).backward()
        grads.append([p.grad.clone() for p in loss.parameters()])
        assert len(calls) == (1 if run is loss else 2)
    for one, two in zip(*grads, strict=True):
        torch.testing.assert_close(one, two)


def test_one_pass_per_input_recomputes_for_another_input_an_in_place_change_or_grad_mode():
    from tdrl.modules import one_pass_per_input

    net, x = MinAtarCNN(4, 3), frames(2, 4, 10, 10, high=2)
    calls = []
    net.features[1].register_forward_hook(lambda *args: calls.append(1))
    with one_pass_per_input():
        first = net(x)
        assert net(x) is first and len(calls) == 1  # the same tensor: its first output
        net(x.clone())  # another tensor with the same values
        with torch.no_grad():
            assert net(x).grad_fn is None  # another grad mode
        x[0, 0, 0, 0] = 1 - x[0, 0, 0, 0]  # changed in place
        assert not torch.equal(net(x), first) and len(calls) == 4
    net(x), net(x)
    assert len(calls) == 6  # closed: every call computes
