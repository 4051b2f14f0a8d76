"""DRQNLoss against a reference that steps the networks one step at a time (step mode) from the
stored state: the value targets (double Q, terminated, the extra last step) and the burn-in mask."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictSequential

from tdrl.modules import LSTMModule, QValueActor, mlp
from tdrl.objectives import DRQNLoss, HardUpdate

B, L, OBS, N, H, GAMMA = 3, 5, 2, 3, 6, 0.9


def qnet():
    lstm = LSTMModule(OBS, H, in_key="observation", out_key="embed")
    return TensorDictSequential(lstm, QValueActor(mlp(H, N, (8,)), in_key="embed"))


def slices(seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(B, L, OBS, generator=g)
    final = torch.randn(B, OBS, generator=g)  # ("next", obs) of the last step
    next_obs = torch.cat([obs[:, 1:], final[:, None]], 1)
    is_init = torch.zeros(B, L, 1, dtype=torch.bool)
    is_init[0, 0] = True
    h0, c0 = torch.randn(B, 1, H, generator=g), torch.randn(B, 1, H, generator=g)
    h0[0], c0[0] = 0.0, 0.0  # an episode start: the collector stores zeros
    terminated = torch.zeros(B, L, 1, dtype=torch.bool)
    terminated[1, -1] = True  # row 1's episode ends at its last step
    return TensorDict({
        "observation": obs, "is_init": is_init, "action": torch.randint(N, (B, L), generator=g),
        "recurrent_state_h": h0[:, None].expand(B, L, 1, H).clone(),
        "recurrent_state_c": c0[:, None].expand(B, L, 1, H).clone(),
        "next": {"observation": next_obs, "reward": torch.randn(B, L, 1, generator=g),
                 "terminated": terminated, "done": terminated.clone(),
                 "truncated": torch.zeros(B, L, 1, dtype=torch.bool)},
    }, [B, L])  # fmt: skip


def stepped_q(net, batch):
    """Q(s_0) ... Q(s_L) of each row, one step at a time from the stored state."""
    state = {k: batch[k][:, 0] for k in ("recurrent_state_h", "recurrent_state_c")}
    obs = torch.cat([batch["observation"], batch["next", "observation"][:, -1:]], 1)
    init = torch.cat([batch["is_init"], torch.zeros(B, 1, 1, dtype=torch.bool)], 1)
    out = []
    for t in range(L + 1):
        td = net(TensorDict({"observation": obs[:, t], "is_init": init[:, t], **state}, [B]))
        out.append(td["action_value"])
        state = {k: td["next", k] for k in state}
    return torch.stack(out, 1)  # [B, L + 1, N]


@pytest.mark.parametrize("double_dqn", [True, False])
def test_drqn_loss_matches_a_step_by_step_reference(double_dqn):
    torch.manual_seed(0)
    loss = DRQNLoss(qnet(), burn_in=2, gamma=GAMMA, double_dqn=double_dqn)
    for p in loss.target_value_network.parameters():  # a target that differs from the online net
        p.data.add_(0.1 * torch.randn_like(p))
    batch = slices()
    out = loss(batch.clone())
    with torch.no_grad():
        q = stepped_q(loss.value_network, batch)
        q_target = stepped_q(loss.target_value_network, batch)
    chooser = q if double_dqn else q_target
    best = chooser[:, 1:].argmax(-1, keepdim=True)
    next_value = q_target[:, 1:].gather(-1, best).squeeze(-1)
    reward = batch["next", "reward"][..., 0]
    keep = (~batch["next", "terminated"][..., 0]).float()
    target = reward + GAMMA * keep * next_value  # row 1's last step: reward only
    chosen = q[:, :L].gather(-1, batch["action"][..., None]).squeeze(-1)
    expected = torch.nn.functional.smooth_l1_loss(chosen[:, 2:], target[:, 2:])
    torch.testing.assert_close(out["loss"], expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["value_target"], target[:, 2:].mean(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["td_error"], (chosen - target)[:, 2:].abs().mean(1))


def test_gradients_reach_the_online_network_only_and_the_target_updates():
    torch.manual_seed(0)
    loss = DRQNLoss(qnet(), burn_in=1)
    loss(slices())["loss"].backward()
    assert all(
        p.grad is not None and p.grad.abs().sum() > 0 for p in loss.value_network.parameters()
    )
    assert all(p.grad is None for p in loss.target_value_network.parameters())
    HardUpdate(loss, value_network_update_interval=1).step()
    for a, b in zip(
        loss.value_network.parameters(), loss.target_value_network.parameters(), strict=True
    ):
        assert torch.equal(a, b)


def test_bad_slices_are_named():
    loss = DRQNLoss(qnet(), burn_in=5)
    with pytest.raises(ValueError, match="longer than burn_in=5"):
        loss(slices())
    bad = slices().exclude(("next", "observation"))
    with pytest.raises(KeyError, match="'observation'"):
        DRQNLoss(qnet())(bad)


def test_burn_in_steps_get_no_gradient():
    # R2D2: the burn-in only warms the state up; the trained steps start from it, detached.
    torch.manual_seed(0)
    loss = DRQNLoss(qnet(), burn_in=2, gamma=GAMMA)
    batch = slices()
    obs = batch["observation"].clone().requires_grad_(True)
    batch["observation"] = obs
    loss(batch)["loss"].backward()
    assert torch.equal(obs.grad[:, :2], torch.zeros_like(obs.grad[:, :2]))
    assert (obs.grad[:, 2:].abs().sum(-1) > 0).all()  # every trained step is reached


def test_integer_flags_a_mid_slice_episode_end_and_bad_actions_are_refused_by_name():
    loss = DRQNLoss(qnet())
    for dtype in (torch.uint8, torch.int64):  # ~x of an integer flag is not 1 - x
        bad = slices()
        bad["next", "terminated"] = bad["next", "terminated"].to(dtype)
        with pytest.raises(
            TypeError, match=r"'terminated'\) must be bool, got torch\.(uint8|int64)"
        ):
            loss(bad)
    bad = slices()
    bad["next", "reward"] = bad["next", "reward"].long()
    with pytest.raises(TypeError, match="'reward'.*floating-point"):
        loss(bad)
    # a raw rollout cut by a time limit at step 2: Q(s_3) would be the next episode's reset
    for key in ("truncated", "done"):
        bad = slices()
        bad["next", key][0, 2] = True
        with pytest.raises(ValueError, match="slice 0 ends its episode at step 2 of 5"):
            loss(bad)
    bad = slices()
    bad["action"] = bad["action"].float()
    with pytest.raises(
        ValueError, match=r"'action' must be an integer action index \(3, 5\) .*torch\.float32"
    ):
        loss(bad)


def test_one_hot_actions_give_the_index_loss():
    torch.manual_seed(0)
    loss = DRQNLoss(qnet(), burn_in=1, gamma=GAMMA)
    batch = slices()
    one_hot = batch.clone()
    one_hot["action"] = torch.nn.functional.one_hot(batch["action"], N).bool()
    torch.testing.assert_close(loss(one_hot)["loss"], loss(batch)["loss"])
    one_hot["action"] = one_hot["action"].float()  # TorchRL's QValueActor may write floats
    torch.testing.assert_close(loss(one_hot)["loss"], loss(batch)["loss"])


def test_priority_weights_weigh_each_step():
    torch.manual_seed(0)
    loss = DRQNLoss(qnet(), burn_in=2, gamma=GAMMA)
    batch = slices()
    plain = loss(batch.clone())
    with torch.no_grad():
        q = stepped_q(loss.value_network, batch)
        q_target = stepped_q(loss.target_value_network, batch)
    next_value = q_target[:, 1:].gather(-1, q[:, 1:].argmax(-1, keepdim=True)).squeeze(-1)
    keep = (~batch["next", "terminated"][..., 0]).float()
    target = batch["next", "reward"][..., 0] + GAMMA * keep * next_value
    chosen = q[:, :L].gather(-1, batch["action"][..., None]).squeeze(-1)
    per_step = torch.nn.functional.smooth_l1_loss(chosen, target, reduction="none")[:, 2:]
    w = torch.tensor([0.0, 2.0, 0.5])
    weighted = batch.clone()
    weighted["priority_weight"] = w[:, None].expand(B, L)  # a slice sampler's: one per slice
    expected = (per_step * w[:, None]).mean()
    torch.testing.assert_close(loss(weighted)["loss"], expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(expected, plain["loss"])
    per_step_w = torch.rand(B, L)
    weighted["priority_weight"] = per_step_w.unsqueeze(-1)
    expected = (per_step * per_step_w[:, 2:]).mean()
    torch.testing.assert_close(loss(weighted)["loss"], expected, rtol=1e-5, atol=1e-6)
    weighted["priority_weight"] = torch.ones(B, L, 2)
    with pytest.raises(ValueError, match="'priority_weight' must be per step"):
        loss(weighted)
