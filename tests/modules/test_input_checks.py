"""Modules, losses and the optimiser step refuse input they would otherwise get silently wrong
(each case gave a wrong number or a raw error before its check), and name what is at fault."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type
from torch import nn

from tdrl.modules import (
    AdditiveGaussianNoise,
    DeterministicActor,
    EpsilonGreedy,
    GaussianActor,
    GRUModule,
    OrnsteinUhlenbeckNoise,
    RunningObservationNorm,
    StateActionCritic,
    TanhGaussianActor,
)
from tdrl.modules.distributional import NoisyLinear
from tdrl.modules.distributions import IndependentNormal, TanhNormal
from tdrl.modules.ensembles import EnsembleLinear, as_ensemble
from tdrl.trainers.config import TD3Config
from tdrl.trainers.optim import optimizer_step


def test_integer_observations_are_normalized_in_floating_point():
    norm = RunningObservationNorm(2)
    x = torch.tensor([[10, 200], [11, 100], [12, 150]], dtype=torch.uint8)
    norm.update(x)
    got = norm.normalize(x)
    assert got.is_floating_point() and bool(got.isfinite().all())
    torch.testing.assert_close(got, norm.normalize(x.float()))
    torch.testing.assert_close(got[:, 0], torch.tensor([-1.0, 0.0, 1.0]) * math.sqrt(1.5))


@pytest.mark.parametrize(
    "make",
    [
        lambda: GaussianActor(nn.Linear(5, 3), action_dim=1),
        lambda: GaussianActor(nn.Linear(5, 3), action_dim=1, action_low=-2.0, action_high=2.0),
        lambda: TanhGaussianActor(nn.Linear(5, 3), action_dim=1, state_dependent_scale=False),
    ],
)
def test_a_network_wider_than_action_dim_is_refused(make):
    # a 1-wide log_std would broadcast over 3 outputs: 3-dim actions from a 1-dim actor
    with pytest.raises(ValueError, match="the network outputs 3 values .*action_dim is 1"):
        make()(TensorDict({"observation": torch.randn(4, 5)}, [4]))


@pytest.mark.parametrize(
    "dist",
    [
        IndependentNormal(torch.zeros(4, 2), torch.ones(4, 2)),
        TanhNormal(torch.zeros(4, 2), torch.ones(4, 2)),
    ],
)
def test_log_prob_of_an_action_of_the_wrong_width_is_refused(dist):
    assert dist.log_prob(torch.full((4, 2), 0.5)).shape == (4,)
    with pytest.raises(ValueError, match=r"action has shape \(4, 1\).*event shape is \(2,\)"):
        dist.log_prob(torch.full((4, 1), 0.5))  # broadcast, it read as [0.5, 0.5]


def test_discrete_log_probs_refuse_actions_that_would_broadcast_or_truncate():
    from tdrl.modules.distributions import Categorical, IndependentBernoulli, MultiCategorical

    bernoulli = IndependentBernoulli(torch.zeros(4, 3))
    assert bernoulli.log_prob(torch.ones(4, 3, dtype=torch.long)).shape == (4,)
    with pytest.raises(ValueError, match=r"action has shape \(4, 1\).*event shape is \(3,\)"):
        bernoulli.log_prob(torch.ones(4, 1, dtype=torch.long))  # read as [1, 1, 1]
    multi = MultiCategorical(torch.zeros(4, 7), [3, 4])
    assert multi.log_prob(torch.ones(4, 2, dtype=torch.long)).shape == (4,)
    for width in (1, 3):  # an IndexError, or a column silently ignored
        with pytest.raises(ValueError, match=rf"action has shape \(4, {width}\)"):
            multi.log_prob(torch.ones(4, width, dtype=torch.long))
    categorical = Categorical(torch.zeros(4, 5))
    assert categorical.log_prob(torch.ones(4, dtype=torch.long)).shape == (4,)
    assert categorical.log_prob(torch.ones(6, 4, dtype=torch.long)).shape == (6, 4)  # samples
    with pytest.raises(ValueError, match=r"action has shape \(4, 1\), expected the batch shape"):
        categorical.log_prob(torch.ones(4, 1, dtype=torch.long))  # would broadcast to [4, 4]
    with pytest.raises(ValueError, match="integer indices, got torch.float32"):
        categorical.log_prob(torch.full((4,), 1.7))  # would be read as 1


def test_recurrent_is_init_must_be_bool_and_batch_first():
    torch.manual_seed(0)
    B, T, F, H = 2, 3, 4, 5
    module = GRUModule(F, H, in_key="obs", out_key="feat")
    step = TensorDict(
        {
            "obs": torch.randn(B, F),
            "is_init": torch.ones(B, 1),
            "recurrent_state": torch.randn(B, 1, H),
        },
        [B],
    )
    with pytest.raises(TypeError, match="'is_init' must be bool .*got torch.float32"):
        module(step)
    seq = module.set_recurrent_mode(True)
    is_init = torch.zeros(B, T, 1, dtype=torch.bool)
    is_init[0, 2] = True
    td = TensorDict({"obs": torch.randn(B, T, F), "recurrent_state": torch.randn(B, T, 1, H)}, [])
    seq(td.clone().set("is_init", is_init))  # [B, T, 1] runs
    with pytest.raises(ValueError, match=r"'is_init' has shape \(3, 2, 1\), expected \(2, 3, 1\)"):
        seq(td.clone().set("is_init", is_init.transpose(0, 1).contiguous()))  # same size


def test_a_recurrent_state_of_another_batch_is_refused_in_both_modes():
    torch.manual_seed(0)
    B, T, F, H = 4, 3, 2, 5
    module = GRUModule(F, H, in_key="obs", out_key="feat")
    step = TensorDict({"obs": torch.randn(B, F), "is_init": torch.zeros(B, 1, dtype=torch.bool)})
    module(step.clone().set("recurrent_state", torch.randn(B, 1, H)))
    with pytest.raises(ValueError, match=r"'recurrent_state' has shape \(2, 1, 5\), expected"):
        module(step.clone().set("recurrent_state", torch.randn(2, 1, H)))  # was a raw size error
    seq = module.set_recurrent_mode(True)
    td = TensorDict({"obs": torch.randn(2, 2 * T, F), "is_init": torch.zeros(2, 2 * T, 1) > 0})
    seq(td.clone().set("recurrent_state", torch.randn(2, 2 * T, 1, H)))
    with pytest.raises(ValueError, match=r"'recurrent_state' has shape \(4, 3, 1, 5\)"):
        # same element count: it was read as 2 rows of 6 steps, each row's t=0 from another row
        seq(td.clone().set("recurrent_state", torch.randn(B, T, 1, H)))


def test_exploration_arguments_and_masks_are_checked():
    with pytest.raises(ValueError, match="num_actions must be >= 1, got 0"):
        EpsilonGreedy(0)  # failed at the first call before
    greedy = EpsilonGreedy(3, eps_init=1.0, mask_key="action_mask")
    mask = torch.ones(4, 3, dtype=torch.bool)
    ok = TensorDict({"action": torch.zeros(4, dtype=torch.int64), "action_mask": mask}, [4])
    assert greedy(ok)["action"].shape == (4,)
    one_hot = TensorDict({"action": torch.eye(3, dtype=torch.int64)[[0, 1, 2, 0]]}, [4])
    with pytest.raises(ValueError, match=r"'action' must be an action index .*got \(4, 3\)"):
        greedy(one_hot.set("action_mask", mask))  # each component was overwritten by an index
    with pytest.raises(ValueError, match=r"'action_mask' has shape \(4, 2\), expected \(4, 3\)"):
        greedy(ok.clone().set("action_mask", mask[:, :2]))
    for bad in ({"dt": -0.01}, {"dt": 0.0}, {"sigma": -0.2}, {"dt": math.nan}):
        with pytest.raises(ValueError, match="dt must be > 0 and sigma >= 0"):
            OrnsteinUhlenbeckNoise(2, **bad)  # dt < 0: NaN noise through sqrt(dt)
    noise = OrnsteinUhlenbeckNoise(2)
    noise(TensorDict({"action": torch.zeros(3, 2)}, [3]))
    for bad in (torch.zeros(2, 1, dtype=torch.bool), torch.zeros(3, 1)):
        with pytest.raises(ValueError, match=r"reset mask .*bool of shape \(3,\) or \(3, 1\)"):
            noise.reset(bad)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("kind", ["gaussian", "ou"])
def test_action_noise_keeps_the_action_dtype(kind, dtype):
    torch.manual_seed(0)
    noise = (
        AdditiveGaussianNoise(2, sigma_init=0.5)
        if kind == "gaussian"
        else (OrnsteinUhlenbeckNoise(2, sigma=5.0))
    )
    action = torch.zeros(64, 2, dtype=dtype)
    out = noise(TensorDict({"action": action}, [64]))["action"]
    assert out.dtype == dtype  # float32 before (the bounds and the state are float32)
    assert float(out.abs().max()) <= 1.0 and float(out.std()) > 0


@pytest.mark.parametrize(
    "mode", [InteractionType.DETERMINISTIC, InteractionType.MODE, InteractionType.MEAN]
)
def test_noisy_linear_is_noiseless_under_every_interaction_type_but_random(mode):
    torch.manual_seed(0)
    layer, x = NoisyLinear(3, 2), torch.ones(1, 3)
    mean = nn.functional.linear(x, layer.weight_mu, layer.bias_mu)
    with set_interaction_type(mode):
        assert torch.equal(layer(x), mean)
    with set_interaction_type(InteractionType.RANDOM):
        assert not torch.equal(layer(x), mean)
    assert not torch.equal(layer(x), mean)  # no type set: the training step's noise


def test_a_saturated_deterministic_actor_stays_inside_its_bounds():
    # mid + half * tanh can round one ulp past a bound (computed with a 0-dim 1.0 it does for
    # a third of random bound pairs); the actor's own path was not seen to, but its acting
    # output is now clamped: this guards that.
    torch.manual_seed(0)
    low = torch.rand(2000) * 10 - 9
    high = low + torch.rand(2000) * 10 + 0.01
    net = nn.Linear(1, 2000)
    nn.init.constant_(net.weight, 100.0)
    nn.init.zeros_(net.bias)
    actor = DeterministicActor(net, 2000, action_low=low, action_high=high)
    for sign in (1.0, -1.0):  # tanh saturates at +-1: mid +- half rounds past a bound
        with torch.no_grad():  # as the collectors and evaluate act
            td = actor(TensorDict({"observation": torch.full((1, 1), sign)}, [1]))
        action = td["action"][0]
        assert bool((action >= low).all() and (action <= high).all())
        torch.testing.assert_close(action, high if sign > 0 else low)


def test_ensemble_layers_and_member_counts_are_checked():
    for layer, x in ((EnsembleLinear(6, 1, num_members=2), torch.randn(4, 1)),
                     (EnsembleLinear(1, 1, num_members=2), torch.randn(4, 6))):  # fmt: skip
        with pytest.raises(ValueError, match=f"input has {x.shape[-1]} features .*takes"):
            layer(x)  # the one-output product broadcast either
    critic = StateActionCritic(nn.Linear(4, 1))
    for n in (0, -3):
        with pytest.raises(ValueError, match=f"num_members must be >= 1, got {n}"):
            as_ensemble(critic, n)
    for n in (2.0, True, "2"):  # a float, a bool or a string is not a count, though 2.0 >= 1
        with pytest.raises(ValueError, match=f"EnsembleLinear: num_members must be .*got {n!r}"):
            EnsembleLinear(4, 1, num_members=n)  # type: ignore[arg-type]
    assert EnsembleLinear(4, 1, num_members=np.int64(2)).num_members == 2  # numpy ints count


def test_td3_smoothing_noise_and_gradient_clip_values_are_checked():
    from tdrl.objectives import TD3Loss

    with pytest.raises(ValueError, match="--noise-clip must be >= 0, got -0.5"):
        TD3Config(noise_clip=-0.5)
    with pytest.raises(ValueError, match="--policy-noise must be >= 0"):
        TD3Config(policy_noise=-0.2)
    actor = DeterministicActor(nn.Linear(3, 2), 2)
    critic = StateActionCritic(nn.Linear(5, 1))
    with pytest.raises(ValueError, match="noise_clip must be >= 0, got 0.2, -0.5"):
        TD3Loss(actor, critic, noise_clip=-0.5)
    for bad in (-1.0, 0.0, float("nan")):
        p = nn.Parameter(torch.tensor([1.0, 1.0]))
        opt = torch.optim.SGD([p], lr=0.1)
        with pytest.raises(ValueError, match="max_grad_norm must be > 0"):
            optimizer_step((p**2).sum(), opt, max_grad_norm=bad)
        assert torch.equal(p.detach(), torch.ones(2))  # nothing stepped (-1 had climbed)
