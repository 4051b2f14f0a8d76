"""ClipPPOLoss, A2CLoss, ReinforceLoss: hand-computed values, gradient routing, errors, update."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from tdrl.data import minibatches
from tdrl.modules import CategoricalActor, GaussianActor, ValueCritic, mlp
from tdrl.objectives import A2CLoss, ClipPPOLoss, ReinforceLoss, total_loss
from tdrl.trainers import optimizer_step

OBS, ACT = 4, 2


def minibatch_steps(loss, optimizer, td, *, epochs, minibatch_size, max_grad_norm=None):
    """A recipe's minibatch epochs (recipes/ppo.py): a step on each minibatch's summed losses;
    returns the loss outputs averaged over the steps."""
    outs = []
    for minibatch in minibatches(td, minibatch_size, epochs=epochs, in_keys=loss.in_keys):
        out = loss(minibatch)
        optimizer_step(total_loss(out), optimizer, max_grad_norm=max_grad_norm)
        outs.append(out.detach())
    return torch.stack(outs).mean()


class Constant(nn.Module):
    """Ignores the observation: output = a learnable bias (a known distribution for hand cases)."""

    def __init__(self, value: torch.Tensor) -> None:
        super().__init__()
        self.bias = nn.Parameter(value.clone())

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.bias.expand(*observation.shape[:-1], -1)


def gaussian_log_prob(action: torch.Tensor, loc: torch.Tensor, std: float) -> torch.Tensor:
    return (-0.5 * ((action - loc) / std) ** 2 - math.log(std) - 0.5 * math.log(2 * math.pi)).sum(
        -1
    )


def hand_case() -> tuple[GaussianActor, ValueCritic, TensorDict, torch.Tensor]:
    loc = torch.tensor([0.1, -0.2])
    actor = GaussianActor(Constant(loc), ACT, init_log_std=math.log(0.5))
    critic = ValueCritic(Constant(torch.tensor([0.5])))
    action = torch.tensor([[0.0, 0.0], [0.5, -0.5], [1.0, 1.0], [-0.3, 0.2]])
    ratio = torch.tensor([0.5, 1.1, 1.5, 0.5])
    log_prob = gaussian_log_prob(action, loc, 0.5)
    td = TensorDict(
        observation=torch.randn(4, OBS),
        action=action,
        action_log_prob=log_prob - ratio.log(),
        advantage=torch.tensor([[1.0], [-1.0], [1.0], [-1.0]]),
        value_target=torch.tensor([[1.0], [0.0], [0.5], [2.0]]),
        state_value=torch.tensor([[0.7], [0.4], [0.5], [0.0]]),
        batch_size=[4],
    )
    return actor, critic, td, ratio


def test_ppo_matches_hand_computation_on_both_clip_sides() -> None:
    actor, critic, td, ratio = hand_case()
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.2, normalize_advantage=False)
    out = loss(td)
    # min(r A, clip(r) A) per sample: 0.5 (r below 1-eps, A>0: unclipped side), -1.1,
    # 1.2 (r above 1+eps, A>0: clipped), -0.8 (r below 1-eps, A<0: clipped).
    torch.testing.assert_close(out["loss_objective"], -torch.tensor((0.5 - 1.1 + 1.2 - 0.8) / 4))
    torch.testing.assert_close(out["clip_fraction"], torch.tensor(0.75))
    kl = sum((r - 1) - math.log(r) for r in ratio.tolist()) / 4
    torch.testing.assert_close(out["kl_approx"], torch.tensor(kl))
    torch.testing.assert_close(out["loss_critic"], torch.tensor(0.5 * (0.25 + 0.25 + 0 + 2.25) / 4))
    torch.testing.assert_close(
        out["entropy"], torch.tensor(2 * (0.5 + 0.5 * math.log(2 * math.pi) + math.log(0.5)))
    )
    # Only samples 0 and 1 pass gradient: d/dloc -(1/4) sum r_i A_i (a_i - loc) / sigma^2.
    out["loss_objective"].backward()
    loc = actor.net.bias.detach()
    expected = (
        -sum(ratio[i] * td["advantage"][i] * (td["action"][i] - loc) / 0.25 for i in (0, 1)) / 4
    )
    torch.testing.assert_close(actor.net.bias.grad, expected)


def test_value_clipping_hand_case() -> None:
    actor, critic, td, _ = hand_case()
    out = ClipPPOLoss(actor, critic, clip_value=0.1, normalize_advantage=False)(td)
    # V = 0.5; old values 0.7, 0.4, 0.5, 0.0 -> clipped values 0.6, 0.5, 0.5, 0.1.
    unclipped = torch.tensor([0.25, 0.25, 0.0, 2.25])
    clipped = (torch.tensor([0.6, 0.5, 0.5, 0.1]) - td["value_target"].squeeze(-1)) ** 2
    torch.testing.assert_close(out["loss_critic"], 0.5 * torch.maximum(unclipped, clipped).mean())
    torch.testing.assert_close(out["value_clip_fraction"], torch.tensor(0.5))


def test_a2c_and_reinforce_hand_values() -> None:
    actor, critic, td, _ = hand_case()
    log_prob = gaussian_log_prob(td["action"], actor.net.bias.detach(), 0.5)
    expected = -(log_prob * td["advantage"].squeeze(-1)).mean()
    out = A2CLoss(actor, critic, entropy_coeff=0.1)(td)
    torch.testing.assert_close(out["loss_objective"], expected)
    torch.testing.assert_close(out["loss_entropy"], -0.1 * out["entropy"])
    torch.testing.assert_close(out["loss_critic"], torch.tensor(0.5 * 2.75 / 4))
    out = ReinforceLoss(actor, critic)(td)
    torch.testing.assert_close(out["loss_actor"], expected)
    torch.testing.assert_close(out["loss_value"], torch.tensor(2.75 / 4))


def networks() -> tuple[GaussianActor, ValueCritic]:
    return GaussianActor(mlp(OBS, ACT, output_gain=0.01), ACT), ValueCritic(mlp(OBS, 1))


def rollout(n: int = 32) -> TensorDict:
    return TensorDict(
        observation=torch.randn(n, OBS),
        action=torch.randn(n, ACT),
        action_log_prob=torch.randn(n) - 2,
        advantage=torch.randn(n, 1),
        value_target=torch.randn(n, 1),
        state_value=torch.randn(n, 1),
        batch_size=[n],
    )


@pytest.mark.parametrize("make", [ClipPPOLoss, A2CLoss, ReinforceLoss])
def test_gradients_reach_exactly_the_intended_parameters(make: type) -> None:
    actor, critic = networks()
    kwargs = {} if make is ReinforceLoss else {"entropy_coeff": 0.01}
    loss = make(actor, critic, **kwargs)
    out = loss(rollout())
    actor_key = "loss_actor" if make is ReinforceLoss else "loss_objective"
    critic_key = "loss_value" if make is ReinforceLoss else "loss_critic"
    for key, owner in ((actor_key, actor), (critic_key, critic), ("loss_entropy", None)):
        if key not in out.keys():
            continue
        loss.zero_grad(set_to_none=True)
        out[key].backward(retain_graph=True)
        reached = {name for name, p in loss.named_parameters() if p.grad is not None}
        if owner is None:  # the entropy of a state-independent Gaussian depends on log_std only
            assert reached == {"actor_network.log_std"}
        else:
            prefix = "actor_network." if owner is actor else "critic_network."
            expected = {prefix + name for name, _ in owner.named_parameters()}
            assert reached == expected
    for key in ("entropy", "kl_approx", "clip_fraction"):
        if key in out.keys():
            assert not out[key].requires_grad and out[key].shape == ()


@pytest.mark.parametrize("make", [ClipPPOLoss, A2CLoss, ReinforceLoss])
def test_input_not_mutated(make: type) -> None:
    loss = make(*networks())
    td = rollout()
    before = td.clone()
    loss(td)
    assert set(td.keys(True)) == set(before.keys(True))
    assert (td == before).all()


def test_errors_name_the_key() -> None:
    loss = ClipPPOLoss(*networks())
    td = rollout()
    with pytest.raises(KeyError, match=r"'advantage'.*estimator \(e\.g\. tdrl\.estimators\.GAE\)"):
        loss(td.exclude("advantage"))
    with pytest.raises(KeyError, match="'action_log_prob'"):
        loss(td.exclude("action_log_prob"))
    with pytest.raises(KeyError, match="'value_target'"):
        loss(td.exclude("value_target"))
    with pytest.raises(KeyError, match="observation"):
        loss(td.exclude("observation"))
    bad = td.clone()
    bad["advantage"] = torch.randn(32, 2)
    with pytest.raises(ValueError, match=r"'advantage' has shape \(32, 2\)"):
        loss(bad)
    with pytest.raises(ValueError, match="unknown key names"):
        loss.set_keys(advantages="adv")
    with pytest.raises(TypeError, match="tdrl.estimators"):
        loss.make_value_estimator("gae", gamma=0.99)
    with pytest.raises(TypeError, match="get_dist"):
        ClipPPOLoss(ValueCritic(mlp(OBS, 1)))
    bad = td.clone()
    bad["advantage"] = torch.ones(32, 1, dtype=torch.int64)
    with pytest.raises(
        TypeError, match="'advantage' must be a floating-point tensor, got torch.int64"
    ):
        ClipPPOLoss(*networks(), normalize_advantage=True)(bad)
    # a critic that writes another key (a TorchRL ValueOperator with out_keys=["value"])
    actor, _ = networks()
    from tensordict.nn import TensorDictModule

    other = TensorDictModule(mlp(OBS, 1), ["observation"], ["value"])
    with pytest.raises(KeyError, match="'state_value'.*critic must write it"):
        ClipPPOLoss(actor, other)(td)


@pytest.mark.parametrize("key", ["advantage", "value_target", "action_log_prob"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_minibatch_steps_refuse_a_nan_or_inf_before_any_step(key, bad) -> None:
    # one NaN advantage, standardized over the minibatch, turned every weight to NaN
    actor, critic = networks()
    loss = ClipPPOLoss(actor, critic, normalize_advantage=True)
    opt = torch.optim.Adam(loss.parameters(), lr=1e-3)
    td = rollout()
    td[key][3] = bad
    before = [p.detach().clone() for p in loss.parameters()]
    with pytest.raises(ValueError, match=rf"'{key}' contains NaN or inf \(1 of 32"):
        minibatch_steps(loss, opt, td, epochs=1, minibatch_size=8)
    assert all(torch.equal(a, b) for a, b in zip(before, loss.parameters(), strict=True))


def test_set_keys_and_estimator_instance() -> None:
    loss = ClipPPOLoss(*networks()).set_keys(advantage="adv", sample_log_prob="old_lp")
    td = rollout()
    td = td.rename_key_("advantage", "adv").rename_key_("action_log_prob", "old_lp")
    assert "adv" in loss.in_keys and "old_lp" in loss.in_keys
    assert torch.isfinite(loss(td)["loss_objective"])
    estimator = nn.Identity()
    assert loss.make_value_estimator(estimator) is estimator and loss.value_estimator is estimator


def test_minibatch_steps_step_every_minibatch_and_learn() -> None:
    torch.manual_seed(0)
    actor, critic = networks()
    loss = ClipPPOLoss(actor, critic, normalize_advantage=False)
    td = TensorDict(observation=torch.randn(4, 25, OBS), batch_size=[4, 25])  # [num_envs, T]
    td["value_target"] = td["observation"][..., :1] * 2
    td["action"] = torch.randn(4, 25, ACT)
    td["advantage"] = td["action"][..., :1]  # favour a larger first action component
    td["action_log_prob"] = actor.get_dist(td).log_prob(td["action"]).detach()
    optimizer = torch.optim.Adam(loss.parameters(), lr=1e-2)
    critic_before = loss(td)["loss_critic"].item()
    seen = []
    optimizer.register_step_post_hook(lambda *args: seen.append(1))
    stats = minibatch_steps(loss, optimizer, td, epochs=3, minibatch_size=30, max_grad_norm=0.5)
    assert len(seen) == 3 * 4  # 100 samples in minibatches of 30: 4 steps per epoch
    assert set(stats.keys()) >= {"loss_objective", "loss_critic", "kl_approx", "clip_fraction"}
    assert loss(td)["loss_critic"].item() < critic_before
    assert actor.get_dist(td).loc[..., 0].mean() > actor.get_dist(td).loc[..., 1].mean()


def test_categorical_actor_in_ppo() -> None:
    actor = CategoricalActor(mlp(OBS, 3, output_gain=0.01))
    td = rollout()
    td["action"] = torch.randint(0, 3, (32,))
    td["action_log_prob"] = torch.full((32,), -math.log(3))
    out = ClipPPOLoss(actor, ValueCritic(mlp(OBS, 1)))(td)
    torch.testing.assert_close(out["entropy"], torch.tensor(math.log(3)), atol=1e-3, rtol=0)
    assert float(out["clip_fraction"]) == 0.0
