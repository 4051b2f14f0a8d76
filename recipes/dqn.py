"""DQN (Mnih et al. 2015) with double Q (van Hasselt et al. 2015, arXiv 1509.06461), dueling
heads (Wang et al. 2016, 1511.06581), n-step returns and prioritized replay (Schaul et al. 2015,
1511.05952) as options, on flat observations or pixels. The distributional family (C51, QR-DQN,
IQN, FQF) and Rainbow are recipes/rainbow.py.

Defaults: CartPole-v1 with rl-baselines3-zoo's tuned DQN settings (hyperparams/dqn.yml): lr
2.3e-3, batch 64, 256x256 MLP with PyTorch's default init, 1k random steps, epsilon 1 -> 0.04
over the first 16% of 50k steps, 128 gradient steps per 256 env steps (utd 0.5), gamma 0.99,
Huber loss, gradient norm clipped at 10 (SB3's default). The zoo copies the target every 10 env
steps; SB3 trains in bursts, so that is one copy per burst of 128 gradient steps, i.e.
--target-update-interval 128 here (a copy every 10 gradient steps diverged). Where tdrl
differs: double Q is on by default (the zoo uses SB3's plain DQN; both solve CartPole-v1).
Adding 3-step returns (--n-steps 3, tdrl's tuned setting in benchmarks/time_to_solve.py)
solves CartPole-v1 in about a third of the env steps.

    python recipes/dqn.py                                  # CartPole-v1
    python recipes/dqn.py --n-steps 3 --prioritized --no-double-dqn
    python recipes/dqn.py --env-id MinAtar/Breakout-v1     # uint8 frames: a CNN Q network
    python recipes/dqn.py --env-id tdrl/Pong-v5 --frame-stack 4 --clip-rewards \
        --terminal-on-life-loss --buffer-size 1000000    # Atari: 7.1 GB of frames when full

On uint8 frames ``[C, H, W]`` (``tdrl.envs.pixels``: MinAtar, Atari) the Q network is a CNN
(--network auto): MinAtar's (Young & Tian 2019) under 36 pixels, DQN's Nature CNN on larger
frames; the CartPole defaults were not tuned for them. The replay buffer stores stacked or large
frames once per step (7,090 bytes a transition on Atari with 4-frame stacks instead of 56,474)
and MinAtar's small frames plainly (``tdrl.data.frames.store_frames_once``).
"""

from __future__ import annotations

from typing import Literal

from tensordict.nn import TensorDictSequential
from torchrl.data import Composite, TensorSpec

from tdrl import keys, trainers
from tdrl.data import PrioritizedReplayBuffer, ReplayBuffer, transitions
from tdrl.data.frames import store_frames_once
from tdrl.envs import RewardClipping
from tdrl.modules import EpsilonGreedy, QValueActor, linear_schedule
from tdrl.modules.networks import q_network
from tdrl.objectives import DQNLoss, HardUpdate, update_priority
from tdrl.trainers.config import QLearningConfig, ReplayConfig, RunConfig


@trainers.configclass
class Config:
    run: RunConfig = RunConfig(
        env_id="CartPole-v1", total_frames=50_000, num_envs=1, eval_every=5_000,
        log_every=1_000, checkpoint_every=25_000,
    )  # fmt: skip
    replay: ReplayConfig = ReplayConfig(
        buffer_size=100_000, batch_size=64, init_random_frames=1_000, utd_ratio=0.5
    )
    q: QLearningConfig = QLearningConfig(
        lr=2.3e-3, eps_end=0.04, eps_frames=8_000, target_update_interval=128
    )
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
    network: Literal["auto", "mlp", "cnn"] = "auto"
    """Q network body: auto (a CNN on uint8 frames, else an MLP of hidden_sizes), mlp, or cnn."""
    frame_stack: int = 1
    """pixel envs: frames per observation (DQN on Atari: 4), each stored once in the buffer."""
    terminal_on_life_loss: bool = False
    """Atari: a lost life ends the training episode (evaluation plays whole games)."""
    clip_rewards: bool = False
    """learn from rewards clipped to [-1, 1] (DQN on Atari); logged returns stay the env's."""

    def __post_init__(self) -> None:
        if self.replay.steps_per_batch != 1:
            raise ValueError(
                "dqn.py collects --frames-per-batch frames per batch; --steps-per-batch "
                f"{self.replay.steps_per_batch} is for the worker collectors of the other "
                "off-policy recipes"
            )


def q_network_and_loss(
    cfg: Config, observation_spec: Composite, action_spec: TensorSpec
) -> tuple[QValueActor, DQNLoss]:
    """The greedy Q actor (an MLP or a CNN with SB3's init, which the zoo tuned) and its loss."""
    body = q_network(
        observation_spec, action_spec, cfg.q.hidden_sizes, network=cfg.network,
        dueling=cfg.dueling,
    )  # fmt: skip
    qnet = QValueActor(body)
    loss = DQNLoss(qnet, loss_function="smooth_l1", double_dqn=cfg.double_dqn, gamma=cfg.q.gamma)
    return qnet, loss


def main(cfg: Config) -> dict[str, float]:
    """Train DQN; returns the final greedy evaluation, the best one, and the counters."""
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    pixel_options = dict(frame_stack=cfg.frame_stack) if cfg.frame_stack > 1 else {}
    life_loss = dict(terminal_on_life_loss=True) if cfg.terminal_on_life_loss else {}
    env, eval_env = trainers.make_envs(
        cfg.run, actions="discrete", env_kwargs=pixel_options, train_env_kwargs=life_loss
    )
    device = cfg.run.torch_device

    # 2. networks: greedy Q actor; epsilon-greedy on top acts only while collecting (RANDOM mode)
    qnet, loss = q_network_and_loss(cfg, env.observation_spec, env.action_spec)
    exploration = EpsilonGreedy(
        int(env.action_spec.space.n), eps_init=cfg.q.eps_init, eps_end=cfg.q.eps_end,
        annealing_num_steps=cfg.q.eps_frames,
    )  # fmt: skip
    policy = TensorDictSequential(qnet, exploration)

    # 3. target copies, optimizer, buffer (stacks and large frames: each frame stored once),
    #    collector, the reward clipping the buffer sees
    target = HardUpdate(loss, value_network_update_interval=cfg.q.target_update_interval)
    loss.to(device)
    policy.to(device)
    optimizer = trainers.adam((qnet.parameters(), cfg.q.lr))
    frames_once = store_frames_once(env.observation_spec, cfg.frame_stack)
    storage = dict(
        n_steps=cfg.n_steps, gamma=cfg.q.gamma, generator=cfg.run.seed, device=device,
        frame_keys=[keys.OBSERVATION] if frames_once else None,
        frame_stack=cfg.frame_stack if frames_once else 1,
    )  # fmt: skip
    if cfg.prioritized:
        buffer: ReplayBuffer = PrioritizedReplayBuffer(
            cfg.replay.buffer_size, alpha=cfg.per_alpha, beta=cfg.per_beta, **storage
        )
    else:
        buffer = ReplayBuffer(cfg.replay.buffer_size, **storage)
    collector = trainers.make_collector(
        cfg.run, env, policy, cfg.q.frames_per_batch,
        init_random_frames=cfg.replay.init_random_frames,
    )  # fmt: skip
    clip = RewardClipping(-1.0, 1.0) if cfg.clip_rewards else None

    # 4. the loop: store each batch, step the schedules, then the gradient steps due
    state = {"loss": loss, "optimizer": optimizer, "policy": policy}
    with trainers.Run.from_config(
        cfg.run, "DQN", state, eval_env=eval_env, policy=qnet, buffer=buffer, config=cfg
    ) as run:
        for batch in run.resume(collector):
            if clip is not None:  # after the collector logged the env's own returns
                batch = clip(batch)
            buffer.extend(transitions(batch))
            exploration.step(collector.frames - int(exploration.frames))  # epsilon: env steps
            if isinstance(buffer, PrioritizedReplayBuffer):  # importance weights -> 1 at the end
                buffer.beta = linear_schedule(
                    cfg.per_beta, 1.0, cfg.run.total_frames, collector.frames
                )
            metrics = None
            for _ in range(
                run.updates_due(
                    learning_starts=cfg.replay.init_random_frames, utd_ratio=cfg.replay.utd_ratio
                )
            ):
                run.updates += 1
                sample = buffer.sample(cfg.replay.batch_size)
                out = loss(sample)
                trainers.optimizer_step(
                    out[keys.LOSS], optimizer, max_grad_norm=cfg.q.max_grad_norm
                )
                if cfg.prioritized:
                    update_priority(buffer, sample, out)  # the loss's per-sample priorities
                # copies counted from the run's gradient steps: a resumed run copies on time
                target.counter = run.updates - 1
                target.step()
                metrics = {
                    keys.LOSS: out[keys.LOSS], "q": out[keys.CHOSEN_ACTION_VALUE],
                    "epsilon": exploration.eps,
                }  # fmt: skip
            collector.update_policy_weights_()
            run.step(metrics)  # log, evaluate, checkpoint when due
        # 5. report: final evaluation (and the best one), curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
