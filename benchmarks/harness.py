"""What the learning benchmarks (``learning.py``, ``mujoco_table.py``) share: one run in a fresh
Python, and an SB3 model trained with the same periodic evaluation as tdrl's recipes.

The scripts import it as a sibling module (``benchmarks/`` is on ``sys.path`` when one runs as a
script, and each script puts it there when a test loads it from its file).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_child(
    script: str | Path,
    payload: dict[str, Any],
    folder: Path,
    result: str,
    *,
    cwd: Path | None = None,
) -> dict[str, Any]:
    """Run ``python script --child <payload as JSON>`` with one OMP/MKL thread and the repository
    on ``PYTHONPATH``, its output in ``folder/log.txt``; returns the JSON that the child wrote
    to ``folder/result``. A failed child raises ``RuntimeError`` with the end of its log."""
    env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, str(Path(script).resolve()), "--child", json.dumps(payload)]
    with (folder / "log.txt").open("w") as log:
        proc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    if proc.returncode != 0:
        end = (folder / "log.txt").read_text()[-3000:]
        raise RuntimeError(f"exit code {proc.returncode}; end of {folder / 'log.txt'}:\n{end}")
    return json.loads((folder / result).read_text())


def learn_sb3(
    model: Any,
    eval_env: Any,
    *,
    steps: int,
    eval_every: int,
    episodes: int,
    eval_seed: int,
    start: float,
    on_eval: Callable[[dict[str, list[float]]], None] | None = None,
    deterministic: bool = True,
) -> dict[str, list[float]]:
    """``model.learn(steps)`` with an evaluation (``deterministic``, else sampled actions) of
    ``episodes`` episodes on
    ``eval_env`` (reseeded with ``eval_seed`` every time, reading the training env's
    VecNormalize statistics, as SB3's EvalCallback does) at the first step that reaches each
    multiple of ``eval_every`` before the budget (0: none), and one after ``learn``.

    Returns:
        The curve: ``"steps"``, ``"returns"``, ``"stds"`` and ``"wall_s"`` (seconds since
        ``start``, a ``time.perf_counter()``), one entry an evaluation; ``on_eval(curve)`` runs
        after each.
    """
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import sync_envs_normalization

    curve: dict[str, list[float]] = {"steps": [], "returns": [], "stds": [], "wall_s": []}

    def evaluate(step: int) -> None:
        sync_envs_normalization(model.get_env(), eval_env)
        eval_env.seed(eval_seed)  # the same start states at every evaluation
        mean, std = evaluate_policy(model, eval_env, episodes, deterministic=deterministic)
        for name, value in zip(curve, (step, mean, std, time.perf_counter() - start), strict=True):
            curve[name].append(float(value))
        if on_eval is not None:
            on_eval(curve)

    class PeriodicEvaluation(BaseCallback):
        next_eval = eval_every if eval_every > 0 else math.inf

        def _on_step(self) -> bool:
            if self.next_eval <= self.num_timesteps < steps:
                evaluate(self.num_timesteps)
                self.next_eval = (self.num_timesteps // eval_every + 1) * eval_every
            return True

    model.learn(steps, callback=PeriodicEvaluation())
    evaluate(model.num_timesteps)
    return curve
