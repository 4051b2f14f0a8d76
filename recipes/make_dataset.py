"""Make D4RL-style offline datasets (Fu et al. 2020, arXiv 2004.07219) from tdrl's own agents, in
the Minari format, under MINARI_DATASETS_PATH (default ~/.minari/datasets), written whole or not
at all.

Kinds: ``random`` (uniform actions), ``policy`` (the actor of a run's newest checkpoint:
``medium``/``expert`` by the run; ``--deterministic`` for its mean) and ``replay`` (that
checkpoint's replay buffer: ``medium-replay``; SAC runs). ``--algo`` names the run's recipe (sac
or ppo); the task and the actor's sizes come from the run folder's config.json.
``--ref-min-score``/``--ref-max-score`` store D4RL's normalization returns (0 random, 100 expert).

    python recipes/make_dataset.py --kind random --env-id Hopper-v5 --steps 100000
    python recipes/sac.py --env-id Hopper-v5 --total-frames 100000 --log-dir runs/hopper-medium
    python recipes/make_dataset.py --kind policy --run runs/hopper-medium --steps 200000
    python recipes/make_dataset.py --kind replay --run runs/hopper-medium
    python recipes/ppo.py --env-id Hopper-v5 --total-frames 1000000 --log-dir runs/expert-hopper
    python recipes/make_dataset.py --kind policy --algo ppo --run runs/expert-hopper --deterministic
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tdrl import keys, trainers

if TYPE_CHECKING:
    from tensordict.nn import TensorDictModuleBase

    from tdrl.envs import VecEnv


@trainers.configclass
class Config:
    kind: Literal["random", "policy", "replay"] = "random"
    """where the transitions come from."""
    env_id: str = ""
    """gymnasium task; empty: the run's (its config.json), else Hopper-v5."""
    run: str = ""
    """policy, replay: a run folder (its newest checkpoint)."""
    algo: Literal["sac", "ppo"] = "sac"
    """policy: the recipe that trained the run (replay: sac only)."""
    hidden_sizes: tuple[int, ...] = ()
    """policy: the run's actor widths; empty: the run's config.json, else the recipe's default
    (sac 256 256, ppo 64 64)."""
    activation: Literal["auto", "tanh", "relu"] = "auto"
    """policy, algo ppo: the run's hidden activation; auto: the run's config.json, else tanh."""
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


def run_settings(cfg: Config) -> Config:
    """``cfg`` with what it leaves open (``env_id``, ``hidden_sizes``, ``activation``) filled
    from the run folder's ``config.json`` where it has one, else with the defaults."""
    from tdrl.trainers.run import CONFIG_FILE

    saved: dict[str, Any] = {}
    if cfg.kind != "random" and cfg.run and (Path(cfg.run) / CONFIG_FILE).is_file():
        saved = json.loads((Path(cfg.run) / CONFIG_FILE).read_text())
    if cfg.kind == "policy" and cfg.algo == "ppo":
        memory = saved.get("recurrent", "none") != "none" or saved.get("sde_sample_freq", 0)
        if memory or not saved.get("rescale_actions", True):
            raise ValueError(
                f"{cfg.run!r} trained a recurrent, gSDE or unrescaled policy: make_dataset "
                "records feed-forward Gaussian policies with rescaled actions"
            )
    return dataclasses.replace(
        cfg,
        env_id=cfg.env_id or saved.get("env_id", "Hopper-v5"),
        hidden_sizes=cfg.hidden_sizes or tuple(saved.get("hidden_sizes", ())),
        activation=saved.get("activation", "tanh") if cfg.activation == "auto" else cfg.activation,
    )


def load_actor(cfg: Config, env: VecEnv, path: Path) -> TensorDictModuleBase:
    """The actor of the checkpoint at ``path``, built as ``cfg.algo``'s recipe builds it."""
    from torch import nn

    from tdrl.modules import actor_critic, tanh_gaussian_actor

    payload = trainers.load_checkpoint(path, restore_rng=False)
    if cfg.algo == "ppo":
        if "actor" not in payload:
            raise KeyError(f"{str(path)!r} holds no 'actor' entry: not an on-policy run")
        state = payload["actor"]
        # the run's observation normalization, if it had one, is in the actor's state
        normalized = any(".obs_norm." in k for k in state)
        actor, _, _ = actor_critic(
            env.observation_spec, env.action_spec, hidden_sizes=cfg.hidden_sizes or (64, 64),
            normalize_observations=normalized,
            activation=nn.ReLU if cfg.activation == "relu" else nn.Tanh,
        )  # fmt: skip
        actor.load_state_dict(state)
        return actor
    if "loss" not in payload:
        raise KeyError(f"{str(path)!r} holds no 'loss' entry: not a SAC run")
    actor = tanh_gaussian_actor(
        env.observation_spec, env.action_spec, cfg.hidden_sizes or (256, 256)
    )
    prefix = "actor_network."
    loss_state = payload["loss"]
    actor.load_state_dict(
        {k[len(prefix) :]: v for k, v in loss_state.items() if k.startswith(prefix)}
    )
    return actor


def main(cfg: Config) -> str:
    """Write the dataset; returns its id."""
    # the library loads here, after the command line: --help answers without it
    import torch

    from tdrl.collectors import Collector
    from tdrl.data import ReplayBuffer, save_minari
    from tdrl.envs import make_vec_env
    from tdrl.trainers.run import BUFFER_DIR, CHECKPOINT

    # 1. the run's checkpoint and settings (policy, replay)
    checkpoint = None
    if cfg.kind != "random":
        checkpoint = trainers.latest_checkpoint(Path(cfg.run)) if cfg.run else None
        if checkpoint is None:
            raise FileNotFoundError(f"--kind {cfg.kind} needs --run with a checkpoint: {cfg.run!r}")
    cfg = run_settings(cfg)
    task = cfg.env_id.split("-")[0].lower()
    dataset_id = cfg.dataset_id or f"tdrl/{task}-{cfg.kind}-v0"
    # 2. the transitions: the checkpoint's replay buffer, or a recording of random or policy steps
    if cfg.kind == "replay":
        assert checkpoint is not None
        folder = checkpoint / BUFFER_DIR
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
            actor = load_actor(cfg, env, checkpoint / CHECKPOINT)
        collector = Collector(env, actor, frames, deterministic=cfg.deterministic)
        source = collector.rollout()  # type: ignore[assignment]
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
        source, dataset_id, cfg.env_id, ref_min_score=cfg.ref_min_score,
        ref_max_score=cfg.ref_max_score, algorithm_name=f"tdrl {cfg.kind}",
        description=f"{cfg.kind} data of {cfg.env_id} made by recipes/make_dataset.py",
    )  # fmt: skip
    root = os.environ.get("MINARI_DATASETS_PATH", str(Path.home() / ".minari" / "datasets"))
    print(
        f"{dataset_id}: {dataset.total_episodes} episodes, {dataset.total_steps} steps, in "
        f"{Path(root) / dataset_id}"
    )
    return dataset_id


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
