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
    error = (chosen - target)[:, 2:].abs()  # R2D2's priority: 0.9 max + 0.1 mean of a slice
    torch.testing.assert_close(out["td_error"], 0.9 * error.max(1).values + 0.1 * error.mean(1))


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


def padded_slices(seed=1):
    """``slices`` with row 0 ending its episode (terminated) at step 2 and row 2 cut
    (truncated) at step 3: the steps after are padding, "mask" False there."""
    batch = slices(seed)
    g = torch.Generator().manual_seed(seed + 100)
    batch["mask"] = torch.tensor([[1, 1, 1, 0, 0], [1] * 5, [1, 1, 1, 1, 0]], dtype=torch.bool)
    batch["next", "terminated"][0, 2] = True
    batch["next", "truncated"][2, 3] = True
    batch["next", "done"] = batch["next", "terminated"] | batch["next", "truncated"]
    # after the end: another episode's steps, which must not matter
    batch["next", "reward"][0, 3:] = 1e3 * torch.randn(2, 1, generator=g)
    batch["observation"][0, 3:] = 10 * torch.randn(2, OBS, generator=g)
    batch["is_init"][0, 3] = True
    batch["observation"][2, 4] = 10 * torch.randn(OBS, generator=g)
    batch["next", "terminated"][2, 4] = True
    batch["next", "done"][2, 4] = True
    return batch


def stepped_padded_q(net, batch, last):
    """Q(s_0) .. Q(s_{last+1}) of one row b (a list per row), one step at a time: the steps up
    to ``last`` then the real next observation of step ``last``."""
    out = []
    for b in range(B):
        e = int(last[b])
        state = {k: batch[k][b : b + 1, 0] for k in ("recurrent_state_h", "recurrent_state_c")}
        obs = torch.cat(
            [batch["observation"][b, : e + 1], batch["next", "observation"][b, e : e + 1]]
        )
        row = []
        for t in range(e + 2):
            init = batch["is_init"][b : b + 1, t] if t <= e else torch.zeros(1, 1, dtype=torch.bool)
            td = net(TensorDict({"observation": obs[t : t + 1], "is_init": init, **state}, [1]))
            row.append(td["action_value"][0])
            state = {k: td["next", k] for k in state}
        out.append(torch.stack(row))
    return out


@pytest.mark.parametrize("rescale", [False, True])
def test_padded_n_step_targets_match_their_written_out_sums(rescale):
    """R2D2's targets: n-step double Q inside each slice's own episode, the real next
    observation after its last kept step, no bootstrap after a terminal step, a bootstrap after
    a cut, nothing read from the padding, and h(.) / h^-1(.) around the bootstrap when asked."""
    from tdrl.ops import value_rescale, value_unscale

    torch.manual_seed(0)
    n = 3
    loss = DRQNLoss(qnet(), burn_in=1, gamma=GAMMA, n_steps=n, value_rescaling=rescale)
    for p in loss.target_value_network.parameters():
        p.data.add_(0.1 * torch.randn_like(p))
    batch = padded_slices()
    out = loss(batch.clone())
    last = batch["mask"].sum(1) - 1
    with torch.no_grad():
        q = stepped_padded_q(loss.value_network, batch, last)
        q_target = stepped_padded_q(loss.target_value_network, batch, last)
    reward, terminated = batch["next", "reward"][..., 0], batch["next", "terminated"][..., 0]
    chosen, targets = [], []
    for b in range(B):
        e = int(last[b])
        for t in range(1, e + 1):  # the kept steps after the burn-in
            h = min(n, e - t + 1)
            ret = sum(GAMMA**k * reward[b, t + k] for k in range(h))
            best = q[b][t + h].argmax()
            boot = q_target[b][t + h][best]
            boot = value_unscale(boot) if rescale else boot
            y = ret + (0.0 if terminated[b, t + h - 1] else GAMMA**h * boot)
            targets.append(value_rescale(y) if rescale else y)
            chosen.append(q[b][t][batch["action"][b, t]])
    expected = torch.nn.functional.smooth_l1_loss(torch.stack(chosen), torch.stack(targets))
    torch.testing.assert_close(out["loss"], expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["value_target"], torch.stack(targets).mean(), rtol=1e-5,
                               atol=1e-6)  # fmt: skip


def test_a_mask_that_does_not_lead_or_an_early_end_is_refused():
    loss = DRQNLoss(qnet(), burn_in=1)
    batch = padded_slices()
    batch["mask"][1, 2] = False  # a hole: kept steps must lead the slice
    with pytest.raises(ValueError, match=r"slice 1's 'mask' \[True, True, False, True, True\]"):
        loss(batch)
    batch = padded_slices()
    batch["mask"][0] = True  # row 0 kept past its terminal step
    with pytest.raises(ValueError, match="slice 0 ends its episode at step 2 of 5"):
        loss(batch)
