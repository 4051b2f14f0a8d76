"""DDPG (Lillicrap et al. 2015, arXiv 1509.02971) on MuJoCo.

Defaults follow Tianshou's published MuJoCo DDPG benchmark (examples/mujoco/mujoco_ddpg.py): actor
and critic lr 1e-3, tau 0.005, gamma 0.99, Gaussian exploration noise 0.1 (half-range units),
batch 256, 256x256 ReLU MLPs, 25k uniform random steps, 1 env, 1 gradient step per env step, 1M
buffer. ``--noise ou`` uses the paper's Ornstein-Uhlenbeck noise instead. Where tdrl differs:
one Adam holds actor and critic with their own learning rates.

The MuJoCo table's 100k cells (benchmarks/mujoco_table.py) run rl-zoo3's settings, those of
its SB3 cells, as its TD3 cells do (see recipes/td3.py): learning from 10k random steps on, not
25k, and 400x300 nets:

    python recipes/ddpg.py --env-id HalfCheetah-v5 --total-frames 1000000
    python recipes/ddpg.py --env-id HalfCheetah-v5 --total-frames 100000 \
        --init-random-frames 10000 --hidden-sizes 400 300
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tensordict.nn import TensorDictSequential
from torch import nn

from tdrl import trainers
from tdrl.modules import (
    AdditiveGaussianNoise,
    OrnsteinUhlenbeckNoise,
    StateActionCritic,
    action_bounds,
    deterministic_actor,
    flat_dims,
    mlp,
    torch_default_init_,
)
from tdrl.objectives import DDPGLoss


@dataclass(frozen=True)
class Config(trainers.ActorCriticConfig):
    """Fields beyond tdrl.trainers.ActorCriticConfig's (--help lists all, with defaults)."""

    init_random_frames: int = 25_000
    noise: Literal["gaussian", "ou"] = "gaussian"
    """exploration noise: Gaussian or Ornstein-Uhlenbeck (restarted at every episode start)."""
    exploration_noise: float = 0.1
    """scale of the exploration noise (half-range units; OU: its sigma)."""


def main(cfg: Config) -> dict[str, float]:
    """Train DDPG; returns the final deterministic evaluation and the counters."""
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.setup(cfg, actions="continuous")
    obs_dim, action_dim = flat_dims(env.observation_spec, env.action_spec)
    low, high = action_bounds(env.action_spec)

    # 2. networks: deterministic actor; the noise on top acts only while collecting
    actor = deterministic_actor(env.observation_spec, env.action_spec, cfg.hidden_sizes)
    bounds = {"action_low": low, "action_high": high}
    if cfg.noise == "ou":
        noise = OrnsteinUhlenbeckNoise(action_dim, sigma=cfg.exploration_noise, **bounds)
    else:
        noise = AdditiveGaussianNoise(action_dim, sigma_init=cfg.exploration_noise, **bounds)
    policy = TensorDictSequential(actor, noise)
    critic_net = mlp(obs_dim + action_dim, 1, cfg.hidden_sizes, activation=nn.ReLU)
    critic = StateActionCritic(torch_default_init_(critic_net))

    # 3. loss
    loss = DDPGLoss(actor, critic, gamma=cfg.gamma)
    # 4. loop (trainers.run_actor_critic: optimiser, buffer, collector acting with the noise):
    #    one step per env -> store -> gradient steps at the update ratio
    #    -> log, evaluate, checkpoint (trainers.train_off_policy; --resume continues a run)
    # 5. report: final evaluation, curve.png, CSV and TensorBoard logs; closes the envs
    return trainers.run_actor_critic(
        cfg, "DDPG", loss, env, eval_env, actor=actor, critic=critic, policy=policy,
        extra_state={"noise": noise},
    )  # fmt: skip


if __name__ == "__main__":
    main(trainers.parse(Config))
