"""Collector demo: a uniform random policy on a MuJoCo task; prints steps/s and episode returns.

Defaults: HalfCheetah-v5, 8 envs in one process, batches of 2000 steps, 20k steps in all.

    python recipes/collect_random.py --env-id Hopper-v5 --mode async --total-frames 20000
"""

from __future__ import annotations

import time
from typing import Literal

from tdrl import trainers


@trainers.configclass
class Config:
    env_id: str = "HalfCheetah-v5"
    """gymnasium id of the task."""
    num_envs: int = 8
    """parallel envs."""
    mode: Literal["sync", "async"] = "sync"
    """one process (sync) or one subprocess per env (async)."""
    frames_per_batch: int = 2000
    """env steps per collected batch (a multiple of num_envs)."""
    total_frames: int = 20_000
    """env steps in total."""
    seed: int = 0
    """seed of the envs and of the random actions."""


def main(cfg: Config) -> dict[str, float]:
    """Collects ``cfg.total_frames`` random steps and returns throughput and mean return."""
    # the library loads here, after the command line: --help answers without it
    import torch

    from tdrl.collectors import Collector
    from tdrl.envs import make_vec_env

    torch.set_num_threads(1)
    returns: list[float] = []
    # 1. envs and a collector without a policy (uniform random actions)
    with make_vec_env(cfg.env_id, cfg.num_envs, mode=cfg.mode, seed=cfg.seed) as env:
        collector = Collector(env, None, cfg.frames_per_batch, total_frames=cfg.total_frames)
        start = time.perf_counter()
        # 2. the loop: one line per batch with the episodes that ended in it
        for batch in collector:
            episodes = collector.episodes
            returns += episodes["episode_return"].tolist()
            recent = ", ".join(f"{r:.1f}" for r in episodes["episode_return"][:4].tolist())
            rate = collector.frames / (time.perf_counter() - start)
            print(
                f"frames {collector.frames:>7}  {rate:8.0f} steps/s  batch {tuple(batch.shape)}  "
                f"episodes ended {len(episodes)}: [{recent}]"
            )
    # 3. report: throughput and the mean return of the ended episodes
    elapsed = time.perf_counter() - start
    mean_return = sum(returns) / max(len(returns), 1)
    print(
        f"{cfg.env_id} x{cfg.num_envs} ({cfg.mode}): {collector.frames / elapsed:.0f} steps/s, "
        f"{len(returns)} episodes, mean return {mean_return:.1f}"
    )
    return {"steps_per_s": collector.frames / elapsed, "mean_return": mean_return}


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
