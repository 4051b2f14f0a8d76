"""tdrl/AntNoContact-v5: Ant-v5 as Ant-v3 ran under MuJoCo 2.0 (no contact forces, no cost)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import tdrl.envs  # noqa: F401  (registers the variants)


def _contact(env_id: str) -> tuple[tuple[int, ...], list[float], gym.Env]:
    env = gym.make(env_id)
    observation, _ = env.reset(seed=0)
    env.action_space.seed(0)
    costs = []
    for _ in range(300):
        observation, _, terminated, truncated, info = env.step(env.action_space.sample())
        costs.append(float(info["reward_contact"]))
        if terminated or truncated:
            observation, _ = env.reset()
    return observation.shape, costs, env


def test_ant_without_contact_observes_27_entries_and_pays_no_contact_cost():
    shape, costs, env = _contact("Ant-v5")
    assert shape == (105,) and min(costs) < 0  # the real task: forces observed and charged
    variant_shape, variant_costs, variant = _contact("tdrl/AntNoContact-v5")
    assert variant_shape == (27,) and all(c == 0.0 for c in variant_costs)
    assert variant.spec.max_episode_steps == env.spec.max_episode_steps == 1000
    # the rest of the task is Ant-v5's: the same first 27 entries from the same state
    first, _ = gym.make("Ant-v5").reset(seed=3)
    same, _ = gym.make("tdrl/AntNoContact-v5").reset(seed=3)
    np.testing.assert_array_equal(first[:27], same)
