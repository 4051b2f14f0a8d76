"""REDQLoss: random M-subset minimum in the target, mean over all N critics in the actor loss."""

from __future__ import annotations

import pytest
import torch
from offpolicy_data import all_params_have_grad, no_param_has_grad, transitions

from tdrl.modules import EnsembleCritic, EnsembleMLP, StateActionCritic, TanhGaussianActor, mlp
from tdrl.objectives import REDQLoss
from tdrl.objectives.offpolicy import critic_values

OBS, ACT, GAMMA = 3, 2, 0.9


def constant_critics(values: list[float]) -> EnsembleCritic:
    """N critics with Q_i(s, a) = values[i]."""
    q = EnsembleCritic(EnsembleMLP(OBS + ACT, 1, (), num_members=len(values)))
    with torch.no_grad():
        q.net.output.weight.zero_()
        q.net.output.bias.copy_(torch.tensor(values).view(-1, 1, 1))
    return q


def actor() -> TanhGaussianActor:
    torch.manual_seed(0)
    return TanhGaussianActor(mlp(OBS, 2 * ACT, (8,)), ACT)


def test_target_takes_the_minimum_of_a_random_subset():
    loss = REDQLoss(actor(), constant_critics([1.0, 2.0, 3.0, 4.0]), num_qvalue_nets=4,
                    sub_sample_len=2, fixed_alpha=True, alpha_init=1e-9, gamma=GAMMA)  # fmt: skip
    td = transitions(1, OBS, ACT)
    reward = td["next", "reward"].squeeze()
    torch.manual_seed(0)
    mins = torch.stack([(loss.value_target(td)[0] - reward) / GAMMA for _ in range(600)])
    counts = torch.bincount(mins.round().long(), minlength=5)
    # min of a uniform 2-subset of {1, 2, 3, 4}: P(1) = 1/2, P(2) = 1/3, P(3) = 1/6, P(4) = 0.
    assert counts[4] == 0 and counts[0] == 0
    freq = counts[1:4].float() / 600
    torch.testing.assert_close(freq, torch.tensor([1 / 2, 1 / 3, 1 / 6]), atol=0.06, rtol=0)


def test_actor_loss_averages_all_critics():
    loss = REDQLoss(actor(), constant_critics([1.0, 2.0, 3.0, 6.0]), num_qvalue_nets=4,
                    alpha_init=0.5)  # fmt: skip
    td = transitions(5, OBS, ACT)
    torch.manual_seed(3)
    loss_actor, log_prob = loss.actor_loss(td)
    torch.testing.assert_close(loss_actor, (0.5 * log_prob - 3.0).mean())


def test_all_critics_regress_and_gradients_route():
    torch.manual_seed(0)
    q = EnsembleCritic(EnsembleMLP(OBS + ACT, 1, (8,), num_members=10))
    loss = REDQLoss(actor(), q)
    assert loss.num_qvalue_nets == 10 and loss.sub_sample_len == 2
    td = transitions(8, OBS, ACT)
    loss(td)["loss_qvalue"].backward()
    # Every one of the N members receives a gradient from the shared target.
    assert all(bool((p.grad.flatten(1).abs().sum(1) > 0).all()) for p in q.parameters())
    assert no_param_has_grad(loss.actor_network)
    loss.zero_grad(set_to_none=True)
    loss(td)["loss_actor"].backward()
    assert all_params_have_grad(loss.actor_network) and no_param_has_grad(q)


def test_bad_subset_size():
    with pytest.raises(ValueError, match="sub_sample_len"):
        REDQLoss(actor(), constant_critics([1.0, 2.0]), num_qvalue_nets=2, sub_sample_len=3)


@pytest.mark.parametrize("batched", [True, False], ids=["EnsembleCritic", "one-critic-copies"])
def test_target_runs_only_the_drawn_critics_and_equals_the_full_ensembles_minimum(batched):
    torch.manual_seed(1)
    if batched:
        critic = EnsembleCritic(EnsembleMLP(OBS + ACT, 1, (16, 16), num_members=5))
    else:  # a single critic, copied into a vmap ensemble (no member subsets: all run)
        critic = StateActionCritic(mlp(OBS + ACT, 1, (16,)))
    loss = REDQLoss(actor(), critic, num_qvalue_nets=5, sub_sample_len=2)
    target = loss.target_qvalue_network
    next_td = transitions(8, OBS, ACT)["next"]
    action = torch.rand(8, ACT) * 2 - 1
    members_run = []
    if batched:
        target.net.output.register_forward_hook(
            lambda m, args, out: members_run.append(out.shape[0])
        )
    torch.manual_seed(3)
    got = loss._target_q(next_td, action)
    torch.manual_seed(3)
    subset = torch.randperm(5)[:2]
    every = critic_values(target, next_td, action, "action")  # [5, B]: all five, by hand
    torch.testing.assert_close(got, every.index_select(0, subset).min(0).values)
    assert members_run == ([2, 5] if batched else [])  # the target ran 2 members, the check 5
