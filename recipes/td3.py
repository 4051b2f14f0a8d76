"""TD3 (Fujimoto et al. 2018, arXiv 1802.09477) on MuJoCo.

Defaults follow Tianshou's published MuJoCo TD3 benchmark (examples/mujoco/mujoco_td3.py): actor
and critic lr 3e-4, tau 0.005, gamma 0.99, Gaussian exploration noise 0.1, target policy noise
0.2 clipped at 0.5 (half-range units), actor and targets updated every 2 critic steps, batch 256,
256x256 ReLU MLPs, 25k uniform random steps, 1 env, 1 gradient step per env step, 1M buffer.
Where tdrl differs: the twin critics are one batched ensemble; one Adam holds both groups (the
actor group is skipped on critic-only steps, as it has no gradient then).

At a 100k-step budget 25k random steps are a quarter of it: the MuJoCo table's 100k cells
(benchmarks/mujoco_table.py) run rl-zoo3's settings, those of its SB3 cells: learning from 10k
steps on, lr 1e-3, 400x300 nets (HalfCheetah-v5 at 100k, final return: seed 0, 4738 at these
defaults; with 10k steps and lr 1e-3 on 256x256 nets, seeds 0 and 2, 4768 and 5142; with
rl-zoo3's settings, seed 0, 6082, where SB3's TD3 reached 5732 and 5836 on seeds 0-1):

    python recipes/td3.py --env-id Hopper-v5 --total-frames 1000000
    python recipes/td3.py --env-id HalfCheetah-v5 --total-frames 100000 \
        --init-random-frames 10000 --actor-lr 1e-3 --critic-lr 1e-3 --hidden-sizes 400 300
"""

from __future__ import annotations

from dataclasses import dataclass

from tensordict.nn import TensorDictSequential

from tdrl import trainers
from tdrl.modules import AdditiveGaussianNoise, action_bounds, deterministic_actor, q_ensemble
from tdrl.objectives import TD3Loss


@dataclass(frozen=True)
class Config(trainers.TD3Config):
    """Fields beyond tdrl.trainers.TD3Config's (--help lists all, with defaults)."""

    env_id: str = "Hopper-v5"
    init_random_frames: int = 25_000
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    exploration_noise: float = 0.1
    """Gaussian exploration noise (half-range units)."""


def main(cfg: Config) -> dict[str, float]:
    """Train TD3; returns the final deterministic evaluation and the counters."""
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.setup(cfg, actions="continuous")
    low, high = action_bounds(env.action_spec)

    # 2. networks: deterministic actor; Gaussian noise on top acts only while collecting
    actor = deterministic_actor(env.observation_spec, env.action_spec, cfg.hidden_sizes)
    noise = AdditiveGaussianNoise(
        len(low), sigma_init=cfg.exploration_noise, action_low=low, action_high=high
    )
    policy = TensorDictSequential(actor, noise)
    critic = q_ensemble(env.observation_spec, env.action_spec, cfg.hidden_sizes)

    # 3. loss
    loss = TD3Loss(
        actor, critic, policy_noise=cfg.policy_noise, noise_clip=cfg.noise_clip, gamma=cfg.gamma
    )
    # 4. loop (trainers.run_actor_critic: optimiser, buffer, collector acting with the noise):
    #    critic every step; actor and targets every policy_delay steps (delayed updates)
    #    -> log, evaluate, checkpoint (trainers.train_off_policy; --resume continues a run)
    # 5. report: final evaluation, curve.png, CSV and TensorBoard logs; closes the envs
    return trainers.run_actor_critic(
        cfg, "TD3", loss, env, eval_env, actor=actor, critic=critic, policy=policy,
        actor_every=cfg.policy_delay, targets_with_actor=True, extra_state={"noise": noise},
    )  # fmt: skip


if __name__ == "__main__":
    main(trainers.parse(Config))
