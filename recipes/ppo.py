"""PPO (Schulman et al. 2017, arXiv 1707.06347) on a MuJoCo task, or any gymnasium task.

python recipes/ppo.py                                   # Hopper-v5, short budget
python recipes/ppo.py --total-frames 1000000            # the 1M-step benchmark setting
python recipes/ppo.py --env-id CartPole-v1 --frames-per-batch 256 --minibatch-size 256 \
    --lr 3e-3 --no-lr-decay --gamma 0.98 --lmbda 0.8 --critic-coeff 0.5 \
    --no-normalize-observations --normalize-advantage --no-scale-rewards
python recipes/ppo.py --env-id Pendulum-v1 --frames-per-batch 2000 --minibatch-size 128 \
    --lr 2e-3 --no-lr-decay --gamma 0.9 --critic-coeff 0.5 --init-log-std 0 \
    --no-normalize-observations --normalize-advantage --no-scale-rewards
python recipes/ppo.py --resume                          # continue runs/ppo/Hopper-v5/seed0
python recipes/ppo.py --env-id CartPoleNoVel-v1 --recurrent lstm --frames-per-batch 1024 \
    --minibatch-size 256 --seq-len 16 --epochs 4 --lr 3e-3 --no-lr-decay --gamma 0.98 \
    --lmbda 0.8 --critic-coeff 0.5 --no-normalize-observations --normalize-advantage \
    --no-scale-rewards   # a POMDP: memory needed

Defaults are Tianshou's MuJoCo PPO benchmark (examples/mujoco/mujoco_ppo.py): 8 envs x 256
steps = 2048 per batch, 10 epochs of minibatch 64, Adam lr 3e-4 decayed linearly to 0, gamma
0.99, GAE lambda 0.95, clip 0.2, critic coefficient 0.25, no entropy bonus, gradient norm 0.5,
64x64 tanh MLPs, initial log-std -0.5, observation normalization, advantages not normalized.
Differences: rewards are divided by the running std of the discounted return (`--scale-rewards`,
as SB3/CleanRL; Tianshou divides the value targets by the std of the returns instead, the same
scale for the critic), GAE is computed once per batch (`--recompute-advantage` re-runs it every
epoch as Tianshou does), and the default budget is short (Tianshou: 3M steps). Chosen on seed
100 at 1M steps (best evaluation; the table's seeds are 0-2): HalfCheetah / Ant with advantages
normalized per minibatch (SB3/CleanRL) and raw rewards 3,980 / 1,582; scaled rewards 4,157 /
1,359; raw advantages 3,534 / 1,550; raw advantages of scaled rewards 6,206 / 2,952 (chosen;
Hopper 3,675, Walker2d 4,646); that and recomputing every epoch 4,244 / 1,498. The CartPole and
Pendulum lines above are tdrl's settings for those small tasks (benchmarks/time_to_solve.py): SB3
zoo's gamma and lambda, with one full-batch step (CartPole) or 128-sample minibatches (Pendulum)
and a higher learning rate, chosen by a small sweep for the fewest gradient steps to solve
(checked on held-out seeds), with the advantage and reward handling of the recipe then
(normalized advantages, raw rewards).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDictBase

from tdrl import trainers
from tdrl.estimators import GAE
from tdrl.objectives import ClipPPOLoss


@dataclass(frozen=True)
class Config(trainers.PPOConfig):
    """Fields beyond tdrl.trainers.PPOConfig's (--help lists all, with defaults)."""

    adam_eps: float = 1e-8
    """Adam's epsilon (PyTorch's default; SB3's on-policy policies use 1e-5)."""
    normalize_advantage: bool = False
    """normalize advantages to zero mean and unit std over each minibatch (SB3, CleanRL);
    off: the estimator's advantages as they are (Tianshou's MuJoCo PPO)."""
    scale_rewards: bool = True
    """divide rewards by the running std of the discounted return before the estimator."""


def main(cfg: Config) -> dict[str, float]:
    """Train PPO as configured; returns the last evaluation and the last update's metrics."""
    # 1-2. envs (seeds, threads, training and evaluation envs) and networks (actor, critic)
    parts = trainers.on_policy_setup(cfg)
    # 3. loss, estimator (run on the whole rollout before minibatching), optimizer
    loss = ClipPPOLoss(parts.actor, parts.critic, clip_epsilon=cfg.clip_epsilon, **cfg.loss_terms)
    estimator = GAE(gamma=cfg.gamma, lmbda=cfg.lmbda, value_network=parts.critic)
    trainers.to_device(cfg, loss, estimator)  # --device: networks, statistics
    optimizer = torch.optim.Adam(loss.parameters(), lr=cfg.lr, eps=cfg.adam_eps, fused=True)

    def update(batch: TensorDictBase) -> dict[str, float]:
        # estimate on the whole rollout, then minibatch epochs
        return trainers.on_policy_update(
            batch, loss, estimator, optimizer, epochs=cfg.epochs,
            minibatch_size=cfg.minibatch_size, max_grad_norm=cfg.max_grad_norm,
            recompute_advantage=cfg.recompute_advantage,
            seq_len=cfg.sequence_length,  # --recurrent: minibatches of whole sequences
        )  # fmt: skip

    # 4. loop: collect a rollout -> update -> log, evaluate, checkpoint (trainers.run_on_policy;
    #    --resume continues a run); 5. report: final evaluation, curve.png, CSV, TensorBoard
    # (--scale-rewards: run_on_policy scales the rewards before update)
    return trainers.run_on_policy(cfg, "PPO", parts, optimizer, update)


if __name__ == "__main__":
    main(trainers.parse(Config))
