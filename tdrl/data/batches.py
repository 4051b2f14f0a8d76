"""What a training loop does with collected batches: store them (:func:`transitions`), count the
gradient steps due at an update-to-data ratio (:func:`updates_due`), cut the replay streams where
the collector started fresh episodes (:func:`truncate_streams`), and split an on-policy rollout
into shuffled minibatches (:func:`minibatches`)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl import keys
from tdrl.data.frames import store_frames_once
from tdrl.data.her import HERReplayBuffer
from tdrl.data.prioritized import PrioritizedReplayBuffer
from tdrl.data.replay_buffer import ReplayBuffer
from tdrl.data.storage import NestedKey

__all__ = [
    "POLICY_OUTPUTS",
    "make_replay_buffer",
    "minibatches",
    "transitions",
    "truncate_streams",
    "updates_due",
]

# What a policy writes besides the action: left out of the replay buffer, whose keys are fixed by
# the first (random-action) batch, which has none of them.
POLICY_OUTPUTS = (
    keys.LOC,
    keys.SCALE,
    keys.LOGITS,
    keys.ACTION_LOG_PROB,
    keys.ACTION_VALUE,
    keys.CHOSEN_ACTION_VALUE,
    keys.FLAT_OBSERVATION,  # recomputed from the stored entries (a relabelled goal included)
)

# Float entries of an on-policy batch that one NaN would spread into every weight.
_CHECKED = (keys.ADVANTAGE, keys.VALUE_TARGET, keys.ACTION_LOG_PROB)


def make_replay_buffer(
    capacity: int,
    *,
    prioritized: bool = False,
    alpha: float = 0.6,
    beta: float = 0.4,
    n_steps: int = 1,
    gamma: float = 0.99,
    generator: int | None = None,
    device: torch.device | str = "cpu",
    observation_spec: Any = None,
    frame_stack: int = 1,
    her: str = "off",
    her_goals: int = 4,
    compute_reward: Any = None,
    compute_terminated: Any = None,
    transform: Any = None,
) -> ReplayBuffer:
    """A uniform or prioritized replay buffer of ``n_steps`` transitions (their
    ``"steps_to_next_obs"`` the losses turn into ``gamma ** k``). Given the env's
    ``observation_spec``, stacked or large uint8 frames are stored once a step and restacked
    at sampling (:func:`tdrl.data.frames.store_frames_once`; ``frame_stack`` frames an
    observation). ``her`` (a strategy of :data:`tdrl.data.HER_STRATEGIES`; ``"off"``: none)
    gives a :class:`HERReplayBuffer` relabelling with ``compute_reward`` (and
    ``compute_terminated``), ``her_goals`` hindsight goals per real one. ``transform``: every
    sample's (:class:`ReplayBuffer`)."""
    once = observation_spec is not None and store_frames_once(observation_spec, frame_stack)
    if her != "off":
        if prioritized:
            raise ValueError("hindsight replay (her) is not combined with prioritized replay")
        if once:
            raise ValueError(
                "hindsight replay (her) does not store frames once: the observation is uint8 "
                f"frames (frame_stack={frame_stack})"
            )
        if compute_reward is None:
            raise ValueError(f"her={her!r} needs the goal env's compute_reward")
        return HERReplayBuffer(
            capacity, compute_reward=compute_reward, compute_terminated=compute_terminated,
            strategy=her, n_sampled_goal=her_goals, n_steps=n_steps, gamma=gamma,
            generator=generator, device=device, transform=transform,
        )  # fmt: skip
    storage: dict[str, Any] = dict(
        n_steps=n_steps, gamma=gamma, generator=generator, device=device,
        frame_keys=[keys.OBSERVATION] if once else None, frame_stack=frame_stack if once else 1,
        transform=transform,
    )  # fmt: skip
    if prioritized:
        return PrioritizedReplayBuffer(capacity, alpha=alpha, beta=beta, **storage)
    return ReplayBuffer(capacity, **storage)


def transitions(batch: TensorDictBase) -> TensorDictBase:
    """``batch`` without the policy's outputs (at the root and in a multi-agent batch's
    ``"agents"`` group): what a replay buffer stores."""
    return batch.exclude(*POLICY_OUTPUTS, *((keys.AGENTS, key) for key in POLICY_OUTPUTS))


def updates_due(frames: int, updates: int, *, learning_starts: int, utd_ratio: float) -> int:
    """Gradient steps to take now so that ``utd_ratio`` steps were taken per env step since
    ``learning_starts``: ``floor(utd_ratio * (frames - learning_starts + 1)) - updates``.

    Stateless (it reads the two counters), so a resumed run keeps the ratio. ``utd_ratio`` may
    be below 1 (Tianshou's ``update_per_step=0.1``: one step per 10 env steps).
    """
    if not utd_ratio > 0:
        raise ValueError(f"utd_ratio must be > 0, got {utd_ratio}")
    if frames < learning_starts:
        return 0
    # The small epsilon keeps e.g. 0.1 * 30 = 2.9999999999999996 from losing a step.
    return max(math.floor(utd_ratio * (frames - learning_starts + 1) + 1e-9) - updates, 0)


def truncate_streams(buffer: ReplayBuffer) -> None:
    """Mark the newest stored step of every stream ``("next", "truncated")`` and done.

    Needed when the collector starts new episodes mid-stream (a resume with async envs, a
    restarted worker), so the next step written to a stream does not follow the newest stored
    one. The stored transition stays valid (its real next observation was stored) and bootstraps
    like any truncation; the flag stops n-step sums and slices from reaching across the seam.
    """
    if len(buffer) == 0:
        return
    storage = buffer.storage  # [length, streams] views of the stored tensors
    newest = (buffer.state_dict()["cursor"] - 1) % storage.batch_size[0]
    for key in (keys.NEXT_TRUNCATED, keys.NEXT_DONE):
        flag = storage.get(key, None)
        if flag is not None:
            flag[newest] = True
    buffer.flags_changed()  # a hindsight buffer finds its episode ends again


def minibatches(
    batch: TensorDictBase,
    minibatch_size: int | None,
    *,
    epochs: int = 1,
    in_keys: Sequence[NestedKey] | None = None,
    seq_len: int | None = None,
    generator: torch.Generator | None = None,
) -> Iterator[TensorDictBase]:
    """Shuffled minibatches of an on-policy rollout, ``epochs`` passes over it.

    The rollout is cut down to ``in_keys`` (a loss's) and flattened once; every epoch draws one
    permutation and gathers once, and minibatches are contiguous slices of that copy (the last
    may be smaller). ``minibatch_size`` None: the whole rollout, one step an epoch.

    With ``seq_len`` (recurrent policies) each env row of the ``[num_envs, T]`` rollout is cut
    in order into ``T / seq_len`` chunks and minibatches hold ``minibatch_size // seq_len`` whole
    chunks (at least one); run the loss in ``torchrl.modules.set_recurrent_mode(True)``.

    Raises:
        KeyError: an entry of ``in_keys`` is missing, named.
        ValueError: the advantage, value target or behaviour log-prob holds a NaN or an inf
            (named, with the count), or ``seq_len`` does not divide T.

    Shapes:
        batch ``[*B]`` -> minibatches ``[M]``; with ``seq_len``: ``[num_envs, T]`` ->
        ``[M, seq_len]``.
    """
    if minibatch_size is not None and minibatch_size < 1 or epochs < 0:
        raise ValueError(
            f"need minibatch_size >= 1 and epochs >= 0, got {minibatch_size}, {epochs}"
        )
    flat = batch if in_keys is None else batch.select(*in_keys, strict=False)
    if in_keys is not None:
        missing = [key for key in in_keys if key not in flat.keys(True)]
        if missing:
            raise KeyError(f"minibatches: the batch has no {missing} entries (the loss reads them)")
    _check_finite(flat)
    flat = flat.reshape(-1) if seq_len is None else _chunks(flat, seq_len)
    size = flat.shape[0]
    step = size if minibatch_size is None else minibatch_size
    if seq_len is not None and minibatch_size is not None:
        step = max(minibatch_size // seq_len, 1)  # whole chunks
    for _ in range(epochs):
        # the permutation is drawn on the CPU (the CPU generator, whatever the batch's device)
        shuffled = flat[torch.randperm(size, generator=generator).to(flat.device)]
        for start in range(0, size, step):
            yield shuffled[start : start + step]


def _check_finite(batch: TensorDictBase) -> None:
    for key in _CHECKED:
        value = batch.get(key, None)
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            finite = value.isfinite()
            if not bool(finite.all()):
                raise ValueError(
                    f"{key!r} contains NaN or inf ({int((~finite).sum())} of {value.numel()} "
                    "entries); check the rewards, the values and the policy's log-probs of this "
                    "rollout"
                )


def _chunks(batch: TensorDictBase, seq_len: int) -> TensorDictBase:
    """``[num_envs, T]`` -> ``[num_envs * T / seq_len, seq_len]`` (each env row cut in order)."""
    if batch.batch_dims != 2:
        raise ValueError(
            f"seq_len needs a [num_envs, T] rollout, got batch size {tuple(batch.batch_size)}"
        )
    envs, steps = batch.batch_size
    if seq_len < 1 or steps % seq_len:
        raise ValueError(
            f"seq_len={seq_len} does not divide the rollout's {steps} steps per env (batch "
            f"{tuple(batch.batch_size)}): pick a divisor of frames_per_batch / num_envs"
        )
    return batch.reshape(envs * steps // seq_len, seq_len)
