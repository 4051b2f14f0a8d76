"""The collector: a policy and a vector env -> ``[num_envs, T]`` rollout TensorDicts."""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from typing import Any, Literal

import numpy as np
import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, set_interaction_type

from tdrl import keys
from tdrl.collectors._policy import Policy, PolicyStep
from tdrl.envs import VecEnv, env_state, load_env_state


class Collector:
    """Iterates over ``[num_envs, T]`` rollouts of ``policy`` in ``env`` (T = frames_per_batch /
    num_envs), in TorchRL's layout (docs/design.md, "Data"), time last and named ``"time"``.

    Each batch holds the observation keys, ``"action"`` and whatever else the policy wrote
    (``"loc"``, ``"scale"``, ``"action_log_prob"``, ...), the root flags (all False: with same-step
    autoreset every root state is a running or freshly reset state), ``("next", obs)`` (the real
    final observation where an episode ended), ``("next", "reward")``, the three ``("next", flag)``
    entries and ``("collector", "traj_ids")`` (int64, one id per episode, unique within the
    collector). Batches are fresh tensors every time (no aliasing), made without gradients.

    The policy also reads ``"is_init"`` (``[num_envs, 1]`` bool, True on the first step of an
    episode), so stateful exploration noise restarts per env at episode ends (TorchRL's
    ``InitTracker``); the batch does not store it, unless the policy is recurrent.

    Recurrent policies (tdrl's or TorchRL's ``LSTMModule``/``GRUModule`` inside the policy,
    found by their ``make_tensordict_primer``): the collector holds their state, zeros at first
    and zeroed wherever ``"is_init"`` is set (every episode start, the same-step autoreset inside a
    batch included), and feeds the policy's ``("next", state)`` output back as the next step's
    state, across batches too. The batch stores the state each step acted from (under the state
    keys), the policy's ``("next", state)`` and ``"is_init"``, so training can replay whole
    sequences from the states the policy had (sequence mode); ``state_dict`` includes the state.

    ``state_dict()`` / ``load_state_dict()`` save and restore the collector between batches
    (counters, the pending observation, running episode statistics, the random-action generator
    and the envs' state), so a resumed run collects exactly what an uninterrupted one would
    (sync envs).

    After each batch, ``collector.episodes`` is a ``[k]`` TensorDict of the k episodes that ended
    during it: ``"episode_return"`` (float32, undiscounted), ``"episode_length"`` (int64) and
    ``"traj_ids"``. Episodes that began in an earlier batch count in full.

    Args:
        env: a ``VecEnv`` (``tdrl.envs.make_vec_env``). The collector resets it on first use and
            then owns its state: do not step or reset it elsewhere while collecting.
        policy: a TensorDictModule (tdrl actor, TorchRL ``ProbabilisticActor``, ...) that writes
            ``"action"`` into the TensorDict it gets; ``None`` draws uniform random actions.
        frames_per_batch: env steps per batch, a multiple of ``env.num_envs``.
        total_frames: stop after this many frames (rounded up to whole batches); -1: never.
        init_random_frames: whole batches of random actions until this many frames were
            collected (those batches hold ``"action"`` but no policy outputs).
        deterministic: run the policy under ``InteractionType.DETERMINISTIC`` (the distribution's
            mode) instead of ``RANDOM``.
        seed: seed of the random actions; default: the env's seed.
        device: where the policy runs (default: the device of its parameters, e.g. ``"cuda"``):
            observations are copied there each step (pinned, non-blocking) and actions back to
            the CPU envs.
        storing_device: where batches are returned; default: ``device`` (the CPU without one).
        on_nonfinite: ``"raise"`` (default): a NaN or infinite observation, reward or action in a
            batch raises an error naming the key, the env index and the step (checked once per
            batch); ``"flag"``: the batch gets ``("collector", "nonfinite")`` ``[num_envs, T]``
            bool, True at such steps, for the caller to drop or mask; ``"ignore"``: no check.

    Shapes:
        batch [num_envs, T]; observation [num_envs, T, *obs_shape]; flags and reward [.., 1].
    """

    def __init__(
        self,
        env: VecEnv,
        policy: Policy | None,
        frames_per_batch: int,
        total_frames: int = -1,
        init_random_frames: int = 0,
        deterministic: bool = False,
        *,
        seed: int | None = None,
        on_nonfinite: Literal["raise", "flag", "ignore"] = "raise",
        device: torch.device | str | None = None,
        storing_device: torch.device | str | None = None,
    ) -> None:
        if env is None or not hasattr(env, "num_envs"):
            raise TypeError(
                f"Collector: env must be a vector env (tdrl.envs.make_vec_env, or a TorchRL env "
                f"through tdrl.envs.from_torchrl), got {type(env).__name__}"
            )
        for name, value in (("frames_per_batch", frames_per_batch), ("total_frames", total_frames)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"Collector: {name} must be an int, got {value!r}")
        n = env.num_envs
        if frames_per_batch <= 0 or frames_per_batch % n:
            raise ValueError(
                f"frames_per_batch={frames_per_batch} must be a positive multiple of num_envs={n}"
            )
        if total_frames < -1:
            raise ValueError(
                f"total_frames must be >= 0, or -1 for never stopping; got {total_frames}"
            )
        if init_random_frames < 0:
            raise ValueError(f"init_random_frames must be >= 0, got {init_random_frames}")
        if on_nonfinite not in ("raise", "flag", "ignore"):
            raise ValueError(
                f"on_nonfinite must be 'raise', 'flag' or 'ignore', got {on_nonfinite!r}"
            )
        self.on_nonfinite = on_nonfinite
        self.env = env
        self.frames_per_batch = frames_per_batch
        self.steps_per_batch = frames_per_batch // n
        self.total_frames = total_frames
        self.init_random_frames = init_random_frames
        self.deterministic = deterministic
        self.frames = 0
        self.episodes = _episodes_td(np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64))
        self.device = None if device is None else torch.device(device)
        if self.device is not None and self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device={device!r}: no CUDA device here (torch.cuda.is_available())")
        self._policy_step = PolicyStep(env, policy, self.device)
        policy_device = self._policy_step.device  # given, or that of the policy's parameters
        self.storing_device = (
            policy_device if storing_device is None else torch.device(storing_device)
        )
        self._generator = torch.Generator()
        seed = seed if seed is not None else env.seed
        if seed is not None:
            self._generator.manual_seed(seed)
        else:
            self._generator.seed()
        self._started = False
        self._traj_ids = np.arange(n, dtype=np.int64)
        self._next_traj_id = n
        self._episode_return = np.zeros(n)
        self._episode_length = np.zeros(n, dtype=np.int64)

    def __iter__(self) -> Iterator[TensorDict]:
        while self.total_frames < 0 or self.frames < self.total_frames:
            yield self.rollout()

    def rollout(self) -> TensorDict:
        """Collects one ``[num_envs, T]`` batch (``iter`` calls this)."""
        use_policy = self._policy_step.policy is not None and self.frames >= self.init_random_frames
        mode = InteractionType.DETERMINISTIC if self.deterministic else InteractionType.RANDOM
        with torch.no_grad(), set_interaction_type(mode):
            batch = self._rollout(use_policy)
        self.frames += self.frames_per_batch
        return batch

    def _rollout(self, use_policy: bool) -> TensorDict:
        env, n, steps = self.env, self.env.num_envs, self.steps_per_batch
        runner = self._policy_step
        if not self._started:
            runner.set_observation(env.reset_arrays(), reset=True)
            self._started = True
        leaves = env.obs_leaves
        # One buffer per key for the whole batch; numpy views take the per-step writes.
        observation = [torch.empty(n, steps, *lf.shape, dtype=lf.dtype) for lf in leaves]
        next_observation = [torch.empty_like(t) for t in observation]
        observation_np = [t.numpy() for t in observation]
        next_observation_np = [t.numpy() for t in next_observation]
        reward = torch.empty(n, steps, 1, dtype=torch.float32)
        terminated = torch.empty(n, steps, 1, dtype=torch.bool)
        truncated = torch.empty(n, steps, 1, dtype=torch.bool)
        traj_ids = torch.empty(n, steps, dtype=torch.int64)
        reward_np, terminated_np = reward.numpy()[..., 0], terminated.numpy()[..., 0]
        truncated_np, traj_ids_np = truncated.numpy()[..., 0], traj_ids.numpy()
        # Recurrent policies: "is_init" is stored too (sequence mode resets its state there).
        store_init = bool(runner.state_keys)
        is_init = torch.empty(n, steps if store_init else 0, 1, dtype=torch.bool)
        is_init_np = is_init.numpy()[..., 0]
        mask_leaf = env.action_mask_leaf  # random actions follow the current mask, step by step
        if use_policy:
            outputs: list[list[torch.Tensor]] = []
        elif mask_leaf is None:
            action = env.rand_action(self._generator, steps)
            action_np = action.numpy()
        else:
            action = torch.empty(n, steps, *env.action_spec.shape[1:], dtype=torch.int64)
            action_np = action.numpy()
        current_np = runner.observation_np
        ended_returns, ended_lengths, ended_ids = [], [], []

        for t in range(steps):
            for dst, src in zip(observation_np, current_np, strict=True):
                dst[:, t] = src
            if store_init:
                is_init_np[:, t] = runner.is_init_np
            if use_policy:
                step_action, values = runner()
                outputs.append(values)
                out = env.step_arrays(step_action.numpy())
            else:
                if mask_leaf is not None:
                    action_np[:, t] = env.rand_action(self._generator, mask=current_np[mask_leaf])
                out = env.step_arrays(action_np[:, t])
            for dst, cur, src in zip(next_observation_np, current_np, out.observation, strict=True):
                dst[:, t] = src
                cur[...] = src
            runner.set_episode_starts(out.final_observation)
            reward_np[:, t] = out.reward
            terminated_np[:, t] = out.terminated
            truncated_np[:, t] = out.truncated
            traj_ids_np[:, t] = self._traj_ids
            self._episode_return += out.reward
            self._episode_length += 1
            for i, final in out.final_observation.items():
                for dst, src in zip(next_observation_np, final, strict=True):
                    dst[i, t] = src
                ended_returns.append(self._episode_return[i])
                ended_lengths.append(self._episode_length[i])
                ended_ids.append(self._traj_ids[i])
                self._episode_return[i] = 0.0
                self._episode_length[i] = 0
                self._traj_ids[i] = self._next_traj_id
                self._next_traj_id += 1

        self.episodes = _episodes_td(
            np.asarray(ended_returns), np.asarray(ended_lengths), np.asarray(ended_ids)
        )
        # The batch as one nested dict, made a TensorDict in one call (names included).
        nxt: dict[str, Any] = {
            keys.REWARD: reward,
            keys.TERMINATED: terminated,
            keys.TRUNCATED: truncated,
            keys.DONE: terminated | truncated,
        }
        source: dict[str, Any] = {keys.NEXT: nxt, keys.COLLECTOR: {keys.TRAJ_IDS: traj_ids}}
        for leaf, obs, next_obs in zip(leaves, observation, next_observation, strict=True):
            _put(source, _as_tuple(leaf.key), obs)
            _put(source, (keys.NEXT, *_as_tuple(leaf.key)), next_obs)
        for key in (keys.DONE, keys.TERMINATED, keys.TRUNCATED):
            source[key] = torch.zeros(n, steps, 1, dtype=torch.bool)
        if store_init:
            source[keys.IS_INIT] = is_init
        if use_policy:
            assert runner.out_keys is not None
            for j, key in enumerate(runner.stored_keys):
                _put(source, _as_tuple(key), torch.stack([values[j] for values in outputs], 1))
        else:
            source[keys.ACTION] = action
        if self.on_nonfinite == "raise":
            _check_finite(_leaves(source), n, self.frames)
        elif self.on_nonfinite == "flag":
            source[keys.COLLECTOR][keys.NONFINITE] = _nonfinite_steps(_leaves(source), n, steps)
        batch = _batch(source, torch.Size((n, steps)))
        if self.storing_device is not None:
            batch = batch.to(self.storing_device, non_blocking=True)
        return batch

    def update_policy_weights_(self) -> None:
        """Nothing to do: this collector acts with the learner's own module (TorchRL's collectors
        have the method too; :class:`RayCollector` sends the weights to its workers)."""

    def shutdown(self) -> None:
        """Close the env (TorchRL's collectors' name; :class:`RayCollector` stops its workers)."""
        self.env.close()

    # --- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Counters, the pending observation and its ``"is_init"`` flags, running episode
        returns/lengths, trajectory ids, the random-action generator and the envs' state
        (``tdrl.envs.env_state``: ``None`` for async envs)."""
        runner = self._policy_step
        return {
            "frames": self.frames,
            "started": self._started,
            "traj_ids": self._traj_ids.copy(),
            "next_traj_id": self._next_traj_id,
            "episode_return": self._episode_return.copy(),
            "episode_length": self._episode_length.copy(),
            "generator": self._generator.get_state(),
            "observation": [t.clone() for t in runner.observation],
            "is_init": runner.is_init.clone(),
            "recurrent_state": {k: runner.td.get(k).clone() for k in runner.state_keys},
            "env": env_state(self.env),
        }

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        """Restore :meth:`state_dict`. Returns True when the restore is exact.

        With async envs (no env state) the envs' next reset is re-seeded from the frame count and
        the collector starts fresh episodes on its next batch: reproducible, not identical, and
        False is returned (a replay buffer should then mark its newest steps truncated).
        """
        self.frames = int(state["frames"])
        self._generator.set_state(state["generator"])
        self._next_traj_id = int(state["next_traj_id"])
        self._traj_ids = state["traj_ids"].copy()
        reseed = (self.env.seed or 0) + 1_000_003 * (self.frames + 1)
        exact = load_env_state(self.env, state["env"], reseed=reseed)
        runner, n = self._policy_step, self.env.num_envs
        if exact:
            self._started = bool(state["started"])
            self._episode_return = state["episode_return"].copy()
            self._episode_length = state["episode_length"].copy()
            for dst, src in zip(runner.observation, state["observation"], strict=True):
                dst.copy_(src)
            runner.is_init.copy_(state["is_init"])
            for key, value in state.get("recurrent_state", {}).items():
                runner.td.get(key).copy_(value)
        else:
            # Fresh episodes: the env is reset (with the derived seed) on the next batch.
            self._started = False
            self._episode_return = np.zeros(n)
            self._episode_length = np.zeros(n, dtype=np.int64)
            self._traj_ids = np.arange(self._next_traj_id, self._next_traj_id + n)
            self._next_traj_id += n
        return exact


def _as_tuple(key: str | tuple[str, ...]) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else key


def _episodes_td(returns: np.ndarray, lengths: np.ndarray, ids: np.ndarray) -> TensorDict:
    return TensorDict(
        {
            keys.EPISODE_RETURN: torch.as_tensor(returns, dtype=torch.float32).reshape(-1),
            keys.EPISODE_LENGTH: torch.as_tensor(lengths, dtype=torch.int64).reshape(-1),
            keys.TRAJ_IDS: torch.as_tensor(ids, dtype=torch.int64).reshape(-1),
        },
        batch_size=(len(returns),),
    )


def _put(source: dict[str, Any], path: tuple[str, ...], value: torch.Tensor) -> None:
    """``source[path[0]]...[path[-1]] = value``, making the nested dicts on the way."""
    for name in path[:-1]:
        source = source.setdefault(name, {})
    source[path[-1]] = value


def _leaves(source: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[Any, Any]]:
    """``(key, tensor)`` of every leaf, in the order the TensorDict made of it iterates."""
    out: list[tuple[Any, Any]] = []
    for name, value in source.items():
        key = (*prefix, name)
        if isinstance(value, dict):
            out += _leaves(value, key)
        else:
            out.append((key if len(key) > 1 else name, value))
    return out


def _batch(source: dict[str, Any], batch_size: torch.Size) -> TensorDict:
    """``TensorDict(source, batch_size, names=[None, "time"])`` in one call (a nested dict and one
    constructor cost less than a TensorDict grown by ``set``; an unchecked fast twin would not
    buy the 1% a fast path must: docs/design.md, "Fast paths")."""
    return TensorDict(source, batch_size=batch_size, names=[None, keys.TIME_DIM_NAME])


def _nonfinite_steps(leaves: list[tuple[Any, Any]], n: int, steps: int) -> torch.Tensor:
    """``[num_envs, T]`` bool: steps with a NaN or infinite float entry."""
    bad = torch.zeros(n, steps, dtype=torch.bool)
    for _, value in leaves:
        if value.is_floating_point():
            bad |= (~torch.isfinite(value)).reshape(n, steps, -1).any(-1)
    return bad


def _check_finite(leaves: list[tuple[Any, Any]], n: int, frames: int) -> None:
    """Raise naming the first non-finite float entry (key, env index, step of the batch)."""
    for key, value in leaves:
        if not value.is_floating_point() or bool(torch.isfinite(value).all()):
            continue
        bad = (~torch.isfinite(value)).reshape(*value.shape[:2], -1).any(-1)
        env_i, step = (int(i) for i in torch.nonzero(bad)[0])
        raise ValueError(
            f"non-finite {key!r} from env {env_i} at step {step} of the batch (env step "
            f"{frames + step * n + env_i} of the run): "
            f"{value[env_i, step].flatten()[:6].tolist()}; Collector(on_nonfinite='ignore') "
            "skips this check"
        )
