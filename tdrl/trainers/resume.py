"""What a checkpoint needs beyond modules and RNG states: the collector's and the envs' state.

A resumed run continues exactly like an uninterrupted one only if the envs are where they were:
same physics state, same step counters, same random streams. Gymnasium envs do not pickle their
state (MuJoCo envs pickle their constructor arguments only, via ``EzPickle``), so
:func:`env_state` reads it explicitly from each sub-env of a sync vector env:

* MuJoCo envs: the full integration state (``mj_getState`` with ``mjSTATE_INTEGRATION``: time,
  qpos, qvel, actuator activations, warm-start accelerations, controls);
* every env: the plain attributes of the unwrapped env (numpy arrays, numbers, ``None``: e.g.
  CartPole's ``state`` and ``steps_beyond_terminated``, Pendulum's ``last_u``), its
  ``np_random`` bit-generator state (reset noise), and the plain attributes of each wrapper
  (``TimeLimit``'s ``_elapsed_steps``, ``OrderEnforcing``'s ``_has_reset``, checker flags).

Async vector envs keep their envs in worker processes, out of reach: for them ``env_state``
returns ``None`` and :func:`load_env_state` re-seeds and resets the envs from a seed derived from
the frame count instead, so a resumed async run is reproducible but not identical to an
uninterrupted one (episodes in flight at the checkpoint are cut).

The collector's state (frame count, current observation, running episode returns and lengths,
trajectory ids, the random-action generator) is read by :func:`collector_state`.
"""

from __future__ import annotations

import numbers
from typing import Any

import gymnasium as gym
import numpy as np

from tdrl.collectors import Collector
from tdrl.envs import VecEnv

_PLAIN = (np.ndarray, numbers.Number, bool, type(None))


def _is_mujoco(env: Any) -> bool:
    return hasattr(env, "model") and hasattr(env, "data") and hasattr(env.data, "qpos")


def _plain_attrs(obj: Any) -> dict[str, Any]:
    return {
        name: value.copy() if isinstance(value, np.ndarray) else value
        for name, value in vars(obj).items()
        if isinstance(value, _PLAIN) and not name.startswith(("_ezpickle", "_saved", "_cached"))
    }


def _layers(env: gym.Env) -> list[Any]:
    layers, layer = [], env
    while isinstance(layer, gym.Wrapper):
        layers.append(layer)
        layer = layer.env
    return layers


def _sub_env_state(env: gym.Env) -> dict[str, Any]:
    unwrapped: Any = env.unwrapped
    state: dict[str, Any] = {
        "attrs": _plain_attrs(unwrapped),
        "np_random": unwrapped.np_random.bit_generator.state,
        # TimeLimit's _elapsed_steps, OrderEnforcing's _has_reset, the env checker's flags.
        "wrappers": [_plain_attrs(layer) for layer in _layers(env)],
    }
    if _is_mujoco(unwrapped):
        import mujoco

        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        physics = np.empty(mujoco.mj_stateSize(unwrapped.model, spec))
        mujoco.mj_getState(unwrapped.model, unwrapped.data, physics, spec)
        state["physics"] = physics
    return state


def _load_sub_env_state(env: gym.Env, state: dict[str, Any]) -> None:
    unwrapped: Any = env.unwrapped
    layers = _layers(env)
    if len(layers) != len(state["wrappers"]):
        raise ValueError(
            f"the env has {len(layers)} wrappers, the checkpoint {len(state['wrappers'])}"
        )
    for obj, attrs in [(unwrapped, state["attrs"]), *zip(layers, state["wrappers"], strict=True)]:
        for name, value in attrs.items():
            setattr(obj, name, value.copy() if isinstance(value, np.ndarray) else value)
    unwrapped.np_random.bit_generator.state = state["np_random"]
    if "physics" in state:
        import mujoco

        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        mujoco.mj_setState(unwrapped.model, unwrapped.data, state["physics"], spec)
        mujoco.mj_forward(unwrapped.model, unwrapped.data)


def env_state(env: VecEnv) -> list[dict[str, Any]] | None:
    """Per-sub-env state of a sync ``VecEnv`` (see the module docstring); ``None`` if async."""
    if env.is_async:
        return None
    return [_sub_env_state(sub) for sub in env._vec.envs]


def load_env_state(env: VecEnv, state: list[dict[str, Any]] | None, *, reseed: int) -> bool:
    """Restore what :func:`env_state` returned. Returns True when the restore is exact.

    With ``state=None`` (async envs) the env's next reset uses seed ``reseed`` instead and False
    is returned; the caller must then start the collector's episodes afresh.
    """
    if state is None:
        env.seed, env._seeded = reseed, False
        return False
    if env.is_async:
        raise ValueError("this checkpoint holds sync env states; resume with mode='sync'")
    subs = env._vec.envs
    if len(subs) != len(state):
        raise ValueError(f"checkpoint has {len(state)} env states, the env has {len(subs)} envs")
    env._seeded = True  # the next reset continues the restored random streams
    for sub, sub_state in zip(subs, state, strict=True):
        _load_sub_env_state(sub, sub_state)
    return True


def collector_state(collector: Collector) -> dict[str, Any]:
    """The collector's counters, current observation and running episode statistics."""
    return {
        "frames": collector.frames,
        "started": collector._started,
        "traj_ids": collector._traj_ids.copy(),
        "next_traj_id": collector._next_traj_id,
        "episode_return": collector._episode_return.copy(),
        "episode_length": collector._episode_length.copy(),
        "generator": collector._generator.get_state(),
        "observation": [t.clone() for t in collector._policy_step.observation],
        "env": env_state(collector.env),
    }


def load_collector_state(collector: Collector, state: dict[str, Any]) -> bool:
    """Restore :func:`collector_state` (and the env state inside it). Returns True if exact."""
    collector.frames = int(state["frames"])
    collector._generator.set_state(state["generator"])
    collector._next_traj_id = int(state["next_traj_id"])
    collector._traj_ids = state["traj_ids"].copy()
    # Async envs: re-seed from the frame count so the resumed run is still reproducible.
    reseed = (collector.env.seed or 0) + 1_000_003 * (collector.frames + 1)
    exact = load_env_state(collector.env, state["env"], reseed=reseed)
    if exact:
        collector._started = bool(state["started"])
        collector._episode_return = state["episode_return"].copy()
        collector._episode_length = state["episode_length"].copy()
        for dst, src in zip(collector._policy_step.observation, state["observation"], strict=True):
            dst.copy_(src)
    else:
        # Fresh episodes: the collector resets the env (with the derived seed) on its next batch.
        collector._started = False
        n = collector.env.num_envs
        collector._episode_return = np.zeros(n)
        collector._episode_length = np.zeros(n, dtype=np.int64)
        collector._traj_ids = np.arange(collector._next_traj_id, collector._next_traj_id + n)
        collector._next_traj_id += n
    return exact


__all__ = ["collector_state", "env_state", "load_collector_state", "load_env_state"]
