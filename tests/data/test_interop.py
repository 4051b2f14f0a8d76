"""Interop with TorchRL 0.14: its collector batches go into tdrl, tdrl batches into its buffer."""

from __future__ import annotations

import pytest
import torch

from tdrl.data import PrioritizedReplayBuffer, ReplayBuffer

torchrl_envs = pytest.importorskip("torchrl.envs")
from torchrl.collectors import Collector  # noqa: E402
from torchrl.data import LazyTensorStorage  # noqa: E402
from torchrl.data import ReplayBuffer as TorchRLReplayBuffer  # noqa: E402


def test_tdrl_buffer_extends_with_torchrl_collector_batches():
    env = torchrl_envs.GymEnv("HalfCheetah-v5")
    env.set_seed(0)
    collector = Collector(env, policy=None, frames_per_batch=30, total_frames=90)  # random policy
    rb = ReplayBuffer(50, n_steps=3, gamma=0.9, generator=0)
    batches = []
    for batch in collector:
        batches.append(batch.clone())
        rb.extend(batch)  # [30] batches named "time": one stream of consecutive steps
    collector.shutdown()
    assert rb.num_streams == 1 and len(rb) == 50
    newest = torch.cat(batches)[-50:]
    stored = rb.storage[:, 0].roll(-rb.stream_storage.oldest(), 0)
    assert (stored == newest).all()
    s = rb.sample(16)
    assert s["observation"].dtype == torch.float64  # stored as TorchRL produced it
    # n-step over a running episode: next observation three steps ahead unless at the newest step
    t = (s["index"] - rb.stream_storage.oldest()) % 50
    k = s["steps_to_next_obs"][:, 0]
    assert torch.equal(k, torch.clamp(50 - t, max=3))
    torch.testing.assert_close(s["next", "observation"], newest["next", "observation"][t + k - 1])


def test_torchrl_buffer_extends_with_tdrl_batches(rollout):
    td = rollout(3, 20)  # tdrl collector layout [num_envs, T]
    trb = TorchRLReplayBuffer(storage=LazyTensorStorage(100, ndim=2))
    trb.extend(td)
    assert len(trb) == 60
    sample = trb.sample(8)
    assert set(sample.keys(True, True)) >= set(td.keys(True, True))
    # and flat samples of a tdrl buffer (with the priority weights TorchRL losses read)
    prb = PrioritizedReplayBuffer(60, generator=0)
    prb.extend(td)
    flat = TorchRLReplayBuffer(storage=LazyTensorStorage(100))
    flat.extend(prb.sample(32))
    assert len(flat) == 32
    out = flat.sample(4)
    assert out["priority_weight"].shape == (4,) and out["next", "reward"].shape == (4, 1)
    stored = td.reshape(-1)
    ids = set(map(tuple, stored["observation"].tolist()))
    assert all(tuple(o) in ids for o in out["observation"].tolist())
