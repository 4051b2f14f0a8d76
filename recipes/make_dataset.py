"""Make D4RL-style offline datasets from tdrl's own agents, in the Minari format.

python recipes/make_dataset.py --kind random --env-id Hopper-v5 --steps 100000
python recipes/sac.py --env-id Hopper-v5 --total-frames 100000 --log-dir runs/hopper-medium
python recipes/make_dataset.py --kind policy --run runs/hopper-medium --steps 200000
python recipes/make_dataset.py --kind replay --run runs/hopper-medium

Kinds (D4RL's, Fu et al. 2020, arXiv 2004.07219): ``random`` (uniform random actions),
``policy`` (the actor of a SAC run's newest checkpoint acting stochastically: ``medium`` for a
policy at about a third of the expert's return, ``expert`` for the best one trained), and
``replay`` (the replay buffer of that checkpoint: ``medium-replay``). ``--ref-min-score`` and
``--ref-max-score`` store the returns that normalize scores the D4RL way (0 = random, 100 =
expert). The dataset id defaults to ``tdrl/<task>-<kind>-v0``; it is written whole or not at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

import torch

from tdrl import trainers
from tdrl.collectors import Collector
from tdrl.data import ReplayBuffer, save_minari
from tdrl.envs import make_vec_env
from tdrl.modules import tanh_gaussian_actor


@dataclass(frozen=True)
class Config:
    """What to write (--help lists every field)."""

    kind: Literal["random", "policy", "replay"] = "random"
    """where the transitions come from."""
    env_id: str = "Hopper-v5"
    """gymnasium task (policy and replay: the run's own)."""
    run: str = ""
    """policy, replay: a SAC run folder (its newest checkpoint)."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """policy: the run's actor widths."""
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


def main(cfg: Config) -> str:
    """Write the dataset; returns its id."""
    task = cfg.env_id.split("-")[0].lower()
    dataset_id = cfg.dataset_id or f"tdrl/{task}-{cfg.kind}-v0"
    checkpoint = None
    if cfg.kind != "random":
        checkpoint = trainers.latest_checkpoint(cfg.run) if cfg.run else None
        if checkpoint is None:
            raise FileNotFoundError(f"--kind {cfg.kind} needs --run with a checkpoint: {cfg.run!r}")
    if cfg.kind == "replay":
        assert checkpoint is not None
        folder = checkpoint / trainers.BUFFER_DIR
        meta = json.loads((folder / "meta.json").read_text())
        source = ReplayBuffer(int(meta["capacity"]))
        source.load(folder)
    else:
        torch.manual_seed(cfg.seed)
        frames = -(-cfg.steps // cfg.num_envs) * cfg.num_envs
        env = make_vec_env(cfg.env_id, cfg.num_envs, seed=cfg.seed)
        actor = None
        if cfg.kind == "policy":
            assert checkpoint is not None
            actor = tanh_gaussian_actor(env.observation_spec, env.action_spec, cfg.hidden_sizes)
            payload = trainers.load_checkpoint(checkpoint / trainers.CHECKPOINT, restore_rng=False)
            loss_state = payload["loss"]
            prefix = "actor_network."
            actor.load_state_dict(
                {k[len(prefix) :]: v for k, v in loss_state.items() if k.startswith(prefix)}
            )
        source = Collector(env, actor, frames).rollout()  # type: ignore[assignment]
        env.close()
    dataset = save_minari(
        source, dataset_id, cfg.env_id, ref_min_score=cfg.ref_min_score,
        ref_max_score=cfg.ref_max_score, algorithm_name=f"tdrl {cfg.kind}",
        description=f"{cfg.kind} data of {cfg.env_id} made by recipes/make_dataset.py",
    )  # fmt: skip
    print(f"{dataset_id}: {dataset.total_episodes} episodes, {dataset.total_steps} steps")
    return dataset_id


if __name__ == "__main__":
    main(trainers.parse(Config))
