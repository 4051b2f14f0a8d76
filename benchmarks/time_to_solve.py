"""Seconds until a policy solves a task: tdrl against Stable-Baselines3 (Tianshou to be added).

Protocol, the same for every library: wall-clock seconds from building the agent until the mean
return of 10 deterministic evaluation episodes (a separate env, reset with a fixed seed) reaches
the threshold (CartPole-v1 >= 475, Pendulum-v1 >= -250); an evaluation at least every 2,000 env
steps; evaluation time counts; median over ``--seeds`` seeds (default 5); a run that has not
solved by ``--max-steps`` counts as unsolved (inf). One thread per library
(``torch.set_num_threads(1)``); absolute times are noise on a shared machine, ratios within one
run are the figure.

Two comparisons per task:
  * tuned: each library with its own tuned settings (tdrl: the PPO recipe's defaults with batches
    of at most 2,000 steps so evaluations can happen every 2,000 steps; SB3: rl-baselines3-zoo's
    hyperparameters);
  * same settings: tdrl with SB3's zoo hyperparameters against SB3 (library overhead alone).

Usage: ``python benchmarks/time_to_solve.py [--tasks CartPole-v1] [--seeds 3]``. Algorithms
(DQN, SAC) are added as more entries of ``RUNNERS``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from tempfile import TemporaryDirectory

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recipes import ppo  # noqa: E402

THRESHOLD = {"CartPole-v1": 475.0, "Pendulum-v1": -250.0}
EVAL_EVERY, EVAL_EPISODES = 2_000, 10

# rl-baselines3-zoo hyperparams/ppo.yml (the SB3 "tuned" settings). ``n_steps`` is per env.
SB3_ZOO = {
    "CartPole-v1": dict(
        n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
        ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, lr_decay=True,
    ),
    # Pendulum: the zoo's settings without gSDE (use_sde), which tdrl's Gaussian actor lacks.
    "Pendulum-v1": dict(
        n_envs=4, n_steps=1024, batch_size=64, gae_lambda=0.95, gamma=0.9, n_epochs=10,
        ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, lr_decay=False,
    ),
}  # fmt: skip
# tdrl's recipe defaults, cut to batches of <= 2,000 steps (the evaluation protocol).
TDRL_TUNED = {
    "CartPole-v1": dict(num_envs=8, frames_per_batch=1024, normalize_observations=False),
    "Pendulum-v1": dict(num_envs=4, frames_per_batch=1024, gamma=0.9, lr=1e-3, lr_decay=False),
}


def tdrl_ppo(task: str, seed: int, max_steps: int, **overrides: object) -> float:
    with TemporaryDirectory() as log_dir:
        settings: dict[str, object] = {"lr_decay": False, **overrides}
        cfg = ppo.Config(
            env_id=task, total_frames=max_steps, eval_every=EVAL_EVERY,
            eval_episodes=EVAL_EPISODES, stop_at_return=THRESHOLD[task], seed=seed,
            log_dir=log_dir, tensorboard=False, progress=False, curve=False, checkpoint_every=0,
            **settings,  # type: ignore[arg-type]
        )  # fmt: skip
        start = time.perf_counter()
        result = ppo.main(cfg)
        elapsed = time.perf_counter() - start
    return elapsed if result["eval_return_mean"] >= THRESHOLD[task] else math.inf


def tdrl_with_sb3_settings(task: str, seed: int, max_steps: int) -> float:
    zoo = SB3_ZOO[task]
    return tdrl_ppo(
        task, seed, max_steps,
        num_envs=zoo["n_envs"], frames_per_batch=zoo["n_envs"] * zoo["n_steps"],
        minibatch_size=zoo["batch_size"], lmbda=zoo["gae_lambda"], gamma=zoo["gamma"],
        epochs=zoo["n_epochs"], entropy_coeff=zoo["ent_coef"], lr=zoo["learning_rate"],
        clip_epsilon=zoo["clip_range"], critic_coeff=0.5, init_log_std=0.0,
        normalize_observations=False, lr_decay=zoo["lr_decay"],
    )  # fmt: skip


def sb3_ppo(task: str, seed: int, max_steps: int) -> float:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env as sb3_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    zoo = dict(SB3_ZOO[task])
    n_envs, lr_decay = zoo.pop("n_envs"), zoo.pop("lr_decay")
    lr = zoo.pop("learning_rate")

    class SolvedCallback(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.next_eval, self.solved = EVAL_EVERY, False

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += EVAL_EVERY
            mean, _ = evaluate_policy(self.model, eval_env, EVAL_EPISODES, deterministic=True)
            self.solved = mean >= THRESHOLD[task]
            return not self.solved

    start = time.perf_counter()
    env = sb3_vec_env(task, n_envs=n_envs, seed=seed)
    eval_env = sb3_vec_env(task, n_envs=5, seed=seed + 10_000)
    schedule = (lambda f: f * lr) if lr_decay else lr
    model = PPO("MlpPolicy", env, learning_rate=schedule, seed=seed, device="cpu", **zoo)
    callback = SolvedCallback()
    model.learn(max_steps, callback=callback)
    elapsed = time.perf_counter() - start
    return elapsed if callback.solved else math.inf


RUNNERS: dict[str, list[tuple[str, Callable[[str, int, int], float]]]] = {
    "tuned": [
        ("tdrl PPO (recipe defaults)", lambda t, s, m: tdrl_ppo(t, s, m, **TDRL_TUNED[t])),
        ("SB3 PPO (zoo)", sb3_ppo),
    ],
    "same settings": [
        ("tdrl PPO (SB3 zoo settings)", tdrl_with_sb3_settings),
        ("SB3 PPO (zoo)", sb3_ppo),
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["CartPole-v1", "Pendulum-v1"])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--max-steps", type=int, default=200_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cache: dict[tuple[str, str, int], float] = {}
    for task in args.tasks:
        for comparison, runners in RUNNERS.items():
            print(f"\n{task} ({comparison}): seconds to mean eval return >= {THRESHOLD[task]}")
            for name, runner in runners:
                times = []
                for seed in range(args.seeds):
                    key = (task, name, seed)
                    if key not in cache:  # SB3 appears in both comparisons: run it once
                        cache[key] = runner(task, seed, args.max_steps)
                    times.append(cache[key])
                shown = ", ".join(f"{t:.1f}" for t in times)
                print(f"  {name:32s} median {statistics.median(times):7.1f} s   [{shown}]")


if __name__ == "__main__":
    main()
