"""Evaluation videos: one deterministic episode rendered to MP4 (``--video`` in the recipes).

MuJoCo renders without a display with ``MUJOCO_GL=egl`` (set it before MuJoCo is imported, e.g.
in the shell: ``MUJOCO_GL=egl python recipes/ppo.py --video``). Needs the ``video`` extra
(imageio with its ffmpeg plugin).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, set_interaction_type

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
    env_kwargs: Mapping[str, Any] | None = None,
) -> int:
    """Render one deterministic episode of ``policy`` on ``env_id`` to the MP4 file ``path``;
    returns the number of frames: the reset frame plus one per step, but for the last step of
    an episode that ends (the env has reset by then).

    The env is made as the evaluation's is (``make_vec_env`` with ``env_kwargs``, e.g.
    ``frame_stack``), and the policy runs as :func:`~tdrl.collectors.evaluate` runs it: the
    env's observation dtypes, ``"is_init"`` and the recurrent state carried from step to step,
    inputs on the policy's device."""
    try:
        import imageio.v2 as imageio
    except ImportError as err:
        raise ImportError("videos need the video extra: pip install 'tdrl[video]'") from err
    from tdrl.collectors._policy import PolicyStep
    from tdrl.envs import make_vec_env

    kwargs = {"render_mode": "rgb_array", **(env_kwargs or {})}
    try:
        env = make_vec_env(env_id, 1, seed=seed, width=size, height=size, **kwargs)
    except TypeError:  # not a MuJoCo env: its own frame size
        env = make_vec_env(env_id, 1, seed=seed, **kwargs)
    with env:
        runner = PolicyStep(env, policy)
        runner.set_observation(env.reset_arrays(seed), reset=True)
        frames = [env.render()[0]]
        with torch.no_grad(), set_interaction_type(InteractionType.DETERMINISTIC):
            for _ in range(max_steps):
                out = env.step_arrays(runner()[0].numpy())
                if out.final_observation:  # the env has reset: its frame is the next episode's
                    break
                runner.set_observation(out.observation)
                runner.set_episode_starts(out.final_observation)  # none: "is_init" cleared
                frames.append(env.render()[0])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    imageio.mimwrite(path, [uint8_frame(f) for f in frames], fps=fps, macro_block_size=1)
    return len(frames)


def uint8_frame(frame: Any) -> np.ndarray:
    """An RGB frame as uint8: float frames in [0, 1] (MinAtar renders float64) scaled by 255 and
    rounded, other values clipped to [0, 255]; uint8 frames as they are."""
    array = np.asarray(frame)
    if array.dtype == np.uint8:
        return array
    if np.issubdtype(array.dtype, np.floating) and array.size and float(array.max()) <= 1.0:
        array = array * 255.0
    return np.clip(np.rint(array), 0, 255).astype(np.uint8)
