"""Real rollouts for the buffer tests: a gymnasium MuJoCo vector env stepped by hand.

InvertedPendulum-v5 with random actions terminates within a few dozen steps and a short time
limit truncates the rest, so one short rollout holds terminated, truncated and unfinished ends.
Same-step autoreset; the real final observation comes from ``info["final_obs"]``
(docs/design.md, "Episode ends").
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict


@functools.lru_cache(maxsize=4)
def _rollout(num_envs: int, steps: int, seed: int, max_episode_steps: int) -> TensorDict:
    envs = gym.make_vec(
        "InvertedPendulum-v5",
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        max_episode_steps=max_episode_steps,
    )
    envs.action_space.seed(seed)
    obs, _ = envs.reset(seed=seed)
    traj = np.arange(num_envs)
    rows: dict[str, list[np.ndarray]] = {
        k: [] for k in ("obs", "act", "next_obs", "rew", "term", "trunc", "traj")
    }
    for _ in range(steps):
        action = envs.action_space.sample()
        next_obs, reward, terminated, truncated, info = envs.step(action)
        done = terminated | truncated
        real_next = next_obs.copy()
        if done.any():
            real_next[done] = np.stack(info["final_obs"][done])
        values = (obs, action, real_next, reward, terminated, truncated, traj.copy())
        for k, v in zip(rows, values, strict=True):
            rows[k].append(np.asarray(v))
        traj[done] = traj.max() + 1 + np.arange(done.sum())
        obs = next_obs
    envs.close()
    a = {k: torch.as_tensor(np.stack(v, 1)) for k, v in rows.items()}  # [N, T, ...]
    flag = lambda x: x.bool().unsqueeze(-1)  # noqa: E731
    false = torch.zeros(num_envs, steps, 1, dtype=torch.bool)
    td = TensorDict(
        {
            "observation": a["obs"].float(),
            "action": a["act"].float(),
            "done": false,
            "terminated": false.clone(),
            "truncated": false.clone(),
            "next": {
                "observation": a["next_obs"].float(),
                "reward": a["rew"].float().unsqueeze(-1),
                "terminated": flag(a["term"]),
                "truncated": flag(a["trunc"]),
                "done": flag(a["term"] | a["trunc"]),
            },
            "collector": {"traj_ids": a["traj"].long()},
        },
        batch_size=[num_envs, steps],
    )
    td.refine_names(None, "time")
    return td


@pytest.fixture
def rollout():
    """``(num_envs, steps, seed, max_episode_steps) -> [N, T]`` rollout (a fresh copy)."""

    def make(
        num_envs: int = 3, steps: int = 40, seed: int = 0, max_episode_steps: int = 12
    ) -> TensorDict:
        return _rollout(num_envs, steps, seed, max_episode_steps).clone()

    return make
