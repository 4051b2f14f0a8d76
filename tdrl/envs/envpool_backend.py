"""envpool as a backend of ``make_vec_env`` (``backend="envpool"``): the envs step in C++ threads.

envpool (Weng et al. 2022, arXiv 2206.10558) resets an ended env on the *next* step (gymnasium's
``NEXT_STEP`` autoreset: that step ignores the action and returns the reset observation). tdrl's
contract is the same-step one (docs/design.md, "Episode ends"), so this adapter resets the envs that
ended right after the step that ended them (envpool's partial ``reset(env_id)``), returns their
reset observations as the next root observation and the real final ones as gymnasium's
``info["final_obs"]``. ``VecEnv`` then treats it exactly like a gymnasium vector env: real final
observations in ``("next", ...)``, ``traj_ids``, ``is_init`` and no wasted step.

Task versions: envpool ships its own MuJoCo ports (``Hopper-v3/v4/v5``, ...). Its ``-v5`` tasks
follow gymnasium's v5 settings (the reward, health and reset-noise parameters printed by
``envpool.make(...).spec.config``), but its random streams differ from gymnasium's, so the same
seed gives other episodes than ``backend="gymnasium"``; and its seeds are fixed when the pool is
made (``make_vec_env``'s ``seed``): a later reset cannot re-seed it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["EnvpoolVectorEnv", "envpool_task", "make_envpool"]


class EnvpoolVectorEnv(gym.vector.VectorEnv):
    """An envpool pool as a gymnasium vector env with same-step autoreset."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.num_envs = int(pool.spec.config.num_envs)
        self.single_observation_space = pool.observation_space
        action = pool.action_space
        if isinstance(action, gym.spaces.Box) and action.dtype == np.float64:
            # gymnasium's MuJoCo tasks take float32 actions; tdrl's policies write float32.
            action = gym.spaces.Box(
                action.low.astype(np.float32), action.high.astype(np.float32), action.shape,
                np.float32,
            )  # fmt: skip
        self.single_action_space = action
        self._pool_action_dtype = pool.action_space.dtype
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, self.num_envs
        )
        self.action_space = gym.vector.utils.batch_space(action, self.num_envs)
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
        self._all = np.arange(self.num_envs, dtype=np.int32)
        self._all_bytes = self._all.tobytes()  # the usual answer order, compared per step
        self._last: np.ndarray = np.zeros(0)  # the newest observations, [num_envs, *obs]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        mask = None if options is None else options.get("reset_mask")
        if mask is None:
            # envpool fixes its seeds when the pool is made (make_envpool's seed); a reset's seed
            # is ignored, as envpool itself does.
            obs, info = self.pool.reset()
            return self._ordered(obs, info["env_id"]), {}
        ids = np.flatnonzero(mask).astype(np.int32)
        fresh, info = self.pool.reset(ids)
        obs = self._last.copy()
        obs[info["env_id"]] = fresh
        self._last = obs
        return obs, {}

    def _ordered(self, obs: np.ndarray, env_id: np.ndarray) -> np.ndarray:
        out = np.empty_like(obs)
        out[env_id] = obs
        self._last = out
        return out

    def step(self, actions: Any) -> Any:
        actions = np.asarray(actions, dtype=self._pool_action_dtype)
        obs, reward, terminated, truncated, info = self.pool.step(actions, self._all)
        order = info["env_id"]
        if order.tobytes() != self._all_bytes:  # envpool may answer in another order
            obs, reward = self._ordered(obs, order), _reorder(reward, order)
            terminated, truncated = _reorder(terminated, order), _reorder(truncated, order)
        ended = terminated | truncated
        out_info: dict[str, Any] = {}
        if ended.any():
            ids = np.flatnonzero(ended).astype(np.int32)
            final = np.empty(self.num_envs, dtype=object)
            for i in ids:
                final[i] = obs[i].copy()
            fresh, reset_info = self.pool.reset(ids)
            obs = obs.copy()
            obs[reset_info["env_id"]] = fresh
            out_info = {"final_obs": final, "_final_obs": ended.copy()}
        self._last = obs
        return obs, reward, terminated, truncated, out_info

    def close(self, **kwargs: Any) -> None:
        close = getattr(self.pool, "close", None)
        if close is not None:
            close()


def _reorder(x: np.ndarray, order: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    out[order] = x
    return out


def envpool_task(env_id: str, **options: Any) -> tuple[str, dict[str, Any]]:
    """envpool's task and options for a gymnasium-side id and its maker's options.

    tdrl's Atari ids (``tdrl/<Game>-v5``: :func:`tdrl.envs.make_atari`) become envpool's
    ``<Game>-v5`` with the same preprocessing: ALE v5's sticky actions (0.25) and minimal action
    set, up to 30 no-ops, 4 frames a step, 84x84 grayscale (area resize), FIRE after resets,
    27k steps (108k frames) an episode, unclipped rewards; ``frame_stack`` becomes
    ``stack_num`` and ``terminal_on_life_loss`` ``episodic_life``. Other ids pass through and
    take no options (envpool's own keyword arguments go to :func:`make_envpool` directly).
    """
    from tdrl.envs.pixels import ATARI_NAMESPACE

    prefix = f"{ATARI_NAMESPACE}/"
    if not (env_id.startswith(prefix) and env_id.endswith("-v5")):
        return env_id, options
    unknown = sorted(set(options) - {"frame_stack", "terminal_on_life_loss"})
    if unknown:
        raise ValueError(f"envpool's {env_id}: options {unknown} have no envpool counterpart here")
    return env_id[len(prefix) :], dict(
        stack_num=int(options.get("frame_stack", 1)),
        episodic_life=bool(options.get("terminal_on_life_loss", False)),
        repeat_action_probability=0.25, full_action_space=False, noop_max=30, frame_skip=4,
        img_height=84, img_width=84, gray_scale=True, use_fire_reset=True, reward_clip=False,
        max_episode_steps=27_000,
    )  # fmt: skip


def make_envpool(env_id: str, num_envs: int, seed: int | None, **kwargs: Any) -> EnvpoolVectorEnv:
    """An envpool pool of ``num_envs`` ``env_id`` envs (synchronous: every step steps all);
    tdrl's Atari ids and their options are translated (:func:`envpool_task`)."""
    try:
        import envpool
    except ImportError as err:
        raise ImportError(
            "backend='envpool' needs the envpool package: pip install 'tdrl[envpool]'"
        ) from err
    env_id, kwargs = envpool_task(env_id, **kwargs)
    tasks = envpool.list_all_envs()
    if env_id not in tasks:
        stem = env_id.split("-")[0].lower()
        close = sorted(t for t in tasks if t.lower().startswith(stem))
        raise ValueError(
            f"envpool has no task {env_id!r}"
            + (f"; it has {close}" if close else "; see envpool.list_all_envs()")
        )
    if seed is None:  # gymnasium's meaning: fresh entropy (envpool's own default is seed 42)
        seed = int(np.random.default_rng().integers(2**31 - 1))
    pool = envpool.make(
        env_id,
        env_type="gymnasium",
        num_envs=num_envs,
        batch_size=num_envs,
        seed=seed,
        **kwargs,
    )
    return EnvpoolVectorEnv(pool)
