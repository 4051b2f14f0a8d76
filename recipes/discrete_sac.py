"""Soft actor-critic for discrete actions (Christodoulou 2019, arXiv 1910.07207).

Defaults follow Tianshou's CartPole discrete-SAC test (test/discrete/test_discrete_sac.py): actor
lr 1e-4, critic lr 1e-3, a fixed alpha of 0.05 (``--auto-alpha`` tunes it with lr 3e-4 toward
``--target-entropy``, by default 0.98 log n), gamma 0.95, tau 0.005, 3-step returns, batch 64,
64x64 ReLU MLPs, 10 envs, 10 env steps per batch, 0.1 gradient steps per env step, a 20k
buffer. Where tdrl differs: the twin critics are one batched ensemble, and 1k uniform random
steps fill the buffer first.

    python recipes/discrete_sac.py --env-id CartPole-v1 --total-frames 50000
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from tdrl import trainers
from tdrl.keys import ACTION_VALUE, OBSERVATION
from tdrl.modules import (
    CategoricalActor,
    EnsembleCritic,
    EnsembleMLP,
    flat_dims,
    mlp,
    torch_default_init_,
)
from tdrl.objectives import DiscreteSACLoss


@dataclass(frozen=True)
class Config(trainers.EntropyConfig):
    """Fields beyond tdrl.trainers.EntropyConfig's (--help lists all, with defaults)."""

    env_id: str = "CartPole-v1"
    total_frames: int = 50_000
    num_envs: int = 10
    init_random_frames: int = 1_000
    utd_ratio: float = 0.1
    batch_size: int = 64
    buffer_size: int = 20_000
    hidden_sizes: tuple[int, ...] = (64, 64)
    gamma: float = 0.95
    eval_every: int = 5_000
    checkpoint_every: int = 25_000
    actor_lr: float = 1e-4
    alpha_init: float = 0.05
    n_steps: int = 3
    """n-step returns from the buffer."""
    auto_alpha: bool = False
    """tune alpha toward --target-entropy ("auto": 0.98 log(actions)); else alpha_init stays."""


def main(cfg: Config) -> dict[str, float]:
    """Train discrete SAC; returns the final deterministic evaluation and the counters."""
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.setup(cfg, actions="discrete")
    obs_dim, num_actions = flat_dims(env.observation_spec, env.action_spec)

    # 2. networks
    actor_net = mlp(obs_dim, num_actions, cfg.hidden_sizes, activation=nn.ReLU)
    actor = CategoricalActor(torch_default_init_(actor_net))
    critic = EnsembleCritic(  # Q_e(s, .) for every action, both critics in one call
        EnsembleMLP(obs_dim, num_actions, cfg.hidden_sizes, num_members=2),
        in_keys=(OBSERVATION,),
        out_key=ACTION_VALUE,
    )

    # 3. loss
    loss = DiscreteSACLoss(
        actor,
        critic,
        num_actions=num_actions,
        alpha_init=cfg.alpha_init,
        fixed_alpha=not cfg.auto_alpha,
        target_entropy=cfg.entropy_target(),
        gamma=cfg.gamma,
    )
    # 4. loop (trainers.run_actor_critic: optimiser, n-step buffer, collector): one step per
    #    env -> store -> gradient steps at the update ratio -> log, evaluate, checkpoint
    # 5. report: final evaluation, curve.png, CSV and TensorBoard logs; closes the envs
    return trainers.run_actor_critic(
        cfg, "Discrete SAC", loss, env, eval_env, actor=actor, critic=critic,
        log_alpha=loss.log_alpha if cfg.auto_alpha else None,  # a fixed alpha's term is constant
        n_steps=cfg.n_steps,
    )  # fmt: skip


if __name__ == "__main__":
    main(trainers.parse(Config))
