"""Multi-agent vector envs in TorchRL's multi-agent layout: VMAS scenarios and PettingZoo parallel
envs (the multi-particle envs of ``mpe2`` among them).

Every agent of a task sits in one group, ``"agents"``, and its entries carry an agent dim after the
env dim, as TorchRL's ``VmasEnv`` and ``PettingZooEnv`` write them:

| key | shape | meaning |
|---|---|---|
| ``("agents", "observation")`` | ``[num_envs, n_agents, *obs]`` | each agent's observation |
| ``("agents", "mask")`` | ``[num_envs, n_agents]`` bool | the agent takes part in the step |
| ``("agents", "action_mask")`` | ``[num_envs, n_agents, n]`` bool | valid actions (masked envs) |
| ``"state"`` | ``[num_envs, *state]`` | the global state, where the env has one |
| ``("agents", "action")`` | ``[num_envs, n_agents, *act]`` | written by the policy |
| ``("next", "agents", "reward")`` | ``[num_envs, n_agents, 1]`` | each agent's reward |
| ``("next", "agents", flag)`` | ``[num_envs, n_agents, 1]`` bool | per agent: three flags |
| ``("next", flag)`` | ``[num_envs, 1]`` bool | the episode: done when every agent is done |

An agent that leaves before the others (PettingZoo drops it from ``env.agents``) keeps its slot:
from the step after its end its mask is False, its observation and reward are 0 and its flags
stay set (a terminated agent has value 0; nothing bootstraps from its absent steps). An agent
that appears mid-episode, or an env whose agents' spaces differ, is refused with an error that
names it. Episodes reset in the same step they end (same-step autoreset): ``step`` returns the
real final observations under ``"next"`` and, apart, the observations to act from next.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from torchrl.data import Bounded, Categorical, Composite, TensorSpec, Unbounded

from tdrl import keys

GROUP = keys.AGENTS
FLAGS = (keys.TERMINATED, keys.TRUNCATED, keys.DONE)


class MultiAgentVecEnv:
    """Base of the multi-agent vector envs: ``num_envs`` copies of an ``n_agents`` task.

    Subclasses fill :attr:`observation_spec` and :attr:`action_spec` and implement
    :meth:`_reset` and :meth:`_step` over plain tensors; this class assembles the TensorDicts.

    Shapes:
        reset() -> TensorDict [num_envs]; step(action [num_envs, n_agents, *act]) -> two
        TensorDicts [num_envs]: the step's ``"next"`` entries and the observations to act from.
    """

    group = GROUP
    num_envs: int
    n_agents: int
    agent_names: list[str]
    seed: int | None
    observation_spec: Composite
    action_spec: TensorSpec
    has_state: bool = False
    # the valid actions of the observations to act from ([num_envs, n_agents, n]), where masked
    _action_mask: torch.Tensor | None = None

    @property
    def full_action_spec(self) -> Composite:
        """``{("agents", "action"): action_spec}`` (TorchRL's name)."""
        group = Composite({keys.ACTION: self.action_spec}, shape=self.action_spec.shape[:2])
        return Composite({GROUP: group}, shape=(self.num_envs,))

    @property
    def continuous(self) -> bool:
        return isinstance(self.action_spec, Bounded)

    def reset(self, seed: int | None = None) -> TensorDict:
        """Reset every env (env i with ``seed + i``, or continuing its random streams)."""
        obs, mask, state = self._reset(seed)
        return self._observation_td(obs, mask, state, self._action_mask)

    def step(self, action: torch.Tensor) -> tuple[TensorDict, TensorDict]:
        """One step of every env; the envs whose episode ended are reset in the same step.

        Returns ``(next, current)``: ``next`` holds the real next observations, the rewards and
        the flags (per agent and of the episode), ``current`` the observations to act from next
        (the reset ones where an episode ended)."""
        self._check_action(action)
        out = self._step(action)
        agent_flags = {name: out[name].unsqueeze(-1) for name in FLAGS}
        done = out[keys.DONE].all(-1, keepdim=True)
        terminated = out[keys.TERMINATED].all(-1, keepdim=True)
        nxt = self._observation_td(out["observation"], out["mask"], out["state"],
                                   out.get("action_mask"))  # fmt: skip
        group = nxt.get(GROUP)
        group.set(keys.REWARD, out["reward"].unsqueeze(-1))
        for name, value in agent_flags.items():
            group.set(name, value)
        nxt.set(keys.DONE, done)
        nxt.set(keys.TERMINATED, terminated)
        nxt.set(keys.TRUNCATED, done & ~terminated)
        current = self._observation_td(out["reset_observation"], out["reset_mask"],
                                       out["reset_state"], self._action_mask)  # fmt: skip
        return nxt, current

    def rand_action(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """A uniform random action of every agent of every env (among the valid ones, where the
        env masks actions: those of the observations to act from)."""
        spec = self.action_spec
        shape = tuple(spec.shape)
        if self._action_mask is not None:  # the arg-max of iid uniforms over the valid actions
            noise = torch.rand(self._action_mask.shape, generator=generator)
            return noise.masked_fill(~self._action_mask, -1.0).argmax(-1)
        if isinstance(spec, Categorical):
            return torch.randint(0, int(spec.space.n), shape, generator=generator)
        low, high = spec.space.low, spec.space.high
        return low + (high - low) * torch.rand(shape, generator=generator)

    def close(self) -> None:
        pass

    def __enter__(self) -> MultiAgentVecEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- for subclasses ----------------------------------------------------------------------
    def _reset(self, seed: int | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        raise NotImplementedError

    def _step(self, action: torch.Tensor) -> dict[str, Any]:
        raise NotImplementedError

    def _make_specs(
        self,
        obs_shape: Sequence[int],
        action: TensorSpec,
        state_shape: Sequence[int] | None,
        action_mask: bool = False,
    ) -> None:
        n, a = self.num_envs, self.n_agents
        group = Composite(
            {
                keys.OBSERVATION: Unbounded((n, a, *obs_shape), dtype=torch.float32),
                keys.MASK: Categorical(2, (n, a), dtype=torch.bool),
            },
            shape=(n, a),
        )
        if action_mask:
            actions = int(action.space.n)
            group[keys.ACTION_MASK] = Categorical(2, (n, a, actions), dtype=torch.bool)
        entries: dict[str, Any] = {GROUP: group}
        if state_shape is not None:
            entries[keys.STATE] = Unbounded((n, *state_shape), dtype=torch.float32)
            self.has_state = True
        self.observation_spec = Composite(entries, shape=(n,))
        self.action_spec = action

    def _observation_td(
        self,
        obs: torch.Tensor,
        mask: torch.Tensor,
        state: torch.Tensor | None,
        action_mask: torch.Tensor | None = None,
    ) -> TensorDict:
        n, a = self.num_envs, self.n_agents
        group = TensorDict({keys.OBSERVATION: obs, keys.MASK: mask}, batch_size=(n, a))
        if action_mask is not None:
            group.set(keys.ACTION_MASK, action_mask.clone())
        td = TensorDict({GROUP: group}, batch_size=(n,))
        if state is not None:
            td.set(keys.STATE, state)
        return td

    def _check_action(self, action: torch.Tensor) -> None:
        spec = self.action_spec
        if not isinstance(action, torch.Tensor) or tuple(action.shape) != tuple(spec.shape):
            got = tuple(action.shape) if isinstance(action, torch.Tensor) else type(action)
            raise ValueError(
                f"{type(self).__name__}: key {(GROUP, keys.ACTION)!r}: expected shape "
                f"{tuple(spec.shape)} ([num_envs, n_agents, *action]), got {got}"
            )
        if isinstance(spec, Categorical) and action.is_floating_point():
            raise ValueError(
                f"{type(self).__name__}: key {(GROUP, keys.ACTION)!r}: discrete actions must be "
                f"integers, got dtype {action.dtype}"
            )


class VmasVecEnv(MultiAgentVecEnv):
    """A VMAS scenario (Bettini et al. 2022, arXiv 2207.03530): ``num_envs`` worlds simulated as
    one batch of torch tensors, every agent in one group. Episodes end at ``max_steps``
    (truncated) or where the scenario says done (terminated); VMAS agents end together.

    Args:
        scenario: a VMAS scenario name (``"navigation"``, ``"balance"``, ``"transport"``).
        num_envs: worlds simulated at once.
        seed: VMAS's seed. VMAS keeps one random state for all its envs in a process; each
            ``VmasVecEnv`` swaps in its own around every call, so an evaluation env's seeded
            resets do not rewind the training env's stream.
        continuous: continuous actions (default) or VMAS's discrete ones.
        max_steps: the episode length (truncation).
        **scenario_kwargs: the scenario's own arguments (``n_agents=3``, ...).
    """

    def __init__(
        self,
        scenario: str,
        num_envs: int,
        seed: int | None = None,
        *,
        continuous: bool = True,
        max_steps: int = 100,
        device: str | torch.device = "cpu",
        **scenario_kwargs: Any,
    ) -> None:
        import vmas

        self.seed, self.num_envs = seed, num_envs
        self.scenario = scenario
        from vmas.simulator.environment.environment import Environment

        # VMAS's random state, one list shared by every VMAS env of the process (its
        # local_seed swaps it in and out of the global generators around each call)
        self._shared = Environment.vmas_random_state
        outside = list(self._shared)
        self._env = vmas.make_env(
            scenario, num_envs=num_envs, device=device, continuous_actions=continuous,
            max_steps=max_steps, seed=seed, terminated_truncated=True, **scenario_kwargs,
        )  # fmt: skip
        self._random_state = list(self._shared)  # this env's, as its seed left it
        self._shared[:] = outside
        agents = self._env.agents
        self.n_agents, self.agent_names = len(agents), [agent.name for agent in agents]
        spaces = self._env.observation_space
        obs_shapes = {tuple(space.shape) for space in spaces}
        act_spaces = self._env.action_space
        _same(self.agent_names, [tuple(s.shape) for s in spaces], "observation shape")
        _same(self.agent_names, [repr(s) for s in act_spaces], "action space")
        shape = (num_envs, self.n_agents)
        if continuous:
            space = act_spaces[0]
            low = torch.as_tensor(space.low, dtype=torch.float32).expand(*shape, -1)
            high = torch.as_tensor(space.high, dtype=torch.float32).expand(*shape, -1)
            action: TensorSpec = Bounded(low.clone(), high.clone(), (*shape, low.shape[-1]))
        else:
            action = Categorical(int(act_spaces[0].n), shape, dtype=torch.int64)
        self._make_specs(obs_shapes.pop(), action, None)
        self._mask = torch.ones(shape, dtype=torch.bool)

    def _obs(self, observations: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack(observations, 1).float()

    @contextmanager
    def _own_random_state(self) -> Iterator[None]:
        outside = list(self._shared)
        self._shared[:] = self._random_state
        try:
            yield
        finally:
            self._random_state = list(self._shared)
            self._shared[:] = outside

    def _reset(self, seed: int | None) -> tuple[torch.Tensor, torch.Tensor, None]:
        with self._own_random_state():
            obs = self._env.reset(seed=seed)
        return self._obs(obs), self._mask.clone(), None

    def _step(self, action: torch.Tensor) -> dict[str, Any]:
        with self._own_random_state():
            return self._step_vmas(action)

    def _step_vmas(self, action: torch.Tensor) -> dict[str, Any]:
        obs, rewards, terminated, truncated, _ = self._env.step(list(action.unbind(1)))
        obs_t = self._obs(obs)
        a = self.n_agents
        terminated = terminated.reshape(-1, 1).expand(-1, a)
        truncated = truncated.reshape(-1, 1).expand(-1, a) & ~terminated
        done = terminated | truncated
        reset_obs = obs_t.clone()
        ended = done[:, 0].nonzero().flatten().tolist()
        if len(ended) == self.num_envs:
            reset_obs = self._obs(self._env.reset())
        elif ended:
            for i in ended:
                fresh = self._env.reset_at(i)
            reset_obs[ended] = self._obs(fresh)[ended]
        return {
            "observation": obs_t, "mask": self._mask.clone(), "state": None,
            "reward": torch.stack(rewards, 1).float(),
            keys.TERMINATED: terminated.clone(), keys.TRUNCATED: truncated.clone(),
            keys.DONE: done.clone(),
            "reset_observation": reset_obs, "reset_mask": self._mask.clone(), "reset_state": None,
        }  # fmt: skip


class PettingZooVecEnv(MultiAgentVecEnv):
    """``num_envs`` copies of a PettingZoo parallel env, stepped one after another in this process.

    Every possible agent has a slot; an agent absent from ``env.agents`` is masked (see the module
    docstring). The agents' observation spaces must be equal Boxes and their action spaces equal
    (one group, one network); a difference is an error that names the agents and spaces. Where the
    env has a ``state()``, it is ``"state"``.

    Args:
        make: builds one parallel env (e.g. ``mpe2.simple_spread_v3.parallel_env``).
        num_envs: copies.
        seed: env i is reset with ``seed + i`` the first time, then continues its own generator.
        **make_kwargs: passed to ``make`` (``N=3``, ``max_cycles=25``, ...).
    """

    def __init__(
        self, make: Callable[..., Any], num_envs: int, seed: int | None = None, **make_kwargs: Any
    ) -> None:
        self.seed, self.num_envs = seed, num_envs
        self._envs = [make(**make_kwargs) for _ in range(num_envs)]
        env = self._envs[0]
        self.agent_names = list(env.possible_agents)
        self.n_agents = len(self.agent_names)
        obs_spaces = [env.observation_space(name) for name in self.agent_names]
        act_spaces = [env.action_space(name) for name in self.agent_names]
        _same(self.agent_names, [repr(s) for s in obs_spaces], "observation space")
        _same(self.agent_names, [repr(s) for s in act_spaces], "action space")
        obs_space = obs_spaces[0]
        self._masked = hasattr(obs_space, "spaces") and set(obs_space.spaces) == {
            keys.OBSERVATION, keys.ACTION_MASK,
        }  # fmt: skip
        if self._masked:  # PettingZoo's masked layout: {"observation": Box, "action_mask": ...}
            if not hasattr(act_spaces[0], "n"):
                raise ValueError(
                    f"PettingZooVecEnv: agent {self.agent_names[0]!r} has an action mask but "
                    f"{act_spaces[0]} actions; a mask needs discrete ones"
                )
            obs_space = obs_space[keys.OBSERVATION]
        if not hasattr(obs_space, "low"):
            raise ValueError(
                f"PettingZooVecEnv: observation space {obs_spaces[0]} of agent "
                f"{self.agent_names[0]!r} is not a Box (or a dict of 'observation' and "
                "'action_mask')"
            )
        shape = (num_envs, self.n_agents)
        space = act_spaces[0]
        if hasattr(space, "n"):
            action: TensorSpec = Categorical(int(space.n), shape, dtype=torch.int64)
        else:
            low = torch.as_tensor(space.low, dtype=torch.float32).expand(*shape, -1).clone()
            high = torch.as_tensor(space.high, dtype=torch.float32).expand(*shape, -1).clone()
            action = Bounded(low, high, (*shape, low.shape[-1]))
        state_space = getattr(env, "state_space", None)
        state_shape = tuple(state_space.shape) if state_space is not None else None
        self._make_specs(tuple(obs_space.shape), action, state_shape, self._masked)
        self._obs_shape = tuple(obs_space.shape)
        self._n_actions = int(space.n) if self._masked else 0
        self._stacked_mask: torch.Tensor | None = None
        self._seeded = False
        self._alive = np.ones(shape, dtype=bool)

    def _state(self) -> torch.Tensor | None:
        if not self.has_state:
            return None
        return torch.as_tensor(np.stack([env.state() for env in self._envs]), dtype=torch.float32)

    def _stack(self, per_env: list[dict[str, Any]]) -> tuple[torch.Tensor, np.ndarray]:
        """The agents' observations ``[num_envs, n_agents, *obs]`` (0 for absent ones) and who
        is present; with action masks, :attr:`_stacked_mask` gets theirs (all valid where
        absent)."""
        obs = np.zeros((self.num_envs, self.n_agents, *self._obs_shape), dtype=np.float32)
        present = np.zeros((self.num_envs, self.n_agents), dtype=bool)
        valid = np.ones((self.num_envs, self.n_agents, self._n_actions), dtype=bool)
        for i, agents in enumerate(per_env):
            for name, value in agents.items():
                j = self._index(name, i)
                if self._masked:
                    value, valid[i, j] = value[keys.OBSERVATION], value[keys.ACTION_MASK]
                obs[i, j] = value
                present[i, j] = True
        self._stacked_mask = torch.from_numpy(valid) if self._masked else None
        return torch.from_numpy(obs), present

    def _index(self, name: str, env: int) -> int:
        try:
            return self.agent_names.index(name)
        except ValueError:
            raise ValueError(
                f"PettingZooVecEnv: env {env} returned agent {name!r}, which is not among its "
                f"possible_agents {self.agent_names}"
            ) from None

    def _reset_one(self, i: int, seed: int | None) -> dict[str, Any]:
        obs, _ = self._envs[i].reset(seed=seed)
        return obs

    def _reset(self, seed: int | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        if seed is None and not self._seeded:
            seed = self.seed
        self._seeded = True
        per_env = [self._reset_one(i, None if seed is None else seed + i)
                   for i in range(self.num_envs)]  # fmt: skip
        obs, present = self._stack(per_env)
        self._alive, self._action_mask = present, self._stacked_mask
        return obs, torch.from_numpy(present.copy()), self._state()

    def _step(self, action: torch.Tensor) -> dict[str, Any]:
        n, a = self.num_envs, self.n_agents
        actions = action.numpy()
        reward = np.zeros((n, a), dtype=np.float32)
        # an agent that does not act (it left earlier) stays terminated until the episode ends
        flags = {name: np.ones((n, a), dtype=bool) for name in FLAGS}
        flags[keys.TRUNCATED][:] = False
        next_obs: list[dict[str, Any]] = []
        state = None
        states: list[np.ndarray] = []
        reset_obs: list[dict[str, Any]] = []
        for i, env in enumerate(self._envs):
            acting = {name: actions[i, j] for j, name in enumerate(self.agent_names)
                      if self._alive[i, j]}  # fmt: skip
            obs, rew, term, trunc, _ = env.step(acting)
            for name in acting:
                j = self.agent_names.index(name)
                reward[i, j] = rew.get(name, 0.0)
                flags[keys.TERMINATED][i, j] = bool(term.get(name, False))
                flags[keys.TRUNCATED][i, j] = bool(trunc.get(name, False))
            for name in obs:
                if name not in acting:
                    raise ValueError(
                        f"PettingZooVecEnv: agent {name!r} appeared mid-episode in env {i}; "
                        "agents may leave an episode early (masked), not join it late"
                    )
            next_obs.append(obs)
            if self.has_state:
                states.append(env.state())
            ended = not env.agents
            # the observations to act from: the reset's, or those of the agents still in
            still = {name: value for name, value in obs.items() if name in env.agents}
            reset_obs.append(self._reset_one(i, None) if ended else still)
        flags[keys.TRUNCATED] &= ~flags[keys.TERMINATED]  # terminal wins, as in gymnasium
        flags[keys.DONE] = flags[keys.TERMINATED] | flags[keys.TRUNCATED]
        obs_t, _ = self._stack(next_obs)
        next_action_mask = self._stacked_mask
        mask_next = self._alive & ~flags[keys.DONE]
        reset_t, present = self._stack(reset_obs)
        self._action_mask = self._stacked_mask
        episode_over: np.ndarray = np.all(flags[keys.DONE], axis=1)
        alive = np.where(episode_over[:, None], present, mask_next)
        self._alive = alive
        if self.has_state:
            state = torch.as_tensor(np.stack(states), dtype=torch.float32)
        return {
            "observation": obs_t, "mask": torch.from_numpy(mask_next),
            "action_mask": next_action_mask,
            "state": state, "reward": torch.from_numpy(reward),
            **{name: torch.from_numpy(value) for name, value in flags.items()},
            "reset_observation": reset_t, "reset_mask": torch.from_numpy(alive.copy()),
            "reset_state": self._state(),
        }  # fmt: skip

    def close(self) -> None:
        for env in self._envs:
            env.close()


def _same(names: list[str], values: list[Any], what: str) -> None:
    """Refuse agents whose spaces differ: one group shares one network and one tensor."""
    for name, value in zip(names[1:], values[1:], strict=True):
        if value != values[0]:
            raise ValueError(
                f"agents {names[0]!r} and {name!r} have different {what}s ({values[0]} and "
                f"{value}): one group needs equal spaces (one tensor, parameters shared or not)"
            )


def make_multiagent_env(
    env_id: str, num_envs: int, seed: int | None = None, **kwargs: Any
) -> MultiAgentVecEnv:
    """``"vmas/<scenario>"`` (VMAS) or ``"mpe2/<env>"`` / ``"pettingzoo/<module>"`` (a PettingZoo
    module with a ``parallel_env``, e.g. ``"pettingzoo/pettingzoo.butterfly.pistonball_v6"``);
    ``continuous=True/False`` picks the action space of VMAS and MPE (which calls it
    ``continuous_actions``); other PettingZoo envs take their own arguments and have one action
    space, so ``continuous`` is not passed to them (a recipe checks the space it gets)."""
    family, _, name = env_id.partition("/")
    if family == "mpe2" and "continuous" in kwargs:  # MPE's name for it
        kwargs["continuous_actions"] = kwargs.pop("continuous")
    elif family == "pettingzoo":
        kwargs.pop("continuous", None)
    if family == "vmas":
        return VmasVecEnv(name, num_envs, seed, **kwargs)
    if family in ("mpe2", "pettingzoo"):
        path = f"mpe2.{name}" if family == "mpe2" else name
        try:
            module = importlib.import_module(path)
        except ImportError as err:
            raise ValueError(f"env id {env_id!r}: cannot import {path!r} ({err})") from None
        return PettingZooVecEnv(module.parallel_env, num_envs, seed, **kwargs)
    raise ValueError(f"env id {env_id!r}: a multi-agent id starts with vmas/, mpe2/ or pettingzoo/")


def is_multiagent_id(env_id: object) -> bool:
    return isinstance(env_id, str) and env_id.split("/", 1)[0] in ("vmas", "mpe2", "pettingzoo")
