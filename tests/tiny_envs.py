"""Small gymnasium envs that several test files use (imported as ``tests.tiny_envs``)."""

from __future__ import annotations

import signal
import time

import gymnasium as gym
import numpy as np


class Tiny(gym.Env):
    """Zero observations of size 3, reward 0, never ends; raises ``ValueError`` on its
    ``fail_at``-th step, sleeps ``sleep`` seconds a step, may ignore SIGTERM (async workers)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, fail_at: int = 10**9, sleep: float = 0.0, ignore_sigterm: bool = False):
        self.fail_at, self.sleep, self.steps = fail_at, sleep, 0
        if ignore_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.steps == self.fail_at:
            raise ValueError(f"env failed on step {self.steps}")
        if self.sleep:
            time.sleep(self.sleep)
        return np.zeros(3, np.float32), 0.0, False, False, {}


class Episodic(gym.Env):
    """Observations of size 2 filled with ``fill``; the episode ends after ``length`` steps,
    terminated (default) or truncated; reward 1 a step, or what ``reward(action)`` says."""

    def __init__(self, length: int, *, truncate=False, fill=0.0, reward=None, action_space=None):
        self.length, self.truncate, self.fill, self.reward, self.t = (
            length,
            truncate,
            fill,
            reward,
            0,
        )
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = action_space or gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def _obs(self):
        return np.full(2, self.fill, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        reward = 1.0 if self.reward is None else float(self.reward(action))
        end = self.t >= self.length
        return self._obs(), reward, end and not self.truncate, end and self.truncate, {}


class Masked(gym.Env):
    """Discrete(n) actions; the bool-ish ``"action_mask"`` observation allows actions t % n and
    (t + 1) % n at step t (none at step ``empty_at``). A valid action earns +1, an invalid one -1;
    episodes are truncated after ``length`` steps. With ``one_hot`` the observation is the one-hot
    of t % n (a policy can learn the mask from it), else zeros of size 2."""

    def __init__(self, n=4, *, mask_size=None, empty_at=-1, length=8, one_hot=False) -> None:
        self.n, self.empty_at, self.length, self.one_hot, self.t = n, empty_at, length, one_hot, 0
        obs_size = n if one_hot else 2
        self.observation_space = gym.spaces.Dict(
            {
                "observation": gym.spaces.Box(-1.0, 1.0, (obs_size,), np.float32),
                "action_mask": gym.spaces.Box(0, 1, (mask_size or n,), np.int8),
            }
        )
        self.action_space = gym.spaces.Discrete(n)

    def _obs(self):
        mask = np.zeros(self.observation_space["action_mask"].shape, np.int8)
        if self.t != self.empty_at:
            mask[[self.t % self.n, (self.t + 1) % self.n]] = 1
        if self.one_hot:
            observation = np.eye(self.n, dtype=np.float32)[self.t % self.n]
        else:
            observation = np.zeros(2, np.float32)
        return {"observation": observation, "action_mask": mask}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        valid = self._obs()["action_mask"][action] == 1
        self.t += 1
        return self._obs(), 1.0 if valid else -1.0, False, self.t >= self.length, {}


class Counting(gym.Env):
    """Frames ``[1, 2, 2]`` uint8 numbering every reset and step (the count's four bytes, so each
    frame is unique); episodes last 3, 1, 5, 2 steps in turn, ending terminated or truncated
    alternately."""

    lengths = (3, 1, 5, 2)

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (1, 2, 2), np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self.count, self.episode, self.t = 0, -1, 0

    def _frame(self) -> np.ndarray:
        self.count += 1
        return np.frombuffer(np.uint32(self.count).tobytes(), np.uint8).reshape(1, 2, 2).copy()

    def reset(self, *, seed=None, options=None):
        self.episode, self.t = self.episode + 1, 0
        return self._frame(), {}

    def step(self, action):
        self.t += 1
        end = self.t == self.lengths[self.episode % len(self.lengths)]
        odd = self.episode % 2 == 1
        return self._frame(), 0.0, end and not odd, end and odd, {}


def tiny_worker_env(index: int):
    """A worker collector's env factory: one :class:`Tiny` env; worker 0's raises on its third
    step (once: the worker lives on)."""
    from tdrl.envs import make_vec_env

    return make_vec_env([lambda: Tiny(fail_at=3 if index == 0 else 10**9)], 1, seed=index)


class LeavingAgents:
    """A PettingZoo parallel env of three agents on a clock whose agents leave at different
    steps: agent i is terminated after ``lengths[i]`` steps, the others are truncated at
    ``max_steps``. Observation ``[t, i, action_sum]``, reward ``action + i / 10``, two actions.
    ``late`` holds agent 2 out of the reset and brings it in after the first step (refused);
    ``overlap`` sets truncated at ``max_steps`` also for an agent terminated at that step."""

    metadata = {"name": "leaving_agents_v0"}

    def __init__(self, lengths=(2, 4, 9), max_steps=5, late=False, overlap=False):
        from gymnasium import spaces

        self.lengths, self.max_steps, self.late = lengths, max_steps, late
        self.overlap = overlap
        self.possible_agents = ["a_0", "a_1", "a_2"]
        self._obs_space = spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self._act_space = spaces.Discrete(2)

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def _obs(self, agent):
        i = self.possible_agents.index(agent)
        return np.array([self.t, i, self.sums[i]], np.float32)

    def reset(self, seed=None, options=None):
        self.t, self.sums = 0, [0.0, 0.0, 0.0]
        self.agents = list(self.possible_agents[:2] if self.late else self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        rewards, terminated, truncated = {}, {}, {}
        for agent, action in actions.items():
            i = self.possible_agents.index(agent)
            self.sums[i] += float(action)
            rewards[agent] = float(action) + i / 10
            terminated[agent] = self.t >= self.lengths[i]
            truncated[agent] = self.t >= self.max_steps and (self.overlap or not terminated[agent])
        obs = {a: self._obs(a) for a in actions}
        self.agents = [a for a in actions if not (terminated[a] or truncated[a])]
        if self.late and self.t == 1:
            self.agents.append("a_2")
            obs["a_2"] = self._obs("a_2")
        return obs, rewards, terminated, truncated, {a: {} for a in obs}

    def close(self):
        pass


class MaskedAgents:
    """A PettingZoo parallel env of two agents with three actions and PettingZoo's masked
    observations (``{"observation", "action_mask"}``): at step t agent i may not take action
    ``(t + i) % 3``, and taking it raises. A global ``state()``; episodes of ``max_steps``."""

    metadata = {"name": "masked_agents_v0"}

    def __init__(self, max_steps=4):
        from gymnasium import spaces

        self.max_steps = max_steps
        self.possible_agents = ["a_0", "a_1"]
        self._obs_space = spaces.Dict({
            "observation": spaces.Box(-np.inf, np.inf, (2,), np.float32),
            "action_mask": spaces.Box(0, 1, (3,), np.int8),
        })  # fmt: skip
        self._act_space = spaces.Discrete(3)
        self.state_space = spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def _obs(self, i):
        mask = np.ones(3, np.int8)
        mask[(self.t + i) % 3] = 0
        return {"observation": np.array([self.t, i], np.float32), "action_mask": mask}

    def state(self):
        return np.array([self.t], np.float32)

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, list(self.possible_agents)
        return {a: self._obs(i) for i, a in enumerate(self.agents)}, {a: {} for a in self.agents}

    def step(self, actions):
        for i, agent in enumerate(self.possible_agents):
            if int(actions[agent]) == (self.t + i) % 3:
                raise ValueError(f"{agent} took the forbidden action {actions[agent]} at {self.t}")
        self.t += 1
        end = self.t >= self.max_steps
        obs = {a: self._obs(i) for i, a in enumerate(self.possible_agents)}
        rewards = {a: float(actions[a]) for a in self.possible_agents}
        self.agents = [] if end else list(self.possible_agents)
        return (obs, rewards, dict.fromkeys(obs, False), dict.fromkeys(obs, end),
                {a: {} for a in obs})  # fmt: skip

    def close(self):
        pass


class Dot(gym.Env):
    """A dot on a 1 x 8 x 8 uint8 frame, moved by 4 discrete actions; reward 1 when it reaches
    the corner (7, 7), where the episode ends. Its whole state is plain numpy (exact resume)."""

    observation_space = gym.spaces.Box(0, 255, (1, 8, 8), np.uint8)
    action_space = gym.spaces.Discrete(4)

    def __init__(self) -> None:
        self.position = np.zeros(2, np.int64)

    def _frame(self) -> np.ndarray:
        frame = np.zeros((1, 8, 8), np.uint8)
        frame[0, self.position[0], self.position[1]] = 255
        return frame

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = self.np_random.integers(0, 7, size=2)
        return self._frame(), {}

    def step(self, action):
        move = [(-1, 0), (1, 0), (0, -1), (0, 1)][int(action)]
        self.position = np.clip(self.position + move, 0, 7)
        done = bool((self.position == 7).all())
        return self._frame(), float(done), done, False, {}


class DotDict(Dot):
    """:class:`Dot` with a dict observation: the frame under ``"pixels"`` and the dot's position
    (scaled to [0, 1]) under ``"position"``."""

    observation_space = gym.spaces.Dict(
        {
            "pixels": gym.spaces.Box(0, 255, (1, 8, 8), np.uint8),
            "position": gym.spaces.Box(0.0, 1.0, (2,), np.float32),
        }
    )

    def _frame(self):  # type: ignore[override]
        return {"pixels": super()._frame(), "position": (self.position / 7).astype(np.float32)}


class ReachDict(gym.Env):
    """:class:`DotDict` with continuous moves: the action (in [-1, 1]^2) moves the dot, the
    reward is minus its distance to the corner (7, 7), where the episode ends."""

    observation_space = DotDict.observation_space
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self) -> None:
        self.position = np.zeros(2)

    def _obs(self) -> dict:
        frame = np.zeros((1, 8, 8), np.uint8)
        row, col = np.round(self.position).astype(np.int64)
        frame[0, row, col] = 255
        return {"pixels": frame, "position": (self.position / 7).astype(np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = self.np_random.uniform(0, 7, size=2)
        return self._obs(), {}

    def step(self, action):
        self.position = np.clip(self.position + np.asarray(action, np.float64), 0, 7)
        distance = float(np.linalg.norm(self.position - 7))
        return self._obs(), -distance / 7, distance < 0.5, False, {}


def register_test_envs() -> None:
    """Registers the gymnasium ids of the envs here that recipe tests run by name."""
    ids = {"tdrl-test/Dot-v0": "Dot", "tdrl-test/DotDict-v0": "DotDict",
           "tdrl-test/ReachDict-v0": "ReachDict"}  # fmt: skip
    for env_id, name in ids.items():
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=f"tests.tiny_envs:{name}", max_episode_steps=16)
