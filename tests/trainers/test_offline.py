"""The offline loop's helpers: the dataset's state normalization, action clipping and
reward scaling."""

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.data import ReplayBuffer
from tdrl.trainers.offline import normalize_dataset_observations


def _dataset(obs: torch.Tensor, next_obs: torch.Tensor, capacity: int) -> ReplayBuffer:
    T = obs.shape[0]
    false = torch.zeros(T, 1, dtype=torch.bool)
    td = TensorDict(
        {
            "observation": obs.clone(),
            "action": torch.zeros(T, 1),
            "next": {"observation": next_obs.clone(), "reward": torch.ones(T, 1),
                     "terminated": false, "truncated": false, "done": false},
        },
        batch_size=[T],
    )  # fmt: skip
    rb = ReplayBuffer(capacity, num_streams=1, generator=0)
    rb.extend(td)
    return rb


def test_normalize_dataset_observations_is_td3bc_state_normalization():
    gen = torch.Generator().manual_seed(0)
    T = 50
    scale = torch.tensor([1.0, 10.0, 0.01])
    obs = torch.randn(T, 3, generator=gen) * scale + torch.tensor([5.0, -3.0, 0.0])
    next_obs = torch.randn(T, 3, generator=gen) * scale
    rb = _dataset(obs, next_obs, capacity=80)  # 30 positions never written
    norm = normalize_dataset_observations(rb)

    # TD3+BC's definition, written out: mean and (population) std of the dataset's states
    x = obs.double().numpy()
    mean = x.sum(0) / T
    std = np.sqrt(((x - mean) ** 2).sum(0) / T)
    stored = rb.storage[:T]
    expect_obs = (x - mean) / (std + 1e-3)
    expect_next = (next_obs.double().numpy() - mean) / (std + 1e-3)
    np.testing.assert_allclose(
        stored["observation"][:, 0].numpy(), expect_obs, rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        stored["next", "observation"][:, 0].numpy(), expect_next, rtol=1e-5, atol=1e-5
    )
    assert bool((rb.storage[T:]["observation"] == 0).all())  # unwritten rows untouched
    # the returned transform, applied to the env's raw observations, is the same one
    td = TensorDict({"observation": obs[:4].clone()}, batch_size=[4])
    np.testing.assert_allclose(
        norm(td)["observation"].numpy(), expect_obs[:4], rtol=1e-5, atol=1e-5
    )
    # the sampled batches are normalized too
    sample = rb.sample(16)
    assert sample["observation"].abs().max() < 10


def test_normalize_dataset_observations_refuses_integer_observations_and_empty_buffers():
    T = 8
    rb = _dataset(torch.arange(T * 2).view(T, 2), torch.arange(T * 2).view(T, 2), capacity=T)
    with pytest.raises(TypeError, match="'observation' has dtype torch.int64"):
        normalize_dataset_observations(rb)
    with pytest.raises(ValueError, match="the buffer is empty"):
        normalize_dataset_observations(ReplayBuffer(8, num_streams=1))


def test_clip_dataset_actions_puts_a_policys_samples_into_the_box():
    from tdrl.envs import make_vec_env
    from tdrl.trainers.offline import clip_dataset_actions

    with make_vec_env("Hopper-v5", 1) as env:
        spec = env.action_spec
    action = torch.tensor([[0.5, -0.2, 0.1], [1.7, -3.0, 0.9], [-1.0, 1.0, 2.5]])
    buffer = ReplayBuffer(10)
    buffer.extend(TensorDict({"action": action, "observation": torch.zeros(3, 11)}, [3]))
    assert clip_dataset_actions(buffer, spec) == 3  # 1.7, -3.0 and 2.5
    stored = buffer.storage[:3]["action"].reshape(3, 3)
    torch.testing.assert_close(stored, action.clamp(-1.0, 1.0))
    assert clip_dataset_actions(buffer, spec) == 0


def _steps(reward: torch.Tensor, done: torch.Tensor) -> TensorDict:
    """Steps of ``reward`` and ``done`` (``[S, T]`` or ``[T]``) with the other entries zero."""
    flag = done.unsqueeze(-1)
    false = torch.zeros_like(flag)
    return TensorDict(
        {
            "observation": torch.zeros(*reward.shape, 3),
            "action": torch.zeros(*reward.shape, 1),
            "next": {"observation": torch.zeros(*reward.shape, 3), "reward": reward.unsqueeze(-1),
                     "terminated": flag, "truncated": false, "done": flag},
        },
        batch_size=reward.shape,
    )  # fmt: skip


def test_scale_dataset_rewards_is_iqls_return_spread_scaling():
    from tdrl.trainers.offline import scale_dataset_rewards

    # two streams of 6 steps: stream 0 holds episodes [0, 2] (done at step 2) and [3, 5] (cut
    # at the end of the stored steps); stream 1 episodes [0, 0], [1, 4] and [5, 5]. The
    # rewards make the wrong segmentations give other spreads: a done step opening the next
    # episode (31), one stream's last episode running on into the next stream's first (38).
    reward = torch.tensor([[1.0, 2.0, 30.0, -10.0, 0.5, 0.5], [4.0, 1.0, 1.0, 1.0, 1.0, -2.0]])
    done = torch.zeros(2, 6, dtype=torch.bool)
    done[0, 2] = done[1, 0] = done[1, 4] = True
    rb = ReplayBuffer(20, num_streams=2, generator=0)  # 4 steps a stream never written
    rb.extend(_steps(reward, done))
    returns = [1.0 + 2.0 + 30.0, -10.0 + 0.5 + 0.5, 4.0, 1.0 + 1.0 + 1.0 + 1.0, -2.0]
    factor = scale_dataset_rewards(rb)
    assert factor == pytest.approx(1000.0 / (max(returns) - min(returns)))  # 1000 / 42
    stored = rb.storage[:6]["next", "reward"].reshape(6, 2).t()
    torch.testing.assert_close(stored, reward * factor)
    assert bool((rb.storage[6:]["next", "reward"] == 0).all())  # unwritten rows untouched

    # a wrapped ring: 6 steps into 4 places keep [1 (done), 10, 20, 30] in time order, the
    # episodes [1] and [10, 20, 30] (in storage order [20, 30, 1] and [10]: a spread of 41)
    ring = ReplayBuffer(4, num_streams=1, generator=0)
    ring.extend(_steps(torch.tensor([1.0, 1.0, 1.0, 10.0, 20.0, 30.0]),
                       torch.tensor([False, False, True, False, False, False])))  # fmt: skip
    assert scale_dataset_rewards(ring) == pytest.approx(1000.0 / 59.0)
    kept = ring.storage[:4]["next", "reward"].flatten().sort().values
    torch.testing.assert_close(kept, torch.tensor([1.0, 10.0, 20.0, 30.0]) * 1000.0 / 59.0)

    # one episode, or all of one return: nothing to scale by, and the error says what to do
    flat = _dataset(torch.zeros(5, 2), torch.zeros(5, 2), capacity=5)
    with pytest.raises(ValueError, match="1 episode returns span 0.0.*--scale-rewards off"):
        scale_dataset_rewards(flat)
