"""Gymnasium spaces -> TorchRL specs and TensorDict keys.

tdrl describes env inputs and outputs with TorchRL's spec classes (``Bounded``, ``Unbounded``,
``Categorical``, ``Composite``), so a tdrl env can be handed to TorchRL modules that take a spec
(``ProbabilisticActor(spec=env.action_spec)``) unchanged. Specs carry the batch dimension
``num_envs`` first, as TorchRL's batched envs do.

A ``Box`` observation space becomes the key ``"observation"``; a ``Dict`` space becomes one key per
entry, nested dicts become nested keys (TorchRL's ``GymEnv`` does the same).
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from tensordict import NestedKey
from torchrl.data import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    TensorSpec,
    Unbounded,
)

from tdrl import keys

# numpy -> torch dtypes of the spaces tdrl supports.
_TORCH_DTYPE: dict[np.dtype, torch.dtype] = {
    np.dtype(np.float64): torch.float64,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float16): torch.float16,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.bool_): torch.bool,
}


@dataclass(frozen=True)
class Leaf:
    """One array of an observation: where it lives in gymnasium's obs and in the TensorDict.

    Attributes:
        key: the TensorDict key (a string, or a tuple for nested Dict spaces).
        path: the sequence of dict keys that reaches the array in a gymnasium observation
            (empty for a ``Box`` space).
        shape: per-env shape.
        dtype: the torch dtype tdrl stores (after ``obs_dtype`` conversion of floats).
    """

    key: NestedKey
    path: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: torch.dtype


def torch_dtype(dtype: np.dtype, obs_dtype: torch.dtype | None = None) -> torch.dtype:
    """Maps a numpy dtype to torch; floating dtypes become ``obs_dtype`` when it is given."""
    dtype = np.dtype(dtype)
    if dtype not in _TORCH_DTYPE:
        raise TypeError(f"unsupported numpy dtype {dtype} in a gymnasium space")
    if obs_dtype is not None and dtype.kind == "f":
        return obs_dtype
    return _TORCH_DTYPE[dtype]


def observation_leaves(space: gym.Space, obs_dtype: torch.dtype | None) -> list[Leaf]:
    """Flattens a single-env observation space into ``Leaf`` entries, in the space's key order."""
    if obs_dtype is not None and (
        not isinstance(obs_dtype, torch.dtype) or not obs_dtype.is_floating_point
    ):
        # An integer dtype would truncate float observations without a word.
        raise TypeError(f"obs_dtype must be a floating torch dtype, got {obs_dtype!r}")

    def walk(sub: gym.Space, path: tuple[str, ...]) -> list[Leaf]:
        if isinstance(sub, gym.spaces.Dict):
            return [leaf for name, s in sub.spaces.items() for leaf in walk(s, (*path, name))]
        if path and path[-1] == keys.ACTION_MASK:
            if not isinstance(sub, (gym.spaces.Box, gym.spaces.MultiBinary)):
                raise NotImplementedError(f"{keys.ACTION_MASK!r} must be a Box or MultiBinary")
            shape, dtype = tuple(sub.shape), torch.bool  # stored as bool, whatever the env's dtype
        elif isinstance(sub, gym.spaces.Box):
            shape, dtype = tuple(sub.shape), torch_dtype(sub.dtype, obs_dtype)
        elif isinstance(sub, gym.spaces.Discrete):
            if int(sub.start) != 0:  # its spec, Categorical(n), covers [0, n) only
                raise NotImplementedError(
                    f"Discrete observation space with start={sub.start} at "
                    f"{path or 'the root'}: only start=0 is supported"
                )
            shape, dtype = (), torch.int64
        else:
            raise NotImplementedError(
                f"observation space {sub} at {path or 'the root'} is not supported "
                "(Box, Discrete and Dict of those are)"
            )
        key: NestedKey = path if len(path) > 1 else (path[0] if path else keys.OBSERVATION)
        return [Leaf(key=key, path=path, shape=shape, dtype=dtype)]

    return walk(space, ())


def _box_spec(space: gym.spaces.Box, num_envs: int, dtype: torch.dtype) -> TensorSpec:
    shape = (num_envs, *space.shape)
    low = torch.as_tensor(np.broadcast_to(space.low, space.shape).copy()).to(dtype)
    high = torch.as_tensor(np.broadcast_to(space.high, space.shape).copy()).to(dtype)
    if bool(torch.isfinite(low).all() and torch.isfinite(high).all()):
        return Bounded(low=low.expand(shape), high=high.expand(shape), shape=shape, dtype=dtype)
    return Unbounded(shape=shape, dtype=dtype)


def observation_spec(space: gym.Space, leaves: list[Leaf], num_envs: int) -> Composite:
    """The observation spec ``Composite`` with batch shape ``[num_envs]``."""
    spec = Composite(shape=(num_envs,))
    for leaf in leaves:
        sub: gym.Space = space
        for name in leaf.path:
            sub = sub[name]  # type: ignore[index]
        if leaf.dtype == torch.bool:
            spec[leaf.key] = Binary(
                n=leaf.shape[-1], shape=(num_envs, *leaf.shape), dtype=torch.bool
            )
        elif isinstance(sub, gym.spaces.Box):
            spec[leaf.key] = _box_spec(sub, num_envs, leaf.dtype)
        else:
            assert isinstance(sub, gym.spaces.Discrete)
            spec[leaf.key] = Categorical(int(sub.n), shape=(num_envs,), dtype=torch.int64)
    return spec


def action_spec(space: gym.Space, num_envs: int) -> TensorSpec:
    """The action spec with batch shape ``[num_envs]``: Box -> Bounded, Discrete -> Categorical,
    MultiDiscrete -> MultiCategorical, MultiBinary -> Binary.

    Discrete actions are integer indices (int64, shape ``[num_envs]``), not one-hot vectors;
    MultiDiscrete ones are int64 ``[num_envs, k]`` (one index per component, TorchRL's layout);
    MultiBinary ones are int64 ``[num_envs, k]`` of 0 and 1.
    """
    if isinstance(space, gym.spaces.Box):
        return _box_spec(space, num_envs, torch_dtype(space.dtype))
    if isinstance(space, gym.spaces.Discrete):
        if int(space.start) != 0:
            raise NotImplementedError(f"Discrete action space with start={space.start}")
        return Categorical(int(space.n), shape=(num_envs,), dtype=torch.int64)
    if isinstance(space, gym.spaces.MultiDiscrete):
        if space.nvec.ndim != 1 or (np.asarray(space.start) != 0).any():
            raise NotImplementedError(
                f"MultiDiscrete action space {space}: a flat nvec starting at 0 is supported"
            )
        nvec = torch.as_tensor(space.nvec, dtype=torch.int64)
        k = len(nvec)
        return MultiCategorical(
            nvec.expand(num_envs, k).clone(), shape=(num_envs, k), dtype=torch.int64
        )
    if isinstance(space, gym.spaces.MultiBinary):
        if len(space.shape) != 1:
            raise NotImplementedError(f"MultiBinary action space {space}: a flat one is supported")
        k = int(space.shape[0])
        return Binary(n=k, shape=(num_envs, k), dtype=torch.int64)
    raise NotImplementedError(
        f"action space {space} is not supported (Box, Discrete, MultiDiscrete and MultiBinary are)"
    )
