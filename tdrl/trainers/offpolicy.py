"""Parts of an off-policy loop, as functions: the recipes keep the loop itself visible.

One iteration of every off-policy recipe (``recipes/dqn.py``, ``sac.py``, ``td3.py``, ...)::

    batch = collector.rollout()                       # collect (random until learning starts)
    buffer.extend(batch)                              # extend the replay buffer
    for _ in range(updates_due(frames, updates, ...)):
        out = loss(buffer.sample(batch_size))         # k gradient steps
        optimizer_step(total, optimizer)
        target_updater.step()                         # soft or hard target update
    evaluate_and_log(...); save_run(...)              # eval / log / checkpoint

``save_run`` writes the replay buffer next to the checkpoint, so a resumed run samples from the
same data; :func:`load_run` restores both and marks the newest stored step of every stream as
truncated, because the resumed collector starts fresh episodes there.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl import keys
from tdrl.collectors import evaluate
from tdrl.data import PrioritizedReplayBuffer, ReplayBuffer
from tdrl.envs import VecEnv
from tdrl.trainers.checkpoint import load_checkpoint, save_checkpoint
from tdrl.trainers.logger import Logger

CHECKPOINT_FILE = "checkpoint.pt"
BUFFER_DIR = "buffer"
# What a policy writes besides the action: left out of the replay buffer, whose keys are fixed by
# the first (random-action) batch, which has none of them.
POLICY_OUTPUTS = (
    keys.LOC,
    keys.SCALE,
    keys.LOGITS,
    keys.ACTION_LOG_PROB,
    keys.ACTION_VALUE,
    keys.CHOSEN_ACTION_VALUE,
)


def torch_default_init_(module: torch.nn.Module) -> torch.nn.Module:
    """Re-initialise every ``nn.Linear`` of ``module`` with PyTorch's default (Kaiming-uniform)
    init; returns ``module``.

    ``tdrl.modules.mlp`` initialises orthogonally (the on-policy convention of Andrychowicz et
    al. 2020, arXiv 2006.05990). The off-policy baselines (SB3, Tianshou, CleanRL) keep PyTorch's
    default, and their tuned settings assume it: DQN on CartPole-v1 with rl-baselines3-zoo's
    settings reached 500 at 50k steps with the default init and stayed near 100 with the
    orthogonal one (seed 0, measured here).
    """
    for layer in module.modules():
        if isinstance(layer, torch.nn.Linear):
            layer.reset_parameters()
    return module


def transitions(batch: TensorDictBase) -> TensorDictBase:
    """``batch`` without the policy's outputs: what the replay buffer stores."""
    return batch.exclude(*POLICY_OUTPUTS)


def crossed(frames: int, previous: int, every: int) -> bool:
    """Whether a multiple of ``every`` lies in ``(previous, frames]`` (``every <= 0``: never)."""
    return every > 0 and frames // every > previous // every


def make_replay_buffer(
    capacity: int,
    *,
    prioritized: bool = False,
    alpha: float = 0.6,
    beta: float = 0.4,
    n_steps: int = 1,
    gamma: float = 0.99,
    seed: int | None = None,
) -> ReplayBuffer:
    """A uniform or prioritized (Schaul et al. 2015, arXiv 1511.05952) replay buffer.

    With ``n_steps > 1`` samples are n-step transitions whose ``"steps_to_next_obs"`` the losses
    turn into the bootstrap discount ``gamma ** k``.
    """
    if prioritized:
        return PrioritizedReplayBuffer(
            capacity, alpha=alpha, beta=beta, n_steps=n_steps, gamma=gamma, generator=seed
        )
    return ReplayBuffer(capacity, n_steps=n_steps, gamma=gamma, generator=seed)


def updates_due(frames: int, updates: int, *, learning_starts: int, utd_ratio: float) -> int:
    """Gradient steps to take now so that ``utd_ratio`` steps were taken per env step since
    ``learning_starts``: ``floor(utd_ratio * (frames - learning_starts + 1)) - updates``.

    Stateless (it reads the two counters), so a resumed run keeps the ratio. ``utd_ratio`` may
    be below 1 (Tianshou's ``update_per_step=0.1``: one step per 10 env steps).
    """
    if utd_ratio <= 0:
        raise ValueError(f"utd_ratio must be > 0, got {utd_ratio}")
    if frames < learning_starts:
        return 0
    # The small epsilon keeps e.g. 0.1 * 30 = 2.9999999999999996 from losing a step.
    return max(math.floor(utd_ratio * (frames - learning_starts + 1) + 1e-9) - updates, 0)


def optimizer_step(
    loss: torch.Tensor,
    *optimizers: torch.optim.Optimizer,
    max_grad_norm: float | None = None,
    parameters: Iterable[torch.Tensor] | None = None,
) -> torch.Tensor | None:
    """``zero_grad -> backward -> (clip) -> step`` on every optimiser; returns the grad norm.

    The losses route their terms to disjoint parameter groups (SAC's ``loss_actor`` reaches the
    actor only, and so on), so one backward of the sum updates every network at once.
    ``parameters`` (default: those of the optimisers) are clipped when ``max_grad_norm`` is set.
    """
    for optimizer in optimizers:
        optimizer.zero_grad(set_to_none=True)
    loss.backward()
    norm = None
    if max_grad_norm is not None:
        if parameters is None:
            parameters = [p for o in optimizers for g in o.param_groups for p in g["params"]]
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    for optimizer in optimizers:
        optimizer.step()
    return norm


def episode_metrics(episodes: TensorDictBase) -> dict[str, float]:
    """Mean return and length of the episodes a collector batch ended (empty if none did)."""
    if len(episodes) == 0:
        return {}
    return {
        "return_mean": float(episodes[keys.EPISODE_RETURN].mean()),
        "length_mean": float(episodes[keys.EPISODE_LENGTH].float().mean()),
        "episodes": float(len(episodes)),
    }


def evaluate_and_log(
    env: VecEnv,
    policy: Any,
    logger: Logger,
    step: int,
    *,
    n_episodes: int,
    seed: int | None = None,
) -> dict[str, float]:
    """Deterministic evaluation of ``policy`` for ``n_episodes``, logged to the ``"eval"`` group.

    The policy runs under ``InteractionType.DETERMINISTIC``, so exploration modules
    (``EpsilonGreedy``, ``AdditiveGaussianNoise``) are inactive and stochastic actors act by their
    mode. ``seed`` re-seeds the evaluation env (same start states at every evaluation).
    """
    metrics = evaluate(env, policy, n_episodes, deterministic=True, seed=seed)
    logger.log("eval", step, metrics)
    return metrics


def save_run(run_dir: str | os.PathLike, buffer: ReplayBuffer, **objects: Any) -> Path:
    """Save the replay buffer to ``run_dir/buffer`` and ``objects`` (modules, optimisers,
    counters) with the RNG states to ``run_dir/checkpoint.pt``.

    The buffer goes to a temporary folder that replaces the old one, then the checkpoint is
    written atomically, so an interrupted save leaves a loadable pair (at worst a buffer a few
    steps newer than the counters).
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp, final = run_dir / (BUFFER_DIR + ".tmp"), run_dir / BUFFER_DIR
    shutil.rmtree(tmp, ignore_errors=True)
    buffer.save(tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return save_checkpoint(run_dir / CHECKPOINT_FILE, **objects)


def has_run(run_dir: str | os.PathLike) -> bool:
    """Whether ``run_dir`` holds a checkpoint that :func:`load_run` can resume from."""
    run_dir = Path(run_dir)
    return (run_dir / CHECKPOINT_FILE).is_file() and (run_dir / BUFFER_DIR).is_dir()


def load_run(run_dir: str | os.PathLike, buffer: ReplayBuffer, **objects: Any) -> dict[str, Any]:
    """Restore what :func:`save_run` wrote: ``objects`` get ``load_state_dict``, the buffer its
    data, cursor and sampler state, Python/NumPy/torch their RNG states. Returns the payload
    (plain counters such as ``frames`` are read from it)."""
    run_dir = Path(run_dir)
    payload = load_checkpoint(run_dir / CHECKPOINT_FILE, **objects)
    buffer.load(run_dir / BUFFER_DIR)
    truncate_streams(buffer)
    return payload


def truncate_streams(buffer: ReplayBuffer) -> None:
    """Mark the newest stored step of every stream ``("next", "truncated")`` and done.

    After a resume the collector starts new episodes, so the next step written to a stream does
    not follow the newest stored one. The stored transition itself stays valid (its real next
    observation was stored) and bootstraps like any truncation; the flag stops n-step sums and
    slices from reaching across the seam (DESIGN.md, "Episode ends").
    """
    if len(buffer) == 0:
        return
    storage = buffer.storage  # [length, streams] views of the stored tensors
    newest = (buffer.state_dict()["cursor"] - 1) % storage.batch_size[0]
    for key in (keys.NEXT_TRUNCATED, keys.NEXT_DONE):
        flag = storage.get(key, None)
        if flag is not None:
            flag[newest] = True
