"""TorchRL envs both ways: a tdrl ``VecEnv`` as a TorchRL ``EnvBase``, and the reverse.

The two libraries end episodes differently. tdrl's envs (gymnasium same-step autoreset) reset an
ended env inside the step that ended it and keep the real final observation aside; TorchRL's
``step`` returns the real final observation in ``("next", ...)`` and resets ended envs in a
separate, partial ``reset`` (the ``"_reset"`` mask, what ``step_and_maybe_reset`` does). Each
adapter keeps what the other side expects, so no transition pairs s_t with the next episode's
first observation (docs/design.md, "Episode ends"):

* :func:`to_torchrl`: ``step`` writes the real final observation to ``("next", ...)``; the reset
  observation that gymnasium already produced is handed out by the partial reset that follows.
  A reset of an env whose episode did not end (e.g. TorchRL's ``StepCounter`` truncating) resets
  that env alone (gymnasium's ``reset_mask``).
* :func:`from_torchrl`: a gymnasium ``VectorEnv`` around the TorchRL env that steps with
  ``step_and_maybe_reset`` and reports the real final observation as gymnasium's
  ``info["final_obs"]``; wrapped in a ``VecEnv``, it runs in tdrl's ``Collector``, ``evaluate`` and
  the recipes.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, TensorSpec, Unbounded
from torchrl.envs import EnvBase

from tdrl import keys
from tdrl.envs.vec_env import VecEnv

__all__ = ["from_torchrl", "to_torchrl"]

_RESET = "_reset"  # TorchRL's partial-reset mask key


def _reward_and_done_specs(n: int, device: torch.device) -> tuple[Unbounded, Composite]:
    """TorchRL's reward spec and its done / terminated / truncated specs, ``[n, 1]`` each."""
    flag = Categorical(2, shape=(n, 1), dtype=torch.bool, device=device)
    done = Composite(
        {keys.DONE: flag.clone(), keys.TERMINATED: flag.clone(), keys.TRUNCATED: flag.clone()},
        shape=(n,), device=device,
    )  # fmt: skip
    return Unbounded(shape=(n, 1), dtype=torch.float32, device=device), done


class TorchRLEnv(EnvBase):
    """A tdrl :class:`VecEnv` as a TorchRL env with batch size ``[num_envs]`` (see the module
    docstring); build it with :func:`to_torchrl`."""

    def __init__(self, env: VecEnv) -> None:
        if env.closed:
            raise RuntimeError(f"{env!r} is closed")
        n = env.num_envs
        super().__init__(batch_size=torch.Size([n]), device=torch.device("cpu"))
        self.env = env
        self.observation_spec = env.observation_spec.clone()
        self.action_spec = env.action_spec.clone()
        self.reward_spec, self.done_spec = _reward_and_done_specs(n, torch.device("cpu"))
        # The observation each env is in after the last step: the reset observation where an
        # episode ended (gymnasium's same-step autoreset already reset it).
        self._current: list[np.ndarray] | None = None
        self._ended = np.zeros(n, dtype=bool)

    def _observation(self, arrays: list[np.ndarray]) -> TensorDict:
        td = TensorDict({}, batch_size=self.batch_size)
        for leaf, value in zip(self.env.obs_leaves, arrays, strict=True):
            td.set(leaf.key, torch.tensor(value, dtype=leaf.dtype))
        return td

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get(_RESET, None)
        seed = kwargs.pop("seed", None)
        if kwargs:
            raise TypeError(f"reset got unsupported arguments {sorted(kwargs)}")
        if mask is None or self._current is None or seed is not None:
            self._current = self.env.reset_arrays(seed)
        else:
            wanted = mask.reshape(self.env.num_envs).cpu().numpy()
            # Envs that ended at the last step were reset already; reset only the running ones.
            running = wanted & ~self._ended
            if running.any():
                fresh = self.env.reset_arrays(mask=running)
                for current, new in zip(self._current, fresh, strict=True):
                    current[running] = new[running]
        out = self._observation(self._current)
        n = self.env.num_envs
        for key in (keys.DONE, keys.TERMINATED, keys.TRUNCATED):
            out.set(key, torch.zeros(n, 1, dtype=torch.bool))
        self._ended = np.zeros(n, dtype=bool)
        return out

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get(keys.ACTION)
        self.env.check_action(action)
        out = self.env.step_arrays(action.detach().cpu().numpy())
        self._current = [np.array(o, copy=True) for o in out.observation]
        self._ended = out.terminated | out.truncated
        arrays = [np.array(o, copy=True) for o in out.observation]
        for i, final in out.final_observation.items():
            for array, value in zip(arrays, final, strict=True):
                array[i] = value
        nxt = self._observation(arrays)
        n = self.env.num_envs
        terminated = torch.from_numpy(np.asarray(out.terminated, dtype=bool)).reshape(n, 1)
        truncated = torch.from_numpy(np.asarray(out.truncated, dtype=bool)).reshape(n, 1)
        nxt.set(keys.REWARD, torch.as_tensor(out.reward, dtype=torch.float32).reshape(n, 1))
        nxt.set(keys.TERMINATED, terminated)
        nxt.set(keys.TRUNCATED, truncated)
        nxt.set(keys.DONE, terminated | truncated)
        return nxt

    def _set_seed(self, seed: int | None) -> None:
        # The next full reset seeds env i with seed + i (gymnasium's rule, as make_vec_env).
        self.env.reseed(seed)

    def close(self, *, raise_if_closed: bool = True) -> None:
        self.env.close()
        super().close(raise_if_closed=raise_if_closed)


class TorchRLDeviceEnv(EnvBase):
    """A torch-stepped tdrl env (MuJoCo Warp's worlds, :class:`tdrl.envs.warp_backend.WarpVecEnv`)
    as a TorchRL env with batch size ``[num_envs]`` on the worlds' device; build it with
    :func:`to_torchrl`. ``step`` returns the real final observation; the worlds that ended were
    reset inside it, and the partial reset that follows hands out their reset observation."""

    def __init__(self, env: Any) -> None:
        if env.closed:
            raise RuntimeError(f"{env!r} is closed")
        n = env.num_envs
        super().__init__(batch_size=torch.Size([n]), device=env.device)
        self.env = env
        self.observation_spec = env.observation_spec.clone()
        self.action_spec = env.action_spec.clone()
        self.reward_spec, self.done_spec = _reward_and_done_specs(n, env.device)
        self._current: TensorDictBase | None = None
        self._ended = torch.zeros(n, dtype=torch.bool, device=env.device)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        mask = None if tensordict is None else tensordict.get(_RESET, None)
        seed = kwargs.pop("seed", None)
        if kwargs:
            raise TypeError(f"reset got unsupported arguments {sorted(kwargs)}")
        if mask is None or self._current is None:
            self._current = self.env.reset(seed)
        else:  # the worlds that ended were reset by the step; reset only the running ones
            if seed is not None:
                self.env.reseed(seed)
            running = mask.reshape(self.env.num_envs).to(self.device) & ~self._ended
            # on the CPU a reset of no world is skipped (its noise draws too); on CUDA the
            # check would be a host sync, so the reset graph runs on an all-False mask
            if self.device.type != "cpu" or bool(running.any()):
                self._current = self.env.reset(mask=running)
        self._ended = torch.zeros_like(self._ended)
        return self._current.select(*self.observation_spec.keys(True, True), keys.DONE,
                                    keys.TERMINATED, keys.TRUNCATED)  # fmt: skip

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        nxt, self._current = self.env.step(tensordict.get(keys.ACTION))
        self._ended = nxt.get(keys.DONE).reshape(-1).clone()  # transforms may edit "done"
        return nxt

    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:  # the next reset draws from this seed
            self.env.reseed(seed)

    def close(self, *, raise_if_closed: bool = True) -> None:
        self.env.close()
        super().close(raise_if_closed=raise_if_closed)


def to_torchrl(env: Any) -> TorchRLEnv | TorchRLDeviceEnv:
    """A tdrl ``VecEnv`` (or MuJoCo Warp's ``WarpVecEnv``, on its device) as a TorchRL
    ``EnvBase`` (batch size ``[num_envs]``), for TorchRL's ``Collector``, ``TransformedEnv``
    and ``rollout``. Closing it closes ``env``."""
    from tdrl.envs.warp_backend import WarpVecEnv

    if isinstance(env, WarpVecEnv):
        return TorchRLDeviceEnv(env)
    if not isinstance(env, VecEnv):
        raise TypeError(f"to_torchrl expects a tdrl VecEnv or WarpVecEnv, got {type(env).__name__}")
    return TorchRLEnv(env)


# --- TorchRL -> tdrl ------------------------------------------------------------------------


def _space(spec: TensorSpec, batch: int, where: str) -> gym.Space:
    """The single-env gymnasium space of a TorchRL spec with ``batch`` leading dims."""
    if isinstance(spec, Composite):
        return gym.spaces.Dict(
            {name: _space(sub, batch, f"{where}.{name}") for name, sub in spec.items()}
        )
    shape = tuple(spec.shape[batch:])
    dtype = torch.empty((), dtype=spec.dtype).numpy().dtype
    if isinstance(spec, Categorical) and spec.dtype not in (torch.bool,) and shape == ():
        return gym.spaces.Discrete(int(spec.space.n))
    if isinstance(spec, Bounded):
        low = spec.space.low.reshape(-1, *shape)[0].cpu().numpy().astype(dtype)
        high = spec.space.high.reshape(-1, *shape)[0].cpu().numpy().astype(dtype)
        return gym.spaces.Box(low, high, shape, dtype)
    if isinstance(spec, Unbounded) and spec.dtype.is_floating_point:
        return gym.spaces.Box(-np.inf, np.inf, shape, dtype)
    raise NotImplementedError(
        f"TorchRL spec {type(spec).__name__} (dtype {spec.dtype}, shape {tuple(spec.shape)}) at "
        f"{where} has no tdrl mapping: Bounded, floating Unbounded, scalar Categorical and "
        "Composites of those are supported"
    )


def _numpy(td: TensorDictBase, space: gym.Space) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {name: _numpy(td.get(name), sub) for name, sub in space.spaces.items()}
    return td.detach().cpu().numpy() if isinstance(td, torch.Tensor) else td


class _TorchRLVector(gym.vector.VectorEnv):
    """A TorchRL env as a gymnasium vector env with same-step autoreset (``info["final_obs"]``)."""

    def __init__(self, env: EnvBase) -> None:
        if len(env.batch_size) > 1:
            raise ValueError(
                f"from_torchrl needs a TorchRL env of batch size [] or [num_envs], got "
                f"{tuple(env.batch_size)}"
            )
        self.torchrl_env = env
        self._batched = len(env.batch_size) == 1
        self.num_envs = int(env.batch_size[0]) if self._batched else 1
        b = len(env.batch_size)
        self._obs_keys = [k for k in env.observation_spec.keys()]
        self.single_observation_space = _space(env.observation_spec, b, "observation_spec")
        self.single_action_space = _space(env.action_spec, b, "action_spec")
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, self.num_envs
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self._root: TensorDictBase | None = None
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def _batch(self, x: torch.Tensor) -> np.ndarray:
        a = x.detach().cpu().numpy()
        return a if self._batched else a[None]

    def _obs(self, td: TensorDictBase) -> Any:
        obs = _numpy(td.select(*self._obs_keys), self.single_observation_space)
        if not self._batched:
            out: Any = gym.vector.utils.create_empty_array(self.single_observation_space, 1)
            obs = gym.vector.utils.concatenate(self.single_observation_space, [obs], out)
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        env = self.torchrl_env
        if options and options.get("reset_mask") is not None:
            if self._root is None:
                raise RuntimeError("reset with a mask before a full reset")
            mask = torch.as_tensor(options["reset_mask"]).reshape(*env.batch_size, 1)
            self._root = env.reset(self._root.clone().set(_RESET, mask), set_state=False)
        elif seed is not None and not self._batched:
            self._root = env.reset(seed=seed)  # gymnasium's reset(seed=...) (GymEnv passes it on)
        else:
            if seed is not None:
                env.set_seed(seed)  # TorchRL's own rule for the sub-envs of a batched env
            self._root = env.reset()
        return self._obs(self._root), {}

    def step(self, actions: Any) -> Any:
        if self._root is None:
            raise RuntimeError("step before reset")
        env = self.torchrl_env
        td = self._root.clone(False)
        action = torch.as_tensor(np.asarray(actions), dtype=env.action_spec.dtype)
        td.set(keys.ACTION, action if self._batched else action[0])
        td, root = env.step_and_maybe_reset(td)
        nxt = td.get(keys.NEXT)
        reward = self._batch(nxt.get(keys.REWARD)).reshape(self.num_envs).astype(np.float64)
        terminated = self._batch(nxt.get(keys.TERMINATED)).reshape(self.num_envs)
        truncated = self._batch(nxt.get(keys.TRUNCATED, torch.zeros_like(nxt.get(keys.DONE))))
        truncated = truncated.reshape(self.num_envs)
        done = self._batch(nxt.get(keys.DONE)).reshape(self.num_envs)
        truncated = truncated | (done & ~terminated)  # a done that is not terminal is a cut
        info: dict[str, Any] = {}
        if done.any():
            final = self._obs(nxt)
            info["final_obs"] = np.array(
                [
                    _index(final, i, self.single_observation_space) if done[i] else None
                    for i in range(self.num_envs)
                ],
                dtype=object,
            )
            info["_final_obs"] = done.copy()
        self._root = root
        return self._obs(root), reward, terminated, truncated, info

    def close(self, **kwargs: Any) -> None:
        if not self.torchrl_env.is_closed:
            self.torchrl_env.close()


def _index(obs: Any, i: int, space: gym.Space) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {name: _index(obs[name], i, sub) for name, sub in space.spaces.items()}
    return obs[i]


def from_torchrl(
    env: EnvBase,
    *,
    seed: int | None = None,
    obs_dtype: torch.dtype = torch.float32,
    out_of_bounds: str = "clip",
) -> VecEnv:
    """A TorchRL env (``GymEnv``, ``SerialEnv``, ``ParallelEnv``, a ``TransformedEnv``) as a tdrl
    ``VecEnv``, for tdrl's ``Collector``, ``evaluate`` and recipes.

    A TorchRL env of batch size ``[]`` is one env (``num_envs=1``); ``[N]`` is N envs. ``seed``:
    an unbatched env is reset with ``reset(seed=seed)`` (gymnasium's rule, the same first
    episode as ``make_vec_env(..., seed=seed)``); a batched one is seeded by ``env.set_seed``
    (TorchRL's rule for its sub-envs). Specs tdrl cannot map raise an error naming them.
    Closing the ``VecEnv`` closes ``env``.
    """
    if not isinstance(env, EnvBase):
        raise TypeError(f"from_torchrl expects a TorchRL EnvBase, got {type(env).__name__}")
    return VecEnv(
        _TorchRLVector(env),
        seed=seed,
        obs_dtype=obs_dtype,
        out_of_bounds=out_of_bounds,  # type: ignore[arg-type]
    )
