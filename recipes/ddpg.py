"""DDPG (Lillicrap et al. 2015, arXiv 1509.02971) on MuJoCo.

Defaults follow Tianshou's published MuJoCo DDPG benchmark (examples/mujoco/mujoco_ddpg.py): actor
and critic lr 1e-3, tau 0.005, gamma 0.99, Gaussian exploration noise 0.1 (half-range units),
batch 256, 256x256 ReLU MLPs, 25k uniform random steps, 1 env, 1 gradient step per env step, 1M
buffer. ``--noise ou`` uses the paper's Ornstein-Uhlenbeck noise instead. Where tdrl differs:
one Adam holds actor and critic with their own learning rates.

    python recipes/ddpg.py --env-id HalfCheetah-v5 --total-frames 1000000
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from tensordict.nn import TensorDictSequential
from torch import nn
from tqdm import tqdm

from tdrl.collectors import Collector
from tdrl.envs import make_vec_env
from tdrl.modules import (
    AdditiveGaussianNoise,
    DeterministicActor,
    OrnsteinUhlenbeckNoise,
    StateActionCritic,
    mlp,
)
from tdrl.objectives import DDPGLoss, SoftUpdate
from tdrl.trainers import Logger, parse, plot_learning_curve
from tdrl.trainers.offpolicy import (
    crossed,
    episode_metrics,
    evaluate_and_log,
    has_run,
    load_run,
    make_replay_buffer,
    optimizer_step,
    save_run,
    torch_default_init_,
    transitions,
    updates_due,
)


@dataclass(frozen=True)
class Config:
    env_id: str = "HalfCheetah-v5"
    """gymnasium id of the task (continuous actions)."""
    total_frames: int = 1_000_000
    """env steps in total."""
    num_envs: int = 1
    """parallel training envs."""
    init_random_frames: int = 25_000
    """uniform random steps before the policy acts and learning starts."""
    utd_ratio: float = 1.0
    """gradient steps per env step."""
    batch_size: int = 256
    """transitions per gradient step."""
    buffer_size: int = 1_000_000
    """replay buffer capacity."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """hidden widths of the actor and of the critic."""
    actor_lr: float = 1e-3
    """actor learning rate."""
    critic_lr: float = 1e-3
    """critic learning rate."""
    noise: Literal["gaussian", "ou"] = "gaussian"
    """exploration noise: Gaussian or Ornstein-Uhlenbeck."""
    exploration_noise: float = 0.1
    """scale of the exploration noise (half-range units; OU: its sigma)."""
    gamma: float = 0.99
    """discount."""
    tau: float = 0.005
    """Polyak coefficient of the targets."""
    eval_every: int = 10_000
    """env steps between deterministic evaluations (0: only at the end)."""
    eval_episodes: int = 10
    """episodes per evaluation."""
    checkpoint_every: int = 100_000
    """env steps between checkpoints with the replay buffer (0: never)."""
    log_dir: str = "runs/ddpg"
    """folder of logs, curve PNG and checkpoint."""
    resume: bool = False
    """continue from the checkpoint in log_dir, if there is one."""
    seed: int = 0
    """seed of torch, the envs and the buffer."""
    threads: int = 1
    """torch threads."""
    progress: bool = True
    """show a progress bar."""
    tensorboard: bool = True
    """write TensorBoard event files."""


def main(cfg: Config) -> dict[str, float]:
    """Train DDPG; returns the final deterministic evaluation and the counters."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    run_dir = Path(cfg.log_dir)
    # 1. envs
    env = make_vec_env(cfg.env_id, cfg.num_envs, seed=cfg.seed)
    eval_env = make_vec_env(cfg.env_id, min(cfg.eval_episodes, 10), seed=cfg.seed + 10_000)
    obs_dim = env.obs_leaves[0].shape[-1]
    action_dim = env.action_spec.shape[-1]
    low, high = env.action_spec.space.low[0], env.action_spec.space.high[0]

    # 2. networks: deterministic actor; Gaussian noise on top acts only while collecting
    actor_net = torch_default_init_(mlp(obs_dim, action_dim, cfg.hidden_sizes, activation=nn.ReLU))
    actor = DeterministicActor(actor_net, action_dim, action_low=low, action_high=high)
    bounds = {"action_low": low, "action_high": high}
    if cfg.noise == "ou":
        noise = OrnsteinUhlenbeckNoise(action_dim, sigma=cfg.exploration_noise, **bounds)
    else:
        noise = AdditiveGaussianNoise(action_dim, sigma_init=cfg.exploration_noise, **bounds)
    policy = TensorDictSequential(actor, noise)
    critic_net = mlp(obs_dim + action_dim, 1, cfg.hidden_sizes, activation=nn.ReLU)
    critic = StateActionCritic(torch_default_init_(critic_net))

    # 3. loss, target update, optimiser, buffer
    loss = DDPGLoss(actor, critic, gamma=cfg.gamma)
    target_updater = SoftUpdate(loss, tau=cfg.tau)
    optimizer = torch.optim.Adam(
        [
            {"params": actor.parameters(), "lr": cfg.actor_lr},
            {"params": critic.parameters(), "lr": cfg.critic_lr},
        ],
        fused=True,
    )
    buffer = make_replay_buffer(cfg.buffer_size, seed=cfg.seed)
    counters = {"frames": 0, "updates": 0}
    if cfg.resume and has_run(run_dir):
        counters = load_run(run_dir, buffer, loss=loss, optimizer=optimizer)["counters"]
        env.seed = cfg.seed + counters["frames"]
    collector = Collector(
        env, policy, cfg.num_envs, init_random_frames=cfg.init_random_frames, seed=env.seed
    )
    collector.frames = frames = counters["frames"]
    updates = counters["updates"]
    logger = Logger(run_dir, tensorboard=cfg.tensorboard)

    # 4. loop
    bar = tqdm(total=cfg.total_frames, initial=frames, disable=not cfg.progress, desc="ddpg")
    logged: dict[str, torch.Tensor] | None = None
    while frames < cfg.total_frames:
        previous = frames
        buffer.extend(transitions(collector.rollout()))
        frames = collector.frames
        due = updates_due(
            frames, updates, learning_starts=cfg.init_random_frames, utd_ratio=cfg.utd_ratio
        )
        for _ in range(due):
            out = loss(buffer.sample(cfg.batch_size))
            optimizer_step(out["loss_value"] + out["loss_actor"], optimizer)
            target_updater.step()
            logged = {"loss_value": out["loss_value"], "loss_actor": out["loss_actor"]}
        updates += due
        if episodes := episode_metrics(collector.episodes):
            logger.log("train", frames, episodes)
            bar.set_postfix(train_return=f"{episodes['return_mean']:.1f}")
        if logged is not None and crossed(frames, previous, 1_000):
            logger.log("loss", frames, logged | {"updates": updates})
        if crossed(frames, previous, cfg.eval_every) and frames < cfg.total_frames:
            evaluate_and_log(eval_env, actor, logger, frames, n_episodes=cfg.eval_episodes)
        if crossed(frames, previous, cfg.checkpoint_every):
            counters = {"frames": frames, "updates": updates}
            save_run(run_dir, buffer, loss=loss, optimizer=optimizer, counters=counters)
        bar.update(frames - previous)
    bar.close()

    # 5. report
    final = evaluate_and_log(eval_env, actor, logger, frames, n_episodes=cfg.eval_episodes)
    plot_learning_curve(
        run_dir / "eval.csv", run_dir / "eval.png", title=f"DDPG {cfg.env_id} (eval return)"
    )
    logger.close()
    env.close()
    eval_env.close()
    print(f"DDPG {cfg.env_id}: {frames} frames, {updates} updates, eval {final['return_mean']:.1f}")
    return {"eval_return": final["return_mean"], "frames": frames, "updates": updates}


if __name__ == "__main__":
    main(parse(Config))
