"""Partially observed tasks: the ``NoVel`` variants that hide velocities from the observation.

rl-baselines3-zoo defines ``CartPoleNoVel-v1`` (cart position and pole angle only) and
``PendulumNoVel-v1`` (cos and sin of the angle, no angular velocity) to test recurrent policies:
a memoryless policy cannot recover the hidden velocities, a recurrent one can. tdrl registers
those two, ``AcrobotNoVel-v1`` (the cos and sin of both joint angles, no angular velocities: a
swing-up like Pendulum's, with discrete torques) and the MuJoCo locomotion tasks with their
joint velocities removed (``HopperNoVel-v5``, ...): gymnasium's v5 observation is ``qpos``
(less the excluded root coordinates), then ``qvel``, then extras (Ant's contact forces), and the
``qvel`` slice goes.
Importing ``tdrl.envs`` registers them, so ``make_vec_env("HopperNoVel-v5", ...)`` works.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["NOVEL_TASKS", "HideVelocity", "register_novel_tasks", "velocity_free_indices"]

# base id -> (registered id). MuJoCo tasks whose v5 observation is [qpos, qvel, extras].
_MUJOCO_LOCOMOTION = ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Swimmer-v5")
# Classic control: the observation entries that are not velocities.
_CLASSIC = {"CartPole-v1": [0, 2], "Pendulum-v1": [0, 1], "Acrobot-v1": [0, 1, 2, 3]}

NOVEL_TASKS: dict[str, str] = {
    base.replace("-v", "NoVel-v"): base for base in (*_CLASSIC, *_MUJOCO_LOCOMOTION)
}


def velocity_free_indices(env: gym.Env, base_id: str) -> np.ndarray:
    """Indices of ``env``'s observation entries that are not velocities."""
    if base_id in _CLASSIC:
        return np.asarray(_CLASSIC[base_id])
    if base_id not in _MUJOCO_LOCOMOTION:
        raise ValueError(f"no velocity-free variant of {base_id!r}; known: {sorted(NOVEL_TASKS)}")
    sim: Any = env.unwrapped
    size = int(np.prod(env.observation_space.shape))  # type: ignore[arg-type]
    # qpos without the root coordinates that v5 excludes (x, or x and y for Ant), then qvel.
    excluded = size - (sim.model.nq + sim.model.nv) - _extras(sim)
    positions = sim.model.nq + excluded
    velocities = np.arange(positions, positions + sim.model.nv)
    return np.setdiff1d(np.arange(size), velocities)


def _extras(sim: Any) -> int:
    """Observation entries after qvel (Ant-v5's contact forces), 0 for the other tasks."""
    if hasattr(sim, "contact_forces") and getattr(sim, "_include_cfrc_ext_in_observation", False):
        return int(sim.contact_forces[1:].size)
    return 0


class HideVelocity(gym.ObservationWrapper):
    """Keeps the observation entries ``keep`` of a flat ``Box`` observation."""

    def __init__(self, env: gym.Env, keep: np.ndarray) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"HideVelocity needs a flat Box observation, got {space}")
        self.keep = np.asarray(keep)
        self.observation_space = gym.spaces.Box(
            space.low[self.keep], space.high[self.keep], (len(self.keep),), space.dtype
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.keep]


def _make_novel(base_id: str, **kwargs: Any) -> gym.Env:
    env = gym.make(base_id, **kwargs)
    return HideVelocity(env, velocity_free_indices(env, base_id))


def register_novel_tasks() -> None:
    """Register every ``NoVel`` task with gymnasium (idempotent)."""
    for novel_id, base_id in NOVEL_TASKS.items():
        if novel_id not in gym.registry:
            gym.register(novel_id, entry_point=_make_novel, kwargs={"base_id": base_id})  # type: ignore[arg-type]
