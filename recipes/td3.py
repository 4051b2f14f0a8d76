"""TD3 (Fujimoto et al. 2018, arXiv 1802.09477) on MuJoCo.

Defaults follow Tianshou's published MuJoCo TD3 benchmark (examples/mujoco/mujoco_td3.py): actor
and critic lr 3e-4, tau 0.005, gamma 0.99, Gaussian exploration noise 0.1, target policy noise
0.2 clipped at 0.5 (half-range units), actor and targets updated every 2 critic steps, batch 256,
256x256 ReLU MLPs, 25k uniform random steps, 1 env, 1 gradient step per env step, 1M buffer.
Where tdrl differs: the twin critics are one batched ensemble; one Adam holds both groups (the
actor group is skipped on critic-only steps, as it has no gradient then).

    python recipes/td3.py --env-id Hopper-v5 --total-frames 1000000
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tensordict.nn import TensorDictSequential
from torch import nn
from tqdm import tqdm

from tdrl.collectors import Collector
from tdrl.envs import make_vec_env
from tdrl.modules import AdditiveGaussianNoise, DeterministicActor, EnsembleCritic, EnsembleMLP, mlp
from tdrl.objectives import SoftUpdate, TD3Loss
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
    env_id: str = "Hopper-v5"
    """gymnasium id of the task (continuous actions)."""
    total_frames: int = 1_000_000
    """env steps in total."""
    num_envs: int = 1
    """parallel training envs."""
    init_random_frames: int = 25_000
    """uniform random steps before the policy acts and learning starts."""
    utd_ratio: float = 1.0
    """critic gradient steps per env step."""
    policy_delay: int = 2
    """critic steps per actor step and target update."""
    batch_size: int = 256
    """transitions per gradient step."""
    buffer_size: int = 1_000_000
    """replay buffer capacity."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """hidden widths of the actor and of each critic."""
    actor_lr: float = 3e-4
    """actor learning rate."""
    critic_lr: float = 3e-4
    """critic learning rate."""
    exploration_noise: float = 0.1
    """Gaussian exploration noise (half-range units)."""
    policy_noise: float = 0.2
    """target policy smoothing noise (half-range units)."""
    noise_clip: float = 0.5
    """clip of the smoothing noise (half-range units)."""
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
    log_dir: str = "runs/td3"
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
    """Train TD3; returns the final deterministic evaluation and the counters."""
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
    noise = AdditiveGaussianNoise(
        action_dim, sigma_init=cfg.exploration_noise, action_low=low, action_high=high
    )
    policy = TensorDictSequential(actor, noise)
    critic = EnsembleCritic(EnsembleMLP(obs_dim + action_dim, 1, cfg.hidden_sizes, num_members=2))

    # 3. loss, target update, optimiser, buffer
    loss = TD3Loss(
        actor, critic, policy_noise=cfg.policy_noise, noise_clip=cfg.noise_clip, gamma=cfg.gamma
    )
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

    # 4. loop: critic every step; actor and targets every policy_delay steps (delayed updates)
    bar = tqdm(total=cfg.total_frames, initial=frames, disable=not cfg.progress, desc="td3")
    logged: dict[str, torch.Tensor] | None = None
    while frames < cfg.total_frames:
        previous = frames
        buffer.extend(transitions(collector.rollout()))
        frames = collector.frames
        due = updates_due(
            frames, updates, learning_starts=cfg.init_random_frames, utd_ratio=cfg.utd_ratio
        )
        for _ in range(due):
            batch = buffer.sample(cfg.batch_size)
            updates += 1
            if updates % cfg.policy_delay == 0:
                out = loss(batch)
                optimizer_step(out["loss_qvalue"] + out["loss_actor"], optimizer)
                target_updater.step()
                logged = {"loss_qvalue": out["loss_qvalue"], "loss_actor": out["loss_actor"]}
            else:
                optimizer_step(loss.qvalue_loss(batch)[0], optimizer)
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
        run_dir / "eval.csv", run_dir / "eval.png", title=f"TD3 {cfg.env_id} (eval return)"
    )
    logger.close()
    env.close()
    eval_env.close()
    print(f"TD3 {cfg.env_id}: {frames} frames, {updates} updates, eval {final['return_mean']:.1f}")
    return {"eval_return": final["return_mean"], "frames": frames, "updates": updates}


if __name__ == "__main__":
    main(parse(Config))
