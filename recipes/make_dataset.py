"""Make D4RL-style offline datasets (Fu et al. 2020, arXiv 2004.07219) from tdrl's own agents, in
the Minari format, under MINARI_DATASETS_PATH (default ~/.minari/datasets), written whole or not
at all.

Kinds: ``random`` (uniform actions), ``policy`` (the trained policy of a run's newest
checkpoint, rebuilt by the recipe that wrote it, as recipes/export.py rebuilds it: any recipe's
run, on the CPU, in the run's env options; ``medium``/``expert`` by the run; ``--deterministic``
for its mode, a Q-learning run's greedy policy being deterministic already) and ``replay`` (that
checkpoint's replay buffer: ``medium-replay``; off-policy runs). The task is the run's. Actions
are stored as the env executed them (clipped into its box). ``--ref-min-score``/
``--ref-max-score`` store D4RL's normalization returns (0 random, 100 expert).

    python recipes/make_dataset.py --kind random --env-id Hopper-v5 --steps 100000
    python recipes/sac.py --env-id Hopper-v5 --total-frames 100000 --log-dir runs/hopper-medium
    python recipes/make_dataset.py --kind policy --run runs/hopper-medium --steps 200000
    python recipes/make_dataset.py --kind replay --run runs/hopper-medium
    python recipes/ppo.py --env-id Hopper-v5 --total-frames 1000000 --log-dir runs/expert-hopper
    python recipes/make_dataset.py --kind policy --run runs/expert-hopper --deterministic
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Literal

from tdrl import keys, trainers


@trainers.configclass
class Config:
    kind: Literal["random", "policy", "replay"] = "random"
    """where the transitions come from."""
    env_id: str = ""
    """gymnasium task; empty: the run's, else Hopper-v5."""
    run: str = ""
    """policy, replay: a run folder (its newest checkpoint)."""
    deterministic: bool = False
    """policy: act with the distribution's mode (the mean) instead of sampling."""
    steps: int = 100_000
    """random, policy: env steps to record."""
    num_envs: int = 8
    """random, policy: parallel envs."""
    seed: int = 0
    """seed of the envs and the actions."""
    dataset_id: str = ""
    """Minari id; default tdrl/<task>-<kind>-v0."""
    ref_min_score: float | None = None
    """the random policy's return (D4RL normalization)."""
    ref_max_score: float | None = None
    """the expert's return (D4RL normalization)."""


def trained_policy(run: str) -> tuple[Any, str, dict[str, Any], Path]:
    """The trained policy of the run folder ``run`` on the CPU (its recipe's ``main`` rebuilds
    it and loads the newest checkpoint, nothing runs), its task and env options (a frame stack),
    and the checkpoint."""
    from tdrl.trainers.run import exporting

    if str(Path(__file__).parent) not in sys.path:
        sys.path.insert(0, str(Path(__file__).parent))
    from export import trained_run

    module, config, checkpoint = trained_run(run)
    with exporting(None) as loaded:
        module.main(trainers.configure(config, device="cpu"))
    return loaded["policy"], config.run.env_id, loaded["env_kwargs"], checkpoint


def main(cfg: Config) -> str:
    """Write the dataset; returns its id."""
    # the library loads here, after the command line: --help answers without it
    import torch

    from tdrl.collectors import Collector
    from tdrl.data import ReplayBuffer, save_minari
    from tdrl.envs import make_vec_env
    from tdrl.trainers.run import BUFFER_DIR

    # 1. the run's trained policy and task (policy, replay)
    policy: Any = None
    env_id, env_kwargs = cfg.env_id or "Hopper-v5", {}
    if cfg.kind != "random":
        if not cfg.run or trainers.latest_checkpoint(Path(cfg.run)) is None:
            raise FileNotFoundError(f"--kind {cfg.kind} needs --run with a checkpoint: {cfg.run!r}")
        policy, trained_on, env_kwargs, checkpoint = trained_policy(cfg.run)
        if cfg.env_id and cfg.env_id != trained_on:
            raise ValueError(f"--env-id {cfg.env_id}: the run {cfg.run!r} trained on {trained_on}")
        env_id = trained_on
    task = env_id.split("/")[-1].split("-")[0].lower()
    dataset_id = cfg.dataset_id or f"tdrl/{task}-{cfg.kind}-v0"
    # 2. the transitions: the checkpoint's replay buffer, or a recording of random or policy steps
    if cfg.kind == "replay":
        folder = checkpoint / BUFFER_DIR
        meta = json.loads((folder / "meta.json").read_text())
        source = ReplayBuffer(int(meta["capacity"]))
        source.load(folder)
    else:
        torch.manual_seed(cfg.seed)
        frames = -(-cfg.steps // cfg.num_envs) * cfg.num_envs
        env = make_vec_env(env_id, cfg.num_envs, seed=cfg.seed, **env_kwargs)
        collector = Collector(env, policy, frames, deterministic=cfg.deterministic)
        source = collector.rollout()  # type: ignore[assignment]
        space = env.action_spec.space
        if hasattr(space, "low"):  # the actions the env executed: clipped into its box
            action = source.get(keys.ACTION)  # type: ignore[attr-defined]
            low, high = (bound[0].to(action.device) for bound in (space.low, space.high))
            source.set(keys.ACTION, action.clamp(low, high))  # type: ignore[attr-defined]
        env.close()
        ended = collector.episodes  # the episodes that ended inside the recording
        if len(ended):
            returns = ended[keys.EPISODE_RETURN].double()
            spread = f" +- {returns.std().item():.1f}" if len(ended) > 1 else ""
            print(
                f"{len(ended)} complete episodes: return {returns.mean().item():.1f}{spread}, "
                f"length {ended[keys.EPISODE_LENGTH].double().mean().item():.0f}"
            )
    # 3. the dataset, written whole or not at all
    dataset = save_minari(
        source, dataset_id, env_id, ref_min_score=cfg.ref_min_score,
        ref_max_score=cfg.ref_max_score, algorithm_name=f"tdrl {cfg.kind}",
        description=f"{cfg.kind} data of {env_id} made by recipes/make_dataset.py",
    )  # fmt: skip
    root = os.environ.get("MINARI_DATASETS_PATH", str(Path.home() / ".minari" / "datasets"))
    print(
        f"{dataset_id}: {dataset.total_episodes} episodes, {dataset.total_steps} steps, in "
        f"{Path(root) / dataset_id}"
    )
    return dataset_id


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
