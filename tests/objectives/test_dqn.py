"""DQNLoss: Bellman targets by hand at terminated/truncated steps, double Q, n-step, PER."""

from __future__ import annotations

import pytest
import torch
from offpolicy_data import linear
from tensordict import TensorDict

from tdrl.modules import QValueActor
from tdrl.objectives import DQNLoss, HardUpdate, update_priority

GAMMA = 0.9


def identity_q() -> QValueActor:
    """Q(s) = s: two observations, two actions."""
    return QValueActor(linear([[1.0, 0.0], [0.0, 1.0]]))


def batch(terminated, truncated, steps=None) -> TensorDict:
    td = TensorDict(
        {
            "observation": torch.tensor([[1.0, 2.0], [3.0, 0.0], [0.5, 0.5]]),
            "action": torch.tensor([1, 0, 1]),
            ("next", "observation"): torch.tensor([[1.0, 5.0], [2.0, 7.0], [4.0, 3.0]]),
            ("next", "reward"): torch.tensor([[1.0], [2.0], [3.0]]),
            ("next", "terminated"): torch.tensor(terminated).view(3, 1),
            ("next", "truncated"): torch.tensor(truncated).view(3, 1),
        },
        batch_size=[3],
    )
    td["next", "done"] = td["next", "terminated"] | td["next", "truncated"]
    if steps is not None:
        td["steps_to_next_obs"] = torch.tensor(steps).view(3, 1)
    return td


def test_targets_by_hand_at_terminated_and_truncated_steps():
    loss = DQNLoss(identity_q(), gamma=GAMMA)
    # Step 0 ordinary, step 1 terminated, step 2 truncated (time limit).
    td = batch([False, True, False], [False, False, True])
    target = loss.value_target(td)
    # max_a Q'(s', a) = max(s'): 5, (7, dropped), 4.
    expected = torch.tensor([1.0 + GAMMA * 5.0, 2.0, 3.0 + GAMMA * 4.0])
    torch.testing.assert_close(target, expected)
    # Treating the cut as terminal changes exactly that entry.
    cut_as_terminal = loss.value_target(batch([False, True, True], [False, False, False]))
    torch.testing.assert_close(cut_as_terminal[:2], expected[:2])
    assert cut_as_terminal[2] == 3.0


def test_loss_and_td_error_by_hand():
    loss = DQNLoss(identity_q(), gamma=GAMMA)
    td = batch([False, True, False], [False, False, True])
    out = loss(td)
    chosen = torch.tensor([2.0, 3.0, 0.5])  # Q(s, a) = s[a]
    target = torch.tensor([5.5, 2.0, 6.6])
    torch.testing.assert_close(out["td_error"], (chosen - target).abs())
    torch.testing.assert_close(out["loss"], ((chosen - target) ** 2).mean())


def test_nstep_discount_is_gamma_to_the_steps():
    loss = DQNLoss(identity_q(), gamma=GAMMA)
    td = batch([False, False, False], [False, False, False], steps=[3, 1, 2])
    expected = torch.tensor([1 + GAMMA**3 * 5, 2 + GAMMA * 7, 3 + GAMMA**2 * 4])
    torch.testing.assert_close(loss.value_target(td), expected)
    # Without steps_to_next_obs, a per-sample "gamma" entry (the buffer's gamma ** k) is used.
    td2 = batch([False, False, False], [False, False, False])
    td2["gamma"] = torch.tensor([[GAMMA**3], [GAMMA], [GAMMA**2]])
    torch.testing.assert_close(loss.value_target(td2), expected)


def test_double_dqn_selects_with_online_evaluates_with_target():
    online = identity_q()
    loss = DQNLoss(online, gamma=GAMMA, double_dqn=True)
    with torch.no_grad():  # target Q'(s) = reversed s; online still Q(s) = s
        loss.target_value_network.net.weight.copy_(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
    td = batch([False, False, False], [False, False, False])
    # online argmax over s' = [1,5] -> 1, [2,7] -> 1, [4,3] -> 0; Q'(s', a*) = s'[1 - a*].
    expected = torch.tensor([1 + GAMMA * 1.0, 2 + GAMMA * 2.0, 3 + GAMMA * 3.0])
    torch.testing.assert_close(loss.value_target(td), expected)
    plain = DQNLoss(online, gamma=GAMMA)
    with torch.no_grad():
        plain.target_value_network.net.weight.copy_(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
    assert not torch.allclose(plain.value_target(td), expected)


def test_priority_weights_scale_per_sample_losses():
    loss = DQNLoss(identity_q(), gamma=GAMMA)
    td = batch([False, True, False], [False, False, True])
    plain = loss(td)
    td["priority_weight"] = torch.tensor([0.5, 2.0, 0.0])
    weighted = loss(td)
    per_sample = plain["td_error"] ** 2
    torch.testing.assert_close(weighted["loss"], (per_sample * td["priority_weight"]).mean())


def test_update_priority_feeds_td_errors_to_the_buffer():
    class Recorder:
        def update_priority(self, index, priority):
            self.index, self.priority = index, priority

    loss = DQNLoss(identity_q(), gamma=GAMMA)
    td = batch([False, True, False], [False, False, True])
    td["index"] = torch.tensor([7, 3, 11])
    out = loss(td)
    buffer = Recorder()
    update_priority(buffer, td, out)
    assert torch.equal(buffer.index, td["index"])
    torch.testing.assert_close(buffer.priority, out["td_error"])
    assert not buffer.priority.requires_grad


def test_one_hot_actions_equal_index_actions():
    loss = DQNLoss(identity_q(), gamma=GAMMA)
    td = batch([False, True, False], [False, False, True])
    one_hot = td.clone()
    one_hot["action"] = torch.nn.functional.one_hot(td["action"], 2).float()
    torch.testing.assert_close(loss(one_hot)["loss"], loss(td)["loss"])
    one_hot["action"] = one_hot["action"].bool()  # a bool one-hot spec's actions
    torch.testing.assert_close(loss(one_hot)["loss"], loss(td)["loss"])


def test_target_network_is_frozen_and_hard_updated():
    loss = DQNLoss(identity_q(), gamma=GAMMA)
    td = batch([False, True, False], [False, False, True])
    loss(td)["loss"].backward()
    assert all(
        p.grad is None and not p.requires_grad for p in loss.target_value_network.parameters()
    )
    assert all(p.grad is not None for p in loss.value_network.parameters())
    with torch.no_grad():
        loss.value_network.net.weight.add_(1.0)
    updater = HardUpdate(loss, value_network_update_interval=2)
    updater.step()
    assert not torch.equal(loss.target_value_network.net.weight, loss.value_network.net.weight)
    updater.step()
    assert torch.equal(loss.target_value_network.net.weight, loss.value_network.net.weight)


def test_input_is_not_mutated():
    loss = DQNLoss(identity_q(), gamma=GAMMA)
    td = batch([False, True, False], [False, False, True])
    before = td.clone()
    loss(td)
    assert set(td.keys(True, True)) == set(before.keys(True, True))
    assert (td == before).all()


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda td: td.del_(("next", "reward")), "'next', 'reward'"),
        (lambda td: td.del_("action"), "'action'"),
        (lambda td: td.set("action", torch.tensor([0, 5, 1])), "'action' holds indices outside"),
        (lambda td: td.set(("next", "terminated"), torch.zeros(3, 1)), "must be bool"),
        (lambda td: td.set(("next", "reward"), torch.zeros(3, 2)), "'next', 'reward'.*shape"),
        # an integer reward would have cast the n-step discount gamma ** k to 0
        (
            lambda td: td.set(("next", "reward"), torch.ones(3, 1, dtype=torch.long)).set(
                "steps_to_next_obs", torch.full((3, 1), 3)
            ),
            r"\('next', 'reward'\) must be a floating-point tensor, got torch.int64",
        ),
    ],
)
def test_bad_input_names_the_key(mutate, match):
    loss = DQNLoss(identity_q(), gamma=GAMMA)
    td = batch([False, True, False], [False, False, True])
    mutate(td)
    with pytest.raises((KeyError, ValueError, TypeError), match=match):
        loss(td)


def test_nested_priority_key_in_the_output():
    # The output TensorDict takes its unchecked constructor only for plain string keys.
    loss = DQNLoss(identity_q(), gamma=GAMMA).set_keys(priority=("per", "td_error"))
    out = loss(batch([False, True, False], [False, False, True]))
    assert out[("per", "td_error")].shape == (3,)
    assert out.batch_size == torch.Size([]) and "td_error" not in out.keys()
