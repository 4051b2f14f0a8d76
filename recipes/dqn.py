"""DQN (Mnih et al. 2015) with double Q (van Hasselt et al. 2015, arXiv 1509.06461), dueling
heads (Wang et al. 2016, 1511.06581), n-step returns and prioritized replay (Schaul et al. 2015,
1511.05952) as options.

Defaults: CartPole-v1 with rl-baselines3-zoo's tuned DQN settings (hyperparams/dqn.yml): lr
2.3e-3, batch 64, 256x256 MLP with PyTorch's default init, 1k random steps, epsilon 1 -> 0.04
over the first 16% of 50k steps, 128 gradient steps per 256 env steps (utd 0.5), gamma 0.99,
Huber loss, gradient norm clipped at 10 (SB3's default). The zoo copies the target every 10 env
steps; SB3 trains in bursts, so that is one copy per burst, i.e. every 128 gradient steps here
(a copy every 10 gradient steps diverged: Q reached 1e10). Where tdrl differs: double Q is on by
default (the zoo uses SB3's plain DQN; both solve CartPole-v1 here).

    python recipes/dqn.py                                  # CartPole-v1
    python recipes/dqn.py --n-steps 3 --prioritized --no-double-dqn
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tensordict.nn import TensorDictSequential
from tqdm import tqdm

from tdrl.collectors import Collector
from tdrl.data import PrioritizedReplayBuffer
from tdrl.envs import make_vec_env
from tdrl.modules import EpsilonGreedy, QValueActor, linear_schedule, q_mlp
from tdrl.objectives import DQNLoss, HardUpdate, update_priority
from tdrl.trainers import Logger, parse, plot_learning_curve
from tdrl.trainers.offpolicy import (
    crossed,
    episode_metrics,
    evaluate_and_log,
    has_run,
    load_run,
    make_replay_buffer,
    optimizer_step,
    save_run,
    torch_default_init_,
    transitions,
    updates_due,
)


@dataclass(frozen=True)
class Config:
    env_id: str = "CartPole-v1"
    """gymnasium id of the task (discrete actions)."""
    total_frames: int = 50_000
    """env steps in total."""
    num_envs: int = 1
    """parallel training envs."""
    frames_per_batch: int = 256
    """env steps per collected batch (SB3's train_freq)."""
    init_random_frames: int = 1_000
    """uniform random steps before learning starts."""
    utd_ratio: float = 0.5
    """gradient steps per env step (zoo: 128 per 256)."""
    batch_size: int = 64
    """transitions per gradient step."""
    buffer_size: int = 100_000
    """replay buffer capacity."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """hidden widths of the Q network."""
    dueling: bool = False
    """dueling value/advantage head."""
    double_dqn: bool = True
    """select the bootstrap action with the online network."""
    n_steps: int = 1
    """n-step returns from the buffer."""
    prioritized: bool = False
    """prioritized replay (proportional)."""
    per_alpha: float = 0.6
    """PER priority exponent."""
    per_beta: float = 0.4
    """PER importance-weight exponent at the start, annealed to 1 by the end."""
    lr: float = 2.3e-3
    """Adam learning rate."""
    gamma: float = 0.99
    """discount."""
    eps_init: float = 1.0
    """initial exploration epsilon."""
    eps_end: float = 0.04
    """final exploration epsilon."""
    eps_frames: int = 8_000
    """env steps over which epsilon decays."""
    target_update_interval: int = 128
    """gradient steps between hard target copies (zoo: every 10 env steps, i.e. once per burst of
    128 gradient steps, since SB3 trains in bursts every 256 env steps)."""
    max_grad_norm: float = 10.0
    """gradient norm clip."""
    eval_every: int = 5_000
    """env steps between greedy evaluations (0: only at the end)."""
    eval_episodes: int = 10
    """episodes per evaluation."""
    checkpoint_every: int = 25_000
    """env steps between checkpoints with the replay buffer (0: never)."""
    log_dir: str = "runs/dqn"
    """folder of logs, curve PNG and checkpoint."""
    resume: bool = False
    """continue from the checkpoint in log_dir, if there is one."""
    seed: int = 0
    """seed of torch, the envs and the buffer."""
    threads: int = 1
    """torch threads."""
    progress: bool = True
    """show a progress bar."""
    tensorboard: bool = True
    """write TensorBoard event files."""


def main(cfg: Config) -> dict[str, float]:
    """Train DQN; returns the final greedy evaluation, the best one, and the counters."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    run_dir = Path(cfg.log_dir)
    # 1. envs
    env = make_vec_env(cfg.env_id, cfg.num_envs, seed=cfg.seed)
    eval_env = make_vec_env(cfg.env_id, min(cfg.eval_episodes, 10), seed=cfg.seed + 10_000)
    obs_dim, num_actions = env.obs_leaves[0].shape[-1], int(env.action_spec.space.n)

    # 2. networks: greedy Q actor; epsilon-greedy on top acts only while collecting (RANDOM mode)
    qnet_body = q_mlp(obs_dim, num_actions, cfg.hidden_sizes, dueling=cfg.dueling)
    qnet = QValueActor(torch_default_init_(qnet_body))  # SB3's init, which the zoo tuned
    exploration = EpsilonGreedy(
        num_actions, eps_init=cfg.eps_init, eps_end=cfg.eps_end, annealing_num_steps=cfg.eps_frames
    )
    policy = TensorDictSequential(qnet, exploration)

    # 3. loss, target update, optimiser, buffer
    loss = DQNLoss(qnet, loss_function="smooth_l1", double_dqn=cfg.double_dqn, gamma=cfg.gamma)
    target_updater = HardUpdate(loss, value_network_update_interval=cfg.target_update_interval)
    optimizer = torch.optim.Adam(qnet.parameters(), lr=cfg.lr, fused=True)
    buffer = make_replay_buffer(
        cfg.buffer_size,
        prioritized=cfg.prioritized,
        alpha=cfg.per_alpha,
        beta=cfg.per_beta,
        n_steps=cfg.n_steps,
        gamma=cfg.gamma,
        seed=cfg.seed,
    )
    counters = {"frames": 0, "updates": 0, "best": -float("inf")}
    if cfg.resume and has_run(run_dir):
        counters = load_run(run_dir, buffer, loss=loss, optimizer=optimizer, policy=policy)[
            "counters"
        ]
        env.seed = cfg.seed + counters["frames"]
        target_updater.counter = counters["updates"]
    collector = Collector(
        env, policy, cfg.frames_per_batch, init_random_frames=cfg.init_random_frames, seed=env.seed
    )
    collector.frames = frames = counters["frames"]
    updates, best = counters["updates"], counters["best"]
    logger = Logger(run_dir, tensorboard=cfg.tensorboard)

    # 4. loop
    bar = tqdm(total=cfg.total_frames, initial=frames, disable=not cfg.progress, desc="dqn")
    out = None
    while frames < cfg.total_frames:
        previous = frames
        buffer.extend(transitions(collector.rollout()))
        frames = collector.frames
        exploration.step(frames - previous)
        if isinstance(buffer, PrioritizedReplayBuffer):
            # Anneal the importance-weight exponent to 1 by the end (Schaul et al., sec. 3.4).
            buffer.beta = linear_schedule(cfg.per_beta, 1.0, cfg.total_frames, frames)
        due = updates_due(
            frames, updates, learning_starts=cfg.init_random_frames, utd_ratio=cfg.utd_ratio
        )
        for _ in range(due):
            batch = buffer.sample(cfg.batch_size)
            out = loss(batch)
            optimizer_step(out["loss"], optimizer, max_grad_norm=cfg.max_grad_norm)
            if cfg.prioritized:
                update_priority(buffer, batch, out)
            target_updater.step()
        updates += due
        if episodes := episode_metrics(collector.episodes):
            logger.log("train", frames, episodes | {"epsilon": exploration.eps})
            bar.set_postfix(train_return=f"{episodes['return_mean']:.1f}")
        if out is not None and due:
            logger.log("loss", frames, {"loss": out["loss"], "q": out["chosen_action_value"]})
        if crossed(frames, previous, cfg.eval_every) and frames < cfg.total_frames:
            metrics = evaluate_and_log(eval_env, qnet, logger, frames, n_episodes=cfg.eval_episodes)
            best = max(best, metrics["return_mean"])
        if crossed(frames, previous, cfg.checkpoint_every):
            counters = {"frames": frames, "updates": updates, "best": best}
            save_run(
                run_dir, buffer, loss=loss, optimizer=optimizer, policy=policy, counters=counters
            )
        bar.update(frames - previous)
    bar.close()

    # 5. report
    final = evaluate_and_log(eval_env, qnet, logger, frames, n_episodes=cfg.eval_episodes)
    best = max(best, final["return_mean"])
    plot_learning_curve(
        run_dir / "eval.csv", run_dir / "eval.png", title=f"DQN {cfg.env_id} (eval return)"
    )
    logger.close()
    env.close()
    eval_env.close()
    print(f"DQN {cfg.env_id}: {frames} frames, {updates} updates, eval {final['return_mean']:.1f}")
    return {
        "eval_return": final["return_mean"],
        "best_eval_return": best,
        "frames": frames,
        "updates": updates,
    }


if __name__ == "__main__":
    main(parse(Config))
