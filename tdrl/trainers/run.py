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
    save_checkpoint(path, collector=collector.state_dict(), counters=dict(counters), **objects)


def resume_run(path: Path, collector: Collector, **objects: Any) -> dict[str, Any]:
    """Load :func:`save_run`'s checkpoint into fresh objects; returns the counters.

    CSV rows logged after the checkpoint (by a run killed later) are dropped, so the logs of a
    resumed run read like those of an uninterrupted one.
    """
    payload = load_checkpoint(path, **objects)
    exact = collector.load_state_dict(payload["collector"])
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


class Run:
    """The bookkeeping of one recipe run, so each recipe's loop shows only the algorithm.

    Holds the run folder, the logger, the progress bar, the counters (batches, run time, next
    evaluation step) and the objects to checkpoint. After every batch's updates the recipe calls
    :meth:`end_batch`, which logs a ``train`` row (every ``log_every`` batches), evaluates when
    due (deterministic, ``eval_episodes`` on ``eval_env``; always after the last batch), writes a
    checkpoint when due (every ``checkpoint_every`` batches and after the last batch) and says
    whether to stop. The run time counts evaluation time.

    Args:
        log_dir: run folder (CSV, TensorBoard, ``checkpoint.pt``, ``curve.png``).
        state: name -> object with ``state_dict`` (modules, optimizers, schedulers).
        eval_env: evaluation env (not the collector's).
        policy: the policy to evaluate.
        title: learning-curve title and console prefix.
        total_frames: env steps of the whole run.
        eval_every: env steps between evaluations.
        eval_episodes: episodes per evaluation.
        eval_seed: reset seed of every evaluation (the same states every time).
        checkpoint_every: batches between checkpoints.
        log_every: batches between ``train`` rows.
        stop_after_frames: end this process after this many env steps (0: never).
        stop_at_return: end once an evaluation's mean return reaches this.
        tensorboard: also write TensorBoard event files.
        progress: show a progress bar.
    """

    def __init__(
        self,
        log_dir: Path,
        state: Mapping[str, Any],
        *,
        eval_env: VecEnv,
        policy: Callable[[TensorDictBase], TensorDictBase],
        title: str,
        total_frames: int,
        eval_every: int,
        eval_episodes: int = 10,
        eval_seed: int = 0,
        checkpoint_every: int = 10,
        log_every: int = 1,
        stop_after_frames: int = 0,
        stop_at_return: float = float("inf"),
        tensorboard: bool = True,
        progress: bool = True,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.state = dict(state)
        self.eval_env, self.policy, self.title = eval_env, policy, title
        self.total_frames, self.eval_every, self.eval_episodes = (
            total_frames,
            eval_every,
            eval_episodes,
        )
        self.eval_seed, self.checkpoint_every, self.log_every = (
            eval_seed,
            checkpoint_every,
            log_every,
        )
        self.stop_after_frames, self.stop_at_return = stop_after_frames, stop_at_return
        self.tensorboard, self.progress = tensorboard, progress
        self.counters: dict[str, Any] = {"batches": 0, "time": 0.0, "next_eval": eval_every}
        self.last_eval: dict[str, float] = {}
        self.metrics: dict[str, float] = {}
        self.frames = 0
        self._logger: Logger | None = None
        self._bar: tqdm | None = None
        self._start = 0.0

    @property
    def checkpoint_path(self) -> Path:
        return self.log_dir / CHECKPOINT

    def start(self, collector: Collector, *, resume: bool = False) -> None:
        """Resume from the folder's checkpoint (when ``resume`` and one exists); start clocks."""
        if resume and self.checkpoint_path.exists():
            self.counters = resume_run(self.checkpoint_path, collector, **self.state)
        self.frames = collector.frames
        self._logger = Logger(self.log_dir, tensorboard=self.tensorboard)
        self._bar = progress_bar(self.total_frames, initial=self.frames, disable=not self.progress)
        self._start = time.perf_counter() - self.counters["time"]

    def end_batch(self, collector: Collector, metrics: Mapping[str, float]) -> bool:
        """Log, evaluate and checkpoint after a batch's updates; returns True to stop."""
        assert self._logger is not None and self._bar is not None, "call start() first"
        counters, frames = self.counters, collector.frames
        self._bar.update(frames - self.frames)
        self.frames, self.metrics = frames, dict(metrics)
        counters["batches"] += 1
        counters["time"] = time.perf_counter() - self._start
        if counters["batches"] % self.log_every == 0:
            row = {**metrics, **episode_metrics(collector), "time": counters["time"]}
            self._logger.log("train", frames, row)
        done = frames >= self.total_frames or 0 < self.stop_after_frames <= frames
        if frames >= counters["next_eval"] or done:
            self.last_eval = evaluate_and_log(
                self._logger, self.eval_env, self.policy, step=frames,
                n_episodes=self.eval_episodes, seed=self.eval_seed, elapsed=counters["time"],
            )  # fmt: skip
            counters["next_eval"] = (frames // self.eval_every + 1) * self.eval_every
            done = done or self.last_eval["return_mean"] >= self.stop_at_return
            self._bar.set_postfix(eval_return=f"{self.last_eval['return_mean']:.1f}")
        counters["time"] = time.perf_counter() - self._start
        if counters["batches"] % self.checkpoint_every == 0 or done:
            save_run(self.checkpoint_path, collector, counters, **self.state)
        return done

    def finish(self) -> dict[str, float]:
        """Close the logs, plot ``curve.png``; returns the last evaluation (``eval_*``), the
        last update's metrics, ``frames`` and ``time``."""
        if self._bar is not None:
            self._bar.close()
        if self._logger is not None:
            self._logger.close()
        png = finish_run(self.log_dir, self.title)
        result = {"frames": float(self.frames), "time": float(self.counters["time"])}
        result.update(self.metrics)
        result.update({f"eval_{k}": v for k, v in self.last_eval.items()})
        ret = self.last_eval.get("return_mean", float("nan"))
        std = self.last_eval.get("return_std", float("nan"))
        print(
            f"{self.title}: {self.frames} steps in {self.counters['time']:.0f} s, eval return "
            f"{ret:.1f} +- {std:.1f}; logs and {png.name} in {self.log_dir}"
        )
        return result
