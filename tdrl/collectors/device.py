"""The collector of envs that step in torch on their own device (MuJoCo Warp's worlds,
``tdrl.envs.warp_backend``; VMAS and PettingZoo through ``tdrl.collectors.multiagent``).

Such an env takes an action tensor and returns two TensorDicts, ``(next, current)``: the step's
``"next"`` entries and the observations to act from (reset ones where an episode ended). The
collector stacks ``[num_envs, T]`` batches from them on the env's device and keeps its episode
statistics there too: host syncs happen once a batch (the finiteness check, the episodes that
ended, the env's capacity check), never at a step.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from typing import Any, Literal

import torch
from tensordict import NestedKey, TensorDict, TensorDictBase
from tensordict.nn import InteractionType, set_interaction_type

from tdrl import keys


class DeviceCollector:
    """Iterates over ``[num_envs, T]`` rollouts of ``policy`` in a torch-stepped ``env``.

    Each step holds the env's observation entries, what the policy wrote (``"action"``,
    ``"action_log_prob"``, ...), ``"next"`` as the env returned it (real final observations,
    rewards, flags), the root flags (all False: same-step autoreset) and
    ``("collector", "traj_ids")``. After each batch, ``episodes`` holds the episodes that ended
    in it (``"episode_return"``, ``"episode_length"``, ``"traj_ids"``), in the order they ended.

    ``state_dict`` keeps the counters and the random-action generator, not the simulators:
    ``load_state_dict`` returns False and the next batch starts fresh episodes from a seed
    derived from the frame count (reproducible, not identical to an uninterrupted run).

    Args:
        env: a :class:`tdrl.envs.warp_backend.WarpVecEnv` (``make_vec_env(...,
            backend="mujoco_warp")``), or any env with ``reset``/``step(action) -> (next,
            current)``, ``num_envs``, ``seed`` and ``rand_action``.
        policy: a TensorDictModule that writes ``"action"``; ``None``: uniform random actions.
        frames_per_batch: env steps per batch, a multiple of ``env.num_envs``.
        total_frames: stop after this many frames; -1: never.
        init_random_frames: whole batches of random actions first.
        deterministic: run the policy under ``InteractionType.DETERMINISTIC``.
        seed: seed of the random actions; default: the env's seed.
        device: where the policy runs when not on the env's device (observations are moved
            there, its outputs back).
        on_nonfinite: ``"raise"`` (default): a NaN or infinite observation or reward in a batch
            raises an error naming the key, env and step; ``"ignore"``: no check.

    Shapes:
        batch [num_envs, T]; observation [num_envs, T, *obs_shape]; flags and reward [.., 1].
    """

    action_key: NestedKey = keys.ACTION
    reward_key: NestedKey = keys.REWARD  # under "next"
    # the entries the finiteness check reads (on_nonfinite="raise")
    finite_keys: tuple[NestedKey, ...] = (
        keys.OBSERVATION,
        (keys.NEXT, keys.OBSERVATION),
        (keys.NEXT, keys.REWARD),
    )

    def __init__(
        self,
        env: Any,
        policy: Any,
        frames_per_batch: int,
        total_frames: int = -1,
        init_random_frames: int = 0,
        deterministic: bool = False,
        *,
        seed: int | None = None,
        device: torch.device | str | None = None,
        on_nonfinite: Literal["raise", "ignore"] = "raise",
    ) -> None:
        self._check_env(env)
        n = env.num_envs
        if isinstance(frames_per_batch, bool) or not isinstance(frames_per_batch, numbers.Integral):
            raise TypeError(f"frames_per_batch must be an int, got {frames_per_batch!r}")
        if frames_per_batch <= 0 or frames_per_batch % n:
            raise ValueError(
                f"frames_per_batch={frames_per_batch} must be a positive multiple of num_envs={n}"
            )
        if on_nonfinite not in ("raise", "ignore"):
            raise ValueError(f"on_nonfinite must be 'raise' or 'ignore', got {on_nonfinite!r}")
        self.env: Any = env
        self.policy: Any = policy
        self.frames_per_batch: int = frames_per_batch
        self.steps_per_batch: int = frames_per_batch // n
        self.total_frames: int = total_frames
        self.init_random_frames: int = init_random_frames
        self.deterministic: bool = deterministic
        self.on_nonfinite: str = on_nonfinite
        self.device: torch.device | None = None if device is None else torch.device(device)
        self.frames: int = 0
        self._generator: torch.Generator = torch.Generator()
        seed = env.seed if seed is None else seed
        self._generator.manual_seed(seed if seed is not None else 0)
        self._current: TensorDictBase | None = None
        self._reset_seed: int | None = None
        where = getattr(env, "device", None) or torch.device("cpu")
        self._traj_ids: torch.Tensor = torch.arange(n, device=where)
        self._next_traj_id: torch.Tensor = torch.tensor(n, device=where)
        self._return: torch.Tensor = torch.zeros(n, dtype=torch.float64, device=where)
        self._length: torch.Tensor = torch.zeros(n, dtype=torch.int64, device=where)
        self.episodes: TensorDict = _episodes(*(torch.zeros(0),) * 3)

    def _check_env(self, env: Any) -> None:
        from tdrl.envs.warp_backend import WarpVecEnv

        if not isinstance(env, WarpVecEnv):
            raise TypeError(
                "DeviceCollector: env must be a WarpVecEnv (tdrl.envs.make_vec_env with "
                f"backend='mujoco_warp'), got {type(env).__name__}"
            )

    def _reward(self, nxt: TensorDictBase) -> torch.Tensor:
        """The reward an episode's return adds up, ``[num_envs]``."""
        return nxt.get(self.reward_key).squeeze(-1)

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
        ends: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []
        no_flag = torch.zeros(n, 1, dtype=torch.bool, device=self._traj_ids.device)
        with torch.no_grad(), set_interaction_type(mode):
            for _ in range(self.steps_per_batch):
                step = self._current
                if use_policy:
                    acted = self.policy(step if self.device is None else step.to(self.device))
                    if self.device is not None:
                        step = acted.to(self._traj_ids.device)
                else:
                    step.set(self.action_key, env.rand_action(self._generator))
                nxt, self._current = env.step(step.get(self.action_key))
                step.set(keys.NEXT, nxt)
                for flag in (keys.DONE, keys.TERMINATED, keys.TRUNCATED):
                    step.set(flag, no_flag.clone())
                step.set(keys.COLLECTOR_TRAJ_IDS, self._traj_ids.clone())
                steps.append(step)
                ends.append(self._count(nxt))
        batch: TensorDictBase = torch.stack(steps, 1)  # type: ignore[arg-type]
        batch.names = [None, keys.TIME_DIM_NAME]
        if self.on_nonfinite == "raise":
            _check_finite(batch, self.finite_keys, self.frames)
        check_capacity = getattr(env, "check_capacity", None)
        if check_capacity is not None:  # MuJoCo Warp: a world that ran out of contact buffers
            check_capacity()
        done, returns, lengths, ids = (torch.stack(x) for x in zip(*ends, strict=True))
        self.episodes = _episodes(returns[done], lengths[done], ids[done])  # [T, n]: step order
        self.frames += self.frames_per_batch
        return batch

    def _count(
        self, nxt: TensorDictBase
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Adds a step to the running episodes; returns (done, return, length, traj id), each
        ``[num_envs]``, as they stood at this step; restarts the ended ones with new ids."""
        self._return += self._reward(nxt).double()
        self._length += 1
        done = nxt.get(keys.DONE).reshape(-1)
        out = (done, self._return.clone(), self._length.clone(), self._traj_ids.clone())
        self._return.masked_fill_(done, 0.0)
        self._length.masked_fill_(done, 0)
        new = self._next_traj_id + done.cumsum(0) - 1  # in env order, as they ended
        self._traj_ids = torch.where(done, new, self._traj_ids)
        self._next_traj_id = self._next_traj_id + done.sum()
        return out

    def update_policy_weights_(self) -> None:
        """Nothing to do: the collector acts with the learner's own module."""

    def shutdown(self) -> None:
        self.env.close()

    def state_dict(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "generator": self._generator.get_state(),
            "traj_ids": self._traj_ids.cpu(),
            "next_traj_id": int(self._next_traj_id),
        }

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        """Restore the counters; the envs start fresh episodes (returns False: not exact)."""
        self.frames = int(state["frames"])
        self._generator.set_state(state["generator"])
        first, n = int(state["next_traj_id"]), self.env.num_envs
        where = self._traj_ids.device
        self._traj_ids = torch.arange(first, first + n, device=where)
        self._next_traj_id = torch.tensor(first + n, device=where)
        self._current = None
        # a seed numpy takes (VMAS seeds numpy with it): below 2**31
        self._reset_seed = ((self.env.seed or 0) + 1_000_003 * (self.frames + 1)) % 2**31
        self._return.zero_()
        self._length.zero_()
        return False


def _check_finite(batch: TensorDictBase, entries: tuple[NestedKey, ...], frames: int) -> None:
    """One reduction and one host sync per entry; the first bad step (then env) is named."""
    for key in entries:
        if key not in batch.keys(include_nested=True):
            continue
        value = batch.get(key)
        if not value.is_floating_point():
            continue
        bad = ~value.isfinite().flatten(2).all(-1)
        if bool(bad.any()):
            t, env = (int(i) for i in bad.T.nonzero()[0])
            raise ValueError(
                f"non-finite {key!r} at env {env}, step {t} of the batch (after {frames} frames): "
                "the simulation or the policy produced NaN or inf"
            )


def _episodes(returns: torch.Tensor, lengths: torch.Tensor, ids: torch.Tensor) -> TensorDict:
    return TensorDict(
        {
            keys.EPISODE_RETURN: returns.to("cpu", torch.float32),
            keys.EPISODE_LENGTH: lengths.to("cpu", torch.int64),
            keys.TRAJ_IDS: ids.to("cpu", torch.int64),
        },
        batch_size=(len(returns),),
    )
