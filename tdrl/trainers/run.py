"""Small pieces every recipe's loop uses: seeding, the run folder, progress, evaluation rows,
resumable checkpoints (modules + optimizers + RNG + collector + envs) and the final report."""

from __future__ import annotations

import csv
import os
import random
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tqdm import tqdm

from tdrl.collectors import Collector, evaluate
from tdrl.envs import VecEnv
from tdrl.trainers.checkpoint import load_checkpoint, save_checkpoint
from tdrl.trainers.logger import Logger, read_csv
from tdrl.trainers.plotting import plot_learning_curve
from tdrl.trainers.resume import collector_state, load_collector_state

CHECKPOINT = "checkpoint.pt"


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (networks' init, action sampling, minibatch shuffles)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run_dir(log_dir: str, algo: str, env_id: str, seed: int) -> Path:
    """``log_dir`` if given, else ``runs/<algo>/<env_id>/seed<seed>``."""
    return Path(log_dir) if log_dir else Path("runs") / algo / env_id / f"seed{seed}"


def progress_bar(total: int, *, initial: int = 0, disable: bool = False, desc: str = "") -> tqdm:
    """A tqdm bar counting env steps."""
    return tqdm(total=total, initial=initial, unit="step", disable=disable, desc=desc, leave=False)


def episode_metrics(collector: Collector) -> dict[str, float]:
    """Mean return and length of the training episodes that ended in the last batch (if any)."""
    episodes = collector.episodes
    if len(episodes) == 0:
        return {}
    return {
        "episode_return": float(episodes["episode_return"].mean()),
        "episode_length": float(episodes["episode_length"].float().mean()),
    }


def evaluate_and_log(
    logger: Logger,
    env: VecEnv,
    policy: Callable[[TensorDictBase], TensorDictBase],
    *,
    step: int,
    n_episodes: int,
    seed: int,
    elapsed: float,
) -> dict[str, float]:
    """Deterministic evaluation on ``env`` (reset with ``seed`` every time, so two evaluations
    differ only by the policy), logged to ``eval.csv`` with its own duration and the run time."""
    start = time.perf_counter()
    result = evaluate(env, policy, n_episodes, deterministic=True, seed=seed)
    result["eval_time"] = time.perf_counter() - start
    result["time"] = elapsed + result["eval_time"]
    logger.log("eval", step, result)
    return result


def save_run(path: Path, collector: Collector, counters: Mapping[str, Any], **objects: Any) -> None:
    """Checkpoint at a batch boundary: ``objects`` (modules, optimizers, schedulers by their
    ``state_dict``), ``counters``, the RNG states, and the collector's and envs' state."""
    save_checkpoint(path, collector=collector_state(collector), counters=dict(counters), **objects)


def resume_run(path: Path, collector: Collector, **objects: Any) -> dict[str, Any]:
    """Load :func:`save_run`'s checkpoint into fresh objects; returns the counters.

    CSV rows logged after the checkpoint (by a run killed later) are dropped, so the logs of a
    resumed run read like those of an uninterrupted one.
    """
    payload = load_checkpoint(path, **objects)
    exact = load_collector_state(collector, payload["collector"])
    if not exact:
        print("resume: async envs were re-seeded; the run continues, not bit-identically")
    drop_rows_after(path.parent, collector.frames)
    return payload["counters"]


def drop_rows_after(log_dir: str | os.PathLike, step: int) -> None:
    """Remove rows with ``step`` > ``step`` from every CSV log in ``log_dir``."""
    for path in Path(log_dir).glob("*.csv"):
        with path.open(newline="") as f:
            header = next(csv.reader(f), None)
        if not header:
            continue
        rows = [r for r in read_csv(path) if r.get("step", 0.0) <= step]
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=header, restval="")
            writer.writeheader()
            for row in rows:
                writer.writerow({k: repr(v) for k, v in row.items()})


def finish_run(log_dir: Path, title: str) -> Path:
    """The learning-curve PNG (``curve.png``) from ``eval.csv``."""
    return plot_learning_curve(log_dir / "eval.csv", log_dir / "curve.png", title=title)
