"""Soft actor-critic (Haarnoja et al. 2018, arXiv 1801.01290, 1812.05905) on MuJoCo.

Defaults follow Tianshou's published MuJoCo SAC benchmark (examples/mujoco/mujoco_sac.py and its
README): actor and critic lr 1e-3, automatic entropy tuning (target -|A|, alpha lr 3e-4, alpha
starting at 1), tau 0.005, gamma 0.99, batch 256, 256x256 ReLU MLPs, 10k uniform random steps
before learning, 1 env, 1 gradient step per env step, a 1M replay buffer. Where tdrl differs:
the twin critics are one batched ensemble (the same maths), the actor's log-std is bounded softly
into [-5, 2] by a tanh (Tianshou clamps it to [-20, 2]), and all three parameter groups share one
Adam with per-group learning rates (the same updates as three Adams). Entropy units: log-densities
are those of the env's action box (as TorchRL's), so "auto" (-|A|) asks for less entropy than
SB3's and Tianshou's -|A| in the squashed [-1, 1] box when the box is wider; their target is
``-|A| + sum log((high - low) / 2)`` here (--target-entropy; equal on MuJoCo's [-1, 1] boxes).

    python recipes/sac.py --env-id HalfCheetah-v5 --total-frames 1000000
    python recipes/sac.py --env-id Pendulum-v1 --total-frames 20000 --init-random-frames 1000
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from tdrl.collectors import Collector
from tdrl.modules import EnsembleCritic, EnsembleMLP, TanhGaussianActor, mlp, torch_default_init_
from tdrl.objectives import SACLoss, SoftUpdate
from tdrl.trainers import (
    OffPolicyConfig,
    Run,
    make_replay_buffer,
    optimizer_step,
    parse,
    setup,
    transitions,
    updates_due,
)


@dataclass(frozen=True)
class Config(OffPolicyConfig):
    # Task, envs, budget, evaluation, logs, checkpoints, replay, update ratio, gamma, networks:
    # the fields of tdrl.trainers.OffPolicyConfig (--help lists them), with their defaults.
    env_id: str = "HalfCheetah-v5"
    # The algorithm's own fields.
    actor_lr: float = 1e-3
    """actor learning rate."""
    critic_lr: float = 1e-3
    """critic learning rate."""
    alpha_lr: float = 3e-4
    """entropy-coefficient learning rate."""
    alpha_init: float = 1.0
    """initial entropy coefficient."""
    target_entropy: str = "auto"
    """entropy target of the alpha tuning: "auto" (-action_dim) or a number."""
    tau: float = 0.005
    """Polyak coefficient of the target critics."""


def entropy_target(cfg: Config) -> str | float:
    """``cfg.target_entropy`` as SACLoss takes it: "auto" or a float."""
    if cfg.target_entropy == "auto":
        return "auto"
    try:
        return float(cfg.target_entropy)
    except ValueError:
        raise ValueError(
            f"target_entropy must be 'auto' or a number, got {cfg.target_entropy!r}"
        ) from None


def main(cfg: Config) -> dict[str, float]:
    """Train SAC; returns the final deterministic evaluation and the counters."""
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = setup(cfg)
    obs_dim, action_dim = env.obs_leaves[0].shape[-1], env.action_spec.shape[-1]
    low, high = env.action_spec.space.low[0], env.action_spec.space.high[0]

    # 2. networks
    actor_net = mlp(obs_dim, 2 * action_dim, cfg.hidden_sizes, activation=nn.ReLU)
    actor = TanhGaussianActor(
        torch_default_init_(actor_net), action_dim, action_low=low, action_high=high
    )
    critic = EnsembleCritic(EnsembleMLP(obs_dim + action_dim, 1, cfg.hidden_sizes, num_members=2))

    # 3. loss, target update, optimiser, buffer
    loss = SACLoss(
        actor,
        critic,
        alpha_init=cfg.alpha_init,
        target_entropy=entropy_target(cfg),
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
    collector = Collector(env, actor, cfg.num_envs, cfg.total_frames, cfg.init_random_frames)
    state = {"loss": loss, "optimizer": optimizer}
    run = Run.from_config(cfg, "SAC", state, eval_env=eval_env, policy=actor, buffer=buffer)
    run.start(collector)  # resumes from the run folder's checkpoint with --resume

    # 4. loop: one step per env -> store -> gradient steps at the update ratio -> log, eval, save
    for batch in collector:
        buffer.extend(transitions(batch))
        due = updates_due(
            collector.frames, run.updates, learning_starts=cfg.init_random_frames,
            utd_ratio=cfg.utd_ratio,
        )  # fmt: skip
        out = None
        for _ in range(due):
            out = loss(buffer.sample(cfg.batch_size))
            optimizer_step(out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"], optimizer)
            target_updater.step()
        run.updates += due
        if run.end_batch(collector, out):
            break

    # 5. report: final evaluation, curve.png, CSV and TensorBoard logs; closes the envs
    return run.finish()


if __name__ == "__main__":
    main(parse(Config))
