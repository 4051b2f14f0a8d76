"""The MinAtar benchmark table: DQN, Rainbow, PPO and PPG on pixels, tdrl beside SB3's DQN and PPO.

The cells, their JSON lines (``docs/benchmarks/minatar_table.jsonl``: one fsynced line per
finished cell, done cells skipped), ``--jobs``, the subprocess per cell with one thread, the
markdown table and the mean ± std curves (``minatar_table.md``, ``minatar_<game>.png``) are
``benchmarks/mujoco_table.py``'s; this file adds only its :class:`~mujoco_table.Suite`: the
algorithms with their settings, the tasks, SB3's DQN and the page's header.

Settings: MinAtar's published DQN (Young & Tian 2019, arXiv 1903.03176; its examples/dqn.py) for
every cell: batch 32, replay 100k, learning rate 2.5e-4, gamma 0.99, epsilon 1 -> 0.1 over 100k env
steps (greedy in evaluation), a hard target copy every 1000 updates, 5k uniform random steps before
learning, one update per env step, the Huber loss; the env's own sticky actions (0.1) and difficulty
ramping. Where both libraries differ from the paper: Adam (eps 1e-8) instead of centered RMSprop
(momentum 0.95, squared-gradient momentum 0.95, eps 0.01), the gradient norm clipped at 10 (SB3's
default), epsilon decaying from step 0 (the paper: from the end of the random steps, so 0.1 at
105k), 500k env steps instead of 5M. tdrl: ``recipes/dqn.py``'s and ``recipes/rainbow.py``'s
``main`` with these fields (``ALGOS``), the MinAtarCNN Q network the recipes pick on MinAtar frames
(16 3x3 filters stride 1, a 128-unit layer), frames stored plainly (``store_frames_once``:
frame-efficient storage only for stacks and large frames; storing these frames once, as the table's
earliest cells did, draws the same samples at about 15% more time a step), no checkpoints (a cell
cut short starts over anyway). "dqn" is plain DQN as in the paper and SB3 (``double_dqn=False``);
"rainbow" is rainbow.py's ``--algo c51 --noisy --dueling --prioritized --n-steps 3 --double-dqn``
on the same settings, with the recipe's C51 support [0, 100] (Obando-Ceron & Castro 2021, arXiv
2011.14826, use ±100 on MinAtar) and PER alpha 0.6, beta 0.4 -> 1. SB3 (DQN only; SB3 has no
Rainbow):
``stable_baselines3.DQN`` with the same values (train_freq 1, gradient_steps 1, learning_starts 5k;
target_update_interval counts env steps there, updates here: the same at one update a step;
exploration_fraction = 100k / budget), whose features extractor is tdrl's ``MinAtarCNN`` body (its
128 hidden features) and net_arch [] (SB3's output layer), so both Q networks have the same layers,
parameters and PyTorch default init, on the same env id (``MinAtar/<Game>-v1``, uint8 frames C x 10
x 10, registered by ``tdrl.envs``).

PPO (both libraries) runs rl-baselines3-zoo's Atari settings (``PPO_ZOO``) without the frame
stack, SB3's ``PPO("CnnPolicy")`` with tdrl's MinAtarCNN body as its shared features extractor
and ``net_arch=[]``, so both have the same layers and parameter count, orthogonally initialised;
PPG (tdrl only) the same policy phase with the paper's auxiliary phase (``PPG``).

Evaluation, the same for both (mujoco_table's): 10 greedy episodes on 5 separate envs reset with
seed + 10,000 every 25k env steps and at the end. Budget: 500k env steps.

Speed, from 20k-step Breakout runs on a 2-core machine with other jobs running (1-minute load
3-6), one thread, env steps/s between 10k and 20k (all learning): tdrl DQN 172, SB3 DQN
184, tdrl Rainbow 57 (C51 + noisy nets + PER). A 500k cell: about 48 min, 45 min and 2.4 h;
the 18 cells (2 games x 3 seeds x {tdrl DQN, SB3 DQN, tdrl Rainbow}): about 24 h of one core,
12 h with ``--jobs 2`` on two free cores.

    python benchmarks/minatar_table.py --jobs 2      # 18 cells, 500k steps each
    python benchmarks/minatar_table.py --algos dqn --tasks MinAtar/Breakout-v1 --dry-run
    python benchmarks/minatar_table.py --render      # minatar_table.md and minatar_<game>.png

Rainbow's ablation (``ABLATED``; rendered by ``ablation_markdown``, the docs' store
``minatar_ablation``): tuning runs of the "rainbow" cell with one ingredient taken out by ``--set``
(none for the full agent), each setting into a table of its own outside docs/ (the driver keeps
tuning lines apart from the table's), then appended to ``minatar_ablation_table.jsonl``:

    python benchmarks/minatar_table.py --algos rainbow --tasks MinAtar/Breakout-v1 --seeds 0 1 \
        --libraries tdrl --steps 100000 --set n_steps=1 --table /tmp/abl/n_steps.jsonl \
        --workdir /tmp/abl/n_steps --jobs 2
    cat /tmp/abl/*.jsonl >> docs/benchmarks/minatar_ablation_table.jsonl
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # when a test loads this file
import mujoco_table as mt  # noqa: E402

TASKS = ("MinAtar/Breakout-v1", "MinAtar/SpaceInvaders-v1")
STEPS, EVAL_EVERY, EPS_FRAMES, HIDDEN = 500_000, 25_000, 100_000, 128

# Young & Tian 2019 as fields of recipes/dqn.py's and rainbow.py's Configs, and the gradient clip
# of both libraries (SB3's default; the paper has none).
PUBLISHED = (
    ("batch_size", 32), ("buffer_size", 100_000), ("lr", 2.5e-4), ("gamma", 0.99),
    ("eps_init", 1.0), ("eps_end", 0.1), ("eps_frames", EPS_FRAMES),
    ("target_update_interval", 1000), ("init_random_frames", 5000), ("frames_per_batch", 1),
    ("utd_ratio", 1.0), ("max_grad_norm", 10.0),
)  # fmt: skip
TABLE_RUN = (("eval_every", EVAL_EVERY), ("checkpoint_every", 0))
RAINBOW = (
    ("algo", "c51"), ("noisy", True), ("dueling", True), ("prioritized", True), ("n_steps", 3),
    ("double_dqn", True),
)  # fmt: skip
# rl-baselines3-zoo's Atari PPO (hyperparams/ppo.yml, "atari": 8 envs x 128 steps, 4 epochs of
# minibatch 256, lr 2.5e-4 and clip 0.1 both decayed linearly, vf_coef 0.5, ent_coef 0.01, SB3's
# defaults for the rest) without its frame stack (MinAtar's channels carry the motion), as fields
# of recipes/ppo.py's Config.
PPO_ZOO = (
    ("num_envs", 8), ("frames_per_batch", 1024), ("epochs", 4), ("minibatch_size", 256),
    ("lr", 2.5e-4), ("lr_decay", True), ("clip_epsilon", 0.1), ("clip_decay", True),
    ("critic_coeff", 0.5), ("entropy_coeff", 0.01), ("gamma", 0.99), ("lmbda", 0.95),
    ("max_grad_norm", 0.5), ("normalize_advantage", True), ("scale_rewards", False),
    ("adam_eps", 1e-5),
)  # fmt: skip
# PPG: the same policy phase (PPO's 4 epochs a rollout) and the paper's auxiliary phase (Cobbe et
# al. 2020; CleanRL's ppg_procgen.py): 6 epochs every 32 rollouts, beta_clone 1. The paper's one
# policy epoch a rollout is for Procgen's 16k-step rollouts; on these 1k-step ones it gives PPG a
# quarter of PPO's policy updates (the superseded lines), so the row measures the auxiliary phase.
PPG = (*PPO_ZOO, ("policy_iterations", 32), ("aux_epochs", 6), ("beta_clone", 1.0))
ALGOS = {
    "dqn": mt.Algo("dqn", (*PUBLISHED, *TABLE_RUN, ("double_dqn", False)), STEPS, "DQN"),
    "rainbow": mt.Algo("rainbow", (*PUBLISHED, *TABLE_RUN, *RAINBOW), STEPS, None),
    "ppo": mt.Algo("ppo", (*PPO_ZOO, *TABLE_RUN), STEPS, "PPO"),
    "ppg": mt.Algo("ppg", (*PPG, *TABLE_RUN), STEPS, None),
}
PACKAGES = ("gymnasium", "minatar")


def sb3_cell_settings(cell: mt.Cell) -> dict[str, Any] | None:
    """SB3's arguments for one cell: :func:`sb3_settings` and, for DQN, the epsilon decay over
    ``EPS_FRAMES`` env steps as a fraction of the cell's budget."""
    kwargs = sb3_settings(cell.algorithm, cell.task)
    if kwargs is not None and cell.algorithm == "dqn":
        kwargs["exploration_fraction"] = EPS_FRAMES / cell.steps  # epsilon's decay in env steps
    return kwargs


def sb3_settings(algorithm: str, task: str) -> dict[str, Any] | None:
    """SB3 DQN's arguments with the published values (exploration_fraction, which depends on the
    budget, is added per cell), SB3 PPO's with the zoo's Atari ones (``learning_rate`` and
    ``clip_range`` decay linearly from these); None for Rainbow and PPG."""
    if algorithm == "ppo":
        ppo = dict(PPO_ZOO)
        return {
            "n_envs": ppo["num_envs"], "n_steps": ppo["frames_per_batch"] // ppo["num_envs"],
            "n_epochs": ppo["epochs"], "batch_size": ppo["minibatch_size"],
            "learning_rate": ppo["lr"], "clip_range": ppo["clip_epsilon"],
            "vf_coef": ppo["critic_coeff"], "ent_coef": ppo["entropy_coeff"],
            "gamma": ppo["gamma"], "gae_lambda": ppo["lmbda"],
            "max_grad_norm": ppo["max_grad_norm"], "normalize_advantage": True,
        }  # fmt: skip
    if algorithm != "dqn":
        return None
    tdrl = dict(PUBLISHED)
    return {
        "learning_rate": tdrl["lr"],
        "buffer_size": tdrl["buffer_size"],
        "learning_starts": tdrl["init_random_frames"],
        "batch_size": tdrl["batch_size"],
        "gamma": tdrl["gamma"],
        "train_freq": tdrl["frames_per_batch"],
        "gradient_steps": round(tdrl["utd_ratio"] * tdrl["frames_per_batch"]),
        "target_update_interval": tdrl["target_update_interval"],
        "exploration_initial_eps": tdrl["eps_init"],
        "exploration_final_eps": tdrl["eps_end"],
        "max_grad_norm": tdrl["max_grad_norm"],
    }


def minatar_features() -> type:
    """SB3's features extractor of tdrl's MinAtarCNN up to its 128-unit ReLU layer."""
    import torch
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    import tdrl.envs  # noqa: F401  # registers MinAtar/<Game>-v1: uint8 [C, 10, 10] frames
    from tdrl.modules import MinAtarCNN

    class MinAtarFeatures(BaseFeaturesExtractor):
        """tdrl's MinAtarCNN up to its 128-unit ReLU layer; SB3's q_net adds the output layer."""

        def __init__(self, observation_space: Any) -> None:
            super().__init__(observation_space, features_dim=HIDDEN)
            channels, height, width = observation_space.shape
            body = MinAtarCNN(channels, None, hidden=HIDDEN, frame_size=(height, width))
            # contiguous weights: SB3's orthogonal init (PPO) views them, which channels-last
            # convolution weights refuse
            self.body = body.to(memory_format=torch.contiguous_format)

        def forward(self, observations: torch.Tensor) -> torch.Tensor:
            # SB3 hands floats (normalize_images=False: still MinAtar's 0/1, exact in uint8)
            return self.body(observations.to(torch.uint8))

    return MinAtarFeatures


def run_sb3_ppo(cell: mt.Cell) -> dict[str, Any]:
    """SB3's PPO with the zoo's Atari settings, tdrl's MinAtarCNN as its shared features
    extractor and net_arch [] (one linear layer per head, as tdrl's actor_critic on frames)."""
    from stable_baselines3 import PPO

    kwargs = sb3_cell_settings(cell)
    assert kwargs is not None
    start = time.perf_counter()
    envs = mt.sb3_envs(cell, kwargs["n_envs"])
    arguments = mt.sb3_ppo_decayed(kwargs)
    policy_kwargs = dict(features_extractor_class=minatar_features(), net_arch=[],
                         normalize_images=False)  # fmt: skip
    model = PPO("CnnPolicy", envs[0], seed=cell.seed, device="cpu", verbose=0,
                policy_kwargs=policy_kwargs, **arguments)  # fmt: skip
    settings = {
        "source": "rl-baselines3-zoo hyperparams/ppo.yml atari (lin_2.5e-4, lin_0.1), no frame "
        "stack",
        "hyperparameters": kwargs,
        "policy": "CnnPolicy: tdrl.modules.MinAtarCNN(C, None) features (shared), net_arch []",
        "policy_parameters": sum(p.numel() for p in model.policy.parameters()),
    }
    return mt.train_sb3(cell, model, envs, start, settings, PACKAGES)


def run_sb3(cell: mt.Cell, folder: Path) -> dict[str, Any]:
    """SB3's DQN with tdrl's MinAtarCNN as its Q network (PPO: :func:`run_sb3_ppo`), evaluated
    like the recipe."""
    from stable_baselines3 import DQN

    if cell.algorithm == "ppo":
        return run_sb3_ppo(cell)
    MinAtarFeatures = minatar_features()
    kwargs = sb3_cell_settings(cell)
    if kwargs is None:
        raise ValueError(f"SB3 has no {cell.algorithm}")
    start = time.perf_counter()
    envs = mt.sb3_envs(cell)
    policy_kwargs = dict(features_extractor_class=MinAtarFeatures, net_arch=[])
    model = DQN(
        "CnnPolicy", envs[0], seed=cell.seed, device="cpu", verbose=0,
        policy_kwargs=policy_kwargs | {"normalize_images": False}, **kwargs,
    )  # fmt: skip
    settings = {
        "source": "Young & Tian 2019 (arXiv 1903.03176); Adam, gradient norm 10",
        "hyperparameters": kwargs,
        "policy": "CnnPolicy: tdrl.modules.MinAtarCNN(C, None) features, net_arch []",
        "q_network_parameters": sum(p.numel() for p in model.q_net.parameters()),
    }
    return mt.train_sb3(cell, model, envs, start, settings, PACKAGES)


HEADER = """\
# MinAtar benchmark table

Written by `python benchmarks/minatar_table.py --render` from `minatar_table.jsonl` (one line
per finished cell: library, algorithm, task, seed, budget, curve, settings, commit, machine
load). The Rainbow lines come from a version of the target copy that also copied the online
network's noise draw, so the target used that draw on the update after each copy (1 update in
1000); `HardUpdate` leaves noise draws out now. Every cell: MinAtar's published DQN settings
(Young & Tian 2019: batch 32, replay 100k, lr 2.5e-4 with Adam instead of RMSprop, gamma 0.99,
epsilon 1 -> 0.1 over 100k steps, target copy every 1000 updates, 5k random steps, one update a
step), the same Q network (MinAtarCNN: 16 3x3 filters, 128 hidden units; SB3's features extractor
is tdrl's module). tdrl: `recipes/dqn.py` (DQN without double Q) and `recipes/rainbow.py`
(Rainbow: `--algo c51 --noisy --dueling --prioritized --n-steps 3 --double-dqn`); SB3: `DQN` (no
Rainbow there). On equal weights and batches tdrl's DQN update is SB3's (`benchmarks/parity_dqn.py`,
output in `parity_dqn.txt`: 30 Breakout updates with target copies, losses equal to 9 digits,
weights within 1.5e-8): the DQN rows' gaps (Breakout 0.85x, SpaceInvaders 1.18x, 3 seeds) are not
in the update; collection, exploration and evaluation were compared by reading SB3's code, not
step by step. PPO, both libraries:
rl-baselines3-zoo's Atari PPO without the frame stack (8 envs
x 128 steps, 4 epochs of minibatch 256, lr 2.5e-4 and clip 0.1 decayed linearly, vf_coef 0.5,
ent_coef 0.01, Adam eps 1e-5, advantages normalized), the MinAtarCNN under both heads (SB3's
shared features extractor, net_arch []); tdrl: `recipes/ppo.py`. PPG (tdrl, `recipes/ppg.py`):
PPO's settings, its 4 policy epochs a rollout included, with the paper's auxiliary phase (6
epochs every 32 rollouts, beta_clone 1). The paper's one policy epoch a rollout (Procgen's
rollouts are 16k steps; these are 1k) gave PPG a quarter of PPO's policy updates: those lines
are in `minatar_table_superseded.jsonl` (SpaceInvaders final 5.0 ± 0.1, Breakout 4.7 ± 0.6).
Greedy evaluation for every row.
Evaluation, both libraries: 10 greedy episodes on a separate env every 25k env steps and at the
end; one torch thread per run.

- final: the last evaluation's mean return, mean ± sample std over seeds; best: each seed's
  max over its evaluations, mean ± std over seeds; wall: mean seconds per run (envs, training
  and evaluations); ratios: tdrl mean / SB3 mean over the seeds both ran (returns: only
  where SB3's mean is > 0).
- peak: the max over evaluation steps of the mean over seeds, ± the population std over seeds
  at that step (Tianshou's way), from tdrl's curves.
"""

# Rainbow's ablation (Hessel et al. 2017, arXiv 1710.02298, sec. "Ablation studies"): each
# ingredient taken out alone, as the --set fields of tuning runs of the "rainbow" cell; the row of
# each, in this order.
ABLATED = {
    "{}": "Rainbow",
    '{"prioritized": false}': "- prioritized replay",
    '{"n_steps": 1}': "- multi-step (1-step returns)",
    '{"algo": "dqn"}': "- distributional (scalar Q, Huber loss)",
    '{"noisy": false}': "- noisy nets (epsilon-greedy)",
    '{"dueling": false}': "- dueling",
    '{"double_dqn": false}': "- double Q",
}
ABLATION_TABLE = mt.ROOT / "docs" / "benchmarks" / "minatar_ablation_table.jsonl"


def ablated(line: dict[str, Any]) -> str:
    """The ablation row of a line of tdrl's "rainbow" cell (its ``overrides``, typed as the
    driver types them, :func:`mujoco_table.typed_overrides`, over the Rainbow preset); a
    ``ValueError`` naming any other line."""
    where = f"{line['library']} {line['algorithm']} {line['task']} seed {line['seed']}"
    if line["library"] != "tdrl" or line["algorithm"] != "rainbow":
        raise ValueError(f"{where}: the ablation rows are tdrl's Rainbow runs")
    if line["eval_episodes"] != mt.EVAL_EPISODES:
        raise ValueError(f"{where}: {line['eval_episodes']} evaluation episodes, not 10")
    changed = mt.typed_overrides(line.get("overrides") or {}, dict(ALGOS["rainbow"].preset))
    key = json.dumps(changed, sort_keys=True)
    if key not in ABLATED:
        raise ValueError(f"{where}: changes {key}, not one of Rainbow's ablations {list(ABLATED)}")
    return ABLATED[key]


def ablation_markdown(lines: list[dict[str, Any]]) -> str:
    """The ablation rows (:func:`ablated`) per task and budget: seeds, final and best (mean ±
    std over seeds), the peak of the mean curve, wall seconds, and the final and best means over
    the full agent's on the seeds both ran (their number where either ran others too); then the
    versions and machine. A line evaluated otherwise than the first of its task and budget is
    refused, naming it; a cell appended twice counts once (the later line)."""
    groups: dict[tuple[str, int], dict[str, dict[int, dict[str, Any]]]] = {}
    protocols: dict[tuple[str, int], int] = {}
    for line in lines:
        row, group = ablated(line), (line["task"], line["steps"])
        if protocols.setdefault(group, line["eval_every"]) != line["eval_every"]:
            raise ValueError(
                f"{line['task']} seed {line['seed']} {row!r}: evaluated every "
                f"{line['eval_every']} steps, its task and budget's first line every "
                f"{protocols[group]}"
            )
        groups.setdefault(group, {}).setdefault(row, {})[line["seed"]] = line
    out = [
        "| task | steps | variant | seeds | final | best | peak | wall s | final / Rainbow "
        "| best / Rainbow |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for (task, steps), rows in sorted(groups.items()):
        full = rows.get("Rainbow", {})
        for name in (n for n in ABLATED.values() if n in rows):
            runs = rows[name]
            ratios = ("—", "—") if name == "Rainbow" else over_full(runs, full)
            finals = [runs[seed]["final_return"] for seed in sorted(runs)]
            bests = [runs[seed]["best_return"] for seed in sorted(runs)]
            wall = statistics.fmean(run["wall_s"] for run in runs.values())
            out.append(
                f"| {task} | {mt.fmt_steps(steps)} | {name} | {', '.join(map(str, sorted(runs)))} "
                f"| {mt.pm(finals)} | {mt.pm(bests)} | {mt.peak_of_mean(runs.values())} "
                f"| {wall:.0f} | {ratios[0]} | {ratios[1]} |"
            )
    return "\n".join(out) + "\n\n" + mt.versions_and_machine(lines)


def over_full(ours: dict[int, dict[str, Any]], full: dict[int, dict[str, Any]]) -> tuple[str, str]:
    """The final and best means of a variant over the full agent's, on the seeds both ran (with
    their number where either ran others too); "—" without such seeds."""
    seeds = sorted(set(ours) & set(full))
    if not seeds:
        return "—", "—"
    note = "" if set(ours) == set(full) else f" ({len(seeds)} seed{'s' * (len(seeds) > 1)})"

    def over(field: str) -> str:
        mean = statistics.fmean(ours[seed][field] for seed in seeds)
        return mt.ratio(mean, statistics.fmean(full[seed][field] for seed in seeds), positive=True)

    return over("final_return") + note, over("best_return") + note


MINATAR = mt.Suite(
    "minatar", __file__, ALGOS, TASKS, sb3_settings, run_sb3, HEADER, packages=PACKAGES,
    sb3_cell_settings=sb3_cell_settings,
)  # fmt: skip

if __name__ == "__main__":
    sys.exit(mt.main(suite=MINATAR))
