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

import torch

from tdrl.collectors import Collector
from tdrl.estimators import GAE
from tdrl.keys import OBSERVATION
from tdrl.modules import actor_critic
from tdrl.objectives import NPGLoss
from tdrl.trainers import (
    OnPolicyConfig,
    Run,
    linear_decay,
    natural_gradient_update,
    parse,
    setup,
)


@dataclass(frozen=True)
class Config(OnPolicyConfig):
    # Task, envs, budget, evaluation, logs, checkpoints, lr, gamma, networks: the fields of
    # tdrl.trainers.OnPolicyConfig (--help lists them), redefined where this recipe differs.
    num_envs: int = 16
    frames_per_batch: int = 1024
    lr: float = 1e-3
    # The algorithm's own fields.
    critic_steps: int = 20
    """full-batch critic steps per batch."""
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


def main(cfg: Config) -> dict[str, float]:
    """Train NPG as configured; returns the last evaluation and update's metrics."""
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = setup(cfg)
    # 2. networks (observation normalization inside both, see tdrl.modules.networks)
    actor, critic, obs_norm = actor_critic(
        env.observation_spec,
        env.action_spec,
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
    optimizer = torch.optim.Adam(critic.parameters(), lr=cfg.lr, fused=True)
    n_batches = math.ceil(cfg.total_frames / cfg.frames_per_batch)
    scheduler = linear_decay(optimizer, n_batches, decay=cfg.lr_decay)
    collector = Collector(env, actor, cfg.frames_per_batch, total_frames=cfg.total_frames)
    state = {"actor": actor, "critic": critic, "optimizer": optimizer, "scheduler": scheduler}
    run = Run.from_config(cfg, "NPG", state, eval_env=eval_env, policy=actor)
    run.start(collector)  # resumes from the run folder's checkpoint with --resume
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
    # 5. report: final evaluation, curve.png, CSV and TensorBoard logs; closes the envs
    return run.finish()


if __name__ == "__main__":
    main(parse(Config))
