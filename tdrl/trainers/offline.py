"""The offline loop: gradient steps on a fixed dataset, evaluated in the real env.

A :class:`Run` counts env steps through its collector; here :class:`OfflineSteps` stands in for
the collector and counts gradient steps, so the run's logs, evaluations, checkpoints, resume and
report work unchanged (``total_frames``, ``eval_every``, ``checkpoint_every`` are in gradient
steps). The dataset is not checkpointed (it is on disk already); the sampling generators are, so a
resumed run draws the same minibatches as an uninterrupted one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from tdrl import keys
from tdrl.data import ReplayBuffer
from tdrl.envs import VecEnv
from tdrl.modules import RunningObservationNorm
from tdrl.trainers.config import OffPolicyConfig
from tdrl.trainers.offpolicy import Step

__all__ = ["OfflineSteps", "normalize_dataset_observations", "train_offline"]


class OfflineSteps:
    """What a :class:`Run` reads of a collector, for an offline run: ``frames`` counts gradient
    steps, no episodes end, and the state is the count and ``buffer``'s sampling generators."""

    def __init__(self, buffer: ReplayBuffer) -> None:
        self.buffer = buffer
        self.frames = 0
        self.episodes = TensorDict({}, batch_size=[0])

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


def train_offline(
    cfg: OffPolicyConfig,
    algo: str,
    state: Mapping[str, Any],
    buffer: ReplayBuffer,
    step: Step,
    *,
    eval_env: VecEnv,
    policy: Callable[[TensorDictBase], TensorDictBase],
    steps_per_batch: int = 1_000,
) -> dict[str, float]:
    """The offline loop of a recipe, from start to report::

        with start_run(cfg, algo, state, OfflineSteps(buffer), ...) as run:  # --resume
            while run.frames < cfg.total_frames:          # frames: gradient steps
                for _ in range(steps_per_batch):
                    run.updates += 1
                    out = step(buffer.sample(cfg.batch_size), run.updates) or out
                run.end_batch(...)                          # log, evaluate, checkpoint
            return run.finish()

    ``step`` is an off-policy recipe's gradient step (``actor_critic_step``, ...). A batch of
    steps ends wherever the run logs, evaluates, checkpoints or stops (a divisor of those
    intervals and of ``steps_per_batch``).
    """
    from tdrl.trainers.run import start_run  # run.py imports the loop modules

    # Batches end on every step count where the run logs, evaluates, checkpoints or stops.
    events = (cfg.eval_every, cfg.checkpoint_every, cfg.log_every, cfg.stop_after_frames)
    steps_per_batch = math.gcd(steps_per_batch, *(n for n in events if n > 0))
    progress = OfflineSteps(buffer)
    with start_run(cfg, algo, state, progress, eval_env=eval_env, policy=policy) as run:
        while progress.frames < cfg.total_frames:
            out = None
            for _ in range(min(steps_per_batch, cfg.total_frames - progress.frames)):
                run.updates += 1
                metrics = step(buffer.sample(cfg.batch_size), run.updates)
                out = out if metrics is None else metrics
                progress.frames += 1
            if run.end_batch(progress, out):
                break
        return run.finish()


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
    norm = RunningObservationNorm(tuple(obs.shape[2:]), clip=None)
    norm.mean.copy_(mean)
    # normalize() divides by sqrt(var + epsilon): this var makes that sigma + eps exactly
    norm.var.copy_((std + eps).pow(2) - norm.epsilon)
    norm.count.fill_(flat.shape[0])
    for key in (keys.OBSERVATION, keys.NEXT_OBSERVATION):
        value = data.get(key)
        value.copy_(norm.normalize(value))
    return norm
