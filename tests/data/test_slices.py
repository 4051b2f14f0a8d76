"""Slice sampling: inside one episode, last step marked, frame stacking stops at episode starts."""

from __future__ import annotations

import pytest
import torch

from tdrl.data import ReplayBuffer


@pytest.mark.parametrize("capacity", [120, 75])
def test_slices_never_cross_an_episode_end(rollout, capacity):
    td = rollout(3, 40)
    rb = ReplayBuffer(capacity, generator=0)
    rb.extend(td)
    L = 5
    s = rb.sample_slices(200, L)
    assert s.batch_size == (200, L)
    traj = s["collector", "traj_ids"]
    assert (traj == traj[:, :1]).all()  # one episode per slice
    assert not s["next", "done"][:, :-1].any()  # ends only at the last step
    assert s["next", "done"][:, -1].all()  # every slice's last step is an end for estimators
    flat = rb.storage.reshape(-1)[s["index"]]
    original_done = flat["next", "done"][:, -1]
    # the last step: its own flags when the episode ended there, else marked truncated
    assert torch.equal(
        s["next", "truncated"][:, -1], flat["next", "truncated"][:, -1] | ~original_done
    )
    assert torch.equal(s["next", "terminated"], flat["next", "terminated"])
    assert (~original_done).any() and original_done.any()
    torch.testing.assert_close(s["observation"], flat["observation"])
    # consecutive steps of one stream: next observation of step i is the observation of i + 1
    torch.testing.assert_close(s["next", "observation"][:, :-1], s["observation"][:, 1:])
    # never across the write cursor: positions increase by one stream step
    pos = s["index"] // 3
    assert ((pos[:, 1:] - pos[:, :-1]) % (capacity // 3) == 1).all()
    assert not s["next", "done"][:, :-1].any()
    # the storage itself is untouched by the marking
    in_time_order = rb.storage["next", "done"].roll(-rb.stream_storage.oldest(), 0).transpose(0, 1)
    assert torch.equal(in_time_order, td[:, -(capacity // 3) :]["next", "done"])


def test_frame_stack_does_not_reach_into_the_previous_episode(rollout):
    td = rollout(3, 40)
    rb = ReplayBuffer(120, generator=1)
    rb.extend(td)
    k, L = 3, 4
    s = rb.sample_slices(100, L, frame_stack=k)
    assert s["observation"].shape == (100, L, k, 4)
    obs, traj = td["observation"], td["collector", "traj_ids"]
    for b in range(100):
        for i in range(L):
            index = int(s["index"][b, i])
            stream, t = index % 3, index // 3
            frames = []
            for j in range(k - 1, -1, -1):  # oldest first; repeat the episode's first frame
                u = t - j
                while u < t and (u < 0 or traj[stream, u] != traj[stream, t]):
                    u += 1
                frames.append(obs[stream, u])
            torch.testing.assert_close(s["observation"][b, i], torch.stack(frames))
            torch.testing.assert_close(
                s["next", "observation"][b, i, -1], td["next", "observation"][stream, t]
            )
            torch.testing.assert_close(s["next", "observation"][b, i, :-1], torch.stack(frames)[1:])


def test_slice_errors():
    from tensordict import TensorDict

    rb = ReplayBuffer(10, generator=0)
    done = torch.tensor([False, True] * 5).unsqueeze(-1)
    rb.extend(
        TensorDict(
            {
                "observation": torch.zeros(10, 1),
                "next": {"done": done, "truncated": torch.zeros_like(done)},
            },
            batch_size=[10],
        )
    )
    pair = rb.sample_slices(4, 2)  # only (even, odd) pairs lie inside one episode
    assert (pair["index"][:, 0] % 2 == 0).all() and pair["next", "done"][:, 1].all()
    with pytest.raises(RuntimeError, match="no slice of length 3"):
        rb.sample_slices(4, 3)
    with pytest.raises(ValueError, match="slice_len"):
        rb.sample_slices(4, 11)


def test_frame_stack_stacks_every_key_of_a_dict_observation(rollout):
    # The same rollout with its observation split into two keys (a dict observation): each key
    # is stacked exactly like the single observation is, column for column.
    td = rollout(3, 40)
    split = td.clone()
    for prefix in ((), ("next",)):
        obs = split.get((*prefix, "observation"))
        split.set((*prefix, "position"), obs[..., :2].clone())
        split.set((*prefix, "velocity"), obs[..., 2:].clone())
        del split[(*prefix, "observation")]
    single, double = ReplayBuffer(120, generator=1), ReplayBuffer(120, generator=1)
    single.extend(td)
    double.extend(split)
    a = single.sample_slices(50, 4, frame_stack=3)
    b = double.sample_slices(50, 4, frame_stack=3)
    assert torch.equal(a["index"], b["index"])  # same generator, same draws
    for prefix in ((), ("next",)):
        stacked = a.get((*prefix, "observation"))
        assert b.get((*prefix, "position")).shape == (50, 4, 3, 2)
        torch.testing.assert_close(b.get((*prefix, "position")), stacked[..., :2])
        torch.testing.assert_close(b.get((*prefix, "velocity")), stacked[..., 2:])
    # the episode-end flags are not stacked
    assert b["next", "done"].shape == (50, 4, 1)
    # naming the keys stacks only those
    c = double.sample_slices(50, 4, frame_stack=3, observation_keys=["position"])
    assert c["position"].shape == (50, 4, 3, 2) and c["velocity"].shape == (50, 4, 2)


@pytest.mark.parametrize("capacity", [120, 75])
def test_padded_slices_keep_their_own_episode_and_mask_the_rest(rollout, capacity):
    """R2D2's padded sequences: a slice may start at any stored step; "mask" keeps its own
    episode's steps (up to the episode's end or the newest stored step), which lead the slice;
    that last kept step is done (its own flags, or marked truncated where the slice cuts it)."""
    td = rollout(3, 40)
    rb = ReplayBuffer(capacity, generator=0)
    rb.extend(td)
    L = 6
    s = rb.sample_slices(2000, L, pad=True)
    mask = s["mask"]
    last = mask.sum(1) - 1
    assert mask[:, 0].all() and torch.equal(mask, torch.arange(L) <= last[:, None])
    rows = torch.arange(2000)
    traj = s["collector", "traj_ids"]
    assert ((traj == traj[:, :1]) | ~mask).all()  # the kept steps: one episode
    done = s["next", "done"][..., 0]
    assert done[rows, last].all() and not (done & (torch.arange(L) < last[:, None])).any()
    flat = rb.storage.reshape(-1)[s["index"]]
    own = flat["next", "done"][rows, last, 0]
    # a cut is marked truncated; an episode's own end keeps its flags
    assert torch.equal(
        s["next", "truncated"][rows, last, 0], flat["next", "truncated"][rows, last, 0] | ~own
    )
    assert torch.equal(s["next", "terminated"], flat["next", "terminated"])
    assert (~own).any() and own.any() and (last < L - 1).any()
    # the newest stored step of a stream is the last a slice keeps
    newest = (rb.stream_storage.cursor - 1) % (capacity // 3)
    pos = s["index"] // 3
    at_newest = (pos == newest) & mask
    assert (
        at_newest.any()
        and (at_newest.float().argmax(1)[at_newest.any(1)] == last[at_newest.any(1)]).all()
    )
    # every stored step is replayed, an episode's terminal step as often as others (uniform
    # starts: a step is kept by the slices starting up to L - 1 steps before it in its episode)
    kept_index = s["index"][mask]
    terminal = rb.storage.reshape(-1)["next", "terminated"][:, 0].nonzero()[:, 0]
    assert terminal.numel() > 0 and torch.isin(terminal, kept_index).all()


def test_a_prioritized_buffer_draws_padded_slice_starts_by_priority(rollout):
    """R2D2's prioritized sequences: a start's priority steers how often its slice is drawn,
    the slice's importance weight stands at each of its steps, and update_priority with a
    loss's per-slice td_error sets the start's priority."""
    from tensordict import TensorDict

    from tdrl.data import PrioritizedReplayBuffer
    from tdrl.objectives import update_priority

    rb = PrioritizedReplayBuffer(120, alpha=1.0, beta=1.0, generator=0)
    rb.extend(rollout(3, 40))
    s = rb.sample_slices(8, 5, pad=True)
    starts = s["index"][:, 0]
    priority = torch.full((8,), 1e-3)
    priority[0] = 1e3  # the first slice's start: far above the others
    update_priority(rb, s, TensorDict({"td_error": priority}, []))
    again = rb.sample_slices(4000, 5, pad=True)
    share = (again["index"][:, 0] == starts[0]).float().mean()
    assert share > 0.5  # 1e3 against 112 items at 1 and 7 at 1e-3
    weight = again["priority_weight"]
    assert weight.shape == (4000, 5) and (weight == weight[:, :1]).all()
    top = again["index"][:, 0] == starts[0]
    assert weight[top].max() < weight[~top].min()  # the most drawn start weighs the least
    with pytest.raises(ValueError, match="draws slice starts by priority only with pad=True"):
        rb.sample_slices(4, 5)


def test_a_slice_cut_by_the_newest_stored_step_keeps_its_start_priority(rollout):
    """R2D2 replays whole sequences: a padded slice that the data's end cut short has no
    priority of its own yet, so update_priority leaves its start's (new items: the max)."""
    from tensordict import TensorDict

    from tdrl.data import PrioritizedReplayBuffer
    from tdrl.objectives import update_priority

    rb = PrioritizedReplayBuffer(120, alpha=1.0, beta=1.0, generator=0)
    rb.extend(rollout(3, 40))
    s = rb.sample_slices(400, 6, pad=True)
    last = s["index"].gather(1, s["mask"].sum(1, keepdim=True) - 1)[:, 0]
    cut = rb.is_newest(last)
    assert cut.any() and (~cut).any()
    update_priority(rb, s, TensorDict({"td_error": torch.full((400,), 1e-3)}, []))
    again = rb.sample_slices(4000, 6, pad=True)
    starts = again["index"][:, 0]
    kept, lowered = s["index"][cut, 0].unique(), s["index"][~cut, 0].unique()
    per_kept = torch.isin(starts, kept).sum() / kept.numel()  # draws per start: priority 1
    per_lowered = torch.isin(starts, lowered).sum() / lowered.numel()  # priority 1e-3
    assert per_kept > 50 * max(float(per_lowered), 1 / 4000)
