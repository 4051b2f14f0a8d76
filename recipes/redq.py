"""REDQ (Chen et al. 2021, arXiv 2101.05982): SAC with an ensemble of N critics, a random pair
in each target, and many gradient steps per env step.

Defaults follow Tianshou's MuJoCo REDQ benchmark (examples/mujoco/mujoco_redq.py): 10 critics, a
subset of 2 in the target, 20 critic steps per env step, the actor updated once per 20 (its
``actor_delay``), actor and critic lr 1e-3, automatic entropy tuning (alpha lr 3e-4), tau 0.005,
gamma 0.99, batch 256, 256x256 ReLU MLPs, 10k uniform random steps, 1 env, 1M buffer. Where tdrl
differs: all N critics are one batched ensemble call, and the actor loss uses the mean over the
N critics (the paper's Alg. 1 line 13; Tianshou's "min" target mode only affects the target).

    python recipes/redq.py --env-id HalfCheetah-v5 --total-frames 300000
"""

from __future__ import annotations

from dataclasses import dataclass

from tdrl import trainers
from tdrl.modules import q_ensemble, tanh_gaussian_actor
from tdrl.objectives import REDQLoss


@dataclass(frozen=True)
class Config(trainers.EntropyConfig):
    """Fields beyond tdrl.trainers.EntropyConfig's (--help lists all, with defaults)."""

    utd_ratio: float = 20.0  # critic gradient steps per env step (the paper's G)
    actor_delay: int = 20
    """critic steps per actor and alpha step."""
    num_qvalue_nets: int = 10
    """ensemble size N."""
    sub_sample_len: int = 2
    """critics in each target's minimum (M)."""


def main(cfg: Config) -> dict[str, float]:
    """Train REDQ; returns the final deterministic evaluation and the counters."""
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.setup(cfg, actions="continuous")

    # 2. networks: all N critics in one batched ensemble
    actor = tanh_gaussian_actor(env.observation_spec, env.action_spec, cfg.hidden_sizes)
    critic = q_ensemble(
        env.observation_spec, env.action_spec, cfg.hidden_sizes, cfg.num_qvalue_nets
    )

    # 3. loss
    loss = REDQLoss(
        actor,
        critic,
        num_qvalue_nets=cfg.num_qvalue_nets,
        sub_sample_len=cfg.sub_sample_len,
        alpha_init=cfg.alpha_init,
        target_entropy=cfg.entropy_target(),
        gamma=cfg.gamma,
    )
    # 4. loop (trainers.run_actor_critic: optimiser, buffer, collector): one step per env
    #    -> store -> G critic steps, an actor step every actor_delay
    #    -> log, evaluate, checkpoint (trainers.train_off_policy; --resume continues a run)
    # 5. report: final evaluation, curve.png, CSV and TensorBoard logs; closes the envs
    return trainers.run_actor_critic(
        cfg, "REDQ", loss, env, eval_env, actor=actor, critic=critic, log_alpha=loss.log_alpha,
        actor_every=cfg.actor_delay,
    )  # fmt: skip


if __name__ == "__main__":
    main(trainers.parse(Config))
