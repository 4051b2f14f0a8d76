"""Gymnasium vector envs (MuJoCo included) that read and write TensorDicts.

The env steps with gymnasium's same-step autoreset (gymnasium >= 1.1): when an episode ends at a
step, gymnasium returns the reset observation and puts the real final one in
``infos["final_obs"]``. tdrl writes the real one to ``("next", "observation")``, so a transition
never pairs s_t with the next episode's first observation (docs/design.md, "Episode ends"), and no
step is spent on a reset.
"""

from __future__ import annotations

import importlib
import multiprocessing
import numbers
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Composite, TensorSpec

from tdrl import keys
from tdrl.envs.multiagent import is_multiagent_id, make_multiagent_env
from tdrl.envs.specs import Leaf, action_spec, observation_leaves, observation_spec

# gymnasium's info entries for same-step autoreset (gymnasium/vector/vector_env.py, _add_info):
# "final_obs" is an object array over envs, "_final_obs" the boolean mask of envs that ended.
_FINAL_OBS, _FINAL_OBS_MASK = "final_obs", "_final_obs"
_CPU = torch.device("cpu")

EnvFactory = Callable[[], gym.Env]

# Seconds an async step or reset may take before the workers are declared stuck. Generous: a
# MuJoCo step takes microseconds, but a user's env may load assets on reset.
DEFAULT_STEP_TIMEOUT = 120.0
# Seconds a worker gets to exit after "close" (then SIGTERM) before SIGKILL.
_CLOSE_GRACE = 5.0


class EnvWorkerError(RuntimeError):
    """An exception raised inside an async env worker, with the worker's traceback as text."""


class _Traced(gym.Wrapper):
    """Turns an exception in the worker's env into an :class:`EnvWorkerError` that carries the
    traceback text, so it reaches the error raised in the main process (gymnasium sends only the
    exception and logs the traceback as a warning, which ``PYTHONWARNINGS=ignore`` hides)."""

    def step(self, action: Any) -> Any:
        try:
            return self.env.step(action)
        except Exception as err:
            raise _worker_error(err) from None

    def reset(self, **kwargs: Any) -> Any:
        try:
            return self.env.reset(**kwargs)
        except Exception as err:
            raise _worker_error(err) from None


def _worker_error(err: Exception) -> EnvWorkerError:
    trace = "".join(traceback.format_exception(err))
    return EnvWorkerError(f"{type(err).__name__}: {err}\n\nworker traceback:\n{trace}")


class _TracedFactory:
    """A picklable factory (spawn start method) of ``_Traced(factory())``."""

    def __init__(self, factory: EnvFactory) -> None:
        self.factory = factory

    def __call__(self) -> gym.Env:
        return _Traced(self.factory())


class StepArrays(NamedTuple):
    """One vector step as numpy arrays (the collector's fast path; no TensorDict).

    Attributes:
        observation: per leaf, ``[num_envs, *shape]``: the next root observation, i.e. the reset
            observation for envs whose episode ended at this step. Valid until the next step.
        reward: ``[num_envs]``.
        terminated: ``[num_envs]`` bool.
        truncated: ``[num_envs]`` bool.
        final_observation: env index -> per-leaf real final observation, for ended envs only.
    """

    observation: list[np.ndarray]
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_observation: dict[int, list[np.ndarray]]


class VecEnv:
    """A gymnasium vector env with TorchRL's TensorDict step semantics.

    ``reset()`` returns a ``[num_envs]`` TensorDict with the observation keys and the root flags
    ``"done"``, ``"terminated"``, ``"truncated"`` (``[num_envs, 1]`` bool, False). ``step(td)``
    reads ``td["action"]`` and writes ``("next", key)`` for every observation key, plus
    ``("next", "reward")`` (float32) and the three flags (``[num_envs, 1]``); on an ended episode
    ``("next", obs)`` is the real final observation. ``step_and_maybe_reset(td)`` also returns the
    next root TensorDict, which holds the reset observation where an episode ended.

    Actions are checked: a missing ``"action"`` key, a batch size other than ``[num_envs]``, a
    shape or dtype other than ``action_spec``'s raise errors naming them. Out-of-bounds Box actions
    are clipped to ``[low, high]`` before the env sees them (``out_of_bounds="clip"``, the default,
    as Stable-Baselines3 does for Gaussian policies); the TensorDict keeps the unclipped action, so
    its log-probability stays valid. ``out_of_bounds="reject"`` raises a ``ValueError`` instead;
    a NaN action raises in both modes. Discrete actions out of range always raise.

    Shapes:
        reset() -> [num_envs]; step(td: [num_envs]) -> td with ("next", ...) of batch [num_envs].
    """

    def __init__(
        self,
        vec_env: gym.vector.VectorEnv,
        *,
        seed: int | None = None,
        obs_dtype: torch.dtype = torch.float32,
        out_of_bounds: Literal["clip", "reject"] = "clip",
        step_timeout: float | None = DEFAULT_STEP_TIMEOUT,
    ) -> None:
        if out_of_bounds not in ("clip", "reject"):
            raise ValueError(f"out_of_bounds must be 'clip' or 'reject', got {out_of_bounds!r}")
        _check_timeout(step_timeout)
        seed = _check_seed(seed)
        mode = getattr(vec_env, "metadata", {}).get("autoreset_mode")
        if mode is not None and mode != gym.vector.AutoresetMode.SAME_STEP:
            # NEXT_STEP (gym.make_vec's default) returns a dummy step after each episode end:
            # stored as a transition, it would pair the final observation with the reset one
            raise ValueError(
                f"VecEnv needs a vector env with same-step autoreset, got autoreset_mode={mode}: "
                "pass autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, or use make_vec_env"
            )
        # Any: the async-only members (step_wait, processes) are not on VectorEnv.
        self._vec: Any = vec_env
        # A vector env that does not say how it resets (no autoreset_mode in its metadata):
        # every step checks that each ended episode came with its final observation.
        self._check_final = mode is None
        self.num_envs: int = vec_env.num_envs
        self.seed = seed
        self.out_of_bounds = out_of_bounds
        self.step_timeout = step_timeout
        # What make_vec_env passed to gymnasium.make (another env of the same kind: videos)
        self.make_kwargs: dict[str, Any] = {}
        self.is_async = isinstance(vec_env, gym.vector.AsyncVectorEnv)
        self.obs_leaves: list[Leaf] = observation_leaves(
            vec_env.single_observation_space, obs_dtype
        )
        self.observation_spec: Composite = observation_spec(
            vec_env.single_observation_space, self.obs_leaves, self.num_envs
        )
        self.action_spec: TensorSpec = action_spec(vec_env.single_action_space, self.num_envs)
        space = vec_env.single_action_space
        self._is_box = isinstance(space, gym.spaces.Box)
        if isinstance(space, gym.spaces.Box):
            self._low = np.broadcast_to(space.low, space.shape).astype(space.dtype)
            self._high = np.broadcast_to(space.high, space.shape).astype(space.dtype)
            self._bounded = bool(np.isfinite(self._low).all() and np.isfinite(self._high).all())
        elif isinstance(space, gym.spaces.Discrete):
            self._n_actions: np.ndarray | int = int(space.n)
        elif isinstance(space, gym.spaces.MultiDiscrete):
            self._n_actions = np.asarray(space.nvec, dtype=np.int64)
        elif isinstance(space, gym.spaces.MultiBinary):
            self._n_actions = np.full(space.shape, 2, dtype=np.int64)
        self._mask_leaf = self._action_mask_leaf(space)
        self._seeded = False
        self._closed = False
        # An async step whose result was never read (KeyboardInterrupt in step_wait).
        self._pending = False
        self._last_observation: list[np.ndarray] | None = None

    # ------------------------------------------------------------------ numpy fast path
    def reset_arrays(
        self, seed: int | None = None, *, mask: np.ndarray | None = None
    ) -> list[np.ndarray]:
        """Resets every env (or those where ``mask`` is True); returns the per-leaf observations
        ``[num_envs, *shape]`` (the unchanged current ones for envs not reset).

        ``seed=None`` uses the seed given to ``make_vec_env`` on the first reset and continues
        the envs' random streams afterwards; env ``i`` gets ``seed + i`` (gymnasium's rule).
        """
        self._check_open()
        options = None
        if mask is not None:
            mask = np.asarray(mask)
            if mask.shape != (self.num_envs,) or mask.dtype != np.bool_:
                raise ValueError(
                    f"reset mask must be a bool array of shape ({self.num_envs},), got "
                    f"{mask.dtype} {mask.shape}"
                )
            if not self._seeded:
                raise RuntimeError("a partial reset (mask) needs a full reset first")
            options = {"reset_mask": mask}
        seed = _check_seed(seed)
        if seed is None and not self._seeded:
            seed = self.seed
        self._seeded = True
        if self._pending:
            self._drain()
        try:
            if self.is_async:
                self._vec.reset_async(seed=seed, options=options)
                obs, _ = self._wait(self._vec.reset_wait)
            else:
                obs, _ = self._vec.reset(seed=seed, options=options)
        except Exception as err:
            raise self._worker_failure("reset", err) from err
        out = self._split(obs)
        if self._mask_leaf is not None:
            self._check_mask(out[self._mask_leaf], "reset")
        return out

    def step_arrays(self, action: np.ndarray) -> StepArrays:
        """Steps every env with an already checked ``[num_envs, *action_shape]`` numpy action."""
        self._check_open()
        if self._pending:
            self._drain()
            raise RuntimeError(
                "an earlier async step was interrupted before its result arrived (e.g. by "
                "KeyboardInterrupt); its result was discarded, so the envs are one step ahead of "
                "their caller: reset the env (a new Collector over it does) before stepping again"
            )
        if self._is_box:
            if self.out_of_bounds == "reject":
                inside = (action >= self._low) & (action <= self._high)
                if not inside.all():
                    env, *dim = np.argwhere(~inside)[0].tolist()
                    d = tuple(dim)
                    raise ValueError(
                        f"action {action[(env, *d)]} of env {env} at dimension {d} is out of "
                        f"bounds [{self._low[d]}, {self._high[d]}] (out_of_bounds='reject')"
                    )
            else:
                # np.clip's Python dispatch costs ~4 us a step; two ufuncs do the same (NaN
                # stays NaN) into a new array: the policy's own action is left as it was.
                action = np.minimum(np.maximum(action, self._low), self._high)
                nan = np.isnan(action)
                if nan.any():  # clipping keeps a NaN: the env would return NaN observations
                    env, *dim = np.argwhere(nan)[0].tolist()
                    raise ValueError(
                        f"action of env {env} at dimension {tuple(dim)} is NaN "
                        f"({action[env].tolist()}): the policy's output is not a number"
                    )
        elif ((action < 0) | (action >= self._n_actions)).any():
            bad = np.argwhere((action < 0) | (action >= self._n_actions))[0]
            raise ValueError(
                f"discrete action {action[tuple(bad)]} at index {tuple(bad.tolist())} is outside "
                f"[0, {self._n_actions}) (env {bad[0]})"
            )
        try:
            if self.is_async:
                self._vec.step_async(action)
                obs, reward, terminated, truncated, info = self._wait(self._vec.step_wait)
            else:
                obs, reward, terminated, truncated, info = self._vec.step(action)
        except Exception as err:
            raise self._worker_failure("step", err) from err
        final: dict[int, list[np.ndarray]] = {}
        if _FINAL_OBS_MASK in info:
            final_obs = info[_FINAL_OBS]
            for i in np.flatnonzero(info[_FINAL_OBS_MASK]):
                final[int(i)] = self._split(final_obs[i])
        if self._check_final:
            missing = [i for i in np.flatnonzero(terminated | truncated) if int(i) not in final]
            if missing:
                raise RuntimeError(
                    f"env {int(missing[0])} ended an episode without its final observation in "
                    f"info[{_FINAL_OBS!r}]: VecEnv needs same-step autoreset (the vector env's "
                    "metadata has no 'autoreset_mode'; next-step autoreset would store a dummy "
                    "step pairing the final observation with the reset one)"
                )
        observation = self._split(obs)
        if self._mask_leaf is not None:
            self._check_mask(observation[self._mask_leaf], "step")
        return StepArrays(observation, reward, terminated, truncated, final)

    def check_action(self, action: Any) -> None:
        """Raises if ``action`` is not a tensor of ``action_spec``'s shape and dtype."""
        spec = self.action_spec
        if not isinstance(action, torch.Tensor):
            raise TypeError(f"{keys.ACTION!r} must be a torch.Tensor, got {type(action).__name__}")
        if action.shape != spec.shape:
            raise ValueError(
                f"{keys.ACTION!r} has shape {tuple(action.shape)}, expected {tuple(spec.shape)} "
                f"([num_envs={self.num_envs}, *action_shape])"
            )
        if action.dtype != spec.dtype:
            raise TypeError(f"{keys.ACTION!r} has dtype {action.dtype}, expected {spec.dtype}")

    # ------------------------------------------------------------------ TensorDict API
    def reset(self, seed: int | None = None) -> TensorDict:
        """Resets every env and returns the root TensorDict ``[num_envs]``."""
        return self._root(self.reset_arrays(seed))

    def step(self, td: TensorDictBase) -> TensorDictBase:
        """Steps with ``td["action"]``, writes ``("next", ...)`` into ``td`` and returns it."""
        if not isinstance(td, TensorDictBase):
            raise TypeError(f"step expects a TensorDict, got {type(td).__name__}")
        if tuple(td.batch_size) != (self.num_envs,):
            raise ValueError(
                f"step got a TensorDict of batch size {tuple(td.batch_size)}, expected "
                f"({self.num_envs},) (num_envs)"
            )
        if keys.ACTION not in td.keys():
            raise KeyError(f"step needs the key {keys.ACTION!r}; got keys {list(td.keys())}")
        action = td.get(keys.ACTION)
        self.check_action(action)
        out = self.step_arrays(action.detach().cpu().numpy())
        self._last_observation = [o.copy() for o in out.observation]
        next_td = self._observation_td(out.observation)
        for i, leaves in out.final_observation.items():
            for leaf, value in zip(self.obs_leaves, leaves, strict=True):
                next_td.get(leaf.key)[i] = torch.as_tensor(value).to(leaf.dtype)
        terminated = torch.from_numpy(out.terminated).reshape(self.num_envs, 1)
        truncated = torch.from_numpy(out.truncated).reshape(self.num_envs, 1)
        next_td.set(keys.REWARD, torch.tensor(out.reward, dtype=torch.float32).unsqueeze(-1))
        next_td.set(keys.TERMINATED, terminated.clone())
        next_td.set(keys.TRUNCATED, truncated.clone())
        next_td.set(keys.DONE, terminated | truncated)
        td.set(keys.NEXT, next_td)
        return td

    def step_and_maybe_reset(self, td: TensorDictBase) -> tuple[TensorDictBase, TensorDict]:
        """``step(td)``, plus the next root: the reset observation where an episode ended."""
        td = self.step(td)
        assert self._last_observation is not None
        return td, self._root(self._last_observation)

    @property
    def action_mask_leaf(self) -> int | None:
        """Index of the ``"action_mask"`` leaf among the observation leaves, or None."""
        return self._mask_leaf

    def rand_action(
        self,
        generator: torch.Generator | None = None,
        steps: int | None = None,
        *,
        mask: np.ndarray | None = None,
    ) -> torch.Tensor:
        """Uniform random actions within the bounds (an unbounded dimension draws from a normal,
        a half-bounded one an exponential off its bound, as gymnasium's ``Box.sample``); with an
        ``"action_mask"`` observation, uniform over the allowed actions of ``mask`` (the current
        one, ``[num_envs, n]``; one step at a time, since the mask changes every step).

        Shapes:
            [num_envs, *action_shape], or [num_envs, steps, *action_shape] when steps is given.
        """
        if self._mask_leaf is not None:
            if mask is None or steps is not None:
                raise ValueError(
                    f"this env has an {keys.ACTION_MASK!r}: random actions are drawn one step at "
                    "a time from the current mask (rand_action(generator, mask=...))"
                )
            return self._masked_rand_action(mask, generator)
        batch = (self.num_envs,) if steps is None else (self.num_envs, steps)
        if self._is_box:
            low, high = torch.as_tensor(self._low), torch.as_tensor(self._high)
            u = torch.rand(*batch, *low.shape, generator=generator, dtype=low.dtype)
            uniform = low + u * (high - low)
            if self._bounded:
                return uniform
            has_low, has_high, shape = low.isfinite(), high.isfinite(), uniform.shape
            normal = torch.randn(shape, generator=generator, dtype=low.dtype)
            tail = torch.empty(shape, dtype=low.dtype).exponential_(generator=generator)
            return torch.where(
                has_low & has_high,
                uniform,
                torch.where(has_low, low + tail, torch.where(has_high, high - tail, normal)),
            )
        if isinstance(self._n_actions, int):
            return torch.randint(self._n_actions, batch, generator=generator)
        # MultiDiscrete / MultiBinary: one uniform index per component
        n = torch.as_tensor(self._n_actions)
        u = torch.rand(*batch, *n.shape, generator=generator, dtype=torch.float64)
        return (u * n).long().clamp_max(n - 1)

    def render(self) -> Any:
        """Each env's ``render()`` (a tuple of frames with ``render_mode="rgb_array"``)."""
        return self._vec.render()

    def close(self) -> None:
        """Closes the envs and their worker processes; safe to call twice.

        Async workers get ``"close"``, then SIGTERM, then SIGKILL, a few seconds apart, so a
        stuck, stopped or SIGTERM-ignoring worker cannot make ``close`` hang.
        """
        if self._closed:
            return
        self._closed = True
        if not self.is_async:
            self._vec.close()
            return
        for pipe in self._vec.parent_pipes:
            if pipe is not None and not pipe.closed:
                try:
                    pipe.send(("close", None))
                except OSError:  # the worker is gone
                    pass
        deadline = time.monotonic() + _CLOSE_GRACE
        for process in self._vec.processes:
            process.join(timeout=max(deadline - time.monotonic(), 0.0))
        self._abort()

    def __enter__(self) -> VecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self._abort()

    def __repr__(self) -> str:
        mode = "async" if self.is_async else "sync"
        return f"VecEnv(num_envs={self.num_envs}, mode={mode}, keys={self.observation_keys})"

    @property
    def observation_keys(self) -> list:
        """The TensorDict keys of the observation (``["observation"]`` for a Box space)."""
        return [leaf.key for leaf in self.obs_leaves]

    @property
    def closed(self) -> bool:
        return self._closed

    def reseed(self, seed: int | None) -> None:
        """The next ``reset_arrays()`` without a seed seeds env ``i`` with ``seed + i``."""
        self.seed, self._seeded = _check_seed(seed), False

    def continue_streams(self) -> None:
        """The next ``reset_arrays()`` without a seed continues the envs' random streams, as after
        a first reset (for envs whose state and streams were restored from a checkpoint)."""
        self._seeded = True

    @property
    def sync_envs(self) -> list[gym.Env] | None:
        """The sub-envs of a gymnasium ``SyncVectorEnv`` (in this process); ``None`` otherwise
        (async workers, a TorchRL env through ``from_torchrl``)."""
        if isinstance(self._vec, gym.vector.SyncVectorEnv):
            return list(self._vec.envs)
        return None

    @property
    def worker_processes(self) -> list[multiprocessing.process.BaseProcess]:
        """The async workers (empty in sync mode)."""
        return list(getattr(self._vec, "processes", []))

    # ------------------------------------------------------------------ internals
    def _action_mask_leaf(self, space: gym.Space) -> int | None:
        """Index of the ``"action_mask"`` observation leaf (checked against the action space)."""
        found = [i for i, leaf in enumerate(self.obs_leaves) if leaf.key == keys.ACTION_MASK]
        if not found:
            return None
        shape = self.obs_leaves[found[0]].shape
        if isinstance(space, gym.spaces.Discrete):
            expected: tuple[int, ...] = (int(space.n),)
        elif isinstance(space, gym.spaces.MultiDiscrete):
            expected = (
                int(np.sum(space.nvec)),
            )  # TorchRL's layout: the components' masks, concatenated
        else:
            raise ValueError(
                f"an {keys.ACTION_MASK!r} observation needs a Discrete or MultiDiscrete action "
                f"space, got {space}"
            )
        if shape != expected:
            raise ValueError(
                f"{keys.ACTION_MASK!r} has shape {shape} per env, expected {expected} for the "
                f"action space {space}"
            )
        self._mask_splits = (
            np.cumsum(space.nvec)[:-1] if isinstance(space, gym.spaces.MultiDiscrete) else None
        )
        return found[0]

    def _masked_rand_action(
        self, mask: np.ndarray, generator: torch.Generator | None
    ) -> torch.Tensor:
        """One uniform draw among the allowed actions per env (and component): the argmax of
        uniform noise over the allowed entries."""
        allowed = torch.as_tensor(np.asarray(mask, dtype=bool))
        noise = torch.rand(allowed.shape, generator=generator).masked_fill_(~allowed, -1.0)
        if self._mask_splits is None:
            return noise.argmax(-1)
        parts = torch.tensor_split(noise, [int(i) for i in self._mask_splits], dim=-1)
        return torch.stack([part.argmax(-1) for part in parts], dim=-1)

    def _check_mask(self, mask: np.ndarray, where: str) -> None:
        """Every env must have a valid action (per component): else no action can be taken."""
        parts = [mask] if self._mask_splits is None else np.split(mask, self._mask_splits, axis=-1)
        for component, part in enumerate(parts):
            empty = ~np.asarray(part, dtype=bool).any(-1)
            if empty.any():
                env = int(np.flatnonzero(empty)[0])
                which = "" if self._mask_splits is None else f" for action component {component}"
                raise ValueError(
                    f"{keys.ACTION_MASK!r} of env {env} allows no action{which} (an all-false "
                    f"row, after {where})"
                )

    def _split(self, obs: Any) -> list[np.ndarray]:
        out = []
        for leaf in self.obs_leaves:
            value = obs
            for name in leaf.path:
                value = value[name]
            out.append(value)
        return out

    def _observation_td(self, observation: list[np.ndarray]) -> TensorDict:
        # device="cpu", as TorchRL's envs say: env I/O is on the CPU, and a replay buffer then
        # checks the device once per batch instead of once per leaf.
        td = TensorDict({}, batch_size=(self.num_envs,), device=_CPU)
        for leaf, value in zip(self.obs_leaves, observation, strict=True):
            # torch.tensor copies: the sync vector env reuses its arrays (copy=False).
            td.set(leaf.key, torch.tensor(value, dtype=leaf.dtype))
        return td

    def _root(self, observation: list[np.ndarray]) -> TensorDict:
        td = self._observation_td(observation)
        for key in (keys.DONE, keys.TERMINATED, keys.TRUNCATED):
            td.set(key, torch.zeros(self.num_envs, 1, dtype=torch.bool))
        return td

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")

    def _wait(self, wait: Callable[..., Any]) -> Any:
        """``wait(timeout=step_timeout)``, remembering a result left unread by an interrupt."""
        try:
            return wait(timeout=self.step_timeout)
        except KeyboardInterrupt:
            self._pending = True
            raise

    def _drain(self) -> None:
        """Reads and drops the result of an interrupted step, so the workers can take calls."""
        try:
            self._vec.step_wait(timeout=self.step_timeout)
        except Exception as err:
            raise self._worker_failure("step", err) from err
        finally:
            self._pending = False

    def _describe_workers(self, err: Exception) -> str:
        """Which workers failed: index, pid and exit code or signal (or 'did not answer')."""
        vec = self._vec
        parts = []
        for i, process in enumerate(vec.processes):
            code = process.exitcode
            if code is not None:
                how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
                parts.append(f"worker {i} (pid {process.pid}) died: {how}")
            elif isinstance(err, multiprocessing.TimeoutError):
                pipe = vec.parent_pipes[i]
                if pipe is not None and not pipe.closed and not pipe.poll():
                    parts.append(f"worker {i} (pid {process.pid}) did not answer{_state(process)}")
            elif vec.parent_pipes[i] is None:  # gymnasium closes the pipe of a worker that raised
                parts.append(f"worker {i} (pid {process.pid}) raised")
        return "; ".join(parts) or "no worker identified"

    def _worker_failure(self, what: str, err: Exception) -> Exception:
        """Tears down an async vector env whose worker failed; returns the error to raise."""
        if not self.is_async:
            return err
        workers = self._describe_workers(err)
        self._abort()
        if isinstance(err, multiprocessing.TimeoutError):
            return TimeoutError(
                f"an env worker did not answer {what} within step_timeout={self.step_timeout}s "
                f"({workers}); the vector env was closed"
            )
        return RuntimeError(
            f"an env worker failed during {what} ({workers}): {type(err).__name__}: {err}; "
            "the vector env was closed"
        )

    def _abort(self) -> None:
        """Stops async workers without talking to them (they may be dead, stuck or stopped):
        SIGTERM, then SIGKILL for any that is still alive a few seconds later."""
        self._closed = True
        vec = self._vec
        if not self.is_async:
            vec.close()
            return
        for process in vec.processes:
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + _CLOSE_GRACE
        for process in vec.processes:
            process.join(timeout=max(deadline - time.monotonic(), 0.0))
        for process in vec.processes:
            if process.is_alive():  # ignores SIGTERM, or is stopped (SIGSTOP)
                process.kill()
                process.join(timeout=_CLOSE_GRACE)
        for pipe in vec.parent_pipes:
            if pipe is not None:
                pipe.close()
        # gymnasium's close() would wait on the workers' pipes; they are gone.
        vec.closed = True


def _state(process: multiprocessing.process.BaseProcess) -> str:
    """`` (stopped)`` when the process is stopped (Linux /proc), else ``""``."""
    try:
        with open(f"/proc/{process.pid}/stat") as f:
            return " (stopped)" if f.read().rsplit(")", 1)[1].split()[0] in "Tt" else ""
    except (OSError, IndexError):
        return ""


def _check_timeout(step_timeout: float | None) -> None:
    if step_timeout is not None and not (
        isinstance(step_timeout, (int, float)) and step_timeout > 0
    ):
        raise ValueError(f"step_timeout must be a number > 0 or None, got {step_timeout!r}")


def _check_seed(seed: int | None) -> int | None:
    """``seed`` as a Python int (gymnasium's vector reset takes no numpy int), or None."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be an int >= 0 or None, got {seed!r}")
    return int(seed)


def make_vec_env(
    env_id_or_callables: str | EnvFactory | Sequence[EnvFactory],
    num_envs: int,
    mode: Literal["sync", "async"] = "sync",
    seed: int | None = None,
    obs_dtype: torch.dtype = torch.float32,
    *,
    out_of_bounds: Literal["clip", "reject"] = "clip",
    step_timeout: float | None = DEFAULT_STEP_TIMEOUT,
    context: str | None = None,
    backend: Literal["gymnasium", "envpool", "mujoco_warp"] = "gymnasium",
    **make_kwargs: Any,
) -> VecEnv:
    """Makes ``num_envs`` gymnasium envs in one vector env that speaks TensorDicts.

    Args:
        env_id_or_callables: a registered id (``"HalfCheetah-v5"``), one env factory (called
            ``num_envs`` times), or ``num_envs`` factories; a multi-agent id (``"vmas/navigation"``,
            ``"mpe2/simple_spread_v3"``) makes a ``tdrl.envs.multiagent.MultiAgentVecEnv``.
        num_envs: number of envs.
        mode: ``"sync"`` (one process, gymnasium's SyncVectorEnv) or ``"async"`` (one subprocess
            per env, AsyncVectorEnv with shared-memory observations).
        seed: seed of the first ``reset()``; env i gets ``seed + i``. Same seed, same batches in
            both modes.
        obs_dtype: dtype of floating observations (MuJoCo's float64 becomes float32).
        out_of_bounds: ``"clip"`` or ``"reject"`` Box actions outside the bounds (see VecEnv).
        step_timeout: async only: seconds a step or reset may take before the workers are
            declared stuck (TimeoutError naming them; the env is closed). ``None``: wait forever.
        context: async only: multiprocessing start method. Default ``"fork"`` where available:
            workers only run gymnasium, and importing torchrl sets the global default to
            ``"spawn"``, which needs a ``__main__`` guard and starts slowly.
        backend: ``"gymnasium"`` (default) or ``"envpool"`` (C++ threads; an env id only, sync
            mode; see ``tdrl.envs.envpool_backend`` for its autoreset handling and task versions)
            or ``"mujoco_warp"`` (a :class:`tdrl.envs.warp_backend.WarpVecEnv`: the worlds of a
            MuJoCo locomotion task on one device, CUDA when there is one; ``device=`` picks it;
            collect with :class:`tdrl.collectors.DeviceCollector`).
        **make_kwargs: passed to ``gymnasium.make`` (e.g. ``max_episode_steps``) or to
            ``envpool.make`` (e.g. ``num_threads``); id only.

    Returns:
        A ``VecEnv`` (a ``WarpVecEnv`` with ``backend="mujoco_warp"``); close it (or use
        ``with``) to stop the worker processes.

    Shapes:
        reset() -> TensorDict [num_envs].
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, numbers.Integral) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    if mode not in ("sync", "async"):
        raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
    _check_timeout(step_timeout)
    seed = _check_seed(seed)
    if is_multiagent_id(env_id_or_callables):  # vmas/..., mpe2/..., pettingzoo/...
        if mode != "sync" or backend != "gymnasium":
            raise ValueError(
                f"env id {env_id_or_callables!r}: a multi-agent env runs in this process "
                "(mode='sync', backend='gymnasium')"
            )
        return make_multiagent_env(env_id_or_callables, num_envs, seed, **make_kwargs)  # type: ignore[return-value]
    if backend == "envpool":
        if not isinstance(env_id_or_callables, str) or mode != "sync":
            raise ValueError("backend='envpool' takes an env id and mode='sync' (its own threads)")
        from tdrl.envs.envpool_backend import make_envpool

        pool = make_envpool(env_id_or_callables, num_envs, seed, **make_kwargs)
        return VecEnv(pool, seed=seed, obs_dtype=obs_dtype, out_of_bounds=out_of_bounds)
    if backend == "mujoco_warp":
        if mode != "sync":
            raise ValueError("backend='mujoco_warp' steps every world in one call: mode='sync'")
        if out_of_bounds != "clip":
            raise ValueError(
                "backend='mujoco_warp' clips actions to the control range (out_of_bounds='clip'): "
                "a per-step bounds check would cost a host sync a step"
            )
        from tdrl.envs.warp_backend import make_warp_env

        warp = make_warp_env(
            env_id_or_callables, num_envs, seed, obs_dtype=obs_dtype, **make_kwargs
        )  # type: ignore[arg-type]
        return warp  # type: ignore[return-value]
    if backend != "gymnasium":
        raise ValueError(
            f"backend must be 'gymnasium', 'envpool' or 'mujoco_warp', got {backend!r}"
        )
    if isinstance(env_id_or_callables, str):
        env_id = env_id_or_callables
        module, _, name = env_id.rpartition(":")
        try:
            if module:  # gymnasium's "module:EnvId": the module registers the id
                importlib.import_module(module)
            gym.spec(name)
        except ImportError as err:
            raise ValueError(f"env id {env_id!r}: cannot import {module!r}: {err}") from err
        except gym.error.Error as err:
            raise ValueError(f"unknown gymnasium env id {env_id!r}: {err}") from err

        def factory() -> gym.Env:
            return gym.make(env_id, **make_kwargs)

        factories: list[EnvFactory] = [factory] * num_envs
    else:
        if make_kwargs:
            raise TypeError(f"make_kwargs {sorted(make_kwargs)} need an env id, not callables")
        if callable(env_id_or_callables):
            factories = [env_id_or_callables] * num_envs
        else:
            factories = list(env_id_or_callables)
            if len(factories) != num_envs:
                raise ValueError(f"got {len(factories)} env factories for num_envs={num_envs}")
    same_step = gym.vector.AutoresetMode.SAME_STEP
    vec: gym.vector.VectorEnv
    if mode == "sync":
        # copy=False: tdrl copies every observation into its own tensors right away.
        vec = gym.vector.SyncVectorEnv(factories, copy=False, autoreset_mode=same_step)
    else:
        if context is None and "fork" in multiprocessing.get_all_start_methods():
            context = "fork"
        traced = [_TracedFactory(f) for f in factories]
        vec = gym.vector.AsyncVectorEnv(
            traced, shared_memory=True, copy=False, context=context, autoreset_mode=same_step
        )
    env = VecEnv(
        vec, seed=seed, obs_dtype=obs_dtype, out_of_bounds=out_of_bounds, step_timeout=step_timeout
    )
    env.make_kwargs = dict(make_kwargs)
    return env
