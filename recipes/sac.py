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

from tdrl import trainers
from tdrl.modules import q_ensemble, tanh_gaussian_actor
from tdrl.objectives import SACLoss


@dataclass(frozen=True)
class Config(trainers.EntropyConfig):
    """Fields beyond tdrl.trainers.EntropyConfig's (--help lists all, with defaults)."""


def main(cfg: Config) -> dict[str, float]:
    """Train SAC; returns the final deterministic evaluation and the counters."""
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.setup(cfg, actions="continuous")

    # 2. networks: a tanh-Gaussian actor and twin critics in one batched ensemble
    actor = tanh_gaussian_actor(env.observation_spec, env.action_spec, cfg.hidden_sizes)
    critic = q_ensemble(env.observation_spec, env.action_spec, cfg.hidden_sizes)

    # 3. loss (trainers.run_actor_critic: one fused Adam, a group per network, and a buffer)
    loss = SACLoss(
        actor,
        critic,
        alpha_init=cfg.alpha_init,
        target_entropy=cfg.entropy_target(),
        gamma=cfg.gamma,
    )
    # 3b. device, optimiser, buffer, collector (trainers.run_actor_critic), then
    # 4. loop: one step per env -> store -> gradient steps at the update ratio
    #    -> log, evaluate, checkpoint (trainers.train_off_policy; --resume continues a run)
    # 5. report: final evaluation, curve.png, CSV and TensorBoard logs; closes the envs
    return trainers.run_actor_critic(
        cfg, "SAC", loss, env, eval_env, actor=actor, critic=critic, log_alpha=loss.log_alpha
    )


if __name__ == "__main__":
    main(trainers.parse(Config))
