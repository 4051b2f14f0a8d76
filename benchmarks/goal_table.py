"""The goal-conditioned table: DQN with and without hindsight replay on bit flipping, tdrl beside
SB3's DQN and ``HerReplayBuffer``.

The cells, their JSON lines (``docs/benchmarks/goal_table.jsonl``), ``--jobs``, the subprocess
per cell with one thread, the page and its curves are ``benchmarks/mujoco_table.py``'s; this file
adds only its :class:`~mujoco_table.Suite`.

Settings. The HER paper's test (Andrychowicz et al. 2017, arXiv 1707.01495, sec. 3.1: n bits, a
reward of -1 until the state equals the goal) on ``tdrl/BitFlipping<n>-v0`` (an episode ends at
the goal or after n steps). Both libraries run rl-baselines3-zoo's tuned CartPole-v1 DQN, which
is ``recipes/dqn.py``'s default (lr 2.3e-3, batch 64, 256x256 MLP, 100k buffer, 1k random steps,
epsilon 1 -> 0.04 over 8k steps, 128 gradient steps per 256 env steps, a target copy after each
such burst, the Huber loss, gradient norm 10), with the HER paper's gamma 0.98 and plain (not
double) DQN, as SB3's is. The network reads the dict observation's entries concatenated (tdrl:
``dict_inputs``; SB3: ``MultiInputPolicy``, whose extractor flattens and concatenates them).
``dqn_her``: hindsight replay with the ``future`` strategy and 4 hindsight goals per real one
(the paper's k = 4; SB3's defaults). ``sac_her`` (``recipes/sac.py --her future`` beside SB3's
``SAC`` with ``HerReplayBuffer``) runs the zoo's SAC FetchReach entry on gymnasium-robotics'
PointMaze_UMaze-v3 (Fetch does not load with mujoco 4): lr 1e-3 for all parts, gamma 0.95,
batch 256, 1k random steps. Nothing was tuned on these cells.

Where the two differ: SB3 relabels the reward but keeps the stored done flag, so a relabelled
transition whose goal is reached is not terminal there; tdrl's buffer takes the env's
``compute_terminated`` (the episode ends at the goal) and makes it terminal. SB3 samples only
transitions of finished episodes; tdrl samples every stored one, relabelling an unfinished
episode's from its steps so far.

Evaluation (mujoco_table's protocol): 10 greedy episodes on separate envs reset with seed +
10,000; a return above -n means the goal was reached.

    python benchmarks/goal_table.py --jobs 2
    python benchmarks/goal_table.py --algos sac_her --tasks gymnasium_robotics:PointMaze_UMaze-v3
    python benchmarks/goal_table.py --render
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # when a test loads this file
import mujoco_table as mt  # noqa: E402

TASKS = ("tdrl/BitFlipping15-v0", "tdrl/BitFlipping25-v0")
STEPS, EVAL_EVERY, EPS_FRAMES = 50_000, 5_000, 8_000
PACKAGES = ("gymnasium",)

TABLE = (
    ("gamma", 0.98), ("double_dqn", False), ("eval_every", EVAL_EVERY), ("checkpoint_every", 0),
)  # fmt: skip
HER = (("her", "future"), ("her_goals", 4))
# SAC + HER on a gymnasium-robotics goal env: rl-baselines3-zoo's SAC FetchReach entry (Fetch does
# not load with mujoco 4: a joint-type assertion in gymnasium-robotics 1.4.2; PointMaze does):
# lr 1e-3 (alpha's too: SB3's ent_coef "auto" shares it), gamma 0.95, batch 256, 1M buffer, 1k
# random steps, HER future with k = 4; 256x256 networks and 2 critics (both libraries' defaults).
POINT_MAZE = "gymnasium_robotics:PointMaze_UMaze-v3"
SAC_HER = (
    ("gamma", 0.95), ("alpha_lr", 1e-3), ("init_random_frames", 1000), *HER,
    ("eval_every", EVAL_EVERY), ("checkpoint_every", 0),
)  # fmt: skip
ALGOS = {
    "dqn": mt.Algo("dqn", TABLE, STEPS, "DQN"),
    "dqn_her": mt.Algo("dqn", (*TABLE, *HER), STEPS, "DQN"),
    "sac_her": mt.Algo("sac", SAC_HER, STEPS, "SAC"),
}


def sb3_settings(algorithm: str, task: str) -> dict[str, Any] | None:
    """SB3 DQN's arguments: the zoo's CartPole-v1 entry with gamma 0.98 (the epsilon decay,
    which depends on the budget, is added per cell), and HER's buffer for ``dqn_her``."""
    if algorithm not in ALGOS:
        return None
    if algorithm == "sac_her":
        return {
            "learning_rate": 1e-3, "batch_size": 256, "buffer_size": 1_000_000,
            "learning_starts": 1000, "gamma": 0.95, "ent_coef": "auto",
            "replay_buffer_kwargs": {"n_sampled_goal": 4, "goal_selection_strategy": "future"},
        }  # fmt: skip
    kwargs: dict[str, Any] = {
        "learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 100_000,
        "learning_starts": 1000, "gamma": 0.98, "target_update_interval": 10,
        "train_freq": 256, "gradient_steps": 128, "exploration_final_eps": 0.04,
        "policy_kwargs": {"net_arch": [256, 256]},
    }  # fmt: skip
    if algorithm == "dqn_her":
        kwargs["replay_buffer_kwargs"] = {"n_sampled_goal": 4, "goal_selection_strategy": "future"}
    return kwargs


def sb3_cell_settings(cell: mt.Cell) -> dict[str, Any] | None:
    """:func:`sb3_settings` with epsilon's decay over ``EPS_FRAMES`` as a fraction of the budget."""
    kwargs = sb3_settings(cell.algorithm, cell.task)
    if kwargs is not None and cell.algorithm.startswith("dqn"):
        kwargs["exploration_fraction"] = EPS_FRAMES / cell.steps
    return kwargs


def run_sb3(cell: mt.Cell, folder: Path) -> dict[str, Any]:
    """SB3's DQN on the dict observation (``MultiInputPolicy``), with ``HerReplayBuffer`` for
    ``dqn_her``, evaluated like the recipe."""
    from stable_baselines3 import DQN, SAC, HerReplayBuffer

    import tdrl.envs  # noqa: F401  # registers tdrl/BitFlipping<n>-v0

    kwargs = sb3_cell_settings(cell)
    if kwargs is None:
        raise ValueError(f"SB3 has no {cell.algorithm}")
    start = time.perf_counter()
    envs = mt.sb3_envs(cell)
    her = {"replay_buffer_class": HerReplayBuffer} if "replay_buffer_kwargs" in kwargs else {}
    sac = cell.algorithm == "sac_her"
    model = (SAC if sac else DQN)("MultiInputPolicy", envs[0], seed=cell.seed, device="cpu",
                                  verbose=0, **her, **kwargs)  # fmt: skip
    source = "sac.yml FetchReach" if sac else "dqn.yml CartPole-v1, gamma 0.98 (HER paper)"
    settings = {
        "class": mt.sb3_class(model) + (" + HER" if her else ""),
        "source": f"rl-baselines3-zoo hyperparams/{source}",
        "hyperparameters": kwargs,
        "policy": "MultiInputPolicy",
    }
    return mt.train_sb3(cell, model, envs, start, settings, PACKAGES)


HEADER = (
    """\
# Goal-conditioned benchmark table

Written by `python benchmarks/goal_table.py --render` from `goal_table.jsonl` (one line per
finished cell). The HER paper's bit-flipping test (n bits, reward -1 until the state equals the
goal, an episode ends at the goal or after n steps): a return above -n reached the goal, about
-n/2 is optimal. Both libraries: rl-baselines3-zoo's CartPole-v1 DQN (lr 2.3e-3, batch 64,
256x256 MLP, 100k buffer, 1k random steps, epsilon 1 -> 0.04 over 8k steps, 128 gradient steps per
256 env steps), gamma 0.98, plain DQN, the dict observation's entries concatenated. `dqn_her`:
hindsight replay, strategy `future`, 4 hindsight goals per real one. tdrl: `recipes/dqn.py
--her future`; SB3: `DQN("MultiInputPolicy")` with `HerReplayBuffer`. Evaluation: 10 greedy
episodes on separate envs; one torch thread per run.

"""
    + mt.LEGEND
)

GOALS = mt.Suite(
    "goal", __file__, ALGOS, TASKS, sb3_settings, run_sb3, HEADER, packages=PACKAGES,
    sb3_cell_settings=sb3_cell_settings,
)  # fmt: skip

if __name__ == "__main__":
    sys.exit(mt.main(suite=GOALS))
