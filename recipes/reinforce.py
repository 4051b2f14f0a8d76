"""REINFORCE (Williams 1992) on a MuJoCo task, or any gymnasium task.

python recipes/reinforce.py                             # Hopper-v5, short budget
python recipes/reinforce.py --baseline                  # with a learned value baseline

Defaults are Tianshou's MuJoCo REINFORCE benchmark (examples/mujoco/mujoco_reinforce.py): 2048
steps per batch, one full-batch Adam step (lr 1e-3, decayed linearly to 0), gamma 0.99, Monte
Carlo returns without a baseline, normalized over the batch (Tianshou normalizes the returns),
64x64 tanh MLP, initial log-std -0.5, observation normalization. Differences: 8 envs x 256
steps (Tianshou: 10 envs), actions clipped to the bounds (Tianshou: tanh; it reports clipping
works as well), a short default budget (Tianshou: 3M steps). Returns of episodes still running
at the end of a batch are cut there (value 0; with --baseline, V bootstraps them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule

from tdrl import trainers
from tdrl.estimators import TD1Estimator
from tdrl.keys import OBSERVATION, STATE_VALUE
from tdrl.objectives import ReinforceLoss


@dataclass(frozen=True)
class Config(trainers.OnPolicyConfig):
    """Fields beyond tdrl.trainers.OnPolicyConfig's (--help lists all, with defaults)."""

    lr: float = 1e-3
    baseline: bool = False
    """subtract a learned state value from the return (and train it)."""


def zero_value() -> TensorDictModule:
    """V = 0 everywhere: the estimator then returns plain discounted returns."""
    return TensorDictModule(
        lambda observation: observation.new_zeros(*observation.shape[:-1], 1),
        in_keys=[OBSERVATION],
        out_keys=[STATE_VALUE],
    )


def main(cfg: Config) -> dict[str, float]:
    """Train REINFORCE as configured; returns the last evaluation and update's metrics."""
    # 1-2. envs (seeds, threads, training and evaluation envs) and networks (actor, critic)
    parts = trainers.on_policy_setup(cfg)
    # 3. loss, estimator (Monte Carlo returns on the whole rollout), optimizer
    baseline = parts.critic if cfg.baseline else None
    loss = ReinforceLoss(parts.actor, baseline, normalize_advantage=cfg.normalize_advantage)
    estimator = TD1Estimator(gamma=cfg.gamma, value_network=baseline or zero_value())
    trainers.to_device(cfg, loss, estimator)  # --device: networks, targets, estimator
    optimizer = torch.optim.Adam(loss.parameters(), lr=cfg.lr, fused=True)

    def update(batch: TensorDictBase) -> dict[str, float]:
        # returns on the whole rollout, then one full-batch step
        return trainers.on_policy_update(batch, loss, estimator, optimizer)

    # 4. loop: collect a rollout -> update -> log, evaluate, checkpoint (trainers.run_on_policy;
    #    --resume continues a run); 5. report: final evaluation, curve.png, CSV, TensorBoard
    return trainers.run_on_policy(cfg, "REINFORCE", parts, optimizer, update)


if __name__ == "__main__":
    main(trainers.parse(Config))
