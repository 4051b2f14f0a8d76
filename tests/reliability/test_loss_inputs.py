"""Losses, estimators, networks and envs refuse input they would turn into a silent NaN, a raw
index error or a hang, and name what is at fault: the key, the argument, the value, the bound."""

from __future__ import annotations

import math
import re

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictSequential
from torch import nn

from tdrl import trainers
from tdrl.envs import make_vec_env
from tdrl.envs.pixels import FrameStack, make_minatar
from tdrl.estimators import GAE, TDLambdaEstimator
from tdrl.modules import (
    BCQVAE,
    BCQPerturbation,
    CategoricalQValueActor,
    DeterministicActor,
    EnsembleCritic,
    EnsembleMLP,
    FQFQValueActor,
    GaussianActor,
    IQNQValueActor,
    LSTMModule,
    MinAtarCNN,
    NatureCNN,
    QuantileQValueActor,
    QValueActor,
    StateActionCritic,
    TanhGaussianActor,
    ValueCritic,
    mlp,
)
from tdrl.objectives import (
    BCQLoss,
    C51Loss,
    ClipPPOLoss,
    CQLLoss,
    CRRLoss,
    DQNLoss,
    DRQNLoss,
    FQFLoss,
    GAILLoss,
    IQLLoss,
    IQNLoss,
    QRDQNLoss,
    TD3BCLoss,
)
from tdrl.ops import InputError
from tdrl.ops.distributional import quantile_huber_loss
from tests import rollouts

OBS, ACT, N, B = 3, 2, 3, 6  # observation width, action width, discrete actions, batch


def transitions(discrete: bool, act: int = ACT) -> TensorDict:
    return rollouts.transitions(B, OBS, num_actions=N if discrete else None, action_dim=act)


def critics(act: int = ACT) -> EnsembleCritic:
    return EnsembleCritic(EnsembleMLP(OBS + act, 1, (8,), num_members=2))


def quantile_net(cls: type = IQNQValueActor, **kwargs) -> IQNQValueActor:
    return cls(nn.Linear(OBS, 4), nn.Linear(4, N), N, 4, num_cosines=4, **kwargs)


def offline(name: str, act: int = ACT):
    """One of the offline losses and its batch, actions in the box [-1, 1]."""
    actor = TanhGaussianActor(mlp(OBS, 2 * act, (8,)), act)
    if name == "CQL":
        loss = CQLLoss(actor, critics(act), num_random=2)
    elif name == "IQL":
        loss = IQLLoss(actor, critics(act), ValueCritic(mlp(OBS, 1, (8,))))
    elif name == "CRR":
        loss = CRRLoss(actor, critics(act))
    elif name == "BCQ":
        vae = BCQVAE(mlp(OBS + act, 4, (8,)), mlp(OBS + 2, act, (8,)), 2, act)
        loss = BCQLoss(BCQPerturbation(mlp(OBS + act, act, (8,)), act), critics(act), vae,
                       num_samples=2)  # fmt: skip
    else:
        loss = TD3BCLoss(DeterministicActor(mlp(OBS, act, (8,)), act), critics(act))
    return loss, transitions(False, act)


def distributional(name: str):
    if name == "DQN":
        return DQNLoss(QValueActor(mlp(OBS, N, (8,)))), transitions(True)
    if name == "C51":
        net = CategoricalQValueActor(nn.Linear(OBS, N * 5), N, v_min=-2.0, v_max=2.0, num_atoms=5)
        return C51Loss(net), transitions(True)
    if name == "QRDQN":
        net = QuantileQValueActor(nn.Linear(OBS, N * 4), N, num_quantiles=4)
        return QRDQNLoss(net), transitions(True)
    if name == "IQN":
        return IQNLoss(quantile_net()), transitions(True)
    return FQFLoss(quantile_net(FQFQValueActor, num_fractions=4)), transitions(True)


def gail():
    g = torch.Generator().manual_seed(0)
    batch = TensorDict(
        {
            "observation": torch.randn(5, OBS, generator=g),
            "action": torch.randn(5, ACT, generator=g),
            "collector_observation": torch.randn(4, OBS, generator=g),
            "collector_action": torch.randn(4, ACT, generator=g),
        },
        [],
    )
    return GAILLoss(StateActionCritic(mlp(OBS + ACT, 1, (8,)), out_key="d_logits")), batch


def ppo():
    actor, critic = GaussianActor(mlp(OBS, ACT, (8,)), ACT), ValueCritic(mlp(OBS, 1, (8,)))
    batch = transitions(False)
    batch["action_log_prob"] = torch.zeros(B)
    batch["advantage"] = torch.randn(B, 1)
    batch["value_target"] = torch.randn(B, 1)
    return ClipPPOLoss(actor, critic), batch


def drqn():
    lstm = LSTMModule(OBS, 4, in_key="observation", out_key="embed")
    net = TensorDictSequential(lstm, QValueActor(mlp(4, N, (8,)), in_key="embed"))
    L, g = 4, torch.Generator().manual_seed(0)
    flag = torch.zeros(2, L, 1, dtype=torch.bool)
    batch = TensorDict(
        {
            "observation": torch.randn(2, L, OBS, generator=g),
            "is_init": flag.clone(),
            "action": torch.randint(N, (2, L), generator=g),
            "recurrent_state_h": torch.zeros(2, L, 1, 4),
            "recurrent_state_c": torch.zeros(2, L, 1, 4),
            "next": {"observation": torch.randn(2, L, OBS, generator=g),
                     "reward": torch.randn(2, L, 1, generator=g),
                     "terminated": flag.clone(), "done": flag.clone(), "truncated": flag.clone()},
        },
        [2, L],
    )  # fmt: skip
    return DRQNLoss(net), batch


def build(name: str):
    if name in ("DQN", "C51", "QRDQN", "IQN", "FQF"):
        return distributional(name)
    if name in ("CQL", "IQL", "CRR", "BCQ"):
        return offline(name)
    return {"GAIL": gail, "PPO": ppo, "DRQN": drqn}[name]()


OBSERVATIONS = ["observation", ("next", "observation")]
REWARD = ("next", "reward")
READS = {  # the float entries each loss reads
    **{name: [*OBSERVATIONS, REWARD] for name in ("DQN", "C51", "QRDQN", "IQN", "FQF")},
    **{name: [*OBSERVATIONS, "action", REWARD] for name in ("CQL", "IQL", "CRR", "BCQ")},
    "GAIL": ["observation", "action", "collector_observation", "collector_action"],
    "PPO": ["observation", "action", "action_log_prob", "advantage", "value_target"],
    "DRQN": [*OBSERVATIONS, REWARD, "recurrent_state_h", "recurrent_state_c"],
}
CASES = [(name, key) for name, keys in READS.items() for key in keys]


@pytest.mark.parametrize(("name", "key"), CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_a_nan_or_inf_in_what_a_loss_reads_is_refused_naming_the_key(name, key):
    loss, batch = build(name)
    for bad in (math.nan, -math.inf):
        poisoned = batch.clone()
        poisoned.get(key).view(-1)[1] = bad
        # C51 with a NaN reward raised "index -9223372036854775808 is out of bounds" here
        named = rf"{type(loss).__name__}: {re.escape(repr(key))} holds 1 NaN .*: {bad}"
        with pytest.raises(ValueError, match=named):
            loss(poisoned)
    loss.validate_inputs = False  # the switch: no check (a NaN loss, or torch's own error)
    try:
        loss(poisoned)
    except (RuntimeError, ValueError) as error:
        assert "validate_inputs" not in str(error)


@pytest.mark.parametrize("name", ["C51", "QRDQN", "IQN", "FQF"])
@pytest.mark.parametrize("index", [7, -1])
def test_distributional_losses_name_an_action_index_out_of_range(name, index):
    loss, batch = build(name)
    batch["action"][2] = index
    with pytest.raises(ValueError, match=rf"'action' holds indices outside \[0, 3\).*3 actions\): "
                       rf"{index} at index \(2,\)"):  # fmt: skip
        loss(batch)


@pytest.mark.parametrize("name", ["IQN", "FQF"])
def test_iqn_and_fqf_name_the_observation_width_their_network_takes(name):
    loss, batch = build(name)
    batch["observation"] = torch.randn(B, 5)
    with pytest.raises(ValueError, match=r"'observation' of shape \(6, 5\) has 5 features, the "
                       r"network takes 3"):  # fmt: skip
        loss(batch)


@pytest.mark.parametrize("name", ["CQL", "IQL", "CRR", "BCQ", "TD3BC"])
def test_offline_losses_refuse_a_flat_action_naming_the_layout(name):
    loss, batch = offline(name, act=1)
    batch["action"] = batch["action"][:, 0]
    with pytest.raises(ValueError, match=r"'action' has shape \(6,\); .*\[\*B, 1\]"):
        loss(batch)


@pytest.mark.parametrize("cls", [QRDQNLoss, IQNLoss, FQFLoss])
@pytest.mark.parametrize("kappa", [math.nan, math.inf])
def test_a_kappa_that_is_not_finite_is_refused_at_construction(cls, kappa):
    net = quantile_net() if cls is not QRDQNLoss else build("QRDQN")[0].value_network
    with pytest.raises(ValueError, match=rf"kappa must be >= 0 and finite, got {kappa}"):
        cls(net, kappa=kappa)
    with pytest.raises(InputError, match=rf"kappa: .*got {kappa}"):
        quantile_huber_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([0.25, 0.75]),
                            kappa=kappa)  # fmt: skip


@pytest.mark.parametrize("side", ["expert", "policy"])
def test_gail_refuses_a_side_without_pairs(side):
    loss, batch = gail()
    prefix = "" if side == "expert" else "collector_"
    obs_key, action_key = f"{prefix}observation", f"{prefix}action"
    batch[obs_key], batch[action_key] = batch[obs_key][:0], batch[action_key][:0]
    with pytest.raises(ValueError, match=rf"no {side} pairs \('{action_key}' has shape \(0, 2\)\)"):
        loss(batch)


@pytest.mark.parametrize("name", ["CQL", "IQL", "CRR", "BCQ", "TD3BC"])
@pytest.mark.parametrize("value", [3.0, -1.5])
def test_offline_losses_refuse_data_actions_outside_the_box(name, value):
    loss, batch = offline(name)
    batch["action"][4, 1] = value
    with pytest.raises(ValueError, match=rf"'action' holds {value} at index \(4, 1\), outside "
                       r"the action box \[-1.0, 1.0\]"):  # fmt: skip
        loss(batch)
    batch["action"][4, 1] = 1.0  # the bounds themselves are actions
    loss(batch)


@pytest.mark.parametrize("cls", [GAE, TDLambdaEstimator])
def test_estimators_take_a_one_element_lambda_tensor_and_refuse_a_longer_one(cls):
    g = torch.Generator().manual_seed(0)
    flag = torch.zeros(2, 5, 1, dtype=torch.bool)
    batch = TensorDict({
        "state_value": torch.randn(2, 5, 1, generator=g),
        "next": {"state_value": torch.randn(2, 5, 1, generator=g),
                 "reward": torch.randn(2, 5, 1, generator=g),
                 "terminated": flag, "done": flag.clone(), "truncated": flag.clone()},
    }, [2, 5])  # fmt: skip
    # differentiable: the torch scan (no kernel to compile)
    as_tensor = cls(gamma=0.9, lmbda=torch.tensor(0.8), differentiable=True)(batch.clone())
    as_float = cls(gamma=0.9, lmbda=0.8, differentiable=True)(batch.clone())
    torch.testing.assert_close(as_tensor["value_target"], as_float["value_target"])
    with pytest.raises(ValueError, match=r"lmbda must be a number .* shape \(2,\)"):
        cls(gamma=0.9, lmbda=torch.tensor([0.8, 0.9]))


def test_a_value_network_of_the_wrong_width_is_named_with_both_widths():
    flag = torch.zeros(2, 5, 1, dtype=torch.bool)
    batch = TensorDict({
        "observation": torch.randn(2, 5, OBS),
        "next": {"observation": torch.randn(2, 5, OBS), "reward": torch.randn(2, 5, 1),
                 "terminated": flag, "done": flag.clone(), "truncated": flag.clone()},
    }, [2, 5])  # fmt: skip
    estimator = GAE(gamma=0.9, lmbda=0.9, value_network=ValueCritic(mlp(5, 1, (8,))))
    with pytest.raises(ValueError, match=r"'observation' of shape .* has 3 features, the network "
                       r"takes 5"):  # fmt: skip
        estimator(batch)
    critic = critics()
    wide = transitions(False, act=4)
    with pytest.raises(ValueError, match=r"'action': \(6, 4\).*input has 7 features.*takes 5"):
        critic(wide)


def test_a_clipping_env_refuses_a_nan_action_naming_it():
    with make_vec_env("Pendulum-v1", 2, seed=0) as env:
        env.reset()
        action = torch.tensor([[0.5], [math.nan]])
        with pytest.raises(ValueError, match=r"action of env 1 at dimension \(0,\) is NaN"):
            env.step(TensorDict({"action": action}, [2]))


@pytest.mark.parametrize("frame_stack", [0, -3, 10**6])
def test_pixel_frame_stacks_are_bounded(frame_stack):
    # 0 and -3 gave no stack at all, 10**6 built stacks for minutes
    bound = r"must be >= 1 and <= \d+ \(an int: frames per observation\), got "
    with pytest.raises(ValueError, match=rf"frame_stack {bound}{frame_stack}"):
        make_minatar("breakout", frame_stack=frame_stack)
    frames = gym.make("CartPole-v1")
    frames.observation_space = gym.spaces.Box(0, 255, (1, 2, 2), np.uint8)
    with pytest.raises(ValueError, match=rf"num_frames {bound}{frame_stack}"):
        FrameStack(frames, frame_stack)


@pytest.mark.parametrize(
    ("make", "argument", "value"),
    [
        (lambda: MinAtarCNN(0, 3), "in_channels", "0"),
        (lambda: NatureCNN(4, 0), "num_outputs", "0"),
        (lambda: NatureCNN(-1, 4), "in_channels", "-1"),
        (lambda: MinAtarCNN(4, 3, hidden=0), "hidden", "0"),
    ],
)
def test_pixel_networks_name_a_count_below_one(make, argument, value):
    with pytest.raises(ValueError, match=rf"{argument} must be an int >= 1, got {value}"):
        make()


def test_recipe_flags_frame_stack_and_steps_are_counts():
    from recipes import dqn, make_dataset

    for frame_stack in (0, -3):
        with pytest.raises(ValueError, match=rf"--frame-stack must be >= 1, got {frame_stack}"):
            trainers.configure(dqn.Config, frame_stack=frame_stack)
    with pytest.raises(ValueError, match=r"--steps must be >= 1, got -5"):
        trainers.configure(make_dataset.Config, steps=-5)
