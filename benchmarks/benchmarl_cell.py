"""One BenchMARL run of the multi-agent table, in BenchMARL's own Python environment.

BenchMARL 1.5.1 imports ``torchrl.collectors.SyncDataCollector``, which TorchRL 0.14 (tdrl's pin)
removed, so it runs in a separate virtual environment with the TorchRL it was released with
(``benchmarks/marl_table.py`` says how to make it). Its defaults are its own YAML files (the
experiment, the algorithm, the MLP and the task configs of the installed package); this script
changes only the budget, the evaluation interval, the seed, the loggers (CSV only) and the
folder. It prints one JSON line: the evaluation curve (BenchMARL's
``eval/agents/reward/episode_reward_mean``: the mean over episodes and agents of each agent's
return), the wall time and the versions.

    /tmp/benchmarl/bin/python benchmarks/benchmarl_cell.py --algorithm mappo \
        --task vmas/navigation --seed 0 --frames 600000 --eval-every 120000 --folder /tmp/x
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from importlib.metadata import version
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", choices=["mappo", "ippo", "qmix", "vdn"], required=True)
    parser.add_argument("--task", required=True, help="vmas/<scenario> or mpe2/simple_spread_v3")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--frames", type=int, required=True)
    parser.add_argument("--eval-every", type=int, required=True)
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--parse-only", action="store_true",
                        help="read a finished run's folder instead of running (wall: BenchMARL's "
                        "own timers_total_time)")  # fmt: skip
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)  # as every cell of the tables: one torch thread per run
    family, _, name = args.task.partition("/")
    if family == "mpe2":
        # TorchRL 0.10 looks for MPE under pettingzoo.mpe, which PettingZoo 1.25+ moved out to
        # the mpe2 package (same modules, same "mpe/<name>" registry keys)
        import mpe2
        import mpe2.all_modules

        sys.modules["pettingzoo.mpe"] = mpe2
        sys.modules["pettingzoo.mpe.all_modules"] = mpe2.all_modules
    from benchmarl.algorithms import IppoConfig, MappoConfig, QmixConfig, VdnConfig
    from benchmarl.environments import PettingZooTask, VmasTask
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models.mlp import MlpConfig

    tasks = {"vmas": VmasTask, "mpe2": PettingZooTask}
    task = getattr(tasks[family], name.removesuffix("_v3").upper()).get_from_yaml()
    configs = {"mappo": MappoConfig, "ippo": IppoConfig, "qmix": QmixConfig, "vdn": VdnConfig}
    algorithm = configs[args.algorithm].get_from_yaml()
    config = ExperimentConfig.get_from_yaml()
    config.max_n_frames = args.frames
    config.evaluation_interval = args.eval_every
    config.loggers = ["csv"]
    config.render = False
    config.create_json = False
    args.folder.mkdir(parents=True, exist_ok=True)
    config.save_folder = str(args.folder)
    wall = None
    if not args.parse_only:
        experiment = Experiment(
            task=task, algorithm_config=algorithm, model_config=MlpConfig.get_from_yaml(),
            critic_model_config=MlpConfig.get_from_yaml(), seed=args.seed, config=config,
        )  # fmt: skip
        start = time.perf_counter()
        experiment.run()
        wall = time.perf_counter() - start

    # BenchMARL logs by iteration: its counters say the frames of each; the evaluation's name
    # holds the group ("agents" in VMAS, "agent" in PettingZoo's MPE)
    def column(pattern: str) -> dict[int, float]:
        with next(args.folder.rglob(f"{pattern}.csv")).open() as f:
            return {int(float(row[0])): float(row[1]) for row in csv.reader(f)}

    frames, times = column("counters_total_frames"), column("timers_total_time")
    evaluations = column("eval_*_reward_episode_reward_mean")
    if wall is None:
        wall = times[max(times)]
    steps = [int(frames[i]) for i in sorted(evaluations)]
    returns = [evaluations[i] for i in sorted(evaluations)]
    walls = [times[i] for i in sorted(evaluations)]
    plain = (int, float, bool, str, list)
    settings = {
        "experiment": {k: v for k, v in vars(config).items() if isinstance(v, plain)},
        "algorithm": {k: v for k, v in vars(algorithm).items() if isinstance(v, plain)},
        "task": dict(task.config),
    }
    packages = ("benchmarl", "torchrl", "tensordict", "torch", "vmas", "mpe2")
    result = {"steps": steps, "returns": returns, "wall_s": wall, "eval_wall_s": walls,
              "settings": settings, "versions": {p: version(p) for p in packages}}  # fmt: skip
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
