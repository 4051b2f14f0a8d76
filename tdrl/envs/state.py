"""Env state for exact resume: what a checkpoint needs to put the envs back where they were.

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

Async vector envs keep their envs in worker processes, out of reach, and some envs hold state
in objects this module cannot read (MinAtar's game, ``FrameStackObservation``'s frame queue, an
emulator): for them ``env_state`` returns ``None`` and :func:`load_env_state` re-seeds the
envs' next reset instead, so a resumed run is reproducible but not identical to an
uninterrupted one (episodes in flight at the checkpoint are cut). ``Collector.state_dict``
stores this state with the collector's own.
"""

from __future__ import annotations

import numbers
from typing import Any

import gymnasium as gym
import numpy as np

from tdrl.envs.vec_env import VecEnv

_PLAIN = (np.ndarray, numbers.Number, bool, type(None))


def _inert(name: str, value: Any, mujoco: bool) -> bool:
    """Whether an attribute holds no episode state this module fails to save: plain values (saved),
    configuration (strings, tuples, dicts, lists, spaces, the spec, the random generator, saved
    through ``np_random``), the next wrapper, and a MuJoCo env's model, data and renderer (its
    physics are saved)."""
    config = (str, tuple, dict, list, gym.Space, gym.Env, np.random.Generator)
    if isinstance(value, (*_PLAIN, *config)):
        return True
    if type(value).__name__ == "EnvSpec":
        return True
    return mujoco and name in ("model", "data", "mujoco_renderer")


def _unreadable(env: gym.Env) -> list[str]:
    """``type.attribute`` of the state :func:`env_state` cannot read from ``env`` (e.g. a MinAtar
    game object, the frame queue of ``FrameStackObservation``, an emulator)."""
    unwrapped: Any = env.unwrapped
    mujoco = _is_mujoco(unwrapped)
    return [
        f"{type(obj).__name__}.{name}"
        for obj in (unwrapped, *_layers(env))
        for name, value in vars(obj).items()
        if not _inert(name, value, mujoco)
    ]


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
    """Per-sub-env state of a sync ``VecEnv`` (see the module docstring); ``None`` if async,
    not a gymnasium ``SyncVectorEnv`` (e.g. a TorchRL env through ``from_torchrl``), or holding
    state this module cannot read (MinAtar's game, a frame stack's queue, an Atari emulator):
    such envs are re-seeded on resume, as async ones, rather than restored half-way."""
    subs = env.sync_envs
    if subs is None or any(_unreadable(sub) for sub in subs):
        return None
    return [_sub_env_state(sub) for sub in subs]


def load_env_state(env: VecEnv, state: list[dict[str, Any]] | None, *, reseed: int) -> bool:
    """Restore what :func:`env_state` returned. Returns True when the restore is exact.

    With ``state=None`` (async envs) the env's next reset uses seed ``reseed`` instead and False
    is returned; the caller must then start the collector's episodes afresh.
    """
    if state is None:
        env.reseed(reseed)
        return False
    subs = env.sync_envs
    if subs is None:
        raise ValueError(
            "this checkpoint holds the states of gymnasium sync envs; resume with "
            "make_vec_env(..., mode='sync')"
        )
    if len(subs) != len(state):
        raise ValueError(f"checkpoint has {len(state)} env states, the env has {len(subs)} envs")
    env.continue_streams()
    for sub, sub_state in zip(subs, state, strict=True):
        _load_sub_env_state(sub, sub_state)
    return True


__all__ = ["env_state", "load_env_state"]
