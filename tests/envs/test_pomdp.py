"""NoVel tasks: the observation is the base task's without its velocity entries."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from tdrl.envs import NOVEL_TASKS, make_vec_env

# Expected kept sizes: CartPole x, theta; Pendulum cos, sin; Acrobot cos and sin of both angles;
# MuJoCo qpos less root coordinates
# (+ Ant-v5's 78 contact-force entries).
SIZES = {
    "CartPoleNoVel-v1": 2,
    "PendulumNoVel-v1": 2,
    "AcrobotNoVel-v1": 4,
    "HopperNoVel-v5": 5,
    "HalfCheetahNoVel-v5": 8,
    "Walker2dNoVel-v5": 8,
    "AntNoVel-v5": 13 + 78,
    "SwimmerNoVel-v5": 3,
}


@pytest.mark.parametrize("novel_id", sorted(NOVEL_TASKS))
def test_novel_observation_is_the_base_without_velocities(novel_id):
    base = gym.make(NOVEL_TASKS[novel_id])
    novel = gym.make(novel_id)
    assert novel.observation_space.shape == (SIZES[novel_id],)
    full, _ = base.reset(seed=3)
    part, _ = novel.reset(seed=3)
    action = np.asarray(base.action_space.sample())
    full, *_ = base.step(action)
    part, *_ = novel.step(action)
    keep = novel.get_wrapper_attr("keep")
    np.testing.assert_array_equal(part, full[keep])
    if novel_id == "CartPoleNoVel-v1":
        assert list(keep) == [0, 2]  # x and theta; x_dot and theta_dot hidden
    if novel_id == "AcrobotNoVel-v1":  # the hidden entries are the two angular velocities
        assert list(keep) == [0, 1, 2, 3]
        np.testing.assert_allclose(full[4:], base.unwrapped.state[2:], rtol=1e-6)
    if novel_id == "HopperNoVel-v5":
        sim = base.unwrapped
        np.testing.assert_allclose(part, sim.data.qpos[1:])  # positions only


def test_novel_tasks_run_in_vector_envs():
    with make_vec_env("PendulumNoVel-v1", 2, seed=0) as env:
        td = env.reset()
        assert td["observation"].shape == (2, 2)
