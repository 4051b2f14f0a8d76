"""TorchRL interop both ways: tdrl batches in TorchRL's buffer and GAE; TorchRL's collector batch
has tdrl's layout, and a tdrl-style policy runs in TorchRL's collector."""

from __future__ import annotations

import torch
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.collectors import Collector as TorchRLCollector
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.envs import DoubleToFloat, GymEnv, SerialEnv, TransformedEnv
from torchrl.objectives.value import GAE

from tdrl.collectors import Collector
from tdrl.envs import make_vec_env


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(17, 6)

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loc = self.net(observation)
        return loc.tanh(), loc


def _policy() -> TensorDictModule:
    torch.manual_seed(0)
    return TensorDictModule(TwoHeads(), ["observation"], ["action", "loc"])


def _tdrl_batch(n: int, steps: int, **make_kwargs) -> torch.Tensor:
    with make_vec_env("HalfCheetah-v5", n, seed=0, **make_kwargs) as env:
        return Collector(env, _policy(), frames_per_batch=n * steps).rollout()


def test_torchrl_replay_buffer_extends_with_a_tdrl_batch():
    batch = _tdrl_batch(2, 5)
    buffer = ReplayBuffer(storage=LazyTensorStorage(100))
    buffer.extend(batch)
    assert len(buffer) == 2  # ndim=1 storage: one [T] sequence per env
    sample = buffer.sample(4)
    assert sample.batch_size == (4, 5)
    assert set(sample.keys(True, True)) >= set(batch.keys(True, True))
    flat = ReplayBuffer(storage=LazyTensorStorage(100))
    flat.extend(batch.reshape(-1))
    assert len(flat) == 10
    torch.testing.assert_close(flat[:]["next", "reward"], batch["next", "reward"].reshape(-1, 1))


def test_torchrl_gae_on_a_tdrl_batch_respects_truncation():
    gamma, lmbda = 0.9, 0.8
    batch = _tdrl_batch(2, 6, max_episode_steps=4)
    torch.manual_seed(0)
    value = TensorDictModule(nn.Linear(17, 1), ["observation"], ["state_value"])
    with torch.no_grad():
        GAE(gamma=gamma, lmbda=lmbda, value_network=value)(batch)
        v = value.module(batch["observation"])
        next_v = value.module(batch["next", "observation"])
    adv = batch["advantage"]
    assert adv.shape == (2, 6, 1)
    r = batch["next", "reward"]
    delta = r + gamma * next_v - v  # nothing terminates in HalfCheetah: always bootstrap
    # Explicit sum from the definition: A_t = sum_k (gamma lmbda)^k delta_{t+k}, stopping at the
    # end of the episode (step 3, a truncation) and at the end of the batch.
    truncated = batch["next", "truncated"].squeeze(-1)
    assert truncated[:, 3].all() and truncated.sum() == 2
    expected = torch.zeros_like(adv)
    for t in range(6):
        end = 3 if t <= 3 else 5
        for k in range(end - t + 1):
            expected[:, t] += (gamma * lmbda) ** k * delta[:, t + k]
    torch.testing.assert_close(adv, expected, rtol=1e-4, atol=1e-5)


def test_torchrl_collector_batch_has_the_tdrl_layout():
    n, steps = 2, 4
    env = TransformedEnv(SerialEnv(n, lambda: GymEnv("HalfCheetah-v5")), DoubleToFloat())
    collector = TorchRLCollector(env, _policy(), frames_per_batch=n * steps, total_frames=n * steps)
    torchrl_batch = next(iter(collector))
    collector.shutdown()
    tdrl_batch = _tdrl_batch(n, steps)
    assert torchrl_batch.batch_size == tdrl_batch.batch_size == (n, steps)
    assert torchrl_batch.names == tdrl_batch.names == [None, "time"]
    theirs, ours = set(torchrl_batch.keys(True, True)), set(tdrl_batch.keys(True, True))
    assert theirs == ours, theirs ^ ours
    for key in sorted(ours, key=str):
        a, b = torchrl_batch[key], tdrl_batch[key]
        assert (a.shape, a.dtype) == (b.shape, b.dtype), key
