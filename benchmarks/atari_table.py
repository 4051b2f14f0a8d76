"""The Atari table: PPO on Breakout at a CPU budget, tdrl (envpool) beside SB3's PPO.

The cells, their JSON lines (``docs/benchmarks/atari_table.jsonl``), ``--jobs``, the subprocess
per cell with one thread, the page and its curves are ``benchmarks/mujoco_table.py``'s; this file
adds only its :class:`~mujoco_table.Suite`.

Settings, both libraries: the Atari PPO of CleanRL's ``ppo_atari_envpool.py`` and
rl-baselines3-zoo's ``hyperparams/ppo.yml`` ("atari"), which agree on 8 envs x 128 steps, 4 epochs
of minibatch 256, learning rate 2.5e-4 decayed linearly to 0, clip 0.1, vf_coef 0.5, ent_coef
0.01, gamma 0.99, GAE lambda 0.95, gradient norm 0.5, advantages normalized, Adam eps 1e-5; the
Nature CNN shared by both heads; 4 stacked 84x84 grayscale frames, a lost life ends a training
episode, rewards clipped to [-1, 1] for the learner. Where they part: CleanRL keeps the clip range
fixed (tdrl here), the zoo decays it linearly (SB3 here).

- tdrl: ``recipes/ppo.py`` on envpool's Breakout-v5 (``--env-backend envpool``; the game as
  ``tdrl/Breakout-v5`` makes it: ALE v5, sticky actions 0.25, up to 30 no-ops, max-pooled frame
  skip 4, FIRE at reset).
- SB3: ``PPO("CnnPolicy")`` on ``tdrl/Breakout-v5`` through gymnasium (the same preprocessing,
  frame stack and episodic life as make kwargs of the env, rewards clipped to their sign by a
  wrapper), SB3's NatureCNN and init.

Evaluation, the same for both: 10 episodes of whole games (no life loss ends them, rewards
unclipped) of the sampling policy, as rl-baselines3-zoo and CleanRL evaluate on Atari (a greedy
Breakout policy may never press FIRE after a lost life and wait out the 108k-frame limit), on 5
separate gymnasium envs reset with seed + 10,000, every 100k env steps and at the end.

Budget: 500k env steps (2M frames), a CPU-sized run: about an hour a cell on one thread.

    python benchmarks/atari_table.py --seeds 0 --jobs 2    # tdrl and SB3, seed 0
    python benchmarks/atari_table.py --render
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # when a test loads this file
import mujoco_table as mt  # noqa: E402

TASKS = ("tdrl/Breakout-v5",)
STEPS, EVAL_EVERY = 500_000, 100_000
PACKAGES = ("gymnasium", "ale_py", "envpool")

# CleanRL's ppo_atari_envpool.py as fields of recipes/ppo.py's Config.
CLEANRL = (
    ("env_backend", "envpool"), ("num_envs", 8), ("frame_stack", 4),
    ("terminal_on_life_loss", True), ("clip_rewards", True), ("frames_per_batch", 1024),
    ("epochs", 4), ("minibatch_size", 256), ("lr", 2.5e-4), ("lr_decay", True),
    ("clip_epsilon", 0.1), ("critic_coeff", 0.5), ("entropy_coeff", 0.01), ("gamma", 0.99),
    ("lmbda", 0.95), ("max_grad_norm", 0.5), ("normalize_advantage", True),
    ("scale_rewards", False), ("adam_eps", 1e-5), ("eval_every", EVAL_EVERY),
    ("eval_deterministic", False), ("checkpoint_every", 0),
)  # fmt: skip
ALGOS = {"ppo": mt.Algo("ppo", CLEANRL, STEPS, "PPO")}


def sb3_settings(algorithm: str, task: str) -> dict[str, Any] | None:
    """SB3 PPO's arguments: the zoo's Atari ones (``learning_rate`` and ``clip_range`` decay
    linearly from these)."""
    if algorithm != "ppo":
        return None
    return {
        "n_envs": 8, "n_steps": 128, "n_epochs": 4, "batch_size": 256, "learning_rate": 2.5e-4,
        "clip_range": 0.1, "vf_coef": 0.5, "ent_coef": 0.01, "gamma": 0.99, "gae_lambda": 0.95,
        "max_grad_norm": 0.5,
    }  # fmt: skip


def _sign_rewards(env: Any) -> Any:
    """The learner's rewards clipped to their sign (the zoo's ``AtariWrapper(clip_reward=True)``);
    the Monitor inside still records the game's returns."""
    import gymnasium as gym
    import numpy as np

    return gym.wrappers.TransformReward(env, lambda reward: float(np.sign(reward)))


def run_sb3(cell: mt.Cell, folder: Path) -> dict[str, Any]:
    """SB3's PPO with the zoo's Atari settings on the same game, evaluated like the recipe."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    import tdrl.envs  # noqa: F401  # registers tdrl/<Game>-v5
    from tdrl.trainers.run import EVAL_SEED_OFFSET

    kwargs = sb3_settings(cell.algorithm, cell.task)
    if kwargs is None:
        raise ValueError(f"SB3 has no {cell.algorithm} here")
    start = time.perf_counter()
    stack = {"frame_stack": 4}
    env = make_vec_env(
        cell.task, n_envs=kwargs["n_envs"], seed=cell.seed, wrapper_class=_sign_rewards,
        env_kwargs=stack | {"terminal_on_life_loss": True},
    )  # fmt: skip
    n_eval = min(mt.EVAL_ENVS, cell.eval_episodes)
    eval_env = make_vec_env(
        cell.task, n_envs=n_eval, seed=cell.seed + EVAL_SEED_OFFSET, env_kwargs=stack
    )
    arguments = mt.sb3_ppo_decayed(kwargs)
    model = PPO("CnnPolicy", env, seed=cell.seed, device="cpu", verbose=0, **arguments)
    settings = {
        "source": "rl-baselines3-zoo hyperparams/ppo.yml atari (lin_2.5e-4, lin_0.1)",
        "hyperparameters": kwargs,
        "policy": "CnnPolicy: NatureCNN features (shared), 4 stacked frames",
        "policy_parameters": sum(p.numel() for p in model.policy.parameters()),
        "evaluation": "sampled actions",
    }
    return mt.train_sb3(
        cell, model, (env, eval_env), start, settings, PACKAGES, deterministic=False
    )


HEADER = """\
# Atari benchmark table

Written by `python benchmarks/atari_table.py --render` from `atari_table.jsonl` (one line per
finished cell). PPO on Breakout at a CPU budget, 500k env steps (2M frames). Both libraries: the
Atari PPO of CleanRL's `ppo_atari_envpool.py` and rl-baselines3-zoo (8 envs x 128 steps, 4 epochs
of minibatch 256, lr 2.5e-4 decayed linearly, clip 0.1, vf_coef 0.5, ent_coef 0.01, gradient norm
0.5, Adam eps 1e-5, advantages normalized), the Nature CNN under both heads, 4 stacked 84x84
frames, a lost life ends a training episode, rewards clipped for the learner. tdrl:
`recipes/ppo.py` on envpool's Breakout-v5 (CleanRL's fixed clip); SB3: `PPO("CnnPolicy")` on
the same game through gymnasium (`tdrl/Breakout-v5`: ALE v5, sticky actions 0.25, the DQN
preprocessing), the zoo's clip decayed linearly. Evaluation, both: 10 episodes of whole games
(unclipped) of the sampling policy (the zoo's and CleanRL's Atari evaluation) on 5 separate
gymnasium envs every 100k env steps and at the end; one torch thread per run.

- final: the last evaluation's mean return, mean ± sample std over seeds; best: each seed's
  max over its evaluations, mean ± std over seeds; wall: mean seconds per run (envs, training
  and evaluations); ratios: tdrl mean / SB3 mean over the seeds both ran.
- peak: the max over evaluation steps of the mean over seeds, ± the population std over seeds
  at that step, from tdrl's curves.
"""

ATARI = mt.Suite(
    "atari", __file__, ALGOS, TASKS, sb3_settings, run_sb3, HEADER, packages=PACKAGES,
    evaluation="Sampled-action",
)  # fmt: skip

if __name__ == "__main__":
    sys.exit(mt.main(suite=ATARI))
