"""REDQ (Chen et al. 2021, arXiv 2101.05982): SAC with an ensemble of N critics, a random pair
in each target, and many gradient steps per env step.

Defaults follow Tianshou's MuJoCo REDQ benchmark (examples/mujoco/mujoco_redq.py): 10 critics, a
subset of 2 in the target, 20 critic steps per env step, the actor updated once per 20 (its
``actor_delay``), actor and critic lr 1e-3, automatic entropy tuning (alpha lr 3e-4), tau 0.005,
gamma 0.99, batch 256, 256x256 ReLU MLPs, 10k uniform random steps, 1 env, 1M buffer. Where tdrl
differs: all N critics are one batched ensemble call, and the actor loss uses the mean over the
N critics (the paper's Alg. 1 line 13; Tianshou's "min" target mode only affects the target).

    python recipes/redq.py --env-id HalfCheetah-v5 --total-frames 300000
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from tdrl.collectors import Collector
from tdrl.envs import make_vec_env
from tdrl.modules import EnsembleCritic, EnsembleMLP, TanhGaussianActor, mlp
from tdrl.objectives import REDQLoss, SoftUpdate
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
    """parallel training envs (one step of each per collected batch)."""
    init_random_frames: int = 10_000
    """uniform random steps before the policy acts and learning starts."""
    utd_ratio: float = 20.0
    """critic gradient steps per env step (the paper's G)."""
    actor_delay: int = 20
    """critic steps per actor and alpha step."""
    num_qvalue_nets: int = 10
    """ensemble size N."""
    sub_sample_len: int = 2
    """critics in each target's minimum (M)."""
    batch_size: int = 256
    """transitions per gradient step."""
    buffer_size: int = 1_000_000
    """replay buffer capacity."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """hidden widths of the actor and of each critic."""
    actor_lr: float = 1e-3
    """actor learning rate."""
    critic_lr: float = 1e-3
    """critic learning rate."""
    alpha_lr: float = 3e-4
    """entropy-coefficient learning rate."""
    alpha_init: float = 1.0
    """initial entropy coefficient."""
    gamma: float = 0.99
    """discount."""
    tau: float = 0.005
    """Polyak coefficient of the target critics."""
    eval_every: int = 10_000
    """env steps between deterministic evaluations (0: only at the end)."""
    eval_episodes: int = 10
    """episodes per evaluation."""
    log_every: int = 1_000
    """env steps between loss logs."""
    checkpoint_every: int = 100_000
    """env steps between checkpoints with the replay buffer (0: never)."""
    log_dir: str = "runs/redq"
    """folder of CSV/TensorBoard logs, the curve PNG and the checkpoint."""
    resume: bool = False
    """continue from the checkpoint in log_dir, if there is one."""
    seed: int = 0
    """seed of torch, the envs and the buffer."""
    threads: int = 1
    """torch threads (small networks: one is fastest per core)."""
    progress: bool = True
    """show a progress bar."""
    tensorboard: bool = True
    """write TensorBoard event files."""


def main(cfg: Config) -> dict[str, float]:
    """Train REDQ; returns the final deterministic evaluation and the counters."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    run_dir = Path(cfg.log_dir)
    # 1. envs: a separate evaluation env, so evaluating never disturbs the collector's episodes.
    env = make_vec_env(cfg.env_id, cfg.num_envs, seed=cfg.seed)
    eval_env = make_vec_env(cfg.env_id, min(cfg.eval_episodes, 10), seed=cfg.seed + 10_000)
    obs_dim = env.obs_leaves[0].shape[-1]
    action_dim = env.action_spec.shape[-1]
    low, high = env.action_spec.space.low[0], env.action_spec.space.high[0]

    # 2. networks
    actor_net = torch_default_init_(
        mlp(obs_dim, 2 * action_dim, cfg.hidden_sizes, activation=nn.ReLU)
    )
    actor = TanhGaussianActor(actor_net, action_dim, action_low=low, action_high=high)
    critic_net = EnsembleMLP(
        obs_dim + action_dim, 1, cfg.hidden_sizes, num_members=cfg.num_qvalue_nets
    )
    critic = EnsembleCritic(critic_net)

    # 3. loss, target update, optimiser, buffer
    loss = REDQLoss(
        actor,
        critic,
        num_qvalue_nets=cfg.num_qvalue_nets,
        sub_sample_len=cfg.sub_sample_len,
        alpha_init=cfg.alpha_init,
        gamma=cfg.gamma,
    )
    target_updater = SoftUpdate(loss, tau=cfg.tau)
    optimizer = torch.optim.Adam(
        [
            {"params": actor.parameters(), "lr": cfg.actor_lr},
            {"params": critic.parameters(), "lr": cfg.critic_lr},
            {"params": [loss.log_alpha], "lr": cfg.alpha_lr},
        ],
        fused=True,  # one kernel per parameter group instead of a Python loop over tensors
    )
    buffer = make_replay_buffer(cfg.buffer_size, seed=cfg.seed)
    counters = {"frames": 0, "updates": 0}
    if cfg.resume and has_run(run_dir):
        counters = load_run(run_dir, buffer, loss=loss, optimizer=optimizer)["counters"]
        env.seed = cfg.seed + counters["frames"]  # fresh episodes, not a replay of the first ones
    collector = Collector(
        env, actor, cfg.num_envs, init_random_frames=cfg.init_random_frames, seed=env.seed
    )
    collector.frames = frames = counters["frames"]
    updates = counters["updates"]
    logger = Logger(run_dir, tensorboard=cfg.tensorboard)

    # 4. loop: collect one step per env -> store -> G critic steps (an actor step every
    # actor_delay) -> log, evaluate, checkpoint
    bar = tqdm(total=cfg.total_frames, initial=frames, disable=not cfg.progress, desc="redq")
    out = None
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
            if updates % cfg.actor_delay == 0:
                out = loss(batch)
                total = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
            else:  # critic-only step: the actor's forward is skipped
                total = loss.qvalue_loss(batch)[0]
            optimizer_step(total, optimizer)
            target_updater.step()
        if episodes := episode_metrics(collector.episodes):
            logger.log("train", frames, episodes)
            bar.set_postfix(train_return=f"{episodes['return_mean']:.1f}")
        if out is not None and crossed(frames, previous, cfg.log_every):
            names = ("loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy")
            logger.log("loss", frames, {k: out[k] for k in names} | {"updates": updates})
        if crossed(frames, previous, cfg.eval_every) and frames < cfg.total_frames:
            evaluate_and_log(eval_env, actor, logger, frames, n_episodes=cfg.eval_episodes)
        if crossed(frames, previous, cfg.checkpoint_every):
            counters = {"frames": frames, "updates": updates}
            save_run(run_dir, buffer, loss=loss, optimizer=optimizer, counters=counters)
        bar.update(frames - previous)
    bar.close()

    # 5. report: final deterministic evaluation, learning curve, logs
    final = evaluate_and_log(eval_env, actor, logger, frames, n_episodes=cfg.eval_episodes)
    plot_learning_curve(
        run_dir / "eval.csv", run_dir / "eval.png", title=f"REDQ {cfg.env_id} (eval return)"
    )
    logger.close()
    env.close()
    eval_env.close()
    print(f"REDQ {cfg.env_id}: {frames} frames, {updates} updates, eval {final['return_mean']:.1f}")
    return {"eval_return": final["return_mean"], "frames": frames, "updates": updates}


if __name__ == "__main__":
    main(parse(Config))
