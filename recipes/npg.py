"""NPG (Kakade 2001; normalized step: Rajeswaran et al. 2017, arXiv 1703.02660).

python recipes/npg.py                                   # Hopper-v5, short budget
python recipes/npg.py --env-id Pendulum-v1 --num-envs 4

Defaults are Tianshou's MuJoCo NPG benchmark (examples/mujoco/mujoco_npg.py): 16 envs x 64 steps
= 1024 per batch; the actor takes one natural-gradient step per batch (conjugate gradient, 10
iterations, damping 0.1; the step's quadratic KL model equals max_kl 0.01, where Tianshou takes
a fixed step size); the critic takes 20 full-batch Adam steps (lr 1e-3, decayed linearly to 0);
gamma 0.99, GAE lambda 0.95, advantages normalized, 64x64 tanh MLPs, initial log-std -0.5,
observation normalization. Differences: no reward/return scaling (Tianshou divides returns by
their running std) and a short default budget (Tianshou: 3M).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from tdrl.collectors import Collector
from tdrl.envs import make_vec_env
from tdrl.estimators import GAE
from tdrl.keys import OBSERVATION
from tdrl.objectives import NPGLoss
from tdrl.trainers import (
    Run,
    actor_critic,
    natural_gradient_update,
    parse,
    run_dir,
    seed_everything,
)


@dataclass(frozen=True)
class Config:
    env_id: str = "Hopper-v5"
    """gymnasium id of the task (discrete action spaces get a categorical policy)."""
    total_frames: int = 200_000
    """env steps in total (short default; Tianshou's benchmark uses 3,000,000)."""
    num_envs: int = 16
    """parallel training envs."""
    mode: Literal["sync", "async"] = "sync"
    """one process (sync; exact resume) or one subprocess per env (async)."""
    frames_per_batch: int = 1024
    """env steps per rollout (a multiple of num_envs)."""
    lr: float = 1e-3
    """Adam learning rate of the critic."""
    lr_decay: bool = True
    """decay the critic's learning rate linearly to 0 over total_frames."""
    critic_steps: int = 20
    """full-batch critic steps per batch."""
    gamma: float = 0.99
    """discount."""
    lmbda: float = 0.95
    """GAE lambda."""
    max_kl: float = 0.01
    """KL size of the actor's step (quadratic model)."""
    damping: float = 0.1
    """added to the Fisher matrix in the conjugate-gradient solve."""
    cg_iters: int = 10
    """conjugate-gradient iterations."""
    normalize_advantage: bool = True
    """normalize advantages over each batch."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """hidden layer widths of the actor and the critic."""
    init_log_std: float = -0.5
    """initial log standard deviation of the Gaussian policy."""
    normalize_observations: bool = True
    """running mean/std observation normalization."""
    eval_every: int = 20_000
    """env steps between deterministic evaluations."""
    eval_episodes: int = 10
    """episodes per evaluation."""
    eval_envs: int = 5
    """parallel evaluation envs."""
    stop_at_return: float = math.inf
    """stop once an evaluation's mean return reaches this (time-to-solve runs)."""
    checkpoint_every: int = 10
    """batches between checkpoints (one is also written at the end)."""
    stop_after_frames: int = 0
    """end this process after this many env steps (0: never); the run stays resumable."""
    resume: bool = False
    """continue from log_dir's checkpoint if there is one."""
    seed: int = 0
    """seed of the envs, the networks and the sampling."""
    log_dir: str = ""
    """run folder (default runs/npg/<env_id>/seed<seed>)."""
    tensorboard: bool = True
    """write TensorBoard event files."""
    progress: bool = True
    """show a progress bar."""
    threads: int = 1
    """torch CPU threads (one is fastest for 64x64 networks)."""


def main(cfg: Config) -> dict[str, float]:
    """Train NPG as configured; returns the last evaluation and update's metrics."""
    torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    # 1. envs: a separate eval env, reset with the same seed at every evaluation
    env = make_vec_env(cfg.env_id, cfg.num_envs, mode=cfg.mode, seed=cfg.seed)
    eval_env = make_vec_env(cfg.env_id, cfg.eval_envs, seed=cfg.seed + 10_000)
    # 2. networks (observation normalization inside both, see tdrl.trainers.networks)
    actor, critic, obs_norm = actor_critic(
        env,
        hidden_sizes=cfg.hidden_sizes,
        init_log_std=cfg.init_log_std,
        normalize_observations=cfg.normalize_observations,
    )
    # 3. loss (actor_step for the actor, "loss_critic" for the critic), estimator, optimizer
    loss = NPGLoss(
        actor,
        critic,
        max_kl=cfg.max_kl,
        damping=cfg.damping,
        cg_iters=cfg.cg_iters,
        normalize_advantage=cfg.normalize_advantage,
    )
    estimator = GAE(gamma=cfg.gamma, lmbda=cfg.lmbda, value_network=critic)
    optimizer = torch.optim.Adam(critic.parameters(), lr=cfg.lr)
    n_batches = math.ceil(cfg.total_frames / cfg.frames_per_batch)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: max(1.0 - i / n_batches, 0.0) if cfg.lr_decay else 1.0
    )
    collector = Collector(env, actor, cfg.frames_per_batch, total_frames=cfg.total_frames)
    run = Run(
        run_dir(cfg.log_dir, "npg", cfg.env_id, cfg.seed),
        {"actor": actor, "critic": critic, "optimizer": optimizer, "scheduler": scheduler},
        eval_env=eval_env, policy=actor, title=f"NPG {cfg.env_id}",
        total_frames=cfg.total_frames, eval_every=cfg.eval_every,
        eval_episodes=cfg.eval_episodes, eval_seed=cfg.seed + 10_000,
        checkpoint_every=cfg.checkpoint_every, stop_after_frames=cfg.stop_after_frames,
        stop_at_return=cfg.stop_at_return, tensorboard=cfg.tensorboard, progress=cfg.progress,
    )  # fmt: skip
    run.start(collector, resume=cfg.resume)
    # 4. loop: GAE on the whole rollout, natural-gradient actor step, critic steps, log / save
    for batch in collector:
        metrics = natural_gradient_update(
            batch, loss, estimator, optimizer, critic_steps=cfg.critic_steps
        )
        metrics["lr"] = scheduler.get_last_lr()[0]
        scheduler.step()
        if obs_norm is not None:  # after the updates, which saw the collection's statistics
            obs_norm.update(batch[OBSERVATION])
        if run.end_batch(collector, metrics):
            break
    # 5. report: the last evaluation is the final one; curve.png, CSV and TensorBoard logs
    env.close()
    eval_env.close()
    return run.finish()


if __name__ == "__main__":
    main(parse(Config))
