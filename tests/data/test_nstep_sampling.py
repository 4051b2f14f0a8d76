"""n-step samples of the buffer against the definition and against tdrl.ops.nstep on the stream."""

from __future__ import annotations

import pytest
import torch

from tdrl.data import PrioritizedReplayBuffer, ReplayBuffer
from tdrl.ops.nstep import nstep_return, nstep_steps


def reference(stream, t: int, n: int, gamma: float):
    """Walk the stored stream (a [T] TensorDict, oldest first) from t: explicit sum."""
    total, k = 0.0, 0
    while k < n and t + k < stream.shape[0]:
        total += gamma**k * float(stream["next", "reward"][t + k])
        k += 1
        if stream["next", "done"][t + k - 1]:
            break
    return total, k, t + k - 1


@pytest.mark.parametrize("capacity", [120, 75])  # 40 of 40 steps per stream; 25 (wrapped)
@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_nstep_samples_equal_definition_and_op(rollout, capacity, cls):
    n, gamma = 4, 0.9
    td = rollout(3, 40)
    rb = cls(capacity, n_steps=n, gamma=gamma, generator=0)
    rb.extend(td[:, :17])
    rb.extend(td[:, 17:])
    L = capacity // 3
    streams = td[:, -L:]  # what each stream holds, oldest first
    # the op on the stored streams (no bootstrap value: the reward sum and k)
    op_sum = nstep_return(
        streams["next", "reward"],
        None,
        streams["next", "terminated"],
        streams["next", "done"],
        gamma=gamma,
        n=n,
    )
    op_steps = nstep_steps(streams["next", "done"], n)
    sample = rb.sample(600)
    oldest = rb.stream_storage.oldest()
    kinds = set()
    for i in range(600):
        index = int(sample["index"][i])
        s, p = index % 3, index // 3
        t = (p - oldest) % L  # time position within the stored stream
        total, k, last = reference(streams[s], t, n, gamma)
        assert sample["steps_to_next_obs"][i].item() == k == op_steps[s, t].item()
        assert sample["next", "reward"][i].item() == pytest.approx(total, rel=1e-5, abs=1e-5)
        assert sample["next", "reward"][i].item() == pytest.approx(
            op_sum[s, t].item(), rel=1e-5, abs=1e-5
        )
        assert sample["gamma"][i].item() == pytest.approx(gamma**k)
        assert torch.equal(sample["observation"][i], streams[s, t]["observation"])
        for key in ("observation", "terminated", "truncated", "done"):
            assert torch.equal(sample["next", key][i], streams[s, last]["next", key])
        if streams[s, last]["next", "terminated"].item():
            kinds.add("terminated")
        elif streams[s, last]["next", "truncated"].item():
            kinds.add("truncated")
        elif t + k == L and k < n:
            kinds.add("unfinished")  # stopped at the newest stored step: bootstrap
        else:
            kinds.add("full")
    assert kinds == {"terminated", "truncated", "unfinished", "full"}


def test_nstep_window_never_reads_past_the_write_cursor():
    # one stream, no episode ends: a window from the newest steps must stop at the newest one
    from tensordict import TensorDict

    rb = ReplayBuffer(10, n_steps=5, gamma=1.0, generator=0)
    for chunk in range(3):  # 12 steps into 10 slots: slots hold steps 2..11, cursor at 2
        t = torch.arange(4 * chunk, 4 * chunk + 4, dtype=torch.float32)
        rb.extend(
            TensorDict(
                {
                    "observation": t.unsqueeze(-1),
                    "next": {
                        "observation": t.unsqueeze(-1) + 1,
                        "reward": torch.ones(4, 1),
                        "done": torch.zeros(4, 1, dtype=torch.bool),
                        "terminated": torch.zeros(4, 1, dtype=torch.bool),
                    },
                },
                batch_size=[4],
            )
        )
    s = rb.sample(400)
    obs = s["observation"][:, 0]
    k = s["steps_to_next_obs"][:, 0].float()
    assert torch.equal(k, torch.clamp(12 - obs, max=5))  # steps 7..11 have fewer than 5 ahead
    assert torch.equal(s["next", "observation"][:, 0], obs + k)
    assert torch.equal(s["next", "reward"][:, 0], k)


def test_the_gamma_entry_is_exact_in_the_rewards_precision(rollout):
    td = rollout(1, 30)
    td["next", "reward"] = td["next", "reward"].double()
    rb = ReplayBuffer(100, n_steps=3, gamma=0.999, generator=0)
    rb.extend(td)
    sample = rb.sample(64)
    k = sample["steps_to_next_obs"].double()
    assert sample["gamma"].dtype == torch.float64
    # an int power of a float is computed in float32: 0.9980010390 for k = 2 before
    torch.testing.assert_close(sample["gamma"], 0.999**k, rtol=1e-15, atol=0.0)
