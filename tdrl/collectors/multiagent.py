"""The multi-agent collector: a policy and a multi-agent vector env -> ``[num_envs, T]`` rollouts
in TorchRL's multi-agent layout (``tdrl.envs.multiagent``); ``tdrl.collectors.evaluate`` evaluates
on the same envs."""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import InteractionType, set_interaction_type

from tdrl import keys
from tdrl.envs.multiagent import GROUP, MultiAgentVecEnv

ACTION = (GROUP, keys.ACTION)
REWARD = (GROUP, keys.REWARD)  # under "next"


class MultiAgentCollector:
    """Iterates over ``[num_envs, T]`` rollouts of ``policy`` in a multi-agent ``env``.

    Each step holds the env's observation entries (``("agents", "observation")``,
    ``("agents", "mask")``, ``"state"``), what the policy wrote (``("agents", "action")``,
    ``("agents", "action_log_prob")``, ``("agents", "logits")``...), ``"next"`` as the env returned
    it (real final observations, per-agent rewards and flags, the episode's flags), the episode's
    root flags (all False) and ``("collector", "traj_ids")``. ``frames`` counts env steps
    (``num_envs`` a step, whatever the number of agents), as TorchRL's collectors do.

    After each batch, ``episodes`` holds the episodes that ended in it: ``"episode_return"`` (the
    mean over the agents of each agent's undiscounted return, as BenchMARL reports it),
    ``"episode_length"``, ``"traj_ids"``.

    ``state_dict`` keeps the counters, the running episodes' statistics and the random-action
    generator, not the simulators: ``load_state_dict`` returns False and the next batch starts
    fresh episodes from a seed derived from the frame count (reproducible, not identical).

    Args:
        env: a :class:`tdrl.envs.multiagent.MultiAgentVecEnv`.
        policy: a TensorDictModule that writes ``("agents", "action")``; ``None``: uniform random.
        frames_per_batch: env steps per batch, a multiple of ``env.num_envs``.
        total_frames: stop after this many frames; -1: never.
        init_random_frames: whole batches of random actions first.
        deterministic: run the policy under ``InteractionType.DETERMINISTIC``.
        seed: seed of the random actions; default: the env's seed.
        device: where the policy runs (observations are moved there; actions back to the env).
    """

    def __init__(
        self,
        env: MultiAgentVecEnv,
        policy: Any,
        frames_per_batch: int,
        total_frames: int = -1,
        init_random_frames: int = 0,
        deterministic: bool = False,
        *,
        seed: int | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        if not isinstance(env, MultiAgentVecEnv):
            raise TypeError(
                f"MultiAgentCollector: env must be a MultiAgentVecEnv (tdrl.envs.make_vec_env with "
                f"a vmas/, mpe2/ or pettingzoo/ id), got {type(env).__name__}"
            )
        n = env.num_envs
        if isinstance(frames_per_batch, bool) or not isinstance(frames_per_batch, numbers.Integral):
            raise TypeError(f"frames_per_batch must be an int, got {frames_per_batch!r}")
        if frames_per_batch <= 0 or frames_per_batch % n:
            raise ValueError(
                f"frames_per_batch={frames_per_batch} must be a positive multiple of num_envs={n}"
            )
        self.env: MultiAgentVecEnv = env
        self.policy: Any = policy
        self.frames_per_batch: int = frames_per_batch
        self.steps_per_batch: int = frames_per_batch // n
        self.total_frames: int = total_frames
        self.init_random_frames: int = init_random_frames
        self.deterministic: bool = deterministic
        self.device: torch.device | None = None if device is None else torch.device(device)
        self.frames: int = 0
        self._generator: torch.Generator = torch.Generator()
        seed = env.seed if seed is None else seed
        self._generator.manual_seed(seed if seed is not None else 0)
        self._current: TensorDict | None = None
        self._reset_seed: int | None = None
        self._traj_ids: torch.Tensor = torch.arange(n)
        self._next_traj_id: int = n
        self._return: torch.Tensor = torch.zeros(n, dtype=torch.float64)
        self._length: torch.Tensor = torch.zeros(n, dtype=torch.int64)
        self.episodes: TensorDict = _episodes([], [], [])

    def __iter__(self) -> Iterator[TensorDictBase]:
        while self.total_frames < 0 or self.frames < self.total_frames:
            yield self.rollout()

    def rollout(self) -> TensorDictBase:
        """Collects one ``[num_envs, T]`` batch."""
        env, n = self.env, self.env.num_envs
        use_policy = self.policy is not None and self.frames >= self.init_random_frames
        mode = InteractionType.DETERMINISTIC if self.deterministic else InteractionType.RANDOM
        if self._current is None:
            self._current = env.reset(self._reset_seed)
        steps: list[TensorDictBase] = []
        ended: tuple[list, list, list] = ([], [], [])
        no_flag = torch.zeros(n, 1, dtype=torch.bool)
        with torch.no_grad(), set_interaction_type(mode):
            for _ in range(self.steps_per_batch):
                step = self._current
                if use_policy:
                    acted = self.policy(step if self.device is None else step.to(self.device))
                    if self.device is not None:
                        step = acted.to("cpu")
                else:
                    step.set(ACTION, env.rand_action(self._generator))
                nxt, self._current = env.step(step.get(ACTION))
                step.set(keys.NEXT, nxt)
                for flag in (keys.DONE, keys.TERMINATED, keys.TRUNCATED):
                    step.set(flag, no_flag.clone())
                step.set(keys.COLLECTOR_TRAJ_IDS, self._traj_ids.clone())
                steps.append(step)
                self._count(nxt, ended)
        batch: TensorDictBase = torch.stack(steps, 1)  # type: ignore[arg-type]
        batch.names = [None, keys.TIME_DIM_NAME]
        self.episodes = _episodes(*ended)
        self.frames += self.frames_per_batch
        return batch

    def _count(self, nxt: TensorDictBase, ended: tuple[list, list, list]) -> None:
        self._return += nxt.get(REWARD).squeeze(-1).double().mean(-1)
        self._length += 1
        done = nxt.get(keys.DONE).squeeze(-1)
        for i in done.nonzero().flatten().tolist():
            ended[0].append(float(self._return[i]))
            ended[1].append(int(self._length[i]))
            ended[2].append(int(self._traj_ids[i]))
            self._return[i], self._length[i] = 0.0, 0
            self._traj_ids[i] = self._next_traj_id
            self._next_traj_id += 1

    def update_policy_weights_(self) -> None:
        """Nothing to do: the collector acts with the learner's own module."""

    def shutdown(self) -> None:
        self.env.close()

    def state_dict(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "generator": self._generator.get_state(),
            "traj_ids": self._traj_ids.clone(),
            "next_traj_id": self._next_traj_id,
        }

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        """Restore the counters; the envs start fresh episodes (returns False: not exact)."""
        self.frames = int(state["frames"])
        self._generator.set_state(state["generator"])
        self._next_traj_id = int(state["next_traj_id"])
        n = self.env.num_envs
        self._traj_ids = torch.arange(self._next_traj_id, self._next_traj_id + n)
        self._next_traj_id += n
        self._current = None
        # a seed numpy takes (VMAS seeds numpy with it): below 2**31
        self._reset_seed = ((self.env.seed or 0) + 1_000_003 * (self.frames + 1)) % 2**31
        self._return.zero_()
        self._length.zero_()
        return False


def _episodes(returns: list[float], lengths: list[int], ids: list[int]) -> TensorDict:
    return TensorDict(
        {
            keys.EPISODE_RETURN: torch.tensor(returns, dtype=torch.float32),
            keys.EPISODE_LENGTH: torch.tensor(lengths, dtype=torch.int64),
            keys.TRAJ_IDS: torch.tensor(ids, dtype=torch.int64),
        },
        batch_size=(len(returns),),
    )
