"""Evaluation videos: one deterministic episode rendered to MP4 (``--video`` in the recipes).

MuJoCo renders without a display with ``MUJOCO_GL=egl`` (set it before MuJoCo is imported, e.g.
in the shell: ``MUJOCO_GL=egl python recipes/ppo.py --video``). Needs the ``video`` extra
(imageio with its ffmpeg plugin).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import InteractionType, set_interaction_type

from tdrl import keys

__all__ = ["record_video"]


def record_video(
    env_id: str,
    policy: Callable[[TensorDictBase], TensorDictBase],
    path: str | os.PathLike,
    *,
    seed: int = 0,
    max_steps: int = 1000,
    size: int = 256,
    fps: int = 30,
) -> int:
    """Render one deterministic episode of ``policy`` on ``env_id`` to the MP4 file ``path``;
    returns the number of frames (the reset frame plus one per step)."""
    try:
        import imageio.v2 as imageio
    except ImportError as err:
        raise ImportError("videos need the video extra: pip install 'tdrl[video]'") from err
    try:
        env = gym.make(env_id, render_mode="rgb_array", width=size, height=size)
    except TypeError:  # not a MuJoCo env: its own frame size
        env = gym.make(env_id, render_mode="rgb_array")
    if not isinstance(env.observation_space, gym.spaces.Box):
        env.close()
        raise NotImplementedError(
            f"videos need a Box observation, {env_id} has {env.observation_space}"
        )
    obs, _ = env.reset(seed=seed)
    frames = [env.render()]
    with torch.no_grad(), set_interaction_type(InteractionType.DETERMINISTIC):
        for _ in range(max_steps):
            observation = torch.as_tensor(np.asarray(obs), dtype=torch.float32).unsqueeze(0)
            td = policy(TensorDict({keys.OBSERVATION: observation}, batch_size=[1]))
            action = td.get(keys.ACTION)[0].cpu().numpy()
            obs, _, terminated, truncated, _ = env.step(action)
            frames.append(env.render())
            if terminated or truncated:
                break
    env.close()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    imageio.mimwrite(path, [np.asarray(f) for f in frames], fps=fps, macro_block_size=1)
    return len(frames)
