"""Goal-conditioned envs: the bit-flipping task of the HER paper, and a goal env's reward hooks.

A goal env (gymnasium-robotics' ``GoalEnv`` layout) observes a dict of ``"observation"``,
``"achieved_goal"`` (the goal the state reaches) and ``"desired_goal"`` (the goal the episode
asks for), and computes its reward from the two goals alone with a vectorized
``compute_reward(achieved_goal, desired_goal, info)``: what hindsight replay
(:class:`tdrl.data.HERReplayBuffer`) calls on a relabelled transition. :func:`goal_functions`
takes those hooks from an env id.

Importing ``tdrl.envs`` registers ``tdrl/BitFlipping<n>-v0`` for n in :data:`BIT_FLIPPING_SIZES`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from tdrl import keys

__all__ = ["BIT_FLIPPING_SIZES", "BitFlipping", "goal_functions", "register_goal_tasks"]

BIT_FLIPPING_SIZES = (5, 10, 15, 20, 25, 30, 40, 50)


class BitFlipping(gym.Env[Any, Any]):
    """Bit flipping (Andrychowicz et al. 2017, arXiv 1707.01495, sec. 3.1): a state of ``n``
    bits, a goal of ``n`` bits, and action ``i`` flips bit ``i``.

    The reward is ``-[s != g]`` (the paper's ``-[f_g(s) = 0]``): 0 on reaching the goal, -1
    otherwise; the episode terminates at the goal (as Stable-Baselines3's ``BitFlippingEnv``)
    and is truncated after ``n`` steps, the paper's episode length. State and goal are drawn
    uniformly, the goal again while it equals the state. A return above ``-n`` means the goal
    was reached. Bits are float32 0/1 (a Box, which every network reads).

    Observation: ``{"observation": s, "achieved_goal": s, "desired_goal": g}``, each ``[n]``.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, n_bits: int = 15, max_steps: int | None = None) -> None:
        if isinstance(n_bits, bool) or not isinstance(n_bits, int) or n_bits < 1:
            raise ValueError(f"n_bits must be an int >= 1, got {n_bits!r}")
        self.n_bits = n_bits
        self.max_steps = n_bits if max_steps is None else int(max_steps)
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps!r}")
        bits = gym.spaces.Box(0.0, 1.0, (n_bits,), np.float32)
        self.observation_space = gym.spaces.Dict(
            {keys.OBSERVATION: bits, keys.ACHIEVED_GOAL: bits, keys.DESIRED_GOAL: bits}
        )
        self.action_space = gym.spaces.Discrete(n_bits)
        self._state = np.zeros(n_bits, np.float32)
        self._goal = np.zeros(n_bits, np.float32)
        self._steps = 0

    def _observation(self) -> dict[str, np.ndarray]:
        return {
            keys.OBSERVATION: self._state.copy(),
            keys.ACHIEVED_GOAL: self._state.copy(),
            keys.DESIRED_GOAL: self._goal.copy(),
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        self._state = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self._goal = self._state
        while np.array_equal(self._goal, self._state):
            self._goal = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self._steps = 0
        return self._observation(), {}

    def step(
        self, action: np.int64
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"action must be an int in [0, {self.n_bits}), got {action!r}")
        self._state = self._state.copy()
        self._state[int(action)] = 1.0 - self._state[int(action)]
        self._steps += 1
        reward = float(self.compute_reward(self._state, self._goal, {}))
        terminated = bool(self.compute_terminated(self._state, self._goal, {}))
        truncated = not terminated and self._steps >= self.max_steps
        return self._observation(), reward, terminated, truncated, {"is_success": terminated}

    @staticmethod
    def compute_reward(achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        """``-[achieved != desired]`` over the last axis: ``[*B, n], [*B, n] -> [*B]``."""
        reached = np.all(np.asarray(achieved_goal) == np.asarray(desired_goal), axis=-1)
        return reached.astype(np.float32) - 1.0

    @staticmethod
    def compute_terminated(achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        """The goal is reached: ``[*B, n], [*B, n] -> [*B]`` bool."""
        return np.all(np.asarray(achieved_goal) == np.asarray(desired_goal), axis=-1)


GoalFunction = Callable[[Any, Any, Any], Any]


def goal_functions(env_id: str, **kwargs: Any) -> tuple[GoalFunction, GoalFunction | None]:
    """``(compute_reward, compute_terminated)`` of the goal env ``env_id`` (one env made with
    ``kwargs`` and closed; its ``unwrapped`` methods are used). ``compute_terminated`` is None
    where the env has none (then relabelled transitions keep their stored flags). An env without
    ``compute_reward`` is an error that names it."""
    env = gym.make(env_id, **kwargs)
    try:
        base = env.unwrapped
        reward = getattr(base, "compute_reward", None)
        if not callable(reward):
            raise ValueError(
                f"{env_id} has no compute_reward(achieved_goal, desired_goal, info): hindsight "
                "replay needs a goal env (gymnasium-robotics' GoalEnv layout)"
            )
        terminated = getattr(base, "compute_terminated", None)
        return reward, terminated if callable(terminated) else None
    finally:
        env.close()


def register_goal_tasks() -> None:
    """Register ``tdrl/BitFlipping<n>-v0`` for n in :data:`BIT_FLIPPING_SIZES` (idempotent)."""
    for n in BIT_FLIPPING_SIZES:
        env_id = f"tdrl/BitFlipping{n}-v0"
        if env_id not in gym.registry:
            gym.register(env_id, entry_point="tdrl.envs.goals:BitFlipping", kwargs={"n_bits": n})
