"""A2C (Mnih et al. 2016, arXiv 1602.01783; synchronous) on a MuJoCo task, or any gymnasium task.

python recipes/a2c.py                                   # Hopper-v5, short budget
python recipes/a2c.py --env-id CartPole-v1 --lr 1e-3

Defaults are Tianshou's MuJoCo A2C benchmark (examples/mujoco/mujoco_a2c.py): 16 envs x 5 steps
= 80 per batch, one full-batch step per batch, RMSprop (lr 7e-4, alpha 0.99, eps 1e-5) decayed
linearly to 0, gamma 0.99, GAE lambda 0.95, critic coefficient 0.5, entropy coefficient 0.01,
gradient norm 0.5, 64x64 tanh MLPs, initial log-std -0.5, observation normalization.
The critic learns its value targets divided by the running std of the returns, the advantages
staying in reward units, as Tianshou's `return_scaling` does (tdrl.modules.ValueTargetScaling;
`--no-scale-value-targets` turns it off). At 1M steps, seeds 0-2 (docs/benchmarks/
session_2026-11-26c.txt), it raised the mean final return on HalfCheetah-v5 (1733 to 1975),
Walker2d-v5 (435 to 724) and Ant-v5 (1268 to 2124), and lowered it on Hopper-v5 (784 to 687,
whose best rose from 906 to 1093). `--scale-rewards` (rewards divided by that std, so the
advantages too) is not the same thing: it lowered HalfCheetah-v5's final return on seeds 0-2
from 1845, 1366, 1988 to 941, 759, 621 (docs/benchmarks/session_2026-11-26b.txt).
Differences from Tianshou: a short default budget (Tianshou: 3M steps).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdrl import trainers
from tdrl.estimators import GAE
from tdrl.modules import ValueTargetScaling
from tdrl.objectives import A2CLoss


@dataclass(frozen=True)
class Config(trainers.AdvantageConfig):
    """Fields beyond tdrl.trainers.AdvantageConfig's (--help lists all, with defaults)."""

    num_envs: int = 16
    frames_per_batch: int = 80
    lr: float = 7e-4
    log_every: int = 2_000
    entropy_coeff: float = 0.01
    normalize_advantage: bool = False
    scale_value_targets: bool = True
    """the critic learns its value targets divided by the running std of the returns, the
    advantages staying in reward units (Tianshou's return_scaling; ValueTargetScaling)."""


def main(cfg: Config) -> dict[str, float]:
    """Train A2C as configured; returns the last evaluation and the last update's metrics."""
    # 1-2. envs (seeds, threads, training and evaluation envs) and networks (actor, critic)
    parts = trainers.on_policy_setup(cfg)
    # 3. loss, estimator (run on the whole rollout), optimizer
    loss = A2CLoss(parts.actor, parts.critic, **cfg.loss_terms)
    estimator: TensorDictModuleBase = GAE(
        gamma=cfg.gamma, lmbda=cfg.lmbda, value_network=parts.critic
    )
    if cfg.scale_value_targets:
        estimator = ValueTargetScaling(estimator)  # its statistics go in the checkpoints
    trainers.to_device(cfg, loss, estimator)  # --device: networks, targets, estimator
    optimizer = torch.optim.RMSprop(
        loss.parameters(), lr=cfg.lr, alpha=0.99, eps=1e-5, foreach=True
    )

    def update(batch: TensorDictBase) -> dict[str, float]:
        # estimate on the whole rollout, then one full-batch step
        return trainers.on_policy_update(
            batch, loss, estimator, optimizer, max_grad_norm=cfg.max_grad_norm,
            seq_len=cfg.sequence_length,  # --recurrent: the rollout as whole sequences
        )  # fmt: skip

    # 4. loop: collect a rollout -> update -> log, evaluate, checkpoint (trainers.run_on_policy;
    #    --resume continues a run); 5. report: final evaluation, curve.png, CSV, TensorBoard
    extra_state = {"value_target_scaling": estimator} if cfg.scale_value_targets else None
    return trainers.run_on_policy(cfg, "A2C", parts, optimizer, update, extra_state=extra_state)


if __name__ == "__main__":
    main(trainers.parse(Config))
