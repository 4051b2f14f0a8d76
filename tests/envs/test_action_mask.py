"""An env-provided "action_mask" observation: stored as bool, checked against the action space,
and an all-false row is an error naming the env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from tdrl.collectors import Collector
from tdrl.envs import make_vec_env


class Masked(gym.Env):
    """Discrete(n) actions; the mask allows actions t % n and (t + 1) % n at step t."""

    def __init__(self, n: int = 4, mask_size: int | None = None, empty_at: int = -1) -> None:
        self.n, self.empty_at, self.t = n, empty_at, 0
        size = mask_size or n
        self.observation_space = gym.spaces.Dict(
            {
                "observation": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                "action_mask": gym.spaces.Box(0, 1, (size,), np.int8),
            }
        )
        self.action_space = gym.spaces.Discrete(n)

    def _obs(self):
        mask = np.zeros(self.observation_space["action_mask"].shape, np.int8)
        if self.t != self.empty_at:
            mask[[self.t % self.n, (self.t + 1) % self.n]] = 1
        return {"observation": np.zeros(2, np.float32), "action_mask": mask}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        valid = self._obs()["action_mask"][action] == 1
        self.t += 1
        return self._obs(), 1.0 if valid else -1.0, False, self.t >= 8, {}


def test_mask_is_a_bool_observation_with_a_spec():
    with make_vec_env(lambda: Masked(), 2, seed=0) as env:
        assert env.observation_spec["action_mask"].dtype == torch.bool
        batch = next(iter(Collector(env, None, frames_per_batch=16, total_frames=16)))
    mask = batch["action_mask"]
    assert mask.dtype == torch.bool and mask.shape == (2, 8, 4)
    assert (mask.sum(-1) == 2).all()


def test_mask_of_the_wrong_shape_is_named():
    with pytest.raises(
        ValueError, match=r"'action_mask' has shape \(3,\) per env, expected \(4,\)"
    ):
        make_vec_env(lambda: Masked(mask_size=3), 1)


def test_all_false_mask_row_is_an_error_naming_the_env():
    factories = [lambda: Masked(), lambda: Masked(empty_at=3)]
    with make_vec_env(factories, 2, seed=0) as env:
        collector = Collector(env, None, frames_per_batch=16, total_frames=16)
        with pytest.raises(ValueError, match="'action_mask' of env 1 allows no action"):
            next(iter(collector))
