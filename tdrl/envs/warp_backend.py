"""MuJoCo Warp as a backend of ``make_vec_env`` (``backend="mujoco_warp"``): N worlds of a
gymnasium MuJoCo locomotion task stepped together on one device, as TensorDicts on that device.

MuJoCo Warp (``mujoco_warp``, Google DeepMind and NVIDIA) runs MuJoCo's pipeline as Warp kernels
over a batch of worlds, on a GPU or on Warp's CPU device. :class:`WarpVecEnv` loads the task's
model from gymnasium's own env (same XML, same options, same ``make`` keyword arguments) and
applies that env's rules in torch over all worlds at once, read from the same env object:

- ``Hopper-v5``, ``Walker2d-v5``: observation ``qpos[1:]`` and ``clip(qvel, -10, 10)``; reward
  forward velocity + healthy reward - control cost; terminated when unhealthy (z and angle
  ranges, Hopper also the state range; strict bounds).
- ``HalfCheetah-v5``: observation ``qpos[1:]``, ``qvel``; reward forward velocity - control cost;
  never terminates.
- every task: ``frame_skip`` physics steps an env step, ``dt = frame_skip * timestep``, truncated
  at the spec's ``max_episode_steps`` (gymnasium's ``TimeLimit``); resets draw the same noise
  laws as gymnasium's ``reset_model`` (uniform on positions; uniform or Gaussian on velocities).

The contract is :class:`tdrl.envs.VecEnv`'s: same-step autoreset (the worlds whose episode ended
are reset inside the step; ``("next", "observation")`` holds the real final observation),
actions clipped to the control range, float32 observations. What differs: the physics runs in
float32 (MuJoCo runs in float64), so a trajectory agrees with gymnasium's step by step within a
tolerance, not bitwise (``tests/envs/test_warp_backend.py`` states it), and the reset noise comes
from a torch generator on the device, so a seed gives other episodes than gymnasium's (and on
CUDA, which draws noise for every world each step to stay free of host syncs, other episodes
than on the CPU).

On CUDA the ``frame_skip`` physics steps and the partial reset are captured once as Warp graphs
and replayed on torch's current stream each step: an env step makes no host copy and no host
sync. On the CPU they are captured as Warp's CPU graphs (one replay instead of hundreds of kernel
launches from Python).

``Ant-v5`` is refused: from the same state, one step of its four legs' contacts in float32 differs
from gymnasium's by more than 1e-3 (relative, in the observation) on about a third of the steps
(8 worlds x 100 random-action steps; Hopper, Walker2d and HalfCheetah: at most 4e-4), with the RK4
integrator of its XML and with Euler alike, while MuJoCo itself from the float32-rounded state
stays within 5e-6: its rewards would not be gymnasium's Ant.
"""

from __future__ import annotations

import contextlib
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict
from torchrl.data import Bounded, Composite, Unbounded

from tdrl import keys

__all__ = ["WARP_TASKS", "WarpVecEnv", "make_warp_env"]

# The gymnasium env classes whose rules WarpVecEnv applies, by class name.
WARP_TASKS = {
    "HopperEnv": "Hopper-v5",
    "Walker2dEnv": "Walker2d-v5",
    "HalfCheetahEnv": "HalfCheetah-v5",
}
# mujoco_warp's overflow bits that mean "allocate more" (not the solver's iteration limits).
_CAPACITY_BITS = ("NEFC", "NJMAX_NNZ", "BROADPHASE", "NARROWPHASE", "CCD", "NVMAX")


def _warp() -> tuple[Any, Any]:
    try:
        import warp as wp

        wp.config.log_level = wp.LOG_WARNING  # no banner, no line per kernel module loaded
        import mujoco_warp as mjw
    except ImportError as err:
        raise ImportError(
            "backend='mujoco_warp' needs mujoco-warp and warp-lang: pip install 'tdrl[warp]'"
        ) from err
    return wp, mjw


class WarpVecEnv:
    """``num_envs`` worlds of a gymnasium MuJoCo task on ``device``, stepped by MuJoCo Warp.

    ``reset()`` returns the root TensorDict ``[num_envs]`` (``"observation"`` and the three flags,
    False) on ``device``; ``step(action)`` returns ``(next, current)`` like
    :class:`tdrl.envs.MultiAgentVecEnv`: ``next`` holds ``"observation"`` (the real next one),
    ``"reward"`` and the flags, ``current`` the observations to act from (reset ones where an
    episode ended). All on ``device``; nothing is copied to the host.

    Args:
        env_id: a gymnasium id whose env is one of :data:`WARP_TASKS` (``Hopper-v5``, ...).
        num_envs: number of worlds.
        seed: seed of the reset noise (torch generator on ``device``); ``None``: fresh entropy.
        device: ``"cpu"`` (Warp's CPU device) or ``"cuda[:N]"``.
        obs_dtype: floating observation dtype.
        graph: replay captured Warp graphs (default); False launches every kernel each step.
        contacts_per_world, rows_per_world: what mujoco_warp allocates per world (``nconmax``,
            ``njmax``). The locomotion tasks touch the floor with a few geoms; a world that needs
            more is flagged at that step and :meth:`check_capacity` (the collector calls it
            once a batch) raises an error naming the overflow and these arguments.
        **make_kwargs: passed to ``gymnasium.make`` (the task's options: ``ctrl_cost_weight``,
            ``reset_noise_scale``, ``max_episode_steps``, ...); the env made is only read.

    Shapes:
        reset() -> [num_envs]; step(action [num_envs, act_dim]) -> two TensorDicts [num_envs].
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        obs_dtype: torch.dtype = torch.float32,
        *,
        graph: bool = True,
        contacts_per_world: int = 32,
        rows_per_world: int = 192,
        **make_kwargs: Any,
    ) -> None:
        wp, mjw = _warp()
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"backend='mujoco_warp' runs on cpu or cuda, got device {device!r}")
        if not obs_dtype.is_floating_point:
            raise TypeError(f"obs_dtype must be a floating dtype, got {obs_dtype}")
        gym_env = gym.make(env_id, **make_kwargs)
        task: Any = gym_env.unwrapped  # a MujocoEnv: model, frame_skip, init_qpos, ...
        kind = type(task).__name__
        if kind not in WARP_TASKS:
            gym_env.close()
            raise ValueError(
                f"backend='mujoco_warp' models the tasks {sorted(WARP_TASKS.values())} "
                f"(gymnasium's rules written over a batch of worlds); {env_id!r} is a {kind}"
            )
        self.env_id, self.kind, self.num_envs, self.seed = env_id, kind, num_envs, seed
        self.obs_dtype = obs_dtype
        self.max_episode_steps = gym_env.spec.max_episode_steps if gym_env.spec else None
        self._rules = {k: v for k, v in vars(task).items() if k.startswith("_") and k[1] != "_"}
        self.frame_skip, self.dt = int(task.frame_skip), float(task.dt)
        mjm = task.model
        self._wp, self._mjw = wp, mjw
        self._wp_device = "cpu" if self.device.type == "cpu" else f"cuda:{self.device.index}"
        import mujoco

        with wp.ScopedDevice(self._wp_device):
            self._model = mjw.put_model(mjm)
            mjd = mujoco.MjData(mjm)
            mujoco.mj_forward(mjm, mjd)
            self._data = mjw.put_data(
                mjm, mjd, nworld=num_envs, nconmax=contacts_per_world, njmax=rows_per_world
            )
            wp.synchronize_device(self._wp_device)  # before torch's streams touch the arrays
        d = self._data
        self._qpos, self._qvel = wp.to_torch(d.qpos), wp.to_torch(d.qvel)
        self._ctrl = wp.to_torch(d.ctrl)
        self._overflow = wp.to_torch(d.overflow)  # [N] bitmask, cleared by a world's reset
        self._capacity_mask = 0
        for name in _CAPACITY_BITS:
            self._capacity_mask |= int(getattr(mjw.OverflowType, name, 0))
        self._overflowed = torch.zeros(num_envs, dtype=torch.int32, device=self.device)
        self._capacity = dict(contacts_per_world=contacts_per_world, rows_per_world=rows_per_world)
        self._mask = torch.zeros(num_envs, dtype=torch.bool, device=self.device)
        self._wp_mask = wp.from_torch(self._mask, dtype=wp.bool)
        f32: dict[str, Any] = dict(dtype=torch.float32, device=self.device)
        self._init_qpos = torch.as_tensor(task.init_qpos, **f32)
        self._init_qvel = torch.as_tensor(task.init_qvel, **f32)
        space: Any = task.action_space
        self._low = torch.as_tensor(space.low, **f32)
        self._high = torch.as_tensor(space.high, **f32)
        self.action_spec = Bounded(
            low=self._low.expand(num_envs, -1), high=self._high.expand(num_envs, -1),
            shape=(num_envs, *space.shape), dtype=torch.float32, device=self.device,
        )  # fmt: skip
        obs_dim = int(task.observation_space.shape[0])
        self.observation_spec = Composite(
            {keys.OBSERVATION: Unbounded((num_envs, obs_dim), dtype=obs_dtype, device=self.device)},
            shape=(num_envs,), device=self.device,
        )  # fmt: skip
        gym_env.close()
        self._generator = torch.Generator(self.device)
        self._generator.manual_seed(
            seed if seed is not None else int(np.random.default_rng().integers(2**62))
        )
        self._elapsed = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self._x_before = torch.zeros(num_envs, **f32)
        self._graphs: tuple[Any, Any] | None = None
        self._use_graph = graph
        self._started = False  # the first call is a full reset (capture needs a known state)
        self._closed = False

    # ------------------------------------------------------------------ the task's rules
    def _rule(self, name: str) -> Any:
        return self._rules[f"_{name}"]

    def _observation(self) -> torch.Tensor:
        qpos, qvel = self._qpos, self._qvel
        skip = 1 if self._rule("exclude_current_positions_from_observation") else 0
        if self.kind != "HalfCheetahEnv":
            qvel = qvel.clamp(-10.0, 10.0)
        return torch.cat([qpos[:, skip:], qvel], dim=-1).to(self.obs_dtype)

    def _healthy(self) -> torch.Tensor:
        qpos = self._qpos
        z, angle = qpos[:, 1], qpos[:, 2]
        z_low, z_high = self._rule("healthy_z_range")
        a_low, a_high = self._rule("healthy_angle_range")
        healthy = (z > z_low) & (z < z_high) & (angle > a_low) & (angle < a_high)
        if self.kind == "HopperEnv":
            s_low, s_high = self._rule("healthy_state_range")
            state = torch.cat([qpos, self._qvel], dim=-1)[:, 2:]
            healthy &= ((state > s_low) & (state < s_high)).all(-1)
        return healthy

    def _reward_and_terminated(
        self, action: torch.Tensor, x_velocity: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        reward = self._rule("forward_reward_weight") * x_velocity
        reward = reward - self._rule("ctrl_cost_weight") * action.square().sum(-1)
        if self.kind == "HalfCheetahEnv":
            return reward, torch.zeros_like(reward, dtype=torch.bool)
        healthy = self._healthy()
        reward = reward + healthy * float(self._rule("healthy_reward"))
        if not self._rule("terminate_when_unhealthy"):
            return reward, torch.zeros_like(healthy)
        terminated = ~healthy
        return reward, terminated

    def _reset_noise(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        scale = float(self._rule("reset_noise_scale"))
        g, nq, nv = self._generator, self._qpos.shape[1], self._qvel.shape[1]
        f32: dict[str, Any] = dict(dtype=torch.float32, device=self.device, generator=g)
        qpos = self._init_qpos + scale * (2 * torch.rand(n, nq, **f32) - 1)  # U(-s, s)
        if self.kind in ("HopperEnv", "Walker2dEnv"):
            qvel = self._init_qvel + scale * (2 * torch.rand(n, nv, **f32) - 1)
        else:  # HalfCheetah: s * N(0, 1)
            qvel = self._init_qvel + scale * torch.randn(n, nv, **f32)
        return qpos, qvel

    # ------------------------------------------------------------------ simulation
    def _physics(self) -> None:
        """``frame_skip`` physics steps of every world (gymnasium's ``do_simulation``)."""
        for _ in range(self.frame_skip):
            self._mjw.step(self._model, self._data)

    def _reset_masked(self) -> None:
        """mujoco_warp's ``reset_data`` (``mj_resetData``) of the worlds in ``self._mask``."""
        self._mjw.reset_data(self._model, self._data, reset=self._wp_mask)

    def _stream(self) -> Any:
        """Torch's current CUDA stream as a Warp stream (None on the CPU)."""
        if self.device.type != "cuda":
            return None
        return self._wp.stream_from_torch(torch.cuda.current_stream(self.device))

    def _on(self, stream: Any) -> contextlib.ExitStack:
        """Warp's device, and ``stream`` when there is one, for the calls inside."""
        scope = contextlib.ExitStack()
        scope.enter_context(self._wp.ScopedDevice(self._wp_device))
        if stream is not None:
            scope.enter_context(self._wp.ScopedStream(stream))
        return scope

    def _capture(self) -> tuple[Any, Any]:
        """Both steps as Warp graphs, captured on a side stream on CUDA (each replay then runs
        on torch's current stream); their kernels load in a first, uncaptured call."""
        wp, stream = self._wp, None
        if self.device.type == "cuda":
            self._capture_stream = torch.cuda.Stream(self.device)  # alive with the graphs
            self._capture_stream.wait_stream(torch.cuda.current_stream(self.device))
            stream = wp.stream_from_torch(self._capture_stream)
        with self._on(stream):
            self._physics()  # loads the modules (kernels compile on first use)
            self._reset_masked()
            if stream is not None:
                wp.synchronize_stream(stream)
            with wp.ScopedCapture(stream=stream) as physics:
                self._physics()
            with wp.ScopedCapture(stream=stream) as reset:
                self._reset_masked()
        return physics.graph, reset.graph

    def _run(self, which: int) -> None:
        """The physics (0) or the masked reset (1): a graph replay, or the launches."""
        if self._use_graph:
            if self._graphs is None:
                self._graphs = self._capture()
            self._wp.capture_launch(self._graphs[which], stream=self._stream())
            return
        with self._on(self._stream()):
            (self._physics, self._reset_masked)[which]()

    def _reset_worlds(self, mask: torch.Tensor) -> None:
        """Resets the worlds where ``mask`` is True (gymnasium's ``reset``: ``mj_resetData``,
        then the task's noisy ``qpos``/``qvel``)."""
        self._mask.copy_(mask)
        self._run(1)
        qpos, qvel = self._reset_noise(self.num_envs)
        column = mask.unsqueeze(-1)
        self._qpos.copy_(torch.where(column, qpos, self._qpos))
        self._qvel.copy_(torch.where(column, qvel, self._qvel))
        self._elapsed.masked_fill_(mask, 0)
        self._x_before.copy_(torch.where(mask, self._qpos[:, 0], self._x_before))

    # ------------------------------------------------------------------ the API
    def reset(self, seed: int | None = None, *, mask: torch.Tensor | None = None) -> TensorDict:
        """Resets every world, or those where ``mask`` (``[num_envs]`` bool) is True after a
        first full reset; returns the root TensorDict of every world (``seed``: re-seeds the
        reset noise first)."""
        self._check_open()
        if seed is not None:
            self._generator.manual_seed(seed)
        if mask is None:
            mask = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        else:
            if not self._started:
                raise RuntimeError(f"{self!r}: a partial reset (mask) needs a full reset first")
            if mask.shape != (self.num_envs,) or mask.dtype != torch.bool:
                raise ValueError(
                    f"reset mask must be a bool tensor of shape ({self.num_envs},), got "
                    f"{mask.dtype} {tuple(mask.shape)}"
                )
            mask = mask.to(self.device)
        self._reset_worlds(mask)
        self._started = True
        return self._root(self._observation())

    def step(self, action: torch.Tensor) -> tuple[TensorDict, TensorDict]:
        """One env step of every world; returns ``(next, current)`` (see the class)."""
        self._check_open()
        if not self._started:
            raise RuntimeError(f"{self!r}: reset() before the first step")
        self._check_action(action)
        action = torch.minimum(torch.maximum(action, self._low), self._high)
        self._ctrl.copy_(action)
        self._run(0)
        x_after = self._qpos[:, 0].clone()
        x_velocity = (x_after - self._x_before) / self.dt
        self._x_before = x_after
        self._overflowed |= self._overflow & self._capacity_mask  # before a reset clears it
        observation = self._observation()
        reward, terminated = self._reward_and_terminated(action, x_velocity)
        self._elapsed += 1
        if self.max_episode_steps is not None:
            truncated = self._elapsed >= self.max_episode_steps
        else:
            truncated = torch.zeros_like(terminated)
        done = terminated | truncated
        nxt = TensorDict(
            {
                keys.OBSERVATION: observation,
                keys.REWARD: reward.unsqueeze(-1),
                keys.TERMINATED: terminated.unsqueeze(-1),
                keys.TRUNCATED: truncated.unsqueeze(-1),
                keys.DONE: done.unsqueeze(-1),
            },
            batch_size=(self.num_envs,), device=self.device,
        )  # fmt: skip
        if self.device.type == "cuda" or bool(done.any()):  # CUDA: no host sync, always
            self._reset_worlds(done)
            current = self._observation()
        else:
            current = observation
        return nxt, self._root(current)

    def reseed(self, seed: int) -> None:
        """The reset noise continues from ``seed`` (the next reset's draws)."""
        self._generator.manual_seed(seed)

    def rand_action(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """Uniform actions in the bounds, ``[num_envs, act_dim]`` on the env's device
        (``generator``: a CPU generator; the draw is moved)."""
        u = torch.rand(self.action_spec.shape, generator=generator).to(self.device)
        return self._low + u * (self._high - self._low)

    def close(self) -> None:
        self._closed = True
        self._graphs = None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def observation_keys(self) -> list:
        return [keys.OBSERVATION]

    def __enter__(self) -> WarpVecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"WarpVecEnv({self.env_id!r}, num_envs={self.num_envs}, device={self.device})"

    # ------------------------------------------------------------------ state, checks
    def set_state(self, qpos: torch.Tensor, qvel: torch.Tensor) -> None:
        """Puts every world in the state ``(qpos, qvel)`` (``[num_envs, nq]``, ``[num_envs,
        nv]``), as gymnasium's ``set_state`` after a reset: for comparing trajectories."""
        self._check_open()
        self._mask.fill_(True)
        self._run(1)
        self._qpos.copy_(qpos)
        self._qvel.copy_(qvel)
        self._elapsed.zero_()
        self._x_before.copy_(self._qpos[:, 0])
        self._started = True

    def check_capacity(self) -> None:
        """Raises if a world needed more contacts or constraint rows than allocated since the
        last check (one host sync); the flags are then cleared."""
        worlds = self._overflowed.nonzero().flatten().tolist()
        if not worlds:
            return
        flags = 0
        for bits in self._overflowed[worlds].tolist():
            flags |= bits
        self._overflowed.zero_()
        names = [n for n in _CAPACITY_BITS if flags & int(getattr(self._mjw.OverflowType, n, 0))]
        raise RuntimeError(
            f"{self!r}: worlds {worlds[:8]} overflowed mujoco_warp's buffers ({names}; "
            f"allocated {self._capacity}): their physics dropped contacts or constraints; make "
            "the env with larger contacts_per_world / rows_per_world"
        )

    def _root(self, observation: torch.Tensor) -> TensorDict:
        no = torch.zeros(self.num_envs, 1, dtype=torch.bool, device=self.device)
        return TensorDict(
            {keys.OBSERVATION: observation, keys.DONE: no, keys.TERMINATED: no.clone(),
             keys.TRUNCATED: no.clone()},
            batch_size=(self.num_envs,), device=self.device,
        )  # fmt: skip

    def _check_action(self, action: Any) -> None:
        shape = tuple(self.action_spec.shape)
        if not isinstance(action, torch.Tensor):
            raise TypeError(f"{keys.ACTION!r} must be a torch.Tensor, got {type(action).__name__}")
        if tuple(action.shape) != shape:
            raise ValueError(
                f"{keys.ACTION!r} has shape {tuple(action.shape)}, expected {shape} "
                f"([num_envs={self.num_envs}, *action_shape])"
            )
        if action.dtype != torch.float32:
            raise TypeError(f"{keys.ACTION!r} has dtype {action.dtype}, expected torch.float32")
        if action.device != self.device:
            raise ValueError(
                f"{keys.ACTION!r} is on {action.device}; the worlds are on {self.device}"
            )

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")


def make_warp_env(
    env_id: str, num_envs: int, seed: int | None = None, device: Any = None, **kwargs: Any
) -> WarpVecEnv:
    """``make_vec_env(..., backend="mujoco_warp")``: a :class:`WarpVecEnv` on ``device``
    (default: CUDA when available, else Warp's CPU device)."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(env_id, str):
        raise ValueError(
            "backend='mujoco_warp' takes a gymnasium env id (Hopper-v5, ...), got "
            f"{type(env_id).__name__}"
        )
    return WarpVecEnv(env_id, num_envs, seed, device, **kwargs)
