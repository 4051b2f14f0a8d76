"""SACLoss: twin-Q minimum, Bellman targets by hand, gradient routing, alpha tuning, interop."""

from __future__ import annotations

import warnings

import pytest
import torch
from offpolicy_data import all_params_have_grad, no_param_has_grad, transitions
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn

from tdrl.modules import EnsembleCritic, EnsembleMLP, StateActionCritic, TanhGaussianActor, mlp
from tdrl.objectives import ModuleEnsemble, SACLoss

OBS, ACT, GAMMA = 3, 2, 0.9


def actor(seed: int = 0) -> TanhGaussianActor:
    torch.manual_seed(seed)
    return TanhGaussianActor(mlp(OBS, 2 * ACT, (16,)), ACT)


def twin_linear_critic() -> EnsembleCritic:
    """Q_0(s, a) = sum(a), Q_1(s, a) = 0.5 - sum(a): their minimum switches per sample."""
    critic = EnsembleCritic(EnsembleMLP(OBS + ACT, 1, (), num_members=2))
    layer = critic.net.output
    with torch.no_grad():
        layer.weight.zero_()
        layer.weight[0, OBS:, 0] = 1.0
        layer.weight[1, OBS:, 0] = -1.0
        layer.bias.copy_(torch.tensor([0.0, 0.5]).view(2, 1, 1))
    return critic


def test_target_uses_twin_minimum_and_honours_episode_ends():
    loss = SACLoss(actor(), twin_linear_critic(), gamma=GAMMA, alpha_init=0.3)
    td = transitions(4, OBS, ACT, terminated=[False, True, False, False],
                     truncated=[False, False, True, False])  # fmt: skip
    torch.manual_seed(1)
    target = loss.value_target(td)
    # The same draw by hand: a' ~ pi(s'), y = r + gamma (1 - term) (min_e Q_e - alpha log pi).
    torch.manual_seed(1)
    a, log_prob = loss.actor_network.get_dist(td["next"]).rsample_and_log_prob()
    q = torch.stack([a.sum(-1), 0.5 - a.sum(-1)])
    reward = td["next", "reward"].squeeze(-1)
    not_term = torch.tensor([1.0, 0.0, 1.0, 1.0])  # the truncated step (2) bootstraps
    expected = reward + GAMMA * not_term * (q.min(0).values - 0.3 * log_prob)
    torch.testing.assert_close(target, expected.detach())
    with_max = reward + GAMMA * not_term * (q.max(0).values - 0.3 * log_prob)
    assert not torch.allclose(target, with_max.detach())
    assert target[1] == reward[1]


def test_critic_loss_by_hand_and_td_error():
    loss = SACLoss(actor(), twin_linear_critic(), gamma=GAMMA)
    td = transitions(5, OBS, ACT)
    torch.manual_seed(2)
    target = loss.value_target(td)
    torch.manual_seed(2)
    loss_qvalue, td_error = loss.qvalue_loss(td)
    a = td["action"].sum(-1)
    q = torch.stack([a, 0.5 - a])
    torch.testing.assert_close(loss_qvalue, ((q - target) ** 2).sum(0).mean())
    torch.testing.assert_close(td_error, (q - target).abs().max(0).values)


def test_gradients_reach_exactly_the_intended_parameters():
    critic = EnsembleCritic(EnsembleMLP(OBS + ACT, 1, (16,), num_members=2))
    loss = SACLoss(actor(), critic)
    td = transitions(8, OBS, ACT)
    for name, owner in (
        ("loss_actor", loss.actor_network),
        ("loss_qvalue", loss.qvalue_network),
        ("loss_alpha", None),
    ):
        loss.zero_grad(set_to_none=True)
        loss(td)[name].backward()
        others = [m for m in (loss.actor_network, loss.qvalue_network) if m is not owner]
        if owner is not None:
            assert all_params_have_grad(owner), name
        assert all(no_param_has_grad(m) for m in others), name
        assert no_param_has_grad(loss.target_qvalue_network), name
        assert (loss.log_alpha.grad is not None) == (name == "loss_alpha"), name


class PullToPoint(TensorDictModuleBase):
    """Two identical critics ``Q(s, a) = -20 |a - 0.5|^2``: they reward a narrow policy."""

    num_members = 2

    def __init__(self) -> None:
        super().__init__()
        self.in_keys = ["observation", "action"]
        self.out_keys = ["state_action_value"]

    def values(self, td: TensorDictBase) -> torch.Tensor:
        q = -20.0 * (td["action"] - 0.5).pow(2).sum(-1, keepdim=True)
        return q.expand(2, *q.shape)


def _entropy_after_training(fixed_alpha: bool, alpha_init: float) -> tuple[float, float]:
    torch.manual_seed(0)
    policy = TanhGaussianActor(mlp(2, 2, (16,)), 1)
    loss = SACLoss(policy, PullToPoint(), fixed_alpha=fixed_alpha, alpha_init=alpha_init)
    td = transitions(64, 2, 1)
    params = list(policy.parameters()) + ([] if fixed_alpha else [loss.log_alpha])
    optim = torch.optim.Adam(params, lr=1e-2)
    for _ in range(150):
        loss_actor, log_prob = loss.actor_loss(td)
        total = loss_actor + loss.alpha_loss(log_prob, td)
        optim.zero_grad()
        total.backward()
        optim.step()
    with torch.no_grad():
        big = td.expand(16, 64).reshape(-1)
        entropy = -loss.actor_network.get_dist(big).rsample_and_log_prob()[1].mean()
    return float(entropy), loss.target_entropy()


@pytest.fixture
def one_thread():
    # Tiny networks: extra threads only contend on the shared test machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_alpha_tuning_drives_entropy_to_its_target(one_thread):
    entropy, target = _entropy_after_training(fixed_alpha=False, alpha_init=1.0)
    assert target == -1.0  # "auto": -action_dim
    assert abs(entropy - target) < 0.3, entropy
    # Control: with a small fixed alpha the same critic collapses the policy far below target.
    collapsed, _ = _entropy_after_training(fixed_alpha=True, alpha_init=0.01)
    assert collapsed < target - 1.0, collapsed


def test_fixed_alpha_is_a_buffer_and_alpha_bounds_clamp():
    loss = SACLoss(actor(), twin_linear_critic(), fixed_alpha=True, alpha_init=0.2)
    assert "log_alpha" not in dict(loss.named_parameters())
    assert float(loss.alpha) == pytest.approx(0.2)
    bounded = SACLoss(actor(), twin_linear_critic(), alpha_init=5.0, max_alpha=2.0)
    assert float(bounded.alpha) == pytest.approx(2.0)


def torchrl_actor_and_critic():
    from torchrl.modules import (
        MLP,
        NormalParamExtractor,
        ProbabilisticActor,
        TanhNormal,
        ValueOperator,
    )

    torch.manual_seed(0)
    policy = ProbabilisticActor(
        TensorDictModule(
            nn.Sequential(MLP(in_features=OBS, out_features=2 * ACT, num_cells=[16]),
                          NormalParamExtractor()),
            in_keys=["observation"],
            out_keys=["loc", "scale"],
        ),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        return_log_prob=True,
    )  # fmt: skip
    critic = ValueOperator(MLP(in_features=OBS + ACT, out_features=1, num_cells=[16]),
                           in_keys=["observation", "action"])  # fmt: skip
    return policy, critic


def _train_step(loss: nn.Module, td, keys=("loss_actor", "loss_qvalue", "loss_alpha")):
    optim = torch.optim.Adam(loss.parameters(), lr=1e-2)
    before = [p.clone() for p in loss.parameters() if p.requires_grad]
    out = loss(td)
    assert all(torch.isfinite(out[k]) for k in keys)
    sum(out[k] for k in keys).backward()
    optim.step()
    after = [p for p in loss.parameters() if p.requires_grad]
    assert all(not torch.equal(a, b) for a, b in zip(after, before, strict=True))
    return out


def test_tdrl_sac_accepts_torchrl_actor_and_critic():
    policy, critic = torchrl_actor_and_critic()
    loss = SACLoss(policy, critic, num_qvalue_nets=2, action_dim=ACT)
    assert isinstance(loss.qvalue_network, ModuleEnsemble)
    # The copies are initialised independently.
    first = next(iter(loss.qvalue_network.parameters()))
    assert not torch.equal(first[0], first[1])
    td = transitions(8, OBS, ACT)
    before = td.clone()
    _train_step(loss, td)
    assert (td == before).all() and set(td.keys(True)) == set(before.keys(True))


def test_tdrl_sac_accepts_a_single_tdrl_critic():
    critic = StateActionCritic(mlp(OBS + ACT, 1, (16,)))
    loss = SACLoss(actor(), critic, num_qvalue_nets=2)
    _train_step(loss, transitions(8, OBS, ACT))


def _torchrl_sac_step(policy: nn.Module) -> None:
    from torchrl.objectives import SACLoss as TorchRLSACLoss

    critic = StateActionCritic(mlp(OBS + ACT, 1, (16,)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss = TorchRLSACLoss(policy, critic, target_entropy=-float(ACT))
        loss.make_value_estimator(gamma=GAMMA)
        _train_step(loss, transitions(8, OBS, ACT))


def test_torchrl_sac_accepts_tdrl_modules():
    _torchrl_sac_step(actor())


def test_bad_input_names_the_key():
    loss = SACLoss(actor(), twin_linear_critic())
    td = transitions(4, OBS, ACT)
    del td["next", "observation"]
    with pytest.raises(KeyError, match="observation"):
        loss(td)
    td = transitions(4, OBS, ACT)
    td["next", "terminated"] = td["next", "terminated"].float()
    with pytest.raises(TypeError, match="'next', 'terminated'"):
        loss(td)
    with pytest.raises(ValueError, match="num_qvalue_nets=3"):
        SACLoss(actor(), twin_linear_critic(), num_qvalue_nets=3)
