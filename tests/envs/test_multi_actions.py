"""MultiDiscrete and MultiBinary action spaces in envs, specs and the collector."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torchrl.data import Binary, MultiCategorical

from tdrl.collectors import Collector
from tdrl.envs import make_vec_env


class Combo(gym.Env):
    """Rewards action components that match a target; episodes of 5 steps."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, space: gym.Space) -> None:
        self.action_space = space
        self.seen: list[np.ndarray] = []
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.seen.append(np.asarray(action).copy())
        self.t += 1
        return np.zeros(2, np.float32), float(np.sum(action == 1)), False, self.t >= 5, {}


def test_multidiscrete_spec_random_actions_and_bounds():
    env = make_vec_env(lambda: Combo(gym.spaces.MultiDiscrete([3, 4])), 2, seed=0)
    spec = env.action_spec
    assert isinstance(spec, MultiCategorical) and spec.shape == (2, 2)
    actions = env.rand_action(torch.Generator().manual_seed(0), steps=500)
    assert actions.shape == (2, 500, 2) and actions.dtype == torch.int64
    assert actions[..., 0].max() == 2 and actions[..., 1].max() == 3 and actions.min() == 0
    assert spec.is_in(actions[:, 0])
    batch = next(iter(Collector(env, None, frames_per_batch=20, total_frames=20)))
    assert batch["action"].shape == (2, 10, 2)
    td = env.reset()
    td["action"] = torch.tensor([[0, 3], [3, 0]])
    with pytest.raises(ValueError, match=r"discrete action 3 at index \(1, 0\).*env 1"):
        env.step(td)
    env.close()


def test_multibinary_spec_and_collector():
    env = make_vec_env(lambda: Combo(gym.spaces.MultiBinary(3)), 2, seed=0)
    spec = env.action_spec
    assert isinstance(spec, Binary) and spec.shape == (2, 3)
    batch = next(iter(Collector(env, None, frames_per_batch=40, total_frames=40)))
    actions = batch["action"]
    assert set(actions.unique().tolist()) == {0, 1}
    # the reward counts ones: the env received exactly the stored actions
    torch.testing.assert_close(
        batch["next", "reward"].squeeze(-1), actions.sum(-1).float(), check_dtype=False
    )
    td = env.reset()
    td["action"] = torch.tensor([[0, 1, 2], [0, 0, 0]])
    with pytest.raises(ValueError, match=r"discrete action 2 at index \(0, 2\)"):
        env.step(td)
    env.close()


def test_unsupported_multidiscrete_layout_is_named():
    with pytest.raises(NotImplementedError, match="flat nvec"):
        make_vec_env(lambda: Combo(gym.spaces.MultiDiscrete([[2, 2], [2, 2]])), 1)


def test_a_discrete_observation_not_starting_at_zero_is_named():
    # its spec, Categorical(n), covers [0, n): an embedding sized from it would index past it
    from tdrl.envs.specs import observation_leaves

    space = gym.spaces.Dict(position=gym.spaces.Discrete(3, start=10))
    with pytest.raises(NotImplementedError, match=r"start=10 at \('position',\)"):
        observation_leaves(space, None)
    assert observation_leaves(gym.spaces.Discrete(3), None)[0].dtype == torch.int64
