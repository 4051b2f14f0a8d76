"""MiniGrid through tdrl.envs (the minigrid extra): the 7x7 view as [3, 7, 7] uint8 within the
index bounds, equal to minigrid's own image; and the on-policy networks and exploration bonuses
built on it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from tdrl.collectors import Collector
from tdrl.envs import make_vec_env

pytest.importorskip("minigrid")
TASK = "MiniGrid-DoorKey-5x5-v0"


def test_the_view_is_minigrids_image_channels_first_within_its_index_bounds():
    from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX, STATE_TO_IDX

    with make_vec_env(f"tdrl/{TASK}", 2, seed=3) as env:
        spec = env.observation_spec["observation"]
        assert spec.shape == (2, 3, 7, 7) and spec.dtype == torch.uint8
        high = spec.space.high[0, :, 0, 0].tolist()
        assert high == [max(OBJECT_TO_IDX.values()), max(COLOR_TO_IDX.values()),
                        max(STATE_TO_IDX.values())]  # fmt: skip
        batch = Collector(env, None, 64).rollout()
    obs = batch["observation"]
    assert bool((obs <= spec.space.high[:1, None]).all())
    own = gym.make(TASK)
    image, _ = own.reset(seed=3)
    np.testing.assert_array_equal(
        batch["observation"][0, 0].numpy(), image["image"].transpose(2, 0, 1)
    )


@pytest.mark.parametrize("bonus", ["rnd", "icm"])
def test_the_exploration_bonuses_take_the_view(bonus):
    from tdrl.keys import NEXT_INTRINSIC_REWARD
    from tdrl.trainers.config import IntrinsicConfig, NetworkConfig

    with make_vec_env(f"tdrl/{TASK}", 2, seed=0) as env:
        nets = NetworkConfig().build(env.observation_spec, env.action_spec)
        parts = IntrinsicConfig(intrinsic=bonus, intrinsic_coeff=1.0).build(
            env.observation_spec, env.action_spec, nets, lmbda=0.95, critic_coeff=0.5
        )
        batch = Collector(env, nets.actor, 32).rollout()
    parts.module.intrinsic_reward(batch)
    reward = batch[NEXT_INTRINSIC_REWARD]
    assert (
        reward.shape == (2, 16, 1) and bool(torch.isfinite(reward).all()) and reward.abs().sum() > 0
    )
    with torch.no_grad():
        parts.estimator(batch)  # the intrinsic value targets
    out = parts.losses(batch.reshape(-1))
    assert all(torch.isfinite(v) for v in out.values())
