"""TRPO (Schulman et al. 2015, arXiv 1502.05477) and NPG (Kakade 2001; normalized step:
Rajeswaran et al. 2017, arXiv 1703.02660) on a MuJoCo or any gymnasium task: one recipe, the
actor's natural-gradient step chosen by ``--algo``.

python recipes/trpo.py                                   # TRPO, Hopper-v5, short budget
python recipes/trpo.py --algo npg                        # NPG
python recipes/trpo.py --env-id Pendulum-v1 --num-envs 4

Defaults are Tianshou's MuJoCo TRPO and NPG benchmarks (examples/mujoco/mujoco_trpo.py and
mujoco_npg.py, which share them): 16 envs x 64 steps = 1024 per batch; the actor takes one
natural-gradient step per batch (conjugate gradient, 10 iterations, damping 0.1; TRPO: KL bound
0.01, backtracking ratio 0.8, 10 backtracks; NPG: a step whose quadratic KL model equals 0.01,
where Tianshou takes a fixed step size); the critic takes 20 full-batch Adam steps (lr 1e-3,
decayed linearly to 0); gamma 0.99, GAE lambda 0.95, advantages normalized, 64x64 tanh MLPs,
initial log-std -0.5, observation normalization, and scaled rewards (``--scale-rewards``: divided
by the running std of the discounted return, so the critic learns targets of unit scale;
Tianshou's ``rew_norm`` divides the returns by their running std for the same end). Differences:
that scaling's form (the rewards, as SB3's VecNormalize, rather than the returns), NPG's step (see
above) and a short default budget (Tianshou: 3M). The scaling is on by default since it was tried
on seed 100 (Hopper-v5): NPG's final evaluation at 1M steps 1453 with it (1923 at 980k), where
the unscaled recipe's seeds 0-2 ended at 627-914; TRPO 3268 at 300k steps, where the unscaled
seeds 0-2 were at 371-563 (docs/benchmarks/session_2026-11-25c.txt). The table's seeds are 0-2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDictBase

from tdrl import trainers
from tdrl.estimators import GAE
from tdrl.objectives import NPGLoss, TRPOLoss


@dataclass(frozen=True)
class Config(trainers.OnPolicyConfig):
    """Fields beyond tdrl.trainers.OnPolicyConfig's (--help lists all, with defaults)."""

    num_envs: int = 16
    frames_per_batch: int = 1024
    lr: float = 1e-3
    algo: Literal["trpo", "npg"] = "trpo"
    """the actor's step: TRPO (KL-bounded line search) or NPG (normalized natural gradient)."""
    critic_steps: int = 20
    """critic passes over the batch per batch (full-batch steps by default)."""
    critic_minibatch_size: int | None = None
    """the critic's minibatch (None: the whole batch, Tianshou's; SB3's TRPO: 128)."""
    lmbda: float = 0.95
    """GAE lambda."""
    max_kl: float = 0.01
    """KL bound of the actor's step (NPG: the KL of its quadratic model)."""
    backtrack_ratio: float = 0.8
    """line-search step shrink factor (TRPO)."""
    max_backtracks: int = 10
    """line-search trials (TRPO)."""
    damping: float = 0.1
    """added to the Fisher matrix in the conjugate-gradient solve."""
    cg_iters: int = 10
    """conjugate-gradient iterations."""
    scale_rewards: bool = True


def main(cfg: Config) -> dict[str, float]:
    """Train TRPO or NPG as configured; returns the last evaluation and update's metrics."""
    # 1-2. envs (seeds, threads, training and evaluation envs) and networks (actor, critic)
    parts = trainers.on_policy_setup(cfg)
    # 3. loss (actor_step for the actor, "loss_critic" for the critic), estimator, optimizer
    common = dict(
        max_kl=cfg.max_kl,
        damping=cfg.damping,
        cg_iters=cfg.cg_iters,
        normalize_advantage=cfg.normalize_advantage,
    )
    if cfg.algo == "trpo":
        loss = TRPOLoss(
            parts.actor,
            parts.critic,
            backtrack_ratio=cfg.backtrack_ratio,
            max_backtracks=cfg.max_backtracks,
            **common,
        )
    else:
        loss = NPGLoss(parts.actor, parts.critic, **common)
    estimator = GAE(gamma=cfg.gamma, lmbda=cfg.lmbda, value_network=parts.critic)
    trainers.to_device(cfg, loss, estimator)  # --device: networks, targets, estimator
    optimizer = torch.optim.Adam(parts.critic.parameters(), lr=cfg.lr, fused=True)

    def update(batch: TensorDictBase) -> dict[str, float]:
        # GAE on the whole rollout, the natural-gradient actor step, then critic steps
        return trainers.natural_gradient_update(
            batch, loss, estimator, optimizer, critic_steps=cfg.critic_steps,
            critic_minibatch_size=cfg.critic_minibatch_size,
        )  # fmt: skip

    # 4. loop: collect a rollout -> update -> log, evaluate, checkpoint (trainers.run_on_policy;
    #    --resume continues a run); 5. report: final evaluation, curve.png, CSV, TensorBoard
    return trainers.run_on_policy(cfg, cfg.algo.upper(), parts, optimizer, update)


if __name__ == "__main__":
    main(trainers.parse(Config))
