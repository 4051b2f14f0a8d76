"""Soft actor-critic for discrete actions (Christodoulou 2019, arXiv 1910.07207).

Defaults follow Tianshou's CartPole discrete-SAC test (test/discrete/test_discrete_sac.py): actor
lr 1e-4, critic lr 1e-3, a fixed alpha of 0.05 (``--auto-alpha`` tunes it toward 0.98 log n with
lr 3e-4), gamma 0.95, tau 0.005, 3-step returns, batch 64, 64x64 ReLU MLPs, 10 envs, 10 env steps
per batch, 0.1 gradient steps per env step, a 20k buffer. Where tdrl differs: the twin critics are
one batched ensemble, and 1k uniform random steps fill the buffer first.

    python recipes/discrete_sac.py --env-id CartPole-v1 --total-frames 50000
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from tdrl.collectors import Collector
from tdrl.envs import make_vec_env
from tdrl.keys import ACTION_VALUE, OBSERVATION
from tdrl.modules import CategoricalActor, EnsembleCritic, EnsembleMLP, mlp
from tdrl.objectives import DiscreteSACLoss, SoftUpdate
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
    env_id: str = "CartPole-v1"
    """gymnasium id of the task (discrete actions)."""
    total_frames: int = 50_000
    """env steps in total."""
    num_envs: int = 10
    """parallel training envs (one step of each per collected batch)."""
    init_random_frames: int = 1_000
    """uniform random steps before the policy acts and learning starts."""
    utd_ratio: float = 0.1
    """gradient steps per env step."""
    batch_size: int = 64
    """transitions per gradient step."""
    buffer_size: int = 20_000
    """replay buffer capacity."""
    n_steps: int = 3
    """n-step returns from the buffer."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """hidden widths of the actor and of each critic."""
    actor_lr: float = 1e-4
    """actor learning rate."""
    critic_lr: float = 1e-3
    """critic learning rate."""
    alpha_lr: float = 3e-4
    """entropy-coefficient learning rate."""
    alpha_init: float = 0.05
    """(initial) entropy coefficient."""
    auto_alpha: bool = False
    """tune alpha toward the target entropy 0.98 log n."""
    gamma: float = 0.95
    """discount."""
    tau: float = 0.005
    """Polyak coefficient of the target critics."""
    eval_every: int = 5_000
    """env steps between deterministic evaluations (0: only at the end)."""
    eval_episodes: int = 10
    """episodes per evaluation."""
    log_every: int = 1_000
    """env steps between loss logs."""
    checkpoint_every: int = 25_000
    """env steps between checkpoints with the replay buffer (0: never)."""
    log_dir: str = "runs/discrete_sac"
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
    """Train discrete SAC; returns the final deterministic evaluation and the counters."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    run_dir = Path(cfg.log_dir)
    # 1. envs: a separate evaluation env, so evaluating never disturbs the collector's episodes.
    env = make_vec_env(cfg.env_id, cfg.num_envs, seed=cfg.seed)
    eval_env = make_vec_env(cfg.env_id, min(cfg.eval_episodes, 10), seed=cfg.seed + 10_000)
    obs_dim, num_actions = env.obs_leaves[0].shape[-1], int(env.action_spec.space.n)

    # 2. networks
    actor_net = mlp(obs_dim, num_actions, cfg.hidden_sizes, activation=nn.ReLU)
    actor = CategoricalActor(torch_default_init_(actor_net))
    critic = EnsembleCritic(  # Q_e(s, .) for every action, both critics in one call
        EnsembleMLP(obs_dim, num_actions, cfg.hidden_sizes, num_members=2),
        in_keys=(OBSERVATION,),
        out_key=ACTION_VALUE,
    )

    # 3. loss, target update, optimiser, buffer
    loss = DiscreteSACLoss(
        actor,
        critic,
        num_actions=num_actions,
        alpha_init=cfg.alpha_init,
        fixed_alpha=not cfg.auto_alpha,
        gamma=cfg.gamma,
    )
    target_updater = SoftUpdate(loss, tau=cfg.tau)
    optimizer = torch.optim.Adam(
        [
            {"params": actor.parameters(), "lr": cfg.actor_lr},
            {"params": critic.parameters(), "lr": cfg.critic_lr},
            *([{"params": [loss.log_alpha], "lr": cfg.alpha_lr}] if cfg.auto_alpha else []),
        ],
        fused=True,  # one kernel per parameter group instead of a Python loop over tensors
    )
    buffer = make_replay_buffer(
        cfg.buffer_size, n_steps=cfg.n_steps, gamma=cfg.gamma, seed=cfg.seed
    )
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

    # 4. loop: collect one step per env -> store -> gradient steps -> log, evaluate, checkpoint
    bar = tqdm(
        total=cfg.total_frames, initial=frames, disable=not cfg.progress, desc="discrete_sac"
    )
    out = None
    while frames < cfg.total_frames:
        previous = frames
        buffer.extend(transitions(collector.rollout()))
        frames = collector.frames
        due = updates_due(
            frames, updates, learning_starts=cfg.init_random_frames, utd_ratio=cfg.utd_ratio
        )
        for _ in range(due):
            out = loss(buffer.sample(cfg.batch_size))
            total = out["loss_actor"] + out["loss_qvalue"]
            optimizer_step(total + out["loss_alpha"] if cfg.auto_alpha else total, optimizer)
            target_updater.step()
        updates += due
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
        run_dir / "eval.csv", run_dir / "eval.png", title=f"Discrete SAC {cfg.env_id} (eval return)"
    )
    logger.close()
    env.close()
    eval_env.close()
    print(f"Discrete SAC {cfg.env_id}: {frames} frames, eval {final['return_mean']:.1f}")
    return {"eval_return": final["return_mean"], "frames": frames, "updates": updates}


if __name__ == "__main__":
    main(parse(Config))
