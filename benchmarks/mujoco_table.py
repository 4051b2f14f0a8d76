"""The MuJoCo benchmark table: tdrl's recipes and Stable-Baselines3, cell by cell.

A cell is (library, algorithm, task, seed, env-step budget, evaluation protocol). Every finished
cell appends one JSON line to ``docs/benchmarks/mujoco_table.jsonl`` (``--table``): the final
deterministic evaluation (mean and std over the episodes), the best evaluation during training
(the max over the periodic evaluations), the evaluation curve (steps, returns, stds, seconds),
env steps, wall time, the git commit, the exact settings, library versions and how loaded the
machine was (``os.getloadavg()`` at the start and end, ``--jobs`` and how many cells ran at
once). A rerun skips the cells already in the file, so the table grows run by run and
survives interruptions: a line is written (flushed and fsynced) only once its cell has finished;
a cell cut short starts over next time, but a tdrl cell cut after one of its checkpoints resumes
from it (its line says so under ``resumed``). The key of a cell holds no settings, so every
run (and ``--dry-run``) compares the selected lines' recorded settings with what their cells
would run now (:func:`settings_drift`): a line run with another preset, recipe default or zoo
entry is printed as STALE and listed on the rendered page (it still counts as done until
its line is moved to the superseded file), and settings a line has no record of (fields added
since) are counted. ``--jobs N`` runs N cells at a time, each in its own subprocess with one
torch thread (OMP/MKL threads 1); cells are ordered seed by seed, library by library, so with
``--jobs 2`` tdrl and SB3 of one seed run side by side. Another table uses the same machinery
through its own :class:`Suite` (algorithms, tasks, SB3 runs, page, files):
``benchmarks/minatar_table.py`` is one; ``MUJOCO`` is this file's.

tdrl: ``recipes/<recipe>.py``'s ``main(Config(...))`` with the recipe's own defaults except the
task, the seed, the budget and the run folder (``--workdir``, outside the repository); NPG is
``recipes/trpo.py`` with ``algo="npg"``, DDPG ``td3.py`` with ``algo="ddpg"``, REDQ and DroQ
``sac.py`` with ``algo="redq"``; TD3 and DDPG run rl-zoo3's settings, as the SB3 cells
do (``SHORT_BUDGET_DETERMINISTIC``: the recipes' defaults are for 1M steps). The curve is the run's
``eval.csv``.

SB3: PPO, A2C, SAC, TD3, DDPG and sb3-contrib's TRPO with rl-baselines3-zoo 2.9.2's
hyperparameters for that algorithm and task (``ZOO``; the zoo's MuJoCo entries are v4 tasks, v2
for Reacher and the pendulums, and the same values are used on v5), including its VecNormalize
(observations and rewards) where an entry says ``normalize: true``. SB3 runs with torch's default
float mode (tdrl's recipes flush subnormals: ``RunConfig.flush_denormal``).

Evaluation, the same for both: deterministic, ``--eval-episodes`` (10) episodes on a separate env
of min(5, episodes) copies reset with seed + 10,000 every time, every ``eval_every`` env steps
(the tdrl recipe's default: 20k on-policy, 10k off-policy; SB3 evaluates at the first step that
crosses each multiple, tdrl after the first batch that does) and once at the end; SB3's
evaluation env reads the training env's normalization statistics (as SB3's EvalCallback does)
and reports raw returns. Wall time runs from building the envs to the end of the run: for
tdrl the whole ``main`` (its checkpoints, TensorBoard and CSV logs and closing curve.png
included, the recipe's defaults), for SB3 the last evaluation (SB3 logs nothing here).

    python benchmarks/mujoco_table.py --algos ppo a2c reinforce npg trpo --jobs 2   # 1M steps
    python benchmarks/mujoco_table.py --algos sac td3 ddpg --tasks Hopper-v5 HalfCheetah-v5 \
        --jobs 2                                                              # 100k steps
    python benchmarks/mujoco_table.py --algos redq --tasks Hopper-v5 --jobs 2   # REDQ: 30k

(the table's cells; without ``--tasks`` the off-policy algorithms run on all four tasks, and
SB3's A2C cells, which the table does not hold, run with the on-policy line: add
``--libraries tdrl`` to leave them out)
    python benchmarks/mujoco_table.py --tasks Hopper-v5 --seeds 0 1 2 3 4 --dry-run
    python benchmarks/mujoco_table.py --render    # mujoco_table.md and mujoco_<task>.png

Tuning runs (not cells of the table): ``--set FIELD=VALUE`` changes a recipe field on top of the
algorithm's preset, for tdrl cells written to a ``--table`` and ``--workdir`` of their own (the
line records the change under ``overrides``), e.g. on seeds the table does not use:
    python benchmarks/mujoco_table.py --algos a2c --tasks Hopper-v5 --seeds 50 51 \
        --libraries tdrl --set eval_deterministic=False --table /tmp/tune.jsonl --workdir /tmp/tune
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import datetime
import fcntl
import functools
import importlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # when a test loads this file
from harness import learn_sb3, run_child  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULT = "result.json"  # a finished cell's line, in its run folder, before it is appended
STARTED = "cell.json"  # a tdrl cell's fields and starting commit, written when its run starts
EVAL_EPISODES, EVAL_ENVS = 10, 5  # the table's protocol (tdrl's RunConfig defaults)
LIBRARIES = ("tdrl", "SB3")
# Peers that run beside tdrl's cells in tuning tables only (not the table's columns): Tianshou's
# own MuJoCo scripts, where the table quotes Tianshou's published figures.
TUNING_PEERS = ("Tianshou",)
TASKS = ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5")  # the default selection
ON_POLICY_STEPS, OFF_POLICY_STEPS, REDQ_STEPS = 1_000_000, 100_000, 30_000


@dataclasses.dataclass(frozen=True)
class Algo:
    recipe: str
    """module of recipes/ that trains it."""
    preset: tuple[tuple[str, Any], ...]
    """Config fields that pick the algorithm inside its recipe (NPG in trpo.py)."""
    steps: int
    """default env-step budget."""
    sb3: str | None
    """the SB3 (or sb3-contrib) class of the same algorithm, if there is one."""


# TD3 and DDPG at the table's 100k budget: the recipes' defaults are Tianshou's for 1M steps, whose
# 25k uniform random steps are a quarter of this budget. These cells run rl-zoo3's settings, the
# ones of the SB3 cells beside them (``_DETERMINISTIC`` below): learning from 10k steps on, lr
# 1e-3, 400x300 nets; the rest (batch 256, noise 0.1, tau, gamma, TD3's delay and target noise)
# is the same in both already, so the two libraries' cells differ only in their code. Stated in
# recipes/td3.py (DDPG: its --algo ddpg).
SHORT_BUDGET_DETERMINISTIC = (
    ("init_random_frames", 10_000), ("actor_lr", 1e-3), ("critic_lr", 1e-3),
    ("hidden_sizes", (400, 300)),
)  # fmt: skip

REDQ_LOOP = (("algo", "redq"), ("utd_ratio", 20.0), ("policy_delay", 20))

ALGOS: dict[str, Algo] = {
    "ppo": Algo("ppo", (), ON_POLICY_STEPS, "PPO"),
    "a2c": Algo("a2c", (), ON_POLICY_STEPS, "A2C"),
    "reinforce": Algo("reinforce", (), ON_POLICY_STEPS, None),
    "npg": Algo("trpo", (("algo", "npg"),), ON_POLICY_STEPS, None),
    "trpo": Algo("trpo", (("algo", "trpo"),), ON_POLICY_STEPS, "TRPO"),
    "sac": Algo("sac", (), OFF_POLICY_STEPS, "SAC"),
    # sac.py --algo tqc at sb3-contrib's learning rate (the recipe's own is SAC's 1e-3) and
    # update order (the critics stepped, then actor and alpha on the updated critics); the rest
    # of sb3-contrib's TQC defaults (2 critics of 25 quantiles, 2 dropped, batch 256, tau, gamma,
    # 256x256) and the zoo's 10k random steps are the recipe's already
    "tqc": Algo("sac", (("algo", "tqc"), ("actor_lr", 3e-4), ("critic_lr", 3e-4),
                        ("update_order", "critics_first")), OFF_POLICY_STEPS, "TQC"),  # fmt: skip
    # sac.py --algo crossq at the zoo's crossq.yml settings (lr 1e-3 for all three parts, as
    # sb3-contrib's entropy coefficient, Adam betas 0.5/0.999 (sb3-contrib's alpha: 0.9), the
    # actor every 3rd step, 5k random steps, batch renorm momentum 0.01 warmed up 100k batches),
    # but 256x256 critics in both libraries, not the zoo's 2048x2048: a 2048-wide update takes
    # 0.44 s on one core here (11 h a cell); sb3-contrib's CrossQ policy notes that CrossQ
    # "already works with a [256,256] critic network", the width only adding to it
    "crossq": Algo("sac", (("algo", "crossq"), ("critic_hidden_sizes", (256, 256)),
                           ("policy_delay", 3), ("adam_beta1", 0.5), ("alpha_lr", 1e-3),
                           ("init_random_frames", 5_000)), OFF_POLICY_STEPS, "CrossQ"),  # fmt: skip
    "td3": Algo("td3", SHORT_BUDGET_DETERMINISTIC, OFF_POLICY_STEPS, "TD3"),
    "ddpg": Algo("td3", (("algo", "ddpg"), *SHORT_BUDGET_DETERMINISTIC), OFF_POLICY_STEPS,
                 "DDPG"),  # fmt: skip
    # sac.py --algo redq at Tianshou's REDQ settings (10 critics, 20 critic steps per env step,
    # the actor every 20th), checkpoints every 3k steps (the recipe's 100k would be only the
    # last): a REDQ cell takes ~3 h of a core (600k gradient steps), so a cut cell resumes while
    # its run folder is there
    "redq": Algo("sac", (*REDQ_LOOP, ("num_critics", 10), ("checkpoint_every", 3_000)),
                 REDQ_STEPS, None),  # fmt: skip
    # DroQ (Hiraoka et al. 2022): REDQ's loop with 2 critics of dropout 0.01 and LayerNorm;
    # compared with REDQ at the same 30k budget
    "droq": Algo("sac", (*REDQ_LOOP, ("num_critics", 2), ("critic_dropout", 0.01),
                         ("critic_layer_norm", True), ("checkpoint_every", 3_000)),
                 REDQ_STEPS, None),  # fmt: skip
}

DISPLAY_NAMES = {
    "rainbow": "Rainbow", "crossq": "CrossQ", "droq": "DroQ",
    # the exploration table's rows
    "ppo_rnd": "PPO+RND", "ppo_icm": "PPO+ICM", "ppo_rnd_cleanrl": "PPO+RND (CleanRL)",
    "ppo_rnd_first_visit": "PPO+RND first visit",
    "ppo_rnd_first_visit_tuned": "PPO+RND first visit 0.1",
    "ppo_icm_first_visit": "PPO+ICM first visit 0.1",
}  # fmt: skip


def display_name(algorithm: str) -> str:
    """An algorithm's name in the tables and plots: upper case, but the names that are not
    acronyms as their authors write them."""
    return DISPLAY_NAMES.get(algorithm, algorithm.upper())


# rl-baselines3-zoo 2.9.2, rl_zoo3/hyperparams/<algo>.yml, key "<Task>-v4" (v2 for Reacher and
# the pendulums); "n_timesteps" and "policy: MlpPolicy" are left out (the budget is --steps).
# Keys not given are the SB3 class's defaults; the zoo's default n_envs is 1.
# ppo.yml: the tuned entries share these policy_kwargs (activation_fn nn.ReLU).
_PPO_NET = {
    "log_std_init": -2,
    "ortho_init": False,
    "activation_fn": "ReLU",
    "net_arch": {"pi": [256, 256], "vf": [256, 256]},
}
# trpo.yml "&mujoco-defaults" (Ant-v4) merges "&pybullet-defaults" (HalfCheetahBulletEnv-v0).
_TRPO = dict(
    normalize=True, n_envs=2, batch_size=128, n_steps=1024, gamma=0.99, gae_lambda=0.95,
    sub_sampling_factor=1, cg_max_steps=25, cg_damping=0.1, n_critic_updates=20,
    learning_rate=1e-3,
)  # fmt: skip
# td3.yml and ddpg.yml "&mujoco-defaults" (HalfCheetah-v4), the same in both files.
_DETERMINISTIC = dict(
    learning_starts=10_000, noise_type="normal", noise_std=0.1, train_freq=1, gradient_steps=1,
    learning_rate=1e-3, batch_size=256, policy_kwargs={"net_arch": [400, 300]},
)  # fmt: skip
_LOCOMOTION = ("HalfCheetah", "Ant", "Hopper", "Walker2d", "Humanoid")
ZOO: dict[tuple[str, str], dict[str, Any]] = {
    # ppo.yml: Ant-v4 is "&mujoco-defaults" (normalize only); the others are tuned entries.
    ("ppo", "Ant"): dict(normalize=True),
    ("ppo", "Swimmer"): dict(
        normalize=True, gamma=0.9999, n_envs=4, n_steps=1024, batch_size=256,
        learning_rate=6e-4, gae_lambda=0.98,
    ),
    ("ppo", "HalfCheetah"): dict(
        normalize=True, n_envs=1, batch_size=64, n_steps=512, gamma=0.98,
        learning_rate=2.0633e-05, ent_coef=0.000401762, clip_range=0.1, n_epochs=20,
        gae_lambda=0.92, max_grad_norm=0.8, vf_coef=0.58096, policy_kwargs=_PPO_NET,
    ),
    ("ppo", "Hopper"): dict(
        normalize=True, n_envs=1, batch_size=32, n_steps=512, gamma=0.999,
        learning_rate=9.80828e-05, ent_coef=0.00229519, clip_range=0.2, n_epochs=5,
        gae_lambda=0.99, max_grad_norm=0.7, vf_coef=0.835671, policy_kwargs=_PPO_NET,
    ),
    ("ppo", "Humanoid"): dict(
        normalize=True, n_envs=1, batch_size=256, n_steps=512, gamma=0.95,
        learning_rate=3.56987e-05, ent_coef=0.00238306, clip_range=0.3, n_epochs=5,
        gae_lambda=0.9, max_grad_norm=2, vf_coef=0.431892, policy_kwargs=_PPO_NET,
    ),
    ("ppo", "InvertedDoublePendulum"): dict(
        normalize=True, n_envs=1, batch_size=512, n_steps=128, gamma=0.98,
        learning_rate=0.000155454, ent_coef=1.05057e-06, clip_range=0.4, n_epochs=10,
        gae_lambda=0.8, max_grad_norm=0.5, vf_coef=0.695929,
    ),
    ("ppo", "InvertedPendulum"): dict(
        normalize=True, n_envs=1, batch_size=64, n_steps=32, gamma=0.999,
        learning_rate=0.000222425, ent_coef=1.37976e-07, clip_range=0.4, n_epochs=5,
        gae_lambda=0.9, max_grad_norm=0.3, vf_coef=0.19816,
    ),
    ("ppo", "Reacher"): dict(
        normalize=True, n_envs=1, batch_size=32, n_steps=512, gamma=0.9,
        learning_rate=0.000104019, ent_coef=7.52585e-08, clip_range=0.3, n_epochs=5,
        gae_lambda=1.0, max_grad_norm=0.9, vf_coef=0.950368,
    ),
    ("ppo", "Walker2d"): dict(
        normalize=True, n_envs=1, batch_size=32, n_steps=512, gamma=0.99,
        learning_rate=5.05041e-05, ent_coef=0.000585045, clip_range=0.1, n_epochs=20,
        gae_lambda=0.95, max_grad_norm=1, vf_coef=0.871923,
    ),
    # a2c.yml: "&mujoco-defaults" (HalfCheetah-v4): normalize, A2C's defaults otherwise.
    **{("a2c", task): dict(normalize=True) for task in _LOCOMOTION},
    ("a2c", "Swimmer"): dict(normalize=True, gamma=0.9999),
    # trpo.yml: HalfCheetah-v4 adds target_kl 0.04, Swimmer-v4 gamma 0.9999.
    **{("trpo", task): dict(_TRPO) for task in _LOCOMOTION},
    ("trpo", "HalfCheetah"): dict(_TRPO, target_kl=0.04),
    ("trpo", "Swimmer"): dict(_TRPO, gamma=0.9999),
    # sac.yml: "&mujoco-defaults" (HalfCheetah-v4): learning_starts 10000; Swimmer gamma 0.999.
    **{("sac", task): dict(learning_starts=10_000) for task in _LOCOMOTION},
    # tqc.yml "&mujoco-defaults" (HalfCheetah-v4): learning_starts only (sb3-contrib's TQC
    # defaults otherwise)
    **{("tqc", task): dict(learning_starts=10_000) for task in _LOCOMOTION},
    # crossq.yml "&mujoco-defaults" (HalfCheetah-v4): lr 1e-3 and the 1M buffer are the class's
    # defaults; the critics 256x256 instead of 2048x2048 (ALGOS["crossq"] says why)
    **{("crossq", task): dict(learning_starts=5_000, policy_delay=3,
                              policy_kwargs=dict(net_arch=dict(pi=[256, 256], qf=[256, 256])))
       for task in _LOCOMOTION},
    ("sac", "Swimmer"): dict(learning_starts=10_000, gamma=0.999),
    **{(algo, task): dict(_DETERMINISTIC) for algo in ("td3", "ddpg") for task in _LOCOMOTION},
    **{(algo, "Swimmer"): dict(_DETERMINISTIC, gamma=0.9999) for algo in ("td3", "ddpg")},
}  # fmt: skip

# Tianshou's A2C as thu-ml/tianshou examples/mujoco/mujoco_a2c.py (at 03132cc04cfe) sets it up:
# 16 envs x 80 steps a batch, one full-batch RMSprop step, the learning rate decayed linearly to
# 0 over its 100 epochs of 30k steps, observations normalized by VectorEnvNormObs, return scaling,
# 64x64 tanh networks with orthogonal init (gain sqrt 2), the mean layer scaled by 0.01, log-std
# -0.5, actions clipped into the box. The cells' own seed and budget; evaluated like the recipes.
TIANSHOU: dict[str, dict[str, Any]] = {
    "a2c": dict(
        num_train_envs=16, collection_step_num_env_steps=80, buffer_size=4096,
        hidden_sizes=[64, 64], lr=7e-4, rmsprop_eps=1e-5, rmsprop_alpha=0.99, lr_decay=True,
        epoch=100, epoch_num_steps=30_000, gamma=0.99, gae_lambda=0.95, vf_coef=0.5,
        ent_coef=0.01, max_grad_norm=0.5, return_scaling=True, bound_action_method="clip",
        obs_norm=True, init_log_std=-0.5,
    ),
}  # fmt: skip
TIANSHOU_SOURCE = "thu-ml/tianshou 03132cc04cfe examples/mujoco/mujoco_a2c.py"

# Tianshou's MuJoCo benchmark (thu-ml/tianshou examples/mujoco/README.md at f2402056b03a), the
# "Tianshou (1M)" columns: the max over training of the mean over 10 seeds of the mean return of
# 10 test episodes, ± one std over the seeds; gym 0.17.3 v3 tasks (v2 for Reacher and the
# pendulums), 1M env steps. REINFORCE has only 3M and 10M figures there and REDQ none: n/a.
_TIANSHOU_1M_ON_POLICY = """
task                    ppo            a2c            trpo           npg
Ant                     3258.4±1079.3  3485.4±433.1   2866.7±707.9   2358.0±517.5
HalfCheetah             5783.9±1244.0  1829.9±1068.3  4471.2±804.9   3485.2±716.6
Hopper                  2609.3±700.8   1253.2±458.0   2046.0±1037.9  1915.2±550.5
Walker2d                3588.5±756.6   1091.6±709.2   3826.7±782.7   2503.2±963.3
Swimmer                 66.7±99.1      36.6±2.1       40.9±19.6      31.5±8.0
Humanoid                787.1±193.5    1726.0±1070.1  810.1±126.1    765.1±91.3
Reacher                 -4.1±0.3       -6.7±2.3       -5.1±0.8       -4.5±0.5
InvertedPendulum        1000.0±0.0     1000.0±0.0     1000.0±0.0     1000.0±0.0
InvertedDoublePendulum  9231.3±270.4   9257.7±277.4   8435.2±1073.3  9243.2±276.0
"""
_TIANSHOU_1M_OFF_POLICY = """
task                    sac             td3            ddpg
Ant                     5850.2±475.7    5116.4±799.9   990.4±4.3
HalfCheetah             12138.8±1049.3  10201.2±772.8  11718.7±465.6
Hopper                  3542.2±51.5     3472.2±116.8   2197.0±971.6
Walker2d                5007.0±251.5    3982.4±274.5   1400.6±905.0
Swimmer                 44.4±0.5        104.2±34.2     144.1±6.5
Humanoid                5488.5±81.2     5189.5±178.5   177.3±77.6
Reacher                 -2.6±0.2        -2.7±0.2       -3.3±0.3
InvertedPendulum        1000.0±0.0      1000.0±0.0     1000.0±0.0
InvertedDoublePendulum  9359.5±0.4      9349.2±14.3    8364.3±2778.9
"""


# rl-baselines3-zoo's published agents (DLR-RM/rl-baselines3-zoo benchmark.md at 0088472b8cb6),
# the "SB3 zoo (1M)" column: one trained agent per entry (the zoo's own note: "not a quantitative
# benchmark"), trained for 1M env steps with the zoo's hyperparameters on gym v3 tasks, then its
# deterministic policy run for ~150k steps: the mean ± std over those episodes. "-": no MuJoCo
# entry (the zoo's DDPG has PyBullet entries only; its A2C none on Ant and Walker2d).
_ZOO_1M = """
task         ppo           a2c           trpo           sac            td3
Ant          1327.2±451.6  -             4982.3±663.8   4615.8±1354.1  5813.3±589.8
HalfCheetah  5819.1±663.5  3041.2±157.3  1785.5±68.7    9535.5±100.5   9655.7±969.9
Hopper       2410.4±10.0   733.5±376.6   3618.4±356.8   2325.5±1129.7  3606.4±4.0
Walker2d     3478.8±821.7  -             4933.1±1452.5  3863.2±254.3   4717.8±46.3
Swimmer      281.6±9.7     200.6±2.5     365.7±2.1      345.6±3.1      359.1±1.2
"""


def _parse_table(text: str) -> dict[str, dict[str, str]]:
    """``{column: {row: cell}}`` of a whitespace-separated table with a header line."""
    header, *rows = (line.split() for line in text.strip().splitlines())
    return {col: {row[0]: row[i] for row in rows} for i, col in enumerate(header[1:], 1)}


TIANSHOU_1M: dict[str, dict[str, str]] = {
    **_parse_table(_TIANSHOU_1M_ON_POLICY),
    **_parse_table(_TIANSHOU_1M_OFF_POLICY),
}


ZOO_1M: dict[str, dict[str, str]] = _parse_table(_ZOO_1M)


def task_name(task: str) -> str:
    """``"Hopper-v5"`` -> ``"Hopper"`` (the zoo and Tianshou tables are keyed by name)."""
    return task.rsplit("-v", 1)[0]


def zoo_hyperparameters(algorithm: str, task: str) -> dict[str, Any] | None:
    """The zoo's entry for ``algorithm`` on ``task`` (a copy), or None where it has none."""
    entry = ZOO.get((algorithm, task_name(task)))
    return None if entry is None else json_form(entry)


# ----------------------------------------------------------------------------- cells


@dataclasses.dataclass(frozen=True)
class Cell:
    """One run of the table; its fields are its identity (a line with the same is a done cell)."""

    library: str
    algorithm: str
    task: str
    seed: int
    steps: int
    """env-step budget."""
    eval_every: int
    eval_episodes: int

    @property
    def key(self) -> tuple[Any, ...]:
        return dataclasses.astuple(self)

    def folder(self, workdir: Path) -> Path:
        """``<workdir>/<library>/<algorithm>/<task>/seed<seed>-<steps>-e<every>x<episodes>``."""
        run = f"seed{self.seed}-{self.steps}-e{self.eval_every}x{self.eval_episodes}"
        return workdir / self.library / self.algorithm / self.task / run


CELL_FIELDS = tuple(f.name for f in dataclasses.fields(Cell))


def line_key(line: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(line[name] for name in CELL_FIELDS)


# The legend of a tdrl-and-SB3 table page's columns (the goal and exploration pages'; MuJoCo,
# MinAtar and Atari split the wall time further, in their own words).
LEGEND = """\
- final: the last evaluation's mean return, mean ± sample std over seeds; best: each seed's max
  over its evaluations, mean ± std over seeds; wall: mean seconds per run.
- peak: the max over evaluation steps of the mean over seeds, ± the population std over seeds
  at that step.
"""


@dataclasses.dataclass(frozen=True)
class Suite:
    """A table this driver fills: its algorithms and tasks, how SB3 runs a cell, its page, and
    its files (``docs/benchmarks/<name>_table.jsonl`` and ``.md``, ``<name>_<task>.png``, run
    folders in ``/tmp/tdrl_<name>_table``). :data:`MUJOCO` is this file's; the MinAtar one is
    in ``benchmarks/minatar_table.py``, which runs its cells with this file's functions."""

    name: str
    script: str
    """the driver whose ``--child`` runs one of its cells in a fresh Python."""
    algos: Mapping[str, Algo]
    tasks: tuple[str, ...]
    """the default selection, and the order of the table's rows."""
    sb3_settings: Callable[[str, str], dict[str, Any] | None]
    """SB3's hyperparameters of (algorithm, task); None: no SB3 cell."""
    run_sb3: Callable[[Cell, Path], dict[str, Any]]
    """an SB3 cell's results: as :func:`run_sb3` (through :func:`train_sb3`)."""
    header: str
    """the page's opening (its first line, less the "# ", is the command line's help)."""
    packages: tuple[str, ...]
    """the env packages whose versions a line records."""
    references: tuple[tuple[str, Callable[[str, str], str]], ...] = ()
    """the last columns, of published figures: each one's title and (algorithm, task) -> its
    cell."""
    sb3_cell_settings: Callable[[Cell], dict[str, Any] | None] | None = None
    """the hyperparameters an SB3 cell runs with, where they depend on more than (algorithm,
    task) (MinAtar's epsilon decay: on the budget); default :attr:`sb3_settings`'."""
    evaluation: str = "Deterministic"
    """how the evaluations act, as the curves' caption opens (Atari's: sampled actions)."""

    @property
    def table(self) -> Path:
        return ROOT / "docs" / "benchmarks" / f"{self.name}_table.jsonl"

    @property
    def workdir(self) -> Path:
        return Path(f"/tmp/tdrl_{self.name}_table")


def recipe_default(algo: Algo, name: str) -> Any:
    """A field's value in the algorithm's recipe Config: its preset's, else the recipe's default
    (no Config is built)."""
    preset = dict(algo.preset)
    if name in preset:
        return preset[name]
    module = importlib.import_module(f"recipes.{algo.recipe}")
    from tdrl.trainers.config import flat_dict

    return flat_dict(module.Config())[name]


def build_cells(
    suite: Suite,
    algorithms: Iterable[str],
    tasks: Iterable[str],
    seeds: Iterable[int],
    libraries: Iterable[str] = LIBRARIES,
    *,
    steps: int | None = None,
    eval_every: int | None = None,
    eval_episodes: int = EVAL_EPISODES,
) -> list[Cell]:
    """The cells of a selection of ``suite``'s, seed by seed and library by library within each
    (task, algorithm). SB3 cells exist only where SB3 has the algorithm and the suite has SB3
    settings for the task (the zoo's entry on MuJoCo)."""
    cells = []
    for task in tasks:
        for algorithm in algorithms:
            algo = suite.algos[algorithm]
            budget = steps or algo.steps
            every = recipe_default(algo, "eval_every") if eval_every is None else eval_every
            has_sb3 = algo.sb3 is not None
            sb3_cells = has_sb3 and suite.sb3_settings(algorithm, task) is not None
            if "SB3" in libraries and not sb3_cells:
                why = "no SB3 settings" if has_sb3 else "no SB3 class"
                print(f"{algorithm} {task}: {why}, tdrl only")
            if "Tianshou" in libraries and algorithm not in TIANSHOU:
                print(f"{algorithm} {task}: no Tianshou script here, no Tianshou cell")
            for seed in seeds:
                for library in libraries:
                    if library == "SB3" and not sb3_cells:
                        continue
                    if library == "Tianshou" and algorithm not in TIANSHOU:
                        continue
                    cells.append(Cell(library, algorithm, task, seed, budget, every, eval_episodes))
    return cells


# ----------------------------------------------------------------------------- one cell (child)


def machine() -> dict[str, Any]:
    return {"load": list(os.getloadavg()), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def git_commit() -> dict[str, Any]:
    """HEAD and whether tracked files differ from it (other work in the tree)."""

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    return {
        "commit": git("rev-parse", "HEAD") or None,
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }


def same_code(commit: str | None) -> bool:
    """Whether ``tdrl/`` and ``recipes/`` at ``commit`` are those at HEAD (a saved run of other
    code, e.g. from before a recipe's defaults changed, must not be recovered); False for a
    commit git does not know."""
    if not commit:
        return False
    out = subprocess.run(
        ["git", "diff", "--quiet", commit, "HEAD", "--", "tdrl", "recipes"],
        cwd=ROOT, capture_output=True,
    )  # fmt: skip
    return out.returncode == 0


def versions(*names: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": sys.version.split()[0]}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def curve_summary(curve: dict[str, list[float]]) -> dict[str, float]:
    """Final and best evaluation of a curve (``steps``, ``returns``, ``stds``, ``wall_s``)."""
    if not curve["returns"]:
        raise RuntimeError("the run wrote no evaluation")
    return {
        "final_return": curve["returns"][-1],
        "final_return_std": curve["stds"][-1],
        "best_return": max(curve["returns"]),
    }


def resumable(folder: Path, cell: Cell, overrides: dict[str, Any] | None = None) -> bool:
    """Whether ``folder`` holds a checkpoint of ``cell``'s tdrl run with the same ``--set``
    fields, cut before its end (the driver or the machine was stopped): :func:`run_tdrl` then
    resumes it (``--resume``)."""
    from tdrl.trainers import latest_checkpoint

    started = folder / STARTED
    if cell.library != "tdrl" or not started.is_file() or (folder / RESULT).exists():
        return False
    try:
        record = json.loads(started.read_text())
        same = record["cell"] == dataclasses.asdict(cell)
    except (json.JSONDecodeError, KeyError, TypeError):
        return False
    return same and same_overrides(record, overrides) and latest_checkpoint(folder) is not None


def json_form(value: Any) -> Any:
    """``value`` as a JSON round trip gives it back (tuples become lists), to compare a recorded
    value with one given here."""
    return json.loads(json.dumps(value))


def same_overrides(record: Mapping[str, Any], overrides: dict[str, Any] | None) -> bool:
    """Whether a line's (or a started run's) recorded ``--set`` fields are ``overrides`` (none
    recorded: none given)."""
    return (record.get("overrides") or {}) == json_form(overrides or {})


def tdrl_config(
    cell: Cell, folder: Path, suite: Suite, overrides: dict[str, Any] | None = None
) -> Any:
    """The recipe Config a tdrl cell runs: the recipe's defaults, the algorithm's preset, the
    cell's task, seed, budget and evaluation protocol, its run folder in ``folder``;
    ``overrides`` (``--set``, tuning runs): recipe fields changed on top of the preset."""
    algo = suite.algos[cell.algorithm]
    module = importlib.import_module(f"recipes.{algo.recipe}")
    from tdrl.trainers import configure
    from tdrl.trainers.config import flat_dict

    cell_fields = dict(
        env_id=cell.task, seed=cell.seed, total_frames=cell.steps, log_dir=str(folder),
        eval_every=cell.eval_every, eval_episodes=cell.eval_episodes,
    )  # fmt: skip
    clash = sorted(set(overrides or {}) & set(cell_fields))
    if clash:
        raise ValueError(f"--set {clash}: a cell's own fields; use --tasks, --seeds, --steps, ...")
    cfg = configure(module.Config, **dict(algo.preset) | cell_fields)
    if not overrides:
        return cfg
    return configure(cfg, **typed_overrides(overrides, flat_dict(cfg)))


def typed_overrides(overrides: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """``--set`` values in the types of the fields they replace (``base``: the preset's flat
    values): booleans from ``True``/``true``, floats from numbers or ``inf``/``nan``, tuples
    from sequences (a JSON payload turns them into lists); anything else a ``ValueError`` naming
    the field. Where a run is (``log_dir``, ``resume``...) is not a setting: refused. Names
    the config lacks pass through, for ``configure`` to refuse."""
    typed: dict[str, Any] = {}
    for name, value in overrides.items():
        if name in PLACE_SETTINGS or name.startswith("resume"):
            raise ValueError(f"--set {name}: says where a run is, not how it runs")
        default = base.get(name)
        text = value.strip().lower() if isinstance(value, str) else None
        if name not in base or default is None:
            typed[name] = value
        elif isinstance(default, bool):
            if not isinstance(value, bool) and text not in ("true", "false"):
                raise ValueError(f"--set {name}={value!r}: expected True or False")
            typed[name] = value if isinstance(value, bool) else text == "true"
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value % 1:
                raise ValueError(f"--set {name}={value!r}: expected an integer")
            typed[name] = int(value)
        elif isinstance(default, float):
            if isinstance(value, bool) or not (
                isinstance(value, (int, float)) or text in ("inf", "-inf", "nan")
            ):
                raise ValueError(f"--set {name}={value!r}: expected a number")
            typed[name] = float(value)
        elif isinstance(default, tuple):
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"--set {name}={value!r}: expected a tuple, e.g. (64, 64)")
            typed[name] = tuple(value)
        elif isinstance(default, str) and not isinstance(value, str):
            raise ValueError(f"--set {name}={value!r}: expected a string")
        else:
            typed[name] = value
    return typed


def parse_sets(items: Iterable[str]) -> dict[str, Any]:
    """``--set FIELD=VALUE`` items as recipe fields: VALUE read as a Python literal (numbers,
    booleans, tuples, quoted strings), else as a plain string."""
    overrides: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--set {item!r}: expected FIELD=VALUE")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        overrides[name.strip().replace("-", "_")] = value
    return overrides


# Settings that say where a run was, not how it ran.
PLACE_SETTINGS = ("log_dir", "resume")


# Fields recipes no longer have, with the recorded values that mean what the recipe does now
# without them (None: any value; the field only mattered under another one listed here):
# DQN's distributional and noisy options moved to recipes/rainbow.py, and the Q-learning and
# offline recipes lost worker-collector and replay flags they never read.
RETIRED: dict[str, tuple[Any, ...] | None] = {
    "algo": ("dqn",), "noisy": (False,), "collector": ("local",), "steps_per_batch": (1,),
    "num_workers": None, "ray_address": None, "num_atoms": None, "v_min": None, "v_max": None,
    "num_quantiles": None, "num_fractions": None, "fraction_lr": None,
    "fraction_entropy_coeff": None, "noisy_std": None, "noisy_layers": None,
    "noisy_epsilon": None, "init_random_frames": None, "buffer_size": None, "utd_ratio": None,
}  # fmt: skip


# Fields renamed, by algorithm, with their names now: REDQ's own recipe became sac.py --algo
# redq, whose actor step is every --policy-delay-th and whose ensemble is --num-critics.
_REDQ_RENAMED = {"actor_delay": "policy_delay", "num_qvalue_nets": "num_critics"}
RENAMED: dict[str, dict[str, str]] = {"redq": _REDQ_RENAMED, "droq": _REDQ_RENAMED}


def retired(name: str, value: Any) -> bool:
    """Whether a recorded setting whose field is gone now was retired at ``value``."""
    if name not in RETIRED:
        return False
    values = RETIRED[name]
    return values is None or value in values


def settings_drift(line: dict[str, Any], suite: Suite) -> tuple[list[str], list[str]]:
    """How a line's recorded settings stand against what its cell would run now: ``(changed,
    unrecorded)``, the settings recorded with another value (a recipe default, a preset or a
    zoo entry changed since: the line is stale) and those it holds no record of (a field added
    since that ``FIELDS_ADDED`` does not list, whose default may or may not be what the run
    did; a listed one counts as the value runs had before it). The cell key holds no settings,
    so this is what tells a stale line from a done cell. SB3 lines: the hyperparameters of
    ``suite.sb3_settings``."""
    cell = Cell(**{name: line[name] for name in CELL_FIELDS})
    recorded = line.get("settings") or {}
    if cell.library == "Tianshou":
        now = TIANSHOU.get(cell.algorithm, {})
        recorded = recorded.get("hyperparameters", {})
    elif cell.library == "SB3":
        if suite.sb3_cell_settings is not None:
            now = suite.sb3_cell_settings(cell)
        else:
            now = suite.sb3_settings(cell.algorithm, cell.task)
        now = finite(now or {})
        recorded = recorded.get("hyperparameters", {})
    else:
        from tdrl.trainers.config import FIELDS_ADDED, flat_dict

        now = finite(flat_dict(tdrl_config(cell, Path("."), suite, line.get("overrides"))))
        now = {name: value for name, value in now.items() if name not in PLACE_SETTINGS}
        renamed = RENAMED.get(cell.algorithm, {})
        recorded = {
            renamed.get(k, k): v for k, v in recorded.items() if k not in PLACE_SETTINGS
        }
        # a field added since, with the value the runs before it had (what a resume assumes),
        # and a missing algo the row's own (its preset's, else its name): each ran its own
        # recipe then
        own = dict(suite.algos[cell.algorithm].preset).get("algo", cell.algorithm)
        added = FIELDS_ADDED | {"algo": own}
        recorded = {k: v for k, v in added.items() if k in now} | recorded
    now = json_form(now)  # tuples as lists, as the line has them
    changed = [
        f"{name}: {recorded[name]!r} then, {value!r} now"
        for name, value in now.items()
        if name in recorded and recorded[name] != value
    ]
    # a setting the run had that nothing sets now (a field removed or renamed), unless it was
    # retired with the value the recipe now always has
    changed += [
        f"{k}: {recorded[k]!r} then, gone now"
        for k in recorded
        if k not in now and not retired(k, recorded[k])
    ]
    return changed, [name for name in now if name not in recorded]


def report_drift(lines: Iterable[dict[str, Any]], suite: Suite) -> int:
    """Print the lines whose settings differ from what their cells would run now, and the
    settings lines hold no record of; returns the number of stale lines."""
    stale, unrecorded = 0, Counter[str]()
    for line in lines:
        changed, missing = settings_drift(line, suite)
        unrecorded.update(f"{line['library']} {line['algorithm']}: {name}" for name in missing)
        if changed:
            stale += 1
            cell = Cell(**{name: line[name] for name in CELL_FIELDS})
            print(f"STALE (in the table with other settings than now): {cell}: "
                  + "; ".join(changed))  # fmt: skip
    for what, count in sorted(unrecorded.items()):
        print(f"not recorded in {count} line(s), added since: {what}")
    if stale:
        print(f"{stale} stale line(s) count as done: move them to the superseded file to rerun")
    return stale


def run_tdrl(
    cell: Cell,
    folder: Path,
    suite: Suite,
    *,
    resume: bool = False,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The recipe's ``main`` with its own defaults but the algorithm's preset, the cell's task,
    seed, budget and evaluation protocol, its run folder in ``folder``; the curve is its
    ``eval.csv``.

    ``resume``: continue the cut run in ``folder`` from its newest checkpoint. Its wall time is
    the run's own clock at that checkpoint plus this process's time (the steps after the
    checkpoint, which the cut lost, are counted once: as rerun here); the line's ``resumed``
    says from which step and with which starting commit.
    """
    from tdrl.trainers import configure, latest_checkpoint, read_csv
    from tdrl.trainers.config import flat_dict

    module = importlib.import_module(f"recipes.{suite.algos[cell.algorithm].recipe}")
    cfg = tdrl_config(cell, folder, suite, overrides)
    resumed: dict[str, Any] = {}
    if resume:
        import torch

        from tdrl.trainers.run import CHECKPOINT

        checkpoint = latest_checkpoint(folder)
        assert checkpoint is not None, f"no checkpoint to resume in {folder}"
        counters = torch.load(checkpoint / CHECKPOINT, weights_only=False)["counters"]
        started = json.loads((folder / STARTED).read_text())
        resumed = {
            "from_frames": int(checkpoint.name.split(".")[0]),  # folders are named by step
            "run_clock_s": float(counters["time"]),
            "first_commit": started["commit"],
            "first_date": started.get("date"),
        }
        if not same_code(started["commit"]):
            print(
                f"resuming {cell} at {resumed['from_frames']} steps with other code than it "
                f"started with ({started['commit']}): tdrl/ or recipes/ changed since; the "
                "line shows both commits",
                flush=True,
            )
        cfg = configure(cfg, resume=True)
    else:
        (folder / STARTED).write_text(
            json.dumps({
                "cell": dataclasses.asdict(cell),
                "overrides": overrides or {},
                "commit": git_commit()["commit"],
                "date": machine()["time"],
            })
        )  # fmt: skip
    start = time.perf_counter()
    result = module.main(cfg)
    wall = time.perf_counter() - start + resumed.get("run_clock_s", 0.0)
    rows = read_csv(folder / "eval.csv")
    curve = {
        "steps": [int(r["step"]) for r in rows],
        "returns": [r["return_mean"] for r in rows],
        "stds": [r["return_std"] for r in rows],
        "wall_s": [r["time"] for r in rows],
    }
    summary = curve_summary(curve)
    if not math.isclose(summary["final_return"], result["eval_return_mean"], rel_tol=1e-6):
        raise RuntimeError(
            f"eval.csv's last return {summary['final_return']} is not main()'s "
            f"{result['eval_return_mean']}"
        )
    return {
        **summary,
        "env_steps": int(result["frames"]),
        "wall_s": wall,
        "curve": curve,
        "settings": flat_dict(configure(cfg, resume=False)),
        **({"overrides": overrides} if overrides else {}),
        "versions": versions("torch", "tensordict", "torchrl", *suite.packages),
        **({"resumed": resumed} if resumed else {}),
    }


def sb3_envs(cell: Cell, n_envs: int = 1) -> tuple[Any, Any]:
    """SB3's training envs (``n_envs``, seed ``seed``) and evaluation env (min(5, episodes)
    copies, seed ``seed + 10,000``) of the cell's task, as tdrl's recipes make theirs."""
    from stable_baselines3.common.env_util import make_vec_env

    from tdrl.trainers.run import EVAL_SEED_OFFSET

    env = make_vec_env(cell.task, n_envs=n_envs, seed=cell.seed)
    n_eval = min(EVAL_ENVS, cell.eval_episodes)
    return env, make_vec_env(cell.task, n_envs=n_eval, seed=cell.seed + EVAL_SEED_OFFSET)


def sb3_ppo_decayed(kwargs: dict[str, Any]) -> dict[str, Any]:
    """SB3 PPO's arguments from the zoo's Atari ``kwargs`` (``n_envs`` left to the envs):
    ``learning_rate`` and ``clip_range`` decay linearly from their values to 0 (the zoo's
    ``lin_`` schedules: SB3 calls them with the progress remaining, 1 -> 0)."""
    lr, clip = kwargs["learning_rate"], kwargs["clip_range"]
    arguments = {k: v for k, v in kwargs.items() if k != "n_envs"}
    return arguments | {"learning_rate": lambda p: p * lr, "clip_range": lambda p: p * clip}


def print_evaluation(curve: dict[str, list[float]]) -> None:
    """One line of the run's log (``log.txt``) per evaluation, as the recipes' progress: the
    step, the mean and std of the returns, the seconds since the start."""
    step, mean, std, wall = (curve[name][-1] for name in ("steps", "returns", "stds", "wall_s"))
    print(f"{int(step)} steps: return {mean:.1f} +- {std:.1f}, {wall:.0f} s", flush=True)


def sb3_class(model: Any) -> str:
    """The model's class as its package exports it, e.g. ``"sb3_contrib.TQC"``."""
    return f"{type(model).__module__.split('.')[0]}.{type(model).__name__}"


def train_sb3(
    cell: Cell, model: Any, envs: tuple[Any, Any], start: float, settings: dict[str, Any],
    packages: Iterable[str], *, deterministic: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """``model.learn`` for the cell's budget with the table's evaluations on ``envs[1]``
    (``deterministic``, else sampled actions), then both envs closed; the line's results
    (``settings`` gain the model's class unless they name it, and the evaluation envs' count;
    ``versions`` SB3's and ``packages``')."""
    from tdrl.trainers.run import EVAL_SEED_OFFSET

    env, eval_env = envs
    curve = learn_sb3(
        model, eval_env, steps=cell.steps, eval_every=cell.eval_every,
        episodes=cell.eval_episodes, eval_seed=cell.seed + EVAL_SEED_OFFSET, start=start,
        on_eval=print_evaluation, deterministic=deterministic,
    )  # fmt: skip
    wall = time.perf_counter() - start
    env.close()
    eval_env.close()
    curve["steps"] = [int(s) for s in curve["steps"]]
    return {
        **curve_summary(curve),
        "env_steps": int(model.num_timesteps),
        "wall_s": wall,
        "curve": curve,
        "settings": {"class": sb3_class(model)} | settings | {"eval_envs": eval_env.num_envs},
        "versions": versions("torch", "stable_baselines3", *packages),
    }


def run_sb3(cell: Cell, folder: Path) -> dict[str, Any]:
    """SB3 (TRPO, TQC: sb3-contrib) with the zoo's hyperparameters, evaluated like the recipes."""
    import numpy as np
    import torch
    from stable_baselines3.common.noise import NormalActionNoise
    from stable_baselines3.common.vec_env import VecNormalize

    zoo = zoo_hyperparameters(cell.algorithm, cell.task)
    if zoo is None:
        raise ValueError(f"no rl-baselines3-zoo entry for {cell.algorithm} on {cell.task}")
    kwargs = json_form(zoo)
    start = time.perf_counter()
    env, eval_env = sb3_envs(cell, kwargs.pop("n_envs", 1))
    if kwargs.pop("normalize", False):
        # The zoo's VecNormalize (observations and rewards, discounted with the entry's gamma);
        # evaluation sees raw rewards and the training statistics, frozen (its _maybe_normalize).
        norm = {"gamma": kwargs["gamma"]} if "gamma" in kwargs else {}
        env = VecNormalize(env, **norm)
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False, **norm)
    if kwargs.pop("noise_type", None) is not None:  # "normal" in every MuJoCo entry
        sigma = kwargs.pop("noise_std") * np.ones(env.action_space.shape[-1])
        kwargs["action_noise"] = NormalActionNoise(np.zeros_like(sigma), sigma)
    if "policy_kwargs" in kwargs and "activation_fn" in kwargs["policy_kwargs"]:
        policy_kwargs = kwargs["policy_kwargs"]
        policy_kwargs["activation_fn"] = getattr(torch.nn, policy_kwargs["activation_fn"])
    name = ALGOS[cell.algorithm].sb3
    package = "sb3_contrib" if name in ("TRPO", "TQC", "CrossQ") else "stable_baselines3"
    algo_class = getattr(importlib.import_module(package), str(name))
    model = algo_class("MlpPolicy", env, seed=cell.seed, device="cpu", verbose=0, **kwargs)
    settings = {
        "source": f"rl_zoo3 2.9.2 hyperparams/{cell.algorithm}.yml "
        f"{task_name(cell.task)}-v4 (v2 for Reacher and the pendulums)",
        "hyperparameters": zoo,
        "policy": "MlpPolicy",
    }
    return train_sb3(
        cell, model, (env, eval_env), start, settings, ("sb3_contrib", *MUJOCO.packages)
    )


def run_tianshou(cell: Cell, folder: Path) -> dict[str, Any]:
    """Tianshou's A2C built as its MuJoCo script builds it (``TIANSHOU``), trained with its
    OnPolicyTrainer's steps (collect 80 steps, one update on the whole buffer, clear the buffer,
    inside ``policy_within_training_step``) for the cell's budget, evaluated like the recipes:
    the mean action of the actor on observations normalized by the training envs' statistics,
    clipped into the box, with ``tdrl.collectors.evaluate``."""
    import gymnasium as gym
    import numpy as np
    import torch
    from tianshou.algorithm import A2C
    from tianshou.algorithm.modelfree.reinforce import ProbabilisticActorPolicy
    from tianshou.algorithm.optim import LRSchedulerFactoryLinear, RMSpropOptimizerFactory
    from tianshou.data import Collector, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv, VectorEnvNormObs
    from tianshou.utils.net.common import ActorCritic, Net
    from tianshou.utils.net.continuous import ContinuousActorProbabilistic, ContinuousCritic
    from tianshou.utils.torch_utils import policy_within_training_step
    from torch.distributions import Independent, Normal

    from tdrl.collectors import evaluate
    from tdrl.envs import make_vec_env
    from tdrl.trainers.run import EVAL_SEED_OFFSET

    if cell.algorithm not in TIANSHOU:
        raise ValueError(f"no Tianshou script for {cell.algorithm}")
    hp = TIANSHOU[cell.algorithm]
    start = time.perf_counter()
    n = hp["num_train_envs"]
    train_envs = VectorEnvNormObs(DummyVectorEnv([lambda: gym.make(cell.task)] * n))
    train_envs.seed(cell.seed)
    np.random.seed(cell.seed)
    torch.manual_seed(cell.seed)
    with gym.make(cell.task) as probe:  # the spaces
        space, obs_dim = probe.action_space, int(np.prod(probe.observation_space.shape))
    net_a = Net(state_shape=obs_dim, hidden_sizes=hp["hidden_sizes"], activation=torch.nn.Tanh)
    actor = ContinuousActorProbabilistic(
        preprocess_net=net_a, action_shape=space.shape, unbounded=True
    )
    net_c = Net(state_shape=obs_dim, hidden_sizes=hp["hidden_sizes"], activation=torch.nn.Tanh)
    critic = ContinuousCritic(preprocess_net=net_c)
    torch.nn.init.constant_(actor.sigma_param, hp["init_log_std"])
    for module in ActorCritic(actor, critic).modules():
        if isinstance(module, torch.nn.Linear):
            torch.nn.init.orthogonal_(module.weight, gain=math.sqrt(2))
            torch.nn.init.zeros_(module.bias)
    for module in actor.mu.modules():
        if isinstance(module, torch.nn.Linear):
            torch.nn.init.zeros_(module.bias)
            module.weight.data.copy_(0.01 * module.weight.data)
    optim = RMSpropOptimizerFactory(lr=hp["lr"], eps=hp["rmsprop_eps"], alpha=hp["rmsprop_alpha"])
    if hp["lr_decay"]:
        optim.with_lr_scheduler_factory(LRSchedulerFactoryLinear(
            max_epochs=hp["epoch"], epoch_num_steps=hp["epoch_num_steps"],
            collection_step_num_env_steps=hp["collection_step_num_env_steps"],
        ))  # fmt: skip

    def dist(loc_scale: tuple[torch.Tensor, torch.Tensor]) -> Any:
        return Independent(Normal(*loc_scale), 1)

    policy = ProbabilisticActorPolicy(
        actor=actor, dist_fn=dist, action_scaling=True,
        action_bound_method=hp["bound_action_method"], action_space=space,
    )  # fmt: skip
    algorithm = A2C(
        policy=policy, critic=critic, optim=optim, gamma=hp["gamma"],
        gae_lambda=hp["gae_lambda"], max_grad_norm=hp["max_grad_norm"], vf_coef=hp["vf_coef"],
        ent_coef=hp["ent_coef"], return_scaling=hp["return_scaling"],
    )  # fmt: skip
    collector = Collector(
        algorithm, train_envs, VectorReplayBuffer(hp["buffer_size"], n), exploration_noise=True
    )
    collector.reset()

    def act(td: Any) -> Any:  # the mean action, as the recipes evaluate
        obs = train_envs.get_obs_rms().norm(td["observation"].numpy())
        with torch.no_grad():
            (loc, _), _ = actor(torch.as_tensor(obs, dtype=torch.float32))
        action = policy.map_action(loc.numpy())
        return td.set("action", torch.as_tensor(action, dtype=torch.float32))

    eval_seed = cell.seed + EVAL_SEED_OFFSET
    eval_env = make_vec_env(cell.task, min(EVAL_ENVS, cell.eval_episodes), seed=eval_seed)
    curve: dict[str, list[float]] = {"steps": [], "returns": [], "stds": [], "wall_s": []}

    def evaluation(step: int) -> None:
        out = evaluate(eval_env, act, cell.eval_episodes, deterministic=True, seed=eval_seed)
        values = (step, out["return_mean"], out["return_std"], time.perf_counter() - start)
        for name, value in zip(curve, values, strict=True):
            curve[name].append(float(value))
        print_evaluation(curve)

    steps, next_eval = 0, cell.eval_every or math.inf
    while steps < cell.steps:
        with policy_within_training_step(algorithm.policy):
            steps += collector.collect(n_step=hp["collection_step_num_env_steps"]).n_collected_steps
            algorithm.update(buffer=collector.buffer, batch_size=None, repeat=1)
            collector.reset_buffer(keep_statistics=True)
        if next_eval <= steps < cell.steps:
            evaluation(steps)
            next_eval = (steps // cell.eval_every + 1) * cell.eval_every
    evaluation(steps)
    wall = time.perf_counter() - start
    train_envs.close()
    eval_env.close()
    curve["steps"] = [int(step) for step in curve["steps"]]
    return {
        **curve_summary(curve),
        "env_steps": steps,
        "wall_s": wall,
        "curve": curve,
        "settings": {"source": TIANSHOU_SOURCE, "hyperparameters": hp},
        "versions": versions("torch", "tianshou", *MUJOCO.packages),
    }


def finite(value: Any) -> Any:
    """``value`` with every non-finite float written as a string (strict JSON has no inf and
    no nan): ``"inf"``, ``"-inf"``, ``"nan"`` (a recipe's ``stop_at_return`` is inf)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def run_cell(
    cell: Cell,
    folder: Path,
    suite: Suite,
    *,
    jobs: int = 1,
    running: int = 1,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run ``cell`` of ``suite`` in this process (one torch thread); returns its line, also
    written to ``folder/result.json`` (atomically)."""
    import torch

    torch.set_num_threads(1)
    folder.mkdir(parents=True, exist_ok=True)
    before = machine()
    code = git_commit()  # the code the run starts with (HEAD may move while it runs)
    if cell.library == "tdrl":
        result = run_tdrl(
            cell, folder, suite, resume=resumable(folder, cell, overrides), overrides=overrides
        )
    elif cell.library == "Tianshou":
        result = run_tianshou(cell, folder)
    else:
        result = suite.run_sb3(cell, folder)
    after = machine()
    line = finite({
        **dataclasses.asdict(cell),
        **result,
        **code,
        "date": before["time"],
        "load_start": before["load"],
        "load_end": after["load"],
        "jobs": jobs,
        "running_at_start": running,
        "cpus": os.cpu_count(),
    })  # fmt: skip
    partial = folder / (RESULT + ".part")
    partial.write_text(json.dumps(line, allow_nan=False))
    partial.replace(folder / RESULT)
    return line


def child(payload: str, suite: Suite) -> None:
    """``--child``: run one cell (the JSON of its fields plus the folder and the job counts)."""
    raw = json.loads(payload)
    folder, jobs, running = Path(raw.pop("folder")), raw.pop("jobs"), raw.pop("running")
    overrides = raw.pop("overrides", None)
    sys.path.insert(0, str(ROOT))
    line = run_cell(Cell(**raw), folder, suite, jobs=jobs, running=running, overrides=overrides)
    print(f"final return {line['final_return']:.1f}, {line['wall_s']:.0f} s")


# ----------------------------------------------------------------------------- orchestration

Launch = Callable[[Cell, Path, int, int], dict[str, Any]]


def launch_subprocess(
    cell: Cell,
    folder: Path,
    jobs: int,
    running: int,
    *,
    script: str | Path = __file__,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run ``cell`` in a fresh Python, ``script --child`` (the driver of its suite; log:
    ``folder/log.txt``); returns its line."""
    payload = dataclasses.asdict(cell) | {"folder": str(folder), "jobs": jobs, "running": running}
    if overrides:
        payload["overrides"] = overrides
    return run_child(script, payload, folder, RESULT, cwd=ROOT)


def read_lines(table: Path) -> list[dict[str, Any]]:
    """The table's lines; an unreadable one (a torn last line) is skipped with a message."""
    if not table.exists():
        return []
    lines = []
    for number, text in enumerate(table.read_text().splitlines(), 1):
        if not text.strip():
            continue
        try:
            line = numbers(json.loads(text))
            line_key(line)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            print(f"{table}:{number}: not a complete line, left out: {text[:80]!r}")
            continue
        lines.append(line)
    return lines


NUMBERS = ("final_return", "final_return_std", "best_return", "wall_s")


def numbers(line: dict[str, Any]) -> dict[str, Any]:
    """``line`` with the returns, stds and wall time that :func:`finite` wrote as strings
    (``"nan"``: a diverged run) read back as floats."""
    line = dict(line)
    for name in NUMBERS:
        if isinstance(line.get(name), str):
            line[name] = float(line[name])
    if isinstance(line.get("curve"), dict):
        line["curve"] = {
            name: [float(v) if isinstance(v, str) else v for v in values]
            for name, values in line["curve"].items()
        }
    return line


def append_line(table: Path, line: dict[str, Any]) -> None:
    """Append one line, whole (under a lock, flushed and fsynced before the lock is let go),
    on a line of its own after a torn last line (a writer killed mid-line)."""
    table.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(finite(line), allow_nan=False) + "\n"
    with table.open("a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            if f.seek(0, os.SEEK_END) > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    text = "\n" + text
            f.write(text.encode())
            f.flush()
            os.fsync(f.fileno())
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run_cells(
    cells: Iterable[Cell],
    table: Path,
    workdir: Path,
    jobs: int = 1,
    launch: Launch = launch_subprocess,
    *,
    overrides: dict[str, Any] | None = None,
) -> int:
    """Run the cells that are not in ``table`` yet, ``jobs`` at a time; returns the failures.

    A cell's run folder is cleared before it starts (a run cut short starts over), except that a
    ``result.json`` of the same cell run with the same code (its line was lost: the driver was
    stopped after the run ended) is appended without running again, and a tdrl run cut after a
    checkpoint resumes from it (:func:`resumable`). A failed cell is reported
    and not recorded. A cell another driver is running (its ``<folder>.lock`` is held) is
    skipped.
    """
    done = {line_key(line) for line in read_lines(table)}
    todo = []
    for cell in dict.fromkeys(cells):
        if cell.key in done:
            print(f"in the table, skipped: {cell}")
            continue
        saved = cell.folder(workdir) / RESULT
        if saved.exists():
            line = json.loads(saved.read_text())
            same = line_key(line) == cell.key and same_overrides(line, overrides)
            if same and same_code(line.get("commit")):
                append_line(table, line)
                done.add(cell.key)
                print(f"recovered from {saved}: {cell}")
                continue
        todo.append(cell)
    lock, running, failures = threading.Lock(), [0], [0]

    def one(cell: Cell) -> None:
        folder = cell.folder(workdir)
        # The cell's lock, held while its run goes on: a second driver (another shell, the same
        # command twice) skips the cell instead of clearing or resuming its folder under it.
        folder.parent.mkdir(parents=True, exist_ok=True)
        with (folder.parent / f"{folder.name}.lock").open("w") as held:
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"running in another driver, skipped: {cell}", flush=True)
                return
            run_one(cell, folder)

    def run_one(cell: Cell, folder: Path) -> None:
        if not resumable(folder, cell, overrides):  # a cut tdrl run goes on from a checkpoint
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
        with lock:
            running[0] += 1
            now = running[0]
        print(f"start {cell} ({now} running)", flush=True)
        try:
            line = launch(cell, folder, jobs, now)
        except Exception as error:  # one failed cell must not stop the others
            with lock:
                failures[0] += 1
            print(f"FAILED {cell}: {error}", flush=True)
            return
        finally:
            with lock:
                running[0] -= 1
        append_line(table, line)
        if cell.library == "tdrl":  # the run folder keeps its logs; checkpoints (buffers) go
            from tdrl.trainers.checkpoint import CHECKPOINTS

            shutil.rmtree(folder / CHECKPOINTS, ignore_errors=True)
        print(
            f"done {cell}: final {line['final_return']:.1f}, best {line['best_return']:.1f}, "
            f"{line['wall_s']:.0f} s",
            flush=True,
        )

    with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        list(pool.map(one, todo))
    return failures[0]


# ----------------------------------------------------------------------------- the table


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation over seeds (nan for one seed)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else math.nan


def pm(values: list[float]) -> str:
    """``mean ± std`` over seeds (the mean alone for one seed)."""
    mean, std = mean_std(values)
    return f"{mean:.1f}" if math.isnan(std) else f"{mean:.1f} ± {std:.1f}"


def ratio(numerator: float, denominator: float, *, positive: bool) -> str:
    """``numerator / denominator``; for returns only when the denominator is > 0 (a fraction of
    a negative score means nothing)."""
    if (positive and denominator <= 0) or denominator == 0:
        return "n/a"
    return f"{numerator / denominator:.2f}"


Group = tuple[str, str, int]  # (task, algorithm, budget)


def table_lines(lines: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The lines a table row may average, and why the others are left out: a row holds one
    evaluation protocol, 10 episodes every ``eval_every`` steps, with ``eval_every`` the one
    most of its (task, algorithm, budget) lines ran (the first seen of those tied); lines of
    another protocol are left out (their best evaluations and curves do not compare)."""
    counts: dict[Group, Counter[int]] = defaultdict(Counter)
    for line in lines:
        if line["eval_episodes"] == EVAL_EPISODES:
            counts[(line["task"], line["algorithm"], line["steps"])][line["eval_every"]] += 1
    kept, left_out = [], []
    for line in lines:
        group = (line["task"], line["algorithm"], line["steps"])
        if line["eval_episodes"] != EVAL_EPISODES:
            left_out.append(f"{line['eval_episodes']} evaluation episodes, not {EVAL_EPISODES}")
            continue
        protocol = counts[group].most_common(1)[0][0]
        if line["eval_every"] != protocol:
            left_out.append(
                f"{line['library']} {group[1]} {group[0]} seed {line['seed']}: evaluated every "
                f"{line['eval_every']} steps, the row's other lines every {protocol}"
            )
            continue
        kept.append(line)
    return kept, left_out


def summarize(
    lines: list[dict[str, Any]], suite: Suite
) -> dict[Group, dict[str, dict[int, dict[str, Any]]]]:
    """(task, algorithm, budget) -> library -> seed -> line, in ``suite``'s order, of the
    lines :func:`table_lines` keeps; a cell appended twice counts once."""
    groups: dict[Group, dict[str, dict[int, dict[str, Any]]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for line in table_lines(lines)[0]:
        group = (line["task"], line["algorithm"], line["steps"])
        groups[group][line["library"]][line["seed"]] = line
    task_order = {task: i for i, task in enumerate(suite.tasks)}
    algo_order = {algo: i for i, algo in enumerate(suite.algos)}

    def order(group: Group) -> tuple[Any, ...]:
        task, algorithm, steps = group
        return task_order.get(task, len(task_order)), task, algo_order.get(algorithm, 99), steps

    return {group: groups[group] for group in sorted(groups, key=order)}


def mean_curve(
    runs: Iterable[dict[str, Any]],
) -> tuple[list[int], list[float], list[float]]:
    """The steps every run evaluated at, with the mean and std (sample; 0 for one run) over
    the runs of the evaluation return there."""
    curves = [dict(zip(r["curve"]["steps"], r["curve"]["returns"], strict=True)) for r in runs]
    if not curves:
        return [], [], []
    steps = sorted(set.intersection(*(set(c) for c in curves)))
    means, stds = [], []
    for step in steps:
        mean, std = mean_std([c[step] for c in curves])
        means.append(mean)
        stds.append(0.0 if math.isnan(std) else std)
    return steps, means, stds


def peak_of_mean(runs: Iterable[dict[str, Any]]) -> str:
    """Tianshou's figure: the max over the steps of the mean curve, ± the std over seeds there,
    the population std (ddof 0) as its ``examples/mujoco/tools.py`` computes it (``np.std``)."""
    runs = list(runs)
    steps, means, _ = mean_curve(runs)
    if not steps:
        return "n/a"
    best = max(range(len(steps)), key=means.__getitem__)
    if len(runs) == 1:
        return f"{means[best]:.1f}"
    at_best = [dict(zip(r["curve"]["steps"], r["curve"]["returns"], strict=True)) for r in runs]
    std = statistics.pstdev(c[steps[best]] for c in at_best)
    return f"{means[best]:.1f} ± {std:.1f}"


def fmt_steps(steps: int) -> str:
    if steps % 1_000_000 == 0:
        return f"{steps // 1_000_000}M"
    return f"{steps // 1000}k" if steps % 1000 == 0 else str(steps)


HEADER = """\
# MuJoCo benchmark table

Written by `python benchmarks/mujoco_table.py --render` from `mujoco_table.jsonl` (one line per
finished cell: library, algorithm, task, seed, budget, curve, settings, commit, machine load).
The cells: the on-policy algorithms on four tasks at 1M steps, SAC, TD3 and DDPG on Hopper and
HalfCheetah at 100k, REDQ and DroQ on Hopper at 30k, 3 seeds each, and SB3's PPO, TRPO, SAC, TD3
and DDPG on the same cells. tdrl: the recipe's own defaults (`recipes/<algo>.py`; NPG is
`trpo.py --algo npg`), except TD3 and DDPG at 100k steps, which run the SB3 cells' settings:
`--init-random-frames 10000 --actor-lr 1e-3 --critic-lr 1e-3 --hidden-sizes 400 300` (their
defaults, Tianshou's for 1M steps, spend 25k of the budget on random steps; see
`recipes/td3.py`); SB3 (TRPO: sb3-contrib): rl-baselines3-zoo 2.9.2's hyperparameters for the
algorithm and task (its v4 entries, run on v5). Evaluation, both libraries: 10 deterministic
episodes on a separate env every `eval_every` env steps (the recipe's default: 20k on-policy,
10k off-policy) and at the end; one torch thread per run.

- final: the last evaluation's mean return, mean ± sample std over seeds; best: each seed's
  max over its evaluations, mean ± std over seeds; wall: mean seconds per run (envs, training
  and evaluations); ratios: tdrl mean / SB3 mean over the seeds both ran (their number shown
  where either ran others too; returns: only where SB3's mean is > 0).
- peak (Tianshou's metric): the max over evaluation steps of the mean over seeds, ± the std
  over seeds at that step (the population std, as Tianshou's `examples/mujoco/tools.py`
  computes it), from tdrl's curves.
- A row holds one evaluation protocol (10 episodes every `eval_every` steps); a line of another
  is left out, and the page says which.
- Tianshou (1M): thu-ml/tianshou `examples/mujoco/README.md` (commit f2402056b03a), the
  "Tianshou (1M)" columns: max over training of the mean over 10 seeds of 10 test episodes,
  ± std over seeds, gym 0.17.3 v3 tasks, 1M env steps, so above the 100k (off-policy) and 30k
  (REDQ) budgets here; n/a where it publishes no 1M figure (REINFORCE: 3M and 10M only; REDQ:
  none). Ant differs most: on v3 under mujoco >= 2.0 the contact forces read as zero, so they
  neither inform the policy nor cost reward, while Ant-v5 observes them (105 dims against
  v4's 27) and charges their cost by default; the Ant columns compare different tasks.
- SB3 zoo (1M): DLR-RM/rl-baselines3-zoo `benchmark.md` (commit 0088472b8cb6): one trained
  agent per entry (the zoo calls it "not a quantitative benchmark"), 1M env steps at the zoo's
  hyperparameters on gym v3 tasks, then its deterministic policy over ~150k steps: mean ± std
  over those episodes; n/a where the zoo has no MuJoCo entry (DDPG: PyBullet only; A2C: not on
  Ant and Walker2d; NPG, REINFORCE and REDQ: not in SB3).
- Lines of settings that are not the recipes' defaults are kept, with their settings, in
  `mujoco_table_superseded.jsonl`: PPO without reward scaling (on Ant its mean final was 1874.6,
  against 1180.6 with it), TRPO and NPG without return scaling, A2C with `--scale-rewards`, A2C
  without value-target scaling, A2C with its learning rate decayed to 0 over the 1M steps
  (before the 3M horizon of Tianshou's schedule), A2C with Tianshou's value-target scaling
  (before the critic's outputs were preserved), TD3 at the recipe's 1M defaults and with
  256x256 nets. Runs that are not cells (tuning seeds, another evaluation protocol: `--set`,
  which the line records under `overrides`) are kept in `mujoco_tuning.jsonl`.
- NPG is TRPO without the line search (the same KL-scaled natural-gradient step, `max_kl`
  0.01), so where TRPO's line search never shrinks a step the two runs compute the same thing.
  In the TRPO runs' train.csv (977 logged rows a run, `step_size`), it shrank none on Ant
  (seeds 0-2), HalfCheetah and Walker2d (seeds 0-1), 3 and 2 on their seed 2, and 14-61 on
  Hopper: hence the identical Ant rows and seeds 0-1 elsewhere.
- REDQ cells checkpoint every 3k steps (the recipe's 100k would be only the last), so a cell cut
  (the driver or its process stopped) resumes from its checkpoint while its run folder (under
  /tmp) is there; a resumed cell's line says so (`resumed`), and its wall time is the run's clock
  at that checkpoint plus the resumed part; in the run conditions a resumed cell's load is that
  of its last segment. One REDQ cell is 600k gradient steps on 10 critics (update ratio 20):
  ~3 hours of one idle core at `benchmarks/updates.py`'s ~60 REDQ steps/s on one thread, more
  with other work on the machine (the wall column). REDQ has no SB3 class and no published 30k
  figure; against tdrl's SAC cells (update ratio 1) at their 30k evaluation (341, 306, 680: mean
  442), REDQ's 1004.9 at 30k env steps is 2.3x, the sample efficiency its ratio of 20 is for.
- DroQ (`--algos droq`: REDQ's cells with 2 critics of dropout 0.01 and LayerNorm, the rest of
  the settings the same: Tianshou's REDQ learning rate 1e-3, 10k random steps, target entropy
  -3) ends at 30k at 3033.4, 637.3 and 573.0 (seeds 0-2): the mean, 1414.5, is 1.41x REDQ's
  1004.9, but it is seed 0's; seeds 1 and 2 end below REDQ's lowest seed (957.4), and at 20k
  all three (264.6, 285.5, 233.8) are below REDQ's (958.3, 507.0, 852.2). Its three cells ran
  together, three processes on the 2 cores with other work beside them: 6217 s each, against
  REDQ's 16871 (2.7x), 2 critics against 10. The authors' code
  (TakuyaHiraoka/Dropout-Q-Functions-for-Doubly-Efficient-Reinforcement-Learning, REDQ's
  codebase) runs both at lr 3e-4, 5k random steps and MBPO's target entropy (Hopper: -1); those
  settings were not run here.
- Against Tianshou's published 1M figures (its metric is the peak column's: best against
  best), tdrl's PPO, TRPO and NPG are at or above on Hopper, HalfCheetah and Walker2d and
  below on Ant: PPO 1245.6 against 3258.4 (0.38x), TRPO 2322.2 against 2866.7 (0.81x), NPG
  2322.2 against 2358.0 (0.985x; its mean of per-seed bests, 2371.2, is above, but the peak is
  the comparable figure).
- Ant is not the task Tianshou measured: its table ran gym 0.17.3's Ant-v3 under MuJoCo 2.0
  (its README's footnote 3), where the 84 contact-force entries of the observation were always
  zero and the contact cost with them (openai/gym#1541); Ant-v5 observes the forces and charges
  their cost. `tdrl/AntNoContact-v5` is Ant-v5 without both. There tdrl's PPO at its defaults
  (1M steps, the recipe's evaluation: 10 deterministic episodes every 20k steps) peaks at
  4176.7, 3492.4 and 5127.2 on seeds 0-2 (the peak of their mean curve, Tianshou's metric:
  4223.5, 1.30x its 3258.4; final 4176.6 ± 832.9), at 3081.5, 4971.8 and 3160.3 on seeds 3-5
  (peak of the mean curve 3697.5, 1.13x; over seeds 0-5: 3937.1, 1.21x), and at 3588.1 and 4236.8
  on seeds 50 and 51, where the same settings and seeds on Ant-v5 peak at 2286.8 and 1475.9.
  Tianshou's own settings (no reward scaling, the learning rate decayed over its 3M steps, GAE
  before every epoch) did not do better on seeds 50 and 51: peaks 2393.3 and 1756.0 on Ant-v5,
  3557.6 and 2544.7 on `tdrl/AntNoContact-v5`; the defaults stay. These Ant runs are not table
  cells.
- TRPO Walker2d has seeds 0-5: it was the one row where tdrl's mean final and mean best were
  below SB3's on seeds 0-2 (final 3995.6 against 4460.8, 0.90x; best 4173.9 against 4740.1,
  0.88x), so it alone got seeds 3-5, run after and not used for tuning, at the same settings
  but other load (two cells at a time, so its wall ratio mixes two conditions): tdrl final
  4966.9, 5110.2, 4395.9, SB3 3337.2, 4111.4, 1155.0 (SB3's seed 5 fell from a best of 4482.6
  to 1155.0 at the end). Over seeds 0-5: final 4409.9 against 3664.3 (1.20x; without SB3's
  seed 5, 4412.8 against 4166.2, 1.06x), best 4502.6 against 4529.1 (0.99x). Tuning seeds
  50-52 (1M steps, this evaluation, not table cells): the recipe's defaults end at 4565.0,
  4947.3 and 4516.0 (mean 4676.1); SB3's critic regime (`--critic-minibatch-size 128`, 160
  critic steps a batch instead of 20) at 4250.6, 5567.0 and 3806.1 (mean 4541.2); the defaults
  stay.
- CrossQ Hopper has seeds 0-4: behind SB3's on seeds 0-2 (mean final 0.90x), it alone got
  seeds 3 and 4 (seed 5 was cut for time), two cells at a time: tdrl 3123.2 and 3309.9, SB3
  3282.2 and 3047.6. Over seeds 0-4 the mean final is 0.95x SB3's (2939.7 against 3095.7; seed
  0's 1949.9 the one far behind) and the mean best 1.02x (3268.7 against 3197.2). sb3-contrib
  steps the critic first; tdrl's cells take one joint step, which did better on tuning seeds 50
  and 51 (not cells): final 3233.4 and 3178.7 joint, 569.3 and 1385.1 critics first (best 579.1
  and 3256.6).
- TQC's cells step as sb3-contrib's (`--update-order critics_first`: the critics, then actor and
  alpha on the updated critics). HalfCheetah seeds 0-4 were rerun so (seeds 2-4 three cells on
  two cores): final 4752.7 against sb3-contrib's 4870.1 (0.98x), above on seeds 1-3; with the
  joint step, now in the superseded file, 4620.0 (0.95x), above on one seed. Tuning seeds 50
  and 51 (not cells): 4365.5 and 4957.1 critics-first, 3184.4 and 5035.9 joint. Hopper seeds 0-2
  were rerun so too (seed 2 with three processes on two cores): final 960.3, 2189.2 and 2715.2,
  mean 1954.9 against sb3-contrib's 1334.0 (1.47x); the joint step's lines, now in the superseded
  file, ended at 1700.3 (1.27x). The TQC paper drops no atom on HalfCheetah (its d = 0; the zoo
  keeps sb3-contrib's 2): on tuning seeds 50 and 51 (`--set top_quantiles_to_drop=0`, lines in
  `mujoco_tuning.jsonl`) it ended at 4629.3 and 4197.9 against 4365.5 and 4957.1 with 2, so
  the preset keeps 2.
- A2C's rows were rerun when its value-target scaling began to preserve the critic's outputs
  (PopArt's rescaling of the value head, `--preserve-value-outputs`): in Tianshou's procedure,
  which the earlier lines ran, the std of the returns fed on itself (seed 0 on Hopper: 5.6e3 at
  1M steps, episode returns near 200) and Hopper's seed 0 ended at 0.4. Before -> after, peak of
  the mean curve and mean final ± std over seeds (the earlier lines are in the superseded file):
  Hopper (seeds 0-5) 931.4 -> 786.3, 898.5 ± 814.7 -> 757.7 ± 289.7 (lowest final 0.4 ->
  461.7); HalfCheetah (0-2) 2179.4 -> 2641.4, 2147.4 ± 764.0 -> 2521.7 ± 1437.7; Walker2d (0-2)
  1232.7 -> 1055.0, 833.9 ± 580.6 -> 646.4 ± 277.3; Ant (0-2) 2992.0 -> 2888.7, 2807.1 ±
  923.1 -> 2888.7 ± 285.5. Every change is within the spread over seeds; the collapse is gone.
  Walker2d then got seeds 3-5 with the new default (final 426.0, 488.2, 404.5; best 471.9,
  2142.3, 1040.0): over seeds 0-5 its peak of the mean curve is 735.6, 0.67x Tianshou's 1091.6.
- A2C against Tianshou's published peaks: its table was measured while its policies evaluated by
  sampling their actions (thu-ml/tianshou#353; the mode came with #354, April 2021), this
  table evaluates the mode. That is not the gap: the same training runs evaluated both ways
  (a sampled evaluation draws from a random stream of its own, so the train rows are equal),
  seeds 0-5 at 95002ea (lines in `mujoco_tuning.jsonl`), peak of the mean curve on Hopper 686.8
  with the mode and 685.2 sampled, on Walker2d 1189.5 and 889.0 (mean final 630.0 and 482.8,
  899.2 and 814.5). Those runs are also a second draw of the table's seeds (the table's lines
  ran at older commits): Hopper 686.8 against the table's 786.3, Walker2d 1189.5 (1.09x
  Tianshou's 1091.6) against 735.6. Between draws of the same six seeds the row moves more
  than it differs from Tianshou's; the table keeps the lines it has.
- A2C beside Tianshou's own A2C script (`--libraries tdrl Tianshou`, its settings in the driver's
  `TIANSHOU`, evaluated like the cells; lines in `mujoco_tuning.jsonl`), Hopper-v5 seeds 0-5:
  Tianshou's peak of the mean curve is 873.3, 0.70x its published 1253.2 (gym's Hopper-v3),
  against tdrl's 686.8; mean final 533.0 ± 401.7 against tdrl's 630.0 ± 266.6 (1.18x); its seed
  2 ended at 21.7. tdrl's seeds 0-2 ran beside it with curves equal to their earlier runs.
- TD3 HalfCheetah, where tdrl's mean wall time is above SB3's (1.04x): none of its seed pairs ran
  side by side (together 0%, 0%, 2%), so each library's runs met other load on the machine.
"""


def run_commits(line: dict[str, Any]) -> str:
    """The line's commit (``+``: tracked files differed from it); a resumed run's starting
    commit before it where that was another (``first→last``)."""
    last = (line["commit"] or "?")[:8] + ("+" if line["dirty"] else "")
    first = (line.get("resumed", {}).get("first_commit") or "")[:8]
    return f"{first}→{last}" if first and not last.startswith(first) else last


def versions_and_machine(runs: Iterable[dict[str, Any]]) -> str:
    """The page's one statement of the versions each library's lines recorded (every version
    seen, where a package has several) and of the machine (CPUs, ``os.cpu_count()``)."""
    found: dict[str, dict[str, set[str]]] = {}
    cpus: set[int] = set()
    for run in runs:
        packages = found.setdefault(run["library"], {})
        for name, version in (run.get("versions") or {}).items():
            packages.setdefault(name, set()).add(str(version))
        if run.get("cpus"):
            cpus.add(int(run["cpus"]))
    libraries = "; ".join(
        f"{library}: " + ", ".join(f"{name} {' / '.join(sorted(v))}" for name, v in seen.items())
        for library, seen in found.items()
        if seen
    )
    machine = " or ".join(map(str, sorted(cpus))) or "unknown"
    return f"Versions: {libraries or 'not recorded'}. Machine: {machine} CPUs.\n"


def markdown(lines: list[dict[str, Any]], suite: Suite) -> str:
    """The table (one row per task, algorithm and budget) and the run conditions."""
    groups = summarize(lines, suite)
    left_out = table_lines(lines)[1]
    reference = [title for title, _ in suite.references]  # columns of published figures
    out = [suite.header]
    if groups:
        out.append(
            versions_and_machine(
                run for libraries in groups.values() for by_seed in libraries.values()
                for run in by_seed.values()
            )
        )  # fmt: skip
    if left_out:
        reasons = Counter(left_out)
        out.append(
            f"{len(left_out)} line(s) of another evaluation protocol left out: "
            + "; ".join(f"{why}{f' (x{n})' if n > 1 else ''}" for why, n in reasons.items())
            + ".\n"
        )
    if not groups:
        out.append("No cell has finished yet.\n")
        return "\n".join(out)
    out += [
        "| task | algorithm | steps | tdrl final | tdrl best | tdrl seeds | tdrl wall s "
        "| SB3 final | SB3 best | SB3 seeds | SB3 wall s | final tdrl/SB3 | wall tdrl/SB3 "
        "| tdrl peak |" + "".join(f" {title} |" for title in reference),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        + "---:|" * len(reference),
    ]
    for (task, algorithm, steps), libraries in groups.items():
        cells: list[str] = [task, display_name(algorithm), fmt_steps(steps)]
        for library in LIBRARIES:
            runs = list(libraries.get(library, {}).values())
            if not runs:
                cells += ["—"] * 4
                continue
            cells += [
                pm([r["final_return"] for r in runs]),
                pm([r["best_return"] for r in runs]),
                str(len(runs)),
                f"{statistics.fmean(r['wall_s'] for r in runs):.0f}",
            ]
        cells += [
            *paired_ratios(libraries.get("tdrl", {}), libraries.get("SB3", {})),
            peak_of_mean(libraries["tdrl"].values()) if "tdrl" in libraries else "—",
        ]
        cells += [published(algorithm, task) for _, published in suite.references]
        out.append("| " + " | ".join(cells) + " |")
    out += seed_pairs(groups)
    out += [
        "",
        "Run conditions: seeds, commits (`+` when tracked files differed from it), cells run "
        "at once (`--jobs`; most running when one started), mean 1-minute load average at the "
        "start and end of the runs.",
        "",
        "| task | algorithm | steps | library | seeds | commits | jobs (most at once) "
        "| load start → end |",
        "|---|---|---:|---|---|---|---|---|",
    ]
    for (task, algorithm, steps), libraries in groups.items():
        for library, by_seed in libraries.items():
            runs = [by_seed[s] for s in sorted(by_seed)]
            commits = sorted({run_commits(r) for r in runs})
            start = statistics.fmean(r["load_start"][0] for r in runs)
            end = statistics.fmean(r["load_end"][0] for r in runs)
            out.append(
                f"| {task} | {display_name(algorithm)} | {fmt_steps(steps)} | {library} "
                f"| {','.join(map(str, sorted(by_seed)))} | {' '.join(commits)} "
                f"| {max(r['jobs'] for r in runs)} ({max(r['running_at_start'] for r in runs)}) "
                f"| {start:.2f} → {end:.2f} |"
            )
    return "\n".join(out) + "\n"


def paired_ratios(
    ours: dict[int, dict[str, Any]], theirs: dict[int, dict[str, Any]]
) -> tuple[str, str]:
    """tdrl mean / SB3 mean of the final return and of the wall time over the seeds both ran
    (with their number when either library ran others too); "—" without such seeds."""
    seeds = sorted(set(ours) & set(theirs))
    if not seeds:
        return "—", "—"
    note = "" if set(ours) == set(theirs) else f" ({len(seeds)} seed{'s' * (len(seeds) > 1)})"

    def mean(runs: dict[int, dict[str, Any]], name: str) -> float:
        return statistics.fmean(runs[seed][name] for seed in seeds)

    final = ratio(mean(ours, "final_return"), mean(theirs, "final_return"), positive=True)
    wall = ratio(mean(ours, "wall_s"), mean(theirs, "wall_s"), positive=False)
    return final + note, wall + note


def overlap(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """The fraction of the shorter of two runs during which both ran (start ``date``, then
    ``wall_s``): 1 for a pair run side by side, 0 for runs one after the other; ``None`` when
    either was resumed (its clock holds a cut it did not run through)."""
    if "resumed" in a or "resumed" in b:
        return None
    starts = [datetime.datetime.fromisoformat(r["date"]).timestamp() for r in (a, b)]
    ends = [start + r["wall_s"] for start, r in zip(starts, (a, b), strict=True)]
    shorter = min(a["wall_s"], b["wall_s"])
    return max(0.0, min(ends) - max(starts)) / shorter if shorter > 0 else 0.0


def together(a: dict[str, Any], b: dict[str, Any]) -> str:
    share = overlap(a, b)
    return "resumed" if share is None else f"{share:.0%}"


def seed_pairs(groups: dict[Group, dict[str, dict[int, dict[str, Any]]]]) -> list[str]:
    """The seeds both libraries ran, one row each (final return, wall time, their ratios, and
    how much of the time the two ran together), then the pairs where tdrl is behind."""
    rows, behind, slower = [], [], []
    for (task, algorithm, steps), libraries in groups.items():
        ours, theirs = libraries.get("tdrl", {}), libraries.get("SB3", {})
        for seed in sorted(set(ours) & set(theirs)):
            a, b = ours[seed], theirs[seed]
            name = f"{task} {display_name(algorithm)} {fmt_steps(steps)} seed {seed}"
            final = ratio(a["final_return"], b["final_return"], positive=True)
            wall = ratio(a["wall_s"], b["wall_s"], positive=False)
            if not a["final_return"] >= b["final_return"]:  # a diverged (nan) run is behind
                behind.append(f"{name} ({a['final_return']:.1f} against {b['final_return']:.1f})")
            if a["wall_s"] > b["wall_s"]:
                slower.append(f"{name} ({a['wall_s']:.0f} s against {b['wall_s']:.0f} s)")
            rows.append(
                f"| {task} | {display_name(algorithm)} | {fmt_steps(steps)} | {seed} "
                f"| {a['final_return']:.1f} | {b['final_return']:.1f} | {final} "
                f"| {a['wall_s']:.0f} | {b['wall_s']:.0f} | {wall} | {together(a, b)} |"
            )
    if not rows:
        return []
    return [
        "",
        "Seed by seed against SB3: the seeds both libraries ran; together: the share of the "
        "shorter run during which the other ran too (100%: side by side, `--jobs 2`; 0%: one "
        "after the other, under whatever else the machine ran).",
        "",
        "| task | algorithm | steps | seed | tdrl final | SB3 final | final tdrl/SB3 "
        "| tdrl wall s | SB3 wall s | wall tdrl/SB3 | together |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        f"tdrl's final return below SB3's: {len(behind)} of {len(rows)} pairs{listed(behind)}.",
        "",
        f"tdrl's run longer than SB3's: {len(slower)} of {len(rows)} pairs{listed(slower)}.",
    ]


def listed(items: list[str]) -> str:
    """``": a; b"``, or nothing for no items."""
    return ": " + "; ".join(items) if items else ""


def plot_tasks(lines: list[dict[str, Any]], folder: Path, suite: Suite) -> list[Path]:
    """``<suite>_<task>.png`` per task (the id after its last "/"): evaluation return against
    env steps, the mean over seeds ± one std, one line per library and algorithm; one panel per
    budget."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tdrl.trainers.plotting import plot_band, save_png

    by_task: dict[str, dict[Group, Any]] = defaultdict(dict)
    for group, libraries in summarize(lines, suite).items():
        by_task[group[0]][group] = libraries
    colors = {algo: f"C{i}" for i, algo in enumerate(suite.algos)}
    pngs = []
    for task, groups in by_task.items():
        budgets = sorted({steps for _, _, steps in groups})
        fig, axes = plt.subplots(1, len(budgets), figsize=(6.5 * len(budgets), 4.8), squeeze=False)
        for ax, budget in zip(axes[0], budgets, strict=True):
            for (_, algorithm, steps), libraries in groups.items():
                if steps != budget:
                    continue
                for library, by_seed in libraries.items():
                    x, mean, std = mean_curve(by_seed.values())
                    if not x:
                        continue
                    n = len(by_seed)
                    plot_band(
                        ax, x, mean, std, alpha=0.15, color=colors.get(algorithm),
                        ls="-" if library == "tdrl" else "--",
                        marker="o" if len(x) < 3 else None,  # a lone point draws no line
                        label=f"{library} {display_name(algorithm)} ({n} seed{'s' * (n > 1)})",
                    )  # fmt: skip
            ax.set_title(f"{task}, {fmt_steps(budget)} env steps")
            ax.set_xlabel("env steps")
            ax.set_ylabel(f"eval return ({EVAL_EPISODES} deterministic episodes)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize="small", loc="upper left")
        # MinAtar/Breakout-v1: no subfolder; gymnasium_robotics:PointMaze_UMaze-v3: no colon
        name = task.rsplit("/", 1)[-1].rsplit(":", 1)[-1]
        pngs.append(save_png(fig, folder / f"{suite.name}_{name}.png"))
    return pngs


def render(table: Path, suite: Suite, out_dir: Path | None = None) -> tuple[Path, list[Path]]:
    """Write ``<table stem>.md`` and the per-task PNGs next to ``table`` (or in ``out_dir``)."""
    folder = table.parent if out_dir is None else out_dir
    lines = read_lines(table)
    md = folder / f"{table.stem}.md"
    md.parent.mkdir(parents=True, exist_ok=True)
    pngs = plot_tasks(lines, folder, suite)
    curves = [
        "",
        "## Curves",
        "",
        f"{suite.evaluation} evaluation return against env steps, per library: the mean over "
        "seeds, shaded ± the sample std over seeds.",
        *(f"\n![{png.stem}]({png.name})" for png in pngs),
    ]
    md.write_text(
        markdown(lines, suite) + stale_section(lines, suite)
        + ("\n".join(curves) + "\n" if pngs else "")
    )  # fmt: skip
    return md, pngs


def stale_section(lines: list[dict[str, Any]], suite: Suite) -> str:
    """The page's list of lines run with other settings than their cells would run now
    (:func:`settings_drift`), each with what changed; empty when there are none."""
    stale = []
    for line in lines:
        if line["algorithm"] not in suite.algos:  # a retired row: nothing to compare with
            continue
        changed, _ = settings_drift(line, suite)
        if changed:
            cell = f"{line['library']} {line['algorithm']} {line['task']} seed {line['seed']}"
            stale.append(f"- {cell}: {'; '.join(changed)}")
    if not stale:
        return ""
    return "\n".join([
        "", "## Stale lines", "",
        f"{len(stale)} line(s) above ran with other settings than their cells have now (a "
        "default changed since); they count until moved to the superseded file and rerun:", "",
        *stale, "",
    ])  # fmt: skip


# ----------------------------------------------------------------------------- command line


def tianshou_1m(algorithm: str, task: str) -> str:
    """Tianshou's published 1M figure of ``algorithm`` on ``task``, or n/a."""
    return TIANSHOU_1M.get(algorithm, {}).get(task_name(task), "n/a")


def zoo_1m(algorithm: str, task: str) -> str:
    """rl-baselines3-zoo's published 1M agent of ``algorithm`` on ``task``, or n/a."""
    figure = ZOO_1M.get(algorithm, {}).get(task_name(task), "-")
    return "n/a" if figure == "-" else figure


MUJOCO = Suite(
    "mujoco", __file__, ALGOS, TASKS, zoo_hyperparameters, run_sb3, HEADER,
    packages=("gymnasium", "mujoco"),
    references=(("Tianshou (1M)", tianshou_1m), ("SB3 zoo (1M)", zoo_1m)),
)  # fmt: skip


def main(argv: list[str] | None = None, suite: Suite = MUJOCO) -> int:
    """The command line of ``suite``'s driver."""
    parser = argparse.ArgumentParser(description=suite.header.splitlines()[0].lstrip("# "))
    algos = list(suite.algos)
    parser.add_argument("--algos", nargs="+", choices=algos, default=algos)
    parser.add_argument("--tasks", nargs="+", default=list(suite.tasks), help="gymnasium ids")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--libraries", nargs="+", choices=(*LIBRARIES, *TUNING_PEERS), default=list(LIBRARIES),
        help="Tianshou (its A2C script): tuning tables only, like --set",
    )  # fmt: skip
    budgets = ", ".join(f"{name} {fmt_steps(algo.steps)}" for name, algo in suite.algos.items())
    parser.add_argument(
        "--steps", type=int, help=f"env-step budget of every cell (default: {budgets})"
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        help="env steps between evaluations (default: the algorithm's preset, else the recipe's)",
    )
    parser.add_argument(
        "--eval-episodes", type=int, default=EVAL_EPISODES,
        help="episodes per evaluation (the table renders only cells of 10)",
    )  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1, help="cells at once, one core each")
    parser.add_argument("--table", type=Path, default=suite.table, help="the JSON-lines file")
    parser.add_argument(
        "--workdir", type=Path, default=suite.workdir, help="run folders (outside the repository)"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", dest="sets",
        help="tuning runs: a recipe field changed on top of the algorithm's preset (repeatable; "
        "tdrl cells only, into a --table and --workdir of their own, never the table's)",
    )  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="list the cells left to run")
    parser.add_argument("--render", action="store_true", help="only write the .md and PNGs")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, suite)
        return 0
    sys.path.insert(0, str(ROOT))  # the recipes: their defaults, against the lines' settings
    try:
        overrides = parse_sets(args.sets)
    except ValueError as error:
        parser.error(str(error))
    if overrides and args.render:
        parser.error("--set runs tuning cells; --render draws the table's page")
    if args.render:
        md, pngs = render(args.table, suite)
        print(f"wrote {md}" + "".join(f"\nwrote {png}" for png in pngs))
        return 0
    cells = build_cells(
        suite, args.algos, args.tasks, args.seeds, args.libraries, steps=args.steps,
        eval_every=args.eval_every, eval_episodes=args.eval_episodes,
    )  # fmt: skip
    if overrides:
        check_tuning(overrides, cells, args, suite)
    if any(cell.library in TUNING_PEERS for cell in cells):
        check_apart(args, suite, "--libraries Tianshou")
    keys = {cell.key for cell in cells}
    lines = read_lines(args.table)
    other = [line.get("overrides") or {} for line in lines if not same_overrides(line, overrides)]
    if other:  # a table's cells are keyed without settings: one --set (or none) a table
        raise SystemExit(
            f"{args.table} holds lines run with --set {other[0]} (this command: "
            f"{overrides or 'none'}); give --table a file of its own"
        )
    report_drift([line for line in lines if line_key(line) in keys], suite)
    if args.dry_run:
        done = {line_key(line) for line in lines}
        todo = [cell for cell in cells if cell.key not in done]
        print("\n".join(map(str, todo)) + f"\n{len(todo)} of {len(cells)} cells to run")
        return 0
    launch = functools.partial(launch_subprocess, script=suite.script, overrides=overrides)
    failures = run_cells(cells, args.table, args.workdir, args.jobs, launch, overrides=overrides)
    if failures:
        print(f"{failures} cell(s) failed; the same command runs them again")
    return 1 if failures else 0


def check_tuning(
    overrides: dict[str, Any], cells: list[Cell], args: argparse.Namespace, suite: Suite
) -> None:
    """``--set`` runs are tuning runs: tdrl cells only, their lines and run folders apart from
    the table's (a line of other settings there would be stale, and a folder of the table's
    cell would be resumed or cleared), every field one the recipe has, in its type (else an
    exit naming it, before anything runs)."""
    if any(cell.library != "tdrl" for cell in cells):
        raise SystemExit("--set changes tdrl's recipe fields: add --libraries tdrl")
    check_apart(args, suite, "--set")
    for cell in cells:
        try:
            tdrl_config(cell, args.workdir, suite, overrides)
        except (TypeError, ValueError) as error:
            raise SystemExit(f"--set: {error}") from None


def check_apart(args: argparse.Namespace, suite: Suite, what: str) -> None:
    """Tuning runs (``what``) keep their lines and run folders apart from the table's: an exit
    naming the rule otherwise."""
    if args.table.resolve().parent == suite.table.resolve().parent:  # its page and PNGs too
        raise SystemExit(
            f"{what}: tuning lines stay out of the table's folder ({suite.table.parent}); give "
            "--table a file elsewhere"
        )
    if args.workdir.resolve() == suite.workdir.resolve():
        raise SystemExit(f"{what}: give --workdir a folder of its own (not the table's cells')")


if __name__ == "__main__":
    sys.exit(main())
