"""Hyperparameter search over any recipe's settings with Optuna (the tune extra), as rl_zoo3's
tuner does: TPE sampling, median or successive-halving pruning on the evaluations the recipe
writes, several trials at once (processes, or Ray actors with --ray-address), and a study
folder that a killed search resumes from.

The recipe's fixed flags follow ``--``; the searched ones are ``--space`` entries
(``NAME=float|log|int:LOW:HIGH`` or ``'NAME=cat:A|B'``, quoted, a tuple written ``64,64``) or a TOML
``--space-file``. Trial 0 runs the recipe's defaults. The summary (``summary.txt``, and
``summary.png``) gives the best trial as a ready command line and the parameters' importances.

    python recipes/tune.py --recipe ppo --trials 30 --workers 2 --seeds 0 \
        --space lr=log:1e-4:1e-2 gamma=float:0.9:0.999 epochs=int:2:10 \
        -- --env-id CartPole-v1 --total-frames 50000 --eval-every 5000 --no-lr-decay
    python recipes/tune.py --recipe sac --objective mean --seeds 0 1 --space-file sac.toml \
        -- --env-id Pendulum-v1 --total-frames 10000 --eval-every 1000
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from tdrl import trainers


@trainers.configclass
class Config:
    recipe: str = "ppo"
    """the recipe to tune: a name in recipes/ (ppo, sac, ...) or a path."""
    space: tuple[str, ...] = ()
    """searched fields: NAME=float|log|int:LOW:HIGH or NAME=cat:A|B|C."""
    space_file: str = ""
    """a TOML file of searched fields ([lr] log = [1e-5, 1e-2]; [hidden_sizes] choices = ...)."""
    trials: int = 30
    """trials to finish (completed or pruned), over every session of the study."""
    workers: int = 1
    """trials run at once (each a process per seed in turn)."""
    seeds: tuple[int, ...] = (0,)
    """each trial runs every seed; its value is the mean over them."""
    objective: Literal["final", "mean"] = "final"
    """final: the last evaluation return; mean: the mean over all evaluations (rewards speed)."""
    pruner: Literal["median", "halving", "none"] = "median"
    """stop trials that fall behind: the median rule after 5 trials, or successive halving."""
    study_dir: str = ""
    """the study folder (default runs/tune/<recipe>); an existing study there resumes."""
    sampler_seed: int = 0
    """seed of the TPE sampler."""
    ray_address: str = ""
    """run the trials as Ray actors (the ray extra) on this cluster: local, auto or host:port."""


def main(cfg: Config, recipe_args: list[str]) -> str:
    """Run (or resume) the study; returns its summary."""
    from tdrl.tune import Study, parse_param, parse_space_toml

    path = Path(cfg.recipe)
    if not path.suffix:  # a recipe's name
        path = Path(__file__).parent / f"{cfg.recipe}.py"
    space = [parse_param(text) for text in cfg.space]
    if cfg.space_file:
        space += parse_space_toml(Path(cfg.space_file).read_text())
    study = Study(
        path, space, cfg.study_dir or f"runs/tune/{path.stem}", args=recipe_args,
        seeds=cfg.seeds, objective=cfg.objective, pruner=cfg.pruner,
        sampler_seed=cfg.sampler_seed, ray_address=cfg.ray_address or None,
    )  # fmt: skip
    study.optimize(cfg.trials, workers=cfg.workers)
    summary = study.summary()
    print(summary, end="")
    return summary


if __name__ == "__main__":
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    main(trainers.parse(Config, argv[:cut], description=__doc__), argv[cut + 1 :])
