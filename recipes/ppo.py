"""PPO (Schulman et al. 2017, arXiv 1707.06347) on a MuJoCo task, or any gymnasium task.

python recipes/ppo.py                                   # Hopper-v5, short budget
python recipes/ppo.py --total-frames 1000000            # the 1M-step benchmark setting
python recipes/ppo.py --env-id CartPole-v1 --num-envs 8 --frames-per-batch 1024
python recipes/ppo.py --resume                          # continue runs/ppo/Hopper-v5/seed0

Defaults are Tianshou's MuJoCo PPO benchmark (examples/mujoco/mujoco_ppo.py): 8 envs x 256
steps = 2048 per batch, 10 epochs of minibatch 64, Adam lr 3e-4 decayed linearly to 0, gamma
0.99, GAE lambda 0.95, clip 0.2, critic coefficient 0.25, no entropy bonus, gradient norm 0.5,
64x64 tanh MLPs, initial log-std -0.5, observation normalization. Differences: advantages are
normalized per minibatch (SB3/CleanRL; Tianshou off), GAE is computed once per batch
(Tianshou recomputes it every epoch), rewards are not scaled by default (`--scale-rewards`
divides them by the running std of the discounted return as SB3/CleanRL do; Tianshou normalizes
value targets instead; unscaled, Hopper seed 0 already reached 3,236 at 280k steps), and the
default budget is short (Tianshou: 3M steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from tdrl.collectors import Collector
from tdrl.envs import make_vec_env
from tdrl.estimators import GAE
from tdrl.keys import OBSERVATION
from tdrl.modules import RewardScaling
from tdrl.objectives import ClipPPOLoss
from tdrl.trainers import Run, actor_critic, on_policy_update, parse, run_dir, seed_everything


@dataclass(frozen=True)
class Config:
    env_id: str = "Hopper-v5"
    """gymnasium id of the task (discrete action spaces get a categorical policy)."""
    total_frames: int = 200_000
    """env steps in total (short default; the MuJoCo benchmark uses 1,000,000)."""
    num_envs: int = 8
    """parallel training envs."""
    mode: Literal["sync", "async"] = "sync"
    """one process (sync; exact resume) or one subprocess per env (async)."""
    frames_per_batch: int = 2048
    """env steps per rollout (a multiple of num_envs)."""
    epochs: int = 10
    """passes over each rollout."""
    minibatch_size: int = 64
    """samples per gradient step."""
    lr: float = 3e-4
    """Adam learning rate."""
    lr_decay: bool = True
    """decay the learning rate linearly to 0 over total_frames."""
    gamma: float = 0.99
    """discount."""
    lmbda: float = 0.95
    """GAE lambda."""
    clip_epsilon: float = 0.2
    """ratio clip range."""
    critic_coeff: float = 0.25
    """weight of the value loss."""
    entropy_coeff: float = 0.0
    """weight of the entropy bonus."""
    max_grad_norm: float = 0.5
    """global gradient-norm clip."""
    normalize_advantage: bool = True
    """normalize advantages per minibatch."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """hidden layer widths of the actor and the critic."""
    init_log_std: float = -0.5
    """initial log standard deviation of the Gaussian policy."""
    normalize_observations: bool = True
    """running mean/std observation normalization."""
    scale_rewards: bool = False
    """divide rewards by the running std of the discounted return (SB3/CleanRL style)."""
    eval_every: int = 20_000
    """env steps between deterministic evaluations."""
    eval_episodes: int = 10
    """episodes per evaluation."""
    eval_envs: int = 5
    """parallel evaluation envs."""
    stop_at_return: float = math.inf
    """stop once an evaluation's mean return reaches this (time-to-solve runs)."""
    checkpoint_every: int = 10
    """batches between checkpoints (one is also written at the end)."""
    stop_after_frames: int = 0
    """end this process after this many env steps (0: never); the run stays resumable."""
    resume: bool = False
    """continue from log_dir's checkpoint if there is one."""
    seed: int = 0
    """seed of the envs, the networks and the sampling."""
    log_dir: str = ""
    """run folder (default runs/ppo/<env_id>/seed<seed>)."""
    tensorboard: bool = True
    """write TensorBoard event files."""
    progress: bool = True
    """show a progress bar."""
    threads: int = 1
    """torch CPU threads (one is fastest for 64x64 networks)."""


def main(cfg: Config) -> dict[str, float]:
    """Train PPO as configured; returns the last evaluation and the last update's metrics."""
    torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    # 1. envs: a separate eval env, reset with the same seed at every evaluation
    env = make_vec_env(cfg.env_id, cfg.num_envs, mode=cfg.mode, seed=cfg.seed)
    eval_env = make_vec_env(cfg.env_id, cfg.eval_envs, seed=cfg.seed + 10_000)
    # 2. networks (observation normalization inside both, see tdrl.trainers.networks)
    actor, critic, obs_norm = actor_critic(
        env,
        hidden_sizes=cfg.hidden_sizes,
        init_log_std=cfg.init_log_std,
        normalize_observations=cfg.normalize_observations,
    )
    # 3. loss, estimator (run on the whole rollout before minibatching), optimizer
    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=cfg.clip_epsilon,
        entropy_coeff=cfg.entropy_coeff,
        critic_coeff=cfg.critic_coeff,
        normalize_advantage=cfg.normalize_advantage,
    )
    reward_scaler = RewardScaling(cfg.gamma) if cfg.scale_rewards else None
    estimator = GAE(gamma=cfg.gamma, lmbda=cfg.lmbda, value_network=critic)
    optimizer = torch.optim.Adam(loss.parameters(), lr=cfg.lr)
    n_batches = math.ceil(cfg.total_frames / cfg.frames_per_batch)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: max(1.0 - i / n_batches, 0.0) if cfg.lr_decay else 1.0
    )
    collector = Collector(env, actor, cfg.frames_per_batch, total_frames=cfg.total_frames)
    run = Run(
        run_dir(cfg.log_dir, "ppo", cfg.env_id, cfg.seed),
        {"actor": actor, "critic": critic, "optimizer": optimizer, "scheduler": scheduler}
        | ({"reward_scaler": reward_scaler} if reward_scaler is not None else {}),
        eval_env=eval_env, policy=actor, title=f"PPO {cfg.env_id}",
        total_frames=cfg.total_frames, eval_every=cfg.eval_every,
        eval_episodes=cfg.eval_episodes, eval_seed=cfg.seed + 10_000,
        checkpoint_every=cfg.checkpoint_every, stop_after_frames=cfg.stop_after_frames,
        stop_at_return=cfg.stop_at_return, tensorboard=cfg.tensorboard, progress=cfg.progress,
    )  # fmt: skip
    run.start(collector, resume=cfg.resume)
    # 4. loop: estimate on the whole rollout, minibatch epochs, then log / evaluate / checkpoint
    for batch in collector:
        if reward_scaler is not None:  # before the estimator: the critic learns scaled returns
            reward_scaler(batch)
        metrics = on_policy_update(
            batch,
            loss,
            estimator,
            optimizer,
            epochs=cfg.epochs,
            minibatch_size=cfg.minibatch_size,
            max_grad_norm=cfg.max_grad_norm,
        )
        metrics["lr"] = scheduler.get_last_lr()[0]
        scheduler.step()
        if obs_norm is not None:  # after the updates, which saw the collection's statistics
            obs_norm.update(batch[OBSERVATION])
        if run.end_batch(collector, metrics):
            break
    # 5. report: the last evaluation is the final one; curve.png, CSV and TensorBoard logs
    env.close()
    eval_env.close()
    return run.finish()


if __name__ == "__main__":
    main(parse(Config))
