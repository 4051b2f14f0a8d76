"""The exploration table: PPO with and without RND's and ICM's bonuses on a sparse-reward MiniGrid
task, tdrl only (no peer runs these here).

The cells, their JSON lines (``docs/benchmarks/exploration_table.jsonl``), ``--jobs``, the
subprocess per cell with one thread, the page and its curves are ``benchmarks/mujoco_table.py``'s;
this file adds only its :class:`~mujoco_table.Suite`.

Settings. Every row is ``recipes/ppo.py`` on the agent's 7x7 view (``tdrl/MiniGrid-*``: ``[3, 7,
7]`` uint8 indices) through the MinAtar CNN under both heads:

- ``ppo``: rl-baselines3-zoo's Atari PPO structure (8 envs x 128 steps, 4 epochs of minibatch
  256, lr 2.5e-4, clip 0.2, vf_coef 0.5, ent_coef 0.01, Adam eps 1e-5, advantages normalized),
  constant learning rate and clip, no reward scaling;
- ``ppo_rnd``: the same plus RND (Burda et al. 2018) at CleanRL's coefficients
  (``ppo_rnd_envpool.py``: intrinsic 1, extrinsic 2, intrinsic gamma 0.99), its predictor on every
  sample (CleanRL's 0.25 is for 128 envs);
- ``ppo_rnd_first_visit``: ``ppo_rnd`` with the bonus kept only at an episode's first visit of
  each view (``--rnd-first-visit``, NovelD's episodic restriction, Zhang et al. 2021);
- ``ppo_rnd_first_visit_tuned``: that with intrinsic coefficient 0.1 (tuned on seeds 100-101:
  coefficient 1 first reached the goal on greedy evaluation near 1M steps on seed 100, 0.1 at
  0.8 by 750k on seed 101; no other value tried);
- ``ppo_icm``: the same plus ICM (Pathak et al. 2017: beta 0.2, intrinsic coefficient 1);
- ``ppo_icm_first_visit``: ICM paid only at an episode's first visit of each view
  (``--icm-first-visit``) at intrinsic coefficient 0.1, the value tuned for RND's first-visit
  row (not tuned for ICM);
- ``ppo_rnd_cleanrl``: CleanRL's RND settings otherwise too (lr 1e-4, gamma 0.999, 4 minibatches
  an epoch, clip 0.1, ent_coef 0.001, predictor on a quarter of each minibatch), on 8 envs.

Evaluation: 10 episodes of sampled actions on separate envs reset with seed + 10,000 (a greedy
policy can turn in place forever on a MiniGrid view it has never been rewarded from).

    python benchmarks/exploration_table.py --jobs 2
    python benchmarks/exploration_table.py --render
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # when a test loads this file
import mujoco_table as mt  # noqa: E402

TASKS = ("tdrl/MiniGrid-DoorKey-8x8-v0",)
STEPS, EVAL_EVERY = 1_000_000, 50_000
PACKAGES = ("gymnasium", "minigrid")

PPO = (
    ("num_envs", 8), ("frames_per_batch", 1024), ("epochs", 4), ("minibatch_size", 256),
    ("lr", 2.5e-4), ("lr_decay", False), ("clip_epsilon", 0.2), ("critic_coeff", 0.5),
    ("entropy_coeff", 0.01), ("gamma", 0.99), ("lmbda", 0.95), ("max_grad_norm", 0.5),
    ("normalize_advantage", True), ("scale_rewards", False), ("adam_eps", 1e-5),
    ("eval_every", EVAL_EVERY), ("eval_deterministic", False), ("checkpoint_every", 0),
)  # fmt: skip
RND = (("intrinsic", "rnd"), ("intrinsic_coeff", 1.0), ("extrinsic_coeff", 2.0))
FIRST_VISIT = (("rnd_first_visit", True),)
ICM = (("intrinsic", "icm"), ("intrinsic_coeff", 1.0), ("icm_beta", 0.2))
CLEANRL = (
    ("lr", 1e-4), ("gamma", 0.999), ("minibatch_size", 256), ("clip_epsilon", 0.1),
    ("entropy_coeff", 0.001), ("rnd_update_proportion", 0.25),
)  # fmt: skip


def _with(base: tuple[tuple[str, Any], ...], *changes: tuple[str, Any]) -> tuple[Any, ...]:
    """``base`` with ``changes`` replacing (or adding) fields, each name once."""
    names = {name for name, _ in changes}
    return (*((n, v) for n, v in base if n not in names), *changes)


ALGOS = {
    "ppo": mt.Algo("ppo", PPO, STEPS, None),
    "ppo_rnd": mt.Algo("ppo", _with(PPO, *RND), STEPS, None),
    "ppo_rnd_first_visit": mt.Algo("ppo", _with(PPO, *RND, *FIRST_VISIT), STEPS, None),
    "ppo_rnd_first_visit_tuned": mt.Algo(
        "ppo", _with(PPO, *RND, *FIRST_VISIT, ("intrinsic_coeff", 0.1)), STEPS, None
    ),
    "ppo_icm": mt.Algo("ppo", _with(PPO, *ICM), STEPS, None),
    "ppo_icm_first_visit": mt.Algo(
        "ppo", _with(PPO, *ICM, ("icm_first_visit", True), ("intrinsic_coeff", 0.1)), STEPS, None
    ),
    "ppo_rnd_cleanrl": mt.Algo("ppo", _with(PPO, *RND, *CLEANRL), STEPS, None),
}


def no_sb3(algorithm: str, task: str) -> None:
    """No SB3 row: SB3 has no exploration bonus."""
    return None


def run_sb3(cell: mt.Cell, folder: Path) -> dict[str, Any]:
    raise ValueError(f"SB3 has no {cell.algorithm}")


HEADER = (
    """\
# Exploration benchmark table

Written by `python benchmarks/exploration_table.py --render` from `exploration_table.jsonl` (one
line per finished cell). Every row is `recipes/ppo.py` on MiniGrid's 7x7 view through the MinAtar
CNN, tdrl only: `ppo` (the zoo's Atari PPO structure: 8 envs x 128 steps, 4 epochs of minibatch
256, lr 2.5e-4, clip 0.2, vf_coef 0.5, ent_coef 0.01, constant lr and clip), `ppo_rnd` (plus RND
at CleanRL's coefficients: intrinsic 1, extrinsic 2, intrinsic gamma 0.99), `ppo_rnd_first_visit`
(that RND paid only at an episode's first visit of each view: `--rnd-first-visit`, NovelD's
episodic restriction), `ppo_rnd_first_visit_tuned` (that at intrinsic coefficient 0.1, tuned on
seeds 100-101), `ppo_icm` (plus ICM,
beta 0.2), `ppo_icm_first_visit` (that ICM paid at first visits only, coefficient 0.1 as
tuned for RND's first-visit row), `ppo_rnd_cleanrl` (RND with CleanRL's `ppo_rnd_envpool.py`
settings otherwise too: lr 1e-4, gamma 0.999, clip 0.1, ent_coef 0.001, the predictor on a
quarter of each minibatch). Evaluation: 10 episodes of sampled actions on separate envs; one
torch thread per run.

"""
    + mt.LEGEND
)

EXPLORATION = mt.Suite(
    "exploration", __file__, ALGOS, TASKS, no_sb3, run_sb3, HEADER, packages=PACKAGES,
    evaluation="Sampled-action",
)  # fmt: skip

if __name__ == "__main__":
    sys.exit(mt.main(suite=EXPLORATION))
