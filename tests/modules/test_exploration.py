"""Exploration: epsilon schedule, noise only under RANDOM, clipping, per-env OU resets."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type

from tdrl.modules import (
    AdditiveGaussianNoise,
    DeterministicActor,
    EpsilonGreedy,
    OrnsteinUhlenbeckNoise,
    apex_epsilons,
    linear_schedule,
)


def test_linear_schedule():
    assert linear_schedule(1.0, 0.1, 100, 0) == 1.0
    assert linear_schedule(1.0, 0.1, 100, 50) == pytest.approx(0.55)
    assert linear_schedule(1.0, 0.1, 100, 1000) == pytest.approx(0.1)


def test_epsilon_greedy_rate_and_schedule():
    torch.manual_seed(0)
    module = EpsilonGreedy(4, eps_init=1.0, eps_end=0.2, annealing_num_steps=10)
    module.step(10)
    assert module.eps == pytest.approx(0.2)
    td = TensorDict(action=torch.zeros(20000, dtype=torch.int64), batch_size=[20000])
    with set_interaction_type(InteractionType.RANDOM):
        module(td)
    # A random action differs from 0 with probability eps * 3/4.
    assert abs(float((td["action"] != 0).float().mean()) - 0.2 * 0.75) < 0.01
    assert int(td["action"].max()) == 3
    state = module.state_dict()
    fresh = EpsilonGreedy(4, eps_init=1.0, eps_end=0.2, annealing_num_steps=10)
    fresh.load_state_dict(state)
    assert fresh.eps == pytest.approx(0.2)


def test_apex_epsilons_by_hand():
    # Horgan et al. 2018: eps_i = 0.4 ** (1 + 7 i / (N - 1))
    assert torch.allclose(apex_epsilons(8), torch.tensor([0.4 ** (1 + i) for i in range(8)]))
    assert torch.allclose(apex_epsilons(3), torch.tensor([0.4, 0.4**4.5, 0.4**8]))
    assert apex_epsilons(1).tolist() == pytest.approx([0.4])
    assert torch.allclose(apex_epsilons(2, base=0.5, alpha=1.0), torch.tensor([0.5, 0.25]))
    with pytest.raises(ValueError, match="num_envs"):
        apex_epsilons(0)
    with pytest.raises(ValueError, match="base must lie in"):
        apex_epsilons(4, base=1.5)


def test_epsilon_greedy_with_one_epsilon_per_env():
    torch.manual_seed(0)
    ends = torch.tensor([0.0, 1.0, 0.5])
    module = EpsilonGreedy(4, eps_init=1.0, eps_end=ends, annealing_num_steps=10)
    module.step(5)  # halfway: each env halfway from 1 to its own end
    assert torch.allclose(module._eps(), torch.tensor([0.5, 1.0, 0.75]))
    assert module.eps == pytest.approx(0.75)  # the mean, a float to log
    module.step(5)
    steps = 20000
    td = TensorDict(action=torch.zeros(3, steps, dtype=torch.int64), batch_size=[3, steps])
    with set_interaction_type(InteractionType.RANDOM):
        module(td)
    changed = (td["action"] != 0).float().mean(1)  # a random action differs w.p. eps * 3/4
    assert changed[0] == 0.0  # env 0's epsilon is 0: its greedy actions stay
    assert abs(float(changed[1]) - 0.75) < 0.015
    assert abs(float(changed[2]) - 0.5 * 0.75) < 0.015
    fresh = EpsilonGreedy(4, eps_init=1.0, eps_end=torch.ones(3), annealing_num_steps=10)
    fresh.load_state_dict(module.state_dict())  # the per-env ends come back with the schedule
    assert torch.equal(fresh._eps(), ends)


def test_epsilon_greedy_without_a_schedule_holds_its_end():
    # annealing_num_steps=0: eps_end from the first step (Ape-X's fixed epsilons), exactly
    assert EpsilonGreedy(4, eps_init=1.0, eps_end=0.05, annealing_num_steps=0).eps == 0.05
    module = EpsilonGreedy(4, eps_end=apex_epsilons(8), annealing_num_steps=0)
    assert torch.equal(module._eps(), apex_epsilons(8))


def test_epsilon_greedy_names_bad_per_env_epsilons():
    module = EpsilonGreedy(4, eps_end=torch.tensor([0.1, 0.2]))
    td = TensorDict(action=torch.zeros(3, dtype=torch.int64), batch_size=[3])
    with pytest.raises(ValueError, match=r"2 per-env epsilons .* batch \(3,\)"):
        module(td)
    with pytest.raises(ValueError, match=r"epsilons must lie in \[0, 1\]"):
        EpsilonGreedy(4, eps_end=torch.tensor([0.1, 1.2]))
    with pytest.raises(ValueError, match=r"\[num_envs\] tensor, got shape \(2, 2\)"):
        EpsilonGreedy(4, eps_end=torch.zeros(2, 2))


def test_epsilon_greedy_names_a_checkpoint_of_another_epsilon_form():
    per_env = EpsilonGreedy(4, eps_end=apex_epsilons(8))
    per_env.step(100)
    one = EpsilonGreedy(4, eps_end=0.05)
    with pytest.raises(ValueError, match=r"checkpoint holds 8 per-env epsilons .* one epsilon"):
        one.load_state_dict(per_env.state_dict())
    with pytest.raises(ValueError, match=r"checkpoint holds 8 per-env epsilons .* 4 per-env"):
        EpsilonGreedy(4, eps_end=apex_epsilons(4)).load_state_dict(per_env.state_dict())
    with pytest.raises(ValueError, match=r"checkpoint holds one epsilon .* 8 per-env"):
        EpsilonGreedy(4, eps_end=apex_epsilons(8)).load_state_dict(one.state_dict())
    with pytest.raises(ValueError, match=r"checkpoint holds one epsilon"):  # strict or not
        EpsilonGreedy(4, eps_end=apex_epsilons(8)).load_state_dict(one.state_dict(), strict=False)
    # a load pre-hook that fills the entry in runs before the check
    migrated = EpsilonGreedy(4, eps_end=torch.zeros(8))
    migrated.register_load_state_dict_pre_hook(
        lambda module, state, prefix, *rest: state.setdefault(prefix + "eps_end", apex_epsilons(8))
    )
    migrated.load_state_dict(one.state_dict())
    assert torch.equal(migrated.eps_end, apex_epsilons(8))
    # a partial checkpoint without this module's entries, strict=False: it keeps its own
    loose = EpsilonGreedy(4, eps_end=apex_epsilons(8))
    loose.load_state_dict({}, strict=False)
    assert torch.equal(loose.eps_end, apex_epsilons(8))
    # the same form loads, the schedule's position with it
    again = EpsilonGreedy(4, eps_end=torch.zeros(8))
    again.load_state_dict(per_env.state_dict())
    assert torch.equal(again.eps_end, apex_epsilons(8)) and int(again.frames) == 100


@pytest.mark.parametrize(
    "make",
    [
        lambda: EpsilonGreedy(3, eps_init=1.0, eps_end=1.0),
        lambda: AdditiveGaussianNoise(2, sigma_init=1.0),
        lambda: OrnsteinUhlenbeckNoise(2, sigma=5.0),
    ],
)
def test_no_noise_under_deterministic(make):
    module = make()
    action = torch.zeros(8, dtype=torch.int64) if isinstance(module, EpsilonGreedy) else None
    action = torch.zeros(8, 2) if action is None else action
    td = TensorDict(action=action.clone(), batch_size=[8])
    with set_interaction_type(InteractionType.DETERMINISTIC):
        module(td)
    assert torch.equal(td["action"], action)
    module(td)  # no type set: the module explores
    assert not torch.equal(td["action"], action)


def test_gaussian_noise_scale_and_bounds():
    torch.manual_seed(0)
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
    noise = AdditiveGaussianNoise(2, sigma_init=0.1, action_low=low, action_high=high)
    td = TensorDict(action=((low + high) / 2).expand(50000, 2).clone(), batch_size=[50000])
    noise(td)
    std = td["action"].std(0)
    torch.testing.assert_close(std, 0.1 * (high - low) / 2, atol=2e-3, rtol=0)
    wide = AdditiveGaussianNoise(2, sigma_init=10.0, action_low=low, action_high=high)
    td = TensorDict(action=torch.zeros(1000, 2), batch_size=[1000])
    wide(td)
    assert bool((td["action"] >= low).all() and (td["action"] <= high).all())


def test_ou_noise_is_correlated_and_resets_per_env():
    torch.manual_seed(0)
    noise = OrnsteinUhlenbeckNoise(1, sigma=1.0, theta=0.15)
    zeros = torch.zeros(3, 1)
    for _ in range(50):
        noise(TensorDict(action=zeros.clone(), batch_size=[3]))
    assert bool((noise.state != 0).all())
    kept = noise.state[[0, 2]].clone()
    noise.reset(torch.tensor([False, True, False]))
    assert noise.state[1] == 0 and torch.equal(noise.state[[0, 2]], kept)
    # An "is_init" entry resets those envs to x0 before the Euler-Maruyama step.
    is_init = torch.tensor([[True], [False], [False]])
    td = TensorDict(action=zeros.clone(), is_init=is_init, batch_size=[3])
    before = noise.state.clone()
    torch.manual_seed(5)
    noise(td)
    torch.manual_seed(5)
    n = torch.randn(3, 1)
    start = torch.where(is_init, 0.0, before)
    expected = start + 0.15 * (0.0 - start) * 0.01 + 1.0 * 0.01**0.5 * n
    torch.testing.assert_close(noise.state, expected)
    torch.testing.assert_close(td["action"], expected.clamp(-1.0, 1.0))  # half-range 1
    noise.reset()
    assert noise.state.numel() == 0


def test_deterministic_actor_bounds():
    torch.manual_seed(0)
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
    actor = DeterministicActor(torch.nn.Linear(3, 2), 2, action_low=low, action_high=high)
    td = TensorDict(observation=100 * torch.randn(64, 3), batch_size=[64])
    action = actor(td)["action"]
    assert bool((action >= low).all() and (action <= high).all())
    expected = (low + high) / 2 + (high - low) / 2 * torch.tanh(actor.net(td["observation"]))
    torch.testing.assert_close(action, expected)
    with pytest.raises(ValueError, match="outputs 2 values .*action_dim is 3"):
        DeterministicActor(torch.nn.Linear(3, 2), 3)(td)


def test_ou_state_is_saved_and_loaded_whatever_the_number_of_envs():
    from tensordict import TensorDict

    from tdrl.modules import OrnsteinUhlenbeckNoise

    noise = OrnsteinUhlenbeckNoise(2, sigma=0.5)
    td = TensorDict({"action": torch.zeros(3, 2)}, batch_size=[3])
    noise(td)
    saved = noise.state_dict()
    assert saved["state"].shape == (3, 2)
    fresh = OrnsteinUhlenbeckNoise(2, sigma=0.5)  # empty state before its first call
    fresh.load_state_dict(saved)
    assert torch.equal(fresh.state, noise.state)
    torch.manual_seed(0)
    a = noise(td.clone())["action"]
    torch.manual_seed(0)
    b = fresh(td.clone())["action"]
    assert torch.equal(a, b)


def test_noise_options_take_their_defaults_and_refuse_unknown_names():
    noise = OrnsteinUhlenbeckNoise(2)
    assert noise.in_keys[0] == "action"
    assert noise.action_low.tolist() == [-1.0, -1.0] and noise.action_high.tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="sigma"):
        AdditiveGaussianNoise(2, sigma=0.1)  # type: ignore[call-arg]  # its name is sigma_init


def test_epsilon_greedy_refuses_a_one_hot_action_by_name():
    # TorchRL's QValueActor on a OneHot spec writes int64 one-hot [B, n]: replacing entries by
    # random indices would corrupt it silently
    one_hot = torch.nn.functional.one_hot(torch.tensor([3, 1, 0]), 4)
    td = TensorDict(action=one_hot, batch_size=[3])
    with (
        set_interaction_type(InteractionType.RANDOM),
        pytest.raises(ValueError, match=r"'action' must be an action index .*got \(3, 4\)"),
    ):
        EpsilonGreedy(4)(td)
    assert torch.equal(td["action"], one_hot)
    td = TensorDict(action=torch.zeros(3, 1, dtype=torch.int64), batch_size=[3])  # [B, 1] passes
    with set_interaction_type(InteractionType.RANDOM):
        EpsilonGreedy(4, eps_init=1.0, eps_end=1.0)(td)
    assert td["action"].shape == (3, 1)
