"""Offline runs: gradient steps on a fixed dataset, evaluated in the real env.

A :class:`Run` counts env steps through its collector; here :class:`OfflineSteps` stands in for
the collector and counts gradient steps, so the run's logs, evaluations, checkpoints, resume and
report work unchanged (``total_frames``, ``eval_every``, ``checkpoint_every`` are in gradient
steps). The dataset is not checkpointed (it is on disk already); the sampling generators are, so a
resumed run draws the same minibatches as an uninterrupted one. What identifies the dataset (its
id, transition count and a digest: :func:`dataset_digest`) goes with every checkpoint, and a
resume on other data is refused like one with other settings::

    with Run.from_config(cfg.run, ...) as run:
        for steps in run.resume(OfflineSteps(buffer, cfg.run, dataset=cfg.dataset)):
            for _ in range(steps):
                out = ...                       # one gradient step on buffer.sample(...)
                run.updates += 1
            run.step(out)
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDict
from torchrl.data import TensorSpec

from tdrl import keys
from tdrl.data import ReplayBuffer
from tdrl.modules import RunningObservationNorm, action_bounds
from tdrl.trainers.config import RunConfig

__all__ = [
    "OfflineSteps",
    "clip_dataset_actions",
    "dataset_digest",
    "load_dataset_for",
    "normalize_dataset_observations",
    "scale_dataset_rewards",
]

# Entries a loop may rewrite in place after loading (normalize_dataset_observations), which
# dataset_digest leaves out so that it names the dataset as loaded. (Scaled rewards are hashed
# as scaled: the scaling is a setting a resume compares anyway.)
_REWRITTEN = (keys.OBSERVATION, keys.NEXT_OBSERVATION)


@torch.no_grad()
def dataset_digest(buffer: ReplayBuffer) -> str:
    """SHA-256 of a dataset loaded into ``buffer``: the name, dtype and shape of every stored
    entry, and the data of every entry but the observations (which a loop may normalize in
    place): actions, rewards, episode flags. Changes when the dataset's steps do; reads each
    byte once (tens of milliseconds for a million steps)."""
    digest = hashlib.sha256()
    storage = buffer.stream_storage
    if storage is None:
        return digest.hexdigest()
    skip = {k if isinstance(k, tuple) else (k,) for k in _REWRITTEN}
    for key, leaf in zip(storage.keys, storage.leaves, strict=True):
        data = leaf[: storage.size]
        digest.update(f"{'/'.join(key)} {data.dtype} {tuple(data.shape)};".encode())
        if key not in skip:
            digest.update(data.contiguous().cpu().numpy().data)
    return digest.hexdigest()


class OfflineSteps:
    """What a :class:`Run` reads of a collector, for an offline run: iterating yields the
    number of gradient steps of the next batch (``steps_per_batch`` cut to end on every step
    count where the run logs, evaluates, checkpoints or stops), ``frames`` counts gradient steps
    (those of the batch just yielded included), no episodes end, and the state is the count and
    ``buffer``'s sampling generators. ``dataset``: the dataset's id, kept in every checkpoint
    with the transition count and :func:`dataset_digest` (:attr:`dataset_identity`), which a
    resume compares."""

    def __init__(
        self,
        buffer: ReplayBuffer,
        cfg: RunConfig,
        steps_per_batch: int = 1_000,
        *,
        dataset: str = "",
    ) -> None:
        self.buffer = buffer
        self.dataset_identity = {
            "id": dataset,
            "transitions": len(buffer),
            "sha256": dataset_digest(buffer),
        }
        self.total = cfg.total_frames
        events = (cfg.eval_every, cfg.checkpoint_every, cfg.log_every, cfg.stop_after_frames)
        self.steps_per_batch = math.gcd(steps_per_batch, *(n for n in events if n > 0))
        self.frames = 0
        self.episodes = TensorDict({}, batch_size=[0])

    def __iter__(self) -> Iterator[int]:
        while self.frames < self.total:
            steps = min(self.steps_per_batch, self.total - self.frames)
            self.frames += steps
            yield steps

    def state_dict(self) -> dict[str, Any]:
        return {"frames": self.frames, "rng": self.buffer.sampler_state()}

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        self.frames = int(state["frames"])
        self.buffer.load_sampler_state(state["rng"])
        return True

    def update_policy_weights_(self) -> None:
        """Nothing acts but the evaluation, which reads the learner's modules."""

    def shutdown(self) -> None:
        """Nothing to close."""


@torch.no_grad()
def normalize_dataset_observations(
    buffer: ReplayBuffer, *, eps: float = 1e-3
) -> RunningObservationNorm:
    """Normalize a dataset's observations in place by their mean and std (TD3+BC's state
    normalization, Fujimoto & Gu 2021, sec. 5: ``(s - mu) / (sigma + eps)``, both taken over the
    dataset's ``"observation"`` entries), and return the same transform, frozen, for the policy
    that meets the env's raw observations (``TensorDictSequential(norm, actor)``).

    Both ``"observation"`` and ``("next", "observation")`` of every written step are rewritten,
    so the critics' bootstrap sees what the actor sees. Call it once, right after loading.

    Shapes:
        flat observations ``[*F]`` (one ``"observation"`` entry of floats).
    """
    storage = buffer.stream_storage
    if storage is None or storage.size == 0:
        raise ValueError("normalize_dataset_observations: the buffer is empty")
    data = buffer.storage[: storage.size]  # [L, S] views of the written positions
    obs = data.get(keys.OBSERVATION)
    if not obs.is_floating_point():
        raise TypeError(
            f"normalize_dataset_observations: 'observation' has dtype {obs.dtype}; only float "
            "observations are normalized"
        )
    flat = obs.reshape(-1, *obs.shape[2:]).double()
    mean, std = flat.mean(0), flat.std(0, unbiased=False)
    norm = RunningObservationNorm(tuple(obs.shape[2:]), clip=None).to(obs.device)
    norm.mean.copy_(mean)
    # normalize() divides by sqrt(var + epsilon): this var makes that sigma + eps exactly
    norm.var.copy_((std + eps).pow(2) - norm.epsilon)
    norm.count.fill_(flat.shape[0])
    for key in (keys.OBSERVATION, keys.NEXT_OBSERVATION):
        value = data.get(key)
        value.copy_(norm.normalize(value))
    return norm


@torch.no_grad()
def scale_dataset_rewards(buffer: ReplayBuffer, *, scale: float = 1000.0) -> float:
    """Multiply a dataset's rewards, in place, by ``scale / (R_max - R_min)``, the highest and
    lowest return of its episodes (IQL's standardization of MuJoCo locomotion rewards:
    Kostrikov et al. 2021, arXiv 2110.06169, appendix; 1000 in the authors' code), and return
    the factor. An episode is a run of steps, oldest first in each stream, up to a ``("next",
    "done")`` step, or to the newest stored step of its stream. Meant for locomotion data (the
    authors shift AntMaze's sparse rewards instead). Call it once, right after loading."""
    storage = buffer.stream_storage
    if storage is None or storage.size == 0:
        raise ValueError("scale_dataset_rewards: the buffer is empty")
    # [L, S] views in time order (a wrapped ring's oldest step first), then [S, L]
    order = storage.time_order()
    reward = buffer.storage.get(keys.NEXT_REWARD)
    done = buffer.storage.get(keys.NEXT_DONE)[order]
    steps, streams = storage.size, storage.num_streams
    ends = done.reshape(steps, streams).t().to(torch.int64)
    ids = ends.cumsum(1) - ends  # episode ids that rise after each done step, which closes its own
    ids = ids + torch.arange(streams, device=ids.device).unsqueeze(1) * (steps + 1)
    _, ids = torch.unique(ids.flatten(), return_inverse=True)
    flat = reward[order].reshape(steps, streams).t().flatten().double()
    returns = torch.zeros(int(ids.max()) + 1, dtype=torch.float64, device=flat.device)
    returns.index_add_(0, ids, flat)
    spread = float(returns.max() - returns.min())
    if not spread > 0 or not math.isfinite(spread):
        raise ValueError(
            f"scale_dataset_rewards: the {returns.numel()} episode returns span {spread} (highest "
            "minus lowest): nothing to scale by (recipes/offline.py: --scale-rewards off)"
        )
    factor = scale / spread
    reward[: storage.size].mul_(factor)  # every stored step, wherever the ring put it
    return factor


def clip_dataset_actions(buffer: ReplayBuffer, action_spec: TensorSpec) -> int:
    """Clip a dataset's ``"action"`` entries into the action box, in place; returns how many
    values changed. A dataset recorded from a Gaussian policy may hold its unclipped samples,
    which the env ran clipped (as tdrl's ``VecEnv`` does): the offline losses read the actions
    the env executed, and refuse actions outside the box. Call it once, right after loading."""
    storage = buffer.stream_storage
    if storage is None or storage.size == 0:
        raise ValueError("clip_dataset_actions: the buffer is empty")
    low, high = action_bounds(action_spec)
    action = buffer.storage[: storage.size].get(keys.ACTION)  # [L, S, *A] views
    clipped = torch.maximum(torch.minimum(action, high.to(action)), low.to(action))
    changed = int((clipped != action).sum())
    action.copy_(clipped)
    return changed


def load_dataset_for(
    dataset: str,
    env: Any,
    *,
    normalize: bool = False,
    scale_rewards: bool = False,
    generator: int | None = None,
    device: torch.device | str = "cpu",
    env_name: str = "the env",
) -> tuple[ReplayBuffer, RunningObservationNorm | None]:
    """A Minari dataset as a replay buffer ready for an offline loop on ``env``'s spaces:
    loaded (``tdrl.data.load_minari``), its observation and action shapes checked against the
    env's (an error names the entry and both shapes), its actions clipped into the env's box
    (:func:`clip_dataset_actions`, the count printed), and with ``normalize`` its observations
    normalized (:func:`normalize_dataset_observations`: the transform is returned, for the
    evaluation policy; else None); with ``scale_rewards`` its rewards scaled by
    :func:`scale_dataset_rewards` (the factor printed). ``env_name`` names the env in errors."""
    from tdrl.data import load_minari

    buffer = load_minari(dataset, generator=generator, device=device)
    obs_spec, act_spec = env.observation_spec, env.action_spec
    for key, spec in ((keys.OBSERVATION, obs_spec[keys.OBSERVATION]), (keys.ACTION, act_spec)):
        stored = tuple(buffer.storage[key].shape[2:])
        if stored != tuple(spec.shape[1:]):
            raise ValueError(
                f"dataset {dataset!r}: {key} of shape {stored} does not fit {env_name}'s "
                f"{tuple(spec.shape[1:])}"
            )
    if clipped := clip_dataset_actions(buffer, act_spec):  # a policy's unclipped samples
        print(f"dataset {dataset!r}: {clipped} action values clipped into the action box")
    if scale_rewards:
        factor = scale_dataset_rewards(buffer)
        print(f"dataset {dataset!r}: rewards scaled by {factor:.4g} (1000 / return spread)")
    return buffer, normalize_dataset_observations(buffer) if normalize else None
