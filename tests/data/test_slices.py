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
