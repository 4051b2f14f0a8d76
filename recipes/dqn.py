"""DQN (Mnih et al. 2015) with double Q (van Hasselt et al. 2015, arXiv 1509.06461), dueling
heads (Wang et al. 2016, 1511.06581), n-step returns and prioritized replay (Schaul et al. 2015,
1511.05952) as options.

Defaults: CartPole-v1 with rl-baselines3-zoo's tuned DQN settings (hyperparams/dqn.yml): lr
2.3e-3, batch 64, 256x256 MLP with PyTorch's default init, 1k random steps, epsilon 1 -> 0.04
over the first 16% of 50k steps, 128 gradient steps per 256 env steps (utd 0.5), gamma 0.99,
Huber loss, gradient norm clipped at 10 (SB3's default). The zoo copies the target every 10 env
steps; SB3 trains in bursts, so that is one copy per burst, i.e. every 128 gradient steps here
(a copy every 10 gradient steps diverged: Q reached 1e10). Where tdrl differs: double Q is on by
default (the zoo uses SB3's plain DQN; both solve CartPole-v1 here). Adding 3-step returns
(--n-steps 3, tdrl's tuned setting in benchmarks/time_to_solve.py) solved CartPole-v1 in a median
12k env steps (seeds 0-4) instead of 38k (the defaults, seeds 0-2).

    python recipes/dqn.py                                  # CartPole-v1
    python recipes/dqn.py --n-steps 3 --prioritized --no-double-dqn
    python recipes/dqn.py --env-id MinAtar/Breakout-v1     # uint8 frames: a CNN Q network
    python recipes/dqn.py --env-id tdrl/Pong-v5 --frame-stack 4 --clip-rewards \
        --terminal-on-life-loss --buffer-size 1000000    # Atari: 7.1 GB of frames when full
    python recipes/dqn.py --env-id tdrl/Pong-v5 --frame-stack 4 --clip-rewards \
        --algo c51 --noisy --dueling --prioritized --n-steps 3 --double-dqn \
        --v-min -10 --v-max 10                             # Rainbow on Atari (C51's support)

On uint8 frames ``[C, H, W]`` (``tdrl.envs.pixels``: MinAtar, Atari) the Q network is a CNN
(--network auto): MinAtar's (Young & Tian 2019) on frames under 36 pixels, DQN's Nature CNN on
larger ones; the CartPole defaults above were not tuned for them. The replay buffer stores
stacked or large frames once per step (``frame_keys``, with ``--frame-stack``): 7,090 bytes a
transition on Atari with 4-frame stacks instead of 56,474; MinAtar's small frames are stored
plainly (``store_frames_once``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictSequential
from torch import nn
from torchrl.data import Composite, TensorSpec

from tdrl import keys, trainers
from tdrl.collectors import Collector
from tdrl.data import PrioritizedReplayBuffer
from tdrl.envs import RewardClipping
from tdrl.modules import (
    CategoricalQValueActor,
    EpsilonGreedy,
    FQFQValueActor,
    IQNQValueActor,
    MinAtarCNN,
    NatureCNN,
    QuantileQValueActor,
    QValueActor,
    ResampleNoise,
    flat_dims,
    linear_schedule,
    q_mlp,
    reset_noise,
    to_noisy,
    torch_default_init_,
)
from tdrl.objectives import (
    C51Loss,
    DQNLoss,
    FQFLoss,
    HardUpdate,
    IQNLoss,
    QRDQNLoss,
    update_priority,
)


@dataclass(frozen=True)
class Config(trainers.QLearningConfig):
    """Fields beyond tdrl.trainers.QLearningConfig's (--help lists all, with defaults)."""

    env_id: str = "CartPole-v1"
    total_frames: int = 50_000
    init_random_frames: int = 1_000
    utd_ratio: float = 0.5  # zoo: 128 gradient steps per 256 env steps
    batch_size: int = 64
    buffer_size: int = 100_000
    eval_every: int = 5_000
    checkpoint_every: int = 25_000
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
    eps_end: float = 0.04
    eps_frames: int = 8_000
    target_update_interval: int = 128
    """gradient steps between hard target copies (zoo: every 10 env steps, i.e. once per burst of
    128 gradient steps, since SB3 trains in bursts every 256 env steps)."""
    algo: Literal["dqn", "c51", "qrdqn", "iqn", "fqf"] = "dqn"
    """what the network learns: the expected return (dqn), a categorical distribution over
    num_atoms fixed returns in [v_min, v_max] (c51), num_quantiles quantiles (qrdqn), the
    quantile function at sampled fractions (iqn: 8 online and 8 target fractions a sample), or
    at fractions a proposal network chooses per state (fqf: num_fractions of them)."""
    num_atoms: int = 51
    """c51: atoms of the support."""
    v_min: float = 0.0
    """c51: lowest return of the support (CartPole's discounted returns lie in [0, 100]);
    returns outside [v_min, v_max] are clamped to its ends, so give -10 for games with negative
    rewards (Bellemare et al.'s Atari support is [-10, 10] on clipped rewards)."""
    v_max: float = 100.0
    """c51: highest return of the support."""
    num_quantiles: int = 25
    """qrdqn: quantiles per action (200 in the paper, on Atari; the loss compares N x N pairs
    per sample, and 25 solved CartPole-v1 on tuning seed 100 in 102 s where 200 took 6 min for
    13k steps)."""
    num_fractions: int = 32
    """fqf: fractions per state (32 in the paper)."""
    fraction_lr: float = 2.5e-9
    """fqf: learning rate of the fraction proposal network (the paper's Atari value, and
    Tianshou's CartPole test; the paper's RMSprop is Adam here, one optimizer with a group)."""
    fraction_entropy_coeff: float = 0.0
    """fqf: weight of the proposal's entropy bonus."""
    noisy: bool = False
    """noisy linear layers (new noise every env and gradient step) explore instead of epsilon;
    --algo c51 --noisy --dueling --prioritized --n-steps 3 --double-dqn is Rainbow."""
    noisy_std: float = 0.5
    """--noisy: initial noise scale sigma_0 of every noisy layer (Fortunato et al.'s factorized
    0.5; Tianshou's Rainbow examples 0.1)."""
    noisy_layers: Literal["all", "heads"] = "all"
    """--noisy: which linear layers are noisy: all (Hessel et al.'s Rainbow: every fully
    connected layer) or the output layer of each (dueling) head (Tianshou's Rainbow)."""
    noisy_epsilon: bool = False
    """--noisy: keep epsilon-greedy exploration on top of the noise (Tianshou's Rainbow);
    off: the noise explores alone (Hessel et al.)."""
    network: Literal["auto", "mlp", "cnn"] = "auto"
    """Q network body: an MLP of hidden_sizes on a flat observation, or a CNN on uint8 frames
    [C, H, W] (MinAtarCNN under 36 pixels, NatureCNN from 36); auto: the CNN on uint8 frames."""
    frame_stack: int = 1
    """pixel envs: frames per observation (DQN's Atari setting: 4); the env stacks them to act,
    the buffer stores each frame once and restacks at sampling."""
    terminal_on_life_loss: bool = False
    """Atari: a lost life ends the training episode (evaluation plays whole games)."""
    clip_rewards: bool = False
    """learn from rewards clipped to [-1, 1] (DQN on Atari); logged returns stay the env's."""


def is_frames(observation_spec: Composite) -> bool:
    """Whether the observation is uint8 frames ``[C, H, W]``."""
    leaf = observation_spec.get(keys.OBSERVATION, None)
    return (
        leaf is not None
        and leaf.dtype == torch.uint8
        and len(leaf.shape) == len(observation_spec.shape) + 3
    )


# Frames of this many bytes or more are stored once (frame-efficient storage) even unstacked.
STORE_ONCE_BYTES = 4096


def store_frames_once(observation_spec: Composite, frame_stack: int) -> bool:
    """Whether the buffer stores each frame once (``tdrl.data.frames``) instead of each
    transition's observation and next observation: for stacks (a frame is otherwise stored 2k
    times) and for large frames (Atari's 84x84: 7,056 bytes). MinAtar's frames (at most 10x10
    of 10 channels) are stored plainly: its 100k-transition buffer holds at most 200 MB either
    way, and the plain write and sample made DQN on Breakout about 15% faster a step (7,000
    steps, 2 interleaved rounds on 2 loaded cores: 51.7 and 52.5 s against 47.0 and 42.2 s)."""
    if not is_frames(observation_spec):
        return False
    leaf = observation_spec[keys.OBSERVATION]
    frame_bytes = math.prod(int(d) for d in leaf.shape[-2:]) * int(leaf.shape[-3]) // frame_stack
    return frame_stack > 1 or frame_bytes >= STORE_ONCE_BYTES


def pixel_network(cfg: Config, observation_spec: Composite) -> Callable[..., nn.Module] | None:
    """The CNN class for ``cfg.network``, its input set (channels, frame size, and the scale
    1 / high: 1/255 for Atari's pixels, 1 for MinAtar's 0/1 channels), or None for the MLP."""
    leaf = observation_spec.get(keys.OBSERVATION, None)
    frames = is_frames(observation_spec)
    if cfg.network == "mlp" or (cfg.network == "auto" and not frames):
        return None
    if not frames:
        raise ValueError(
            f"--network cnn needs uint8 frames [C, H, W] under 'observation', got {leaf}"
        )
    channels, height, width = (int(d) for d in leaf.shape[-3:])
    scale = 1.0 / max(float(leaf.space.high.max()), 1.0)
    cnn = NatureCNN if min(height, width) >= 36 else MinAtarCNN
    return partial(cnn, channels, frame_size=(height, width), scale=scale)


def q_network_and_loss(
    cfg: Config, observation_spec: Composite, action_spec: TensorSpec
) -> tuple[Any, DQNLoss]:
    """The greedy Q actor of ``cfg.algo`` (SB3's init, which the zoo tuned) and its loss."""
    if cfg.dueling and cfg.algo in ("iqn", "fqf"):
        raise ValueError(f"--dueling is for --algo dqn, c51 and qrdqn, not {cfg.algo}")
    common = dict(double_dqn=cfg.double_dqn, gamma=cfg.gamma)
    cnn = pixel_network(cfg, observation_spec)
    if cnn is None:
        obs_dim, num_actions = flat_dims(observation_spec, action_spec)
    else:
        num_actions = int(action_spec.space.n)
    if cfg.algo in ("iqn", "fqf"):  # features of the last hidden width x the tau embedding
        if cnn is None:
            *hidden, width = cfg.hidden_sizes
            features: nn.Module = nn.Sequential(q_mlp(obs_dim, width, hidden), nn.ReLU())
        else:  # the CNN's hidden features (its features-only form), as in the IQN paper
            features = cnn(None)
            width = features.hidden
        head = q_mlp(width, num_actions, ())
        for part in (features, head):
            noisy = cfg.noisy and (cfg.noisy_layers == "all" or part is head)
            torch_default_init_(to_noisy(part, cfg.noisy_std) if noisy else part)
        if cfg.algo == "iqn":
            iqn = IQNQValueActor(features, head, num_actions, width)
            return iqn, IQNLoss(iqn, **common)
        fqf = FQFQValueActor(features, head, num_actions, width, num_fractions=cfg.num_fractions)
        return fqf, FQFLoss(fqf, entropy_coeff=cfg.fraction_entropy_coeff, **common)
    outputs = {"dqn": 1, "c51": cfg.num_atoms, "qrdqn": cfg.num_quantiles}[cfg.algo]
    if cnn is None:
        body = q_mlp(obs_dim, num_actions, cfg.hidden_sizes, dueling=cfg.dueling, atoms=outputs)
    else:
        body = cnn(num_actions * outputs, dueling=cfg.dueling, atoms=outputs)
    torch_default_init_(body)
    if cfg.noisy:
        to_noisy(body, cfg.noisy_std, heads_only=cfg.noisy_layers == "heads")
    if cfg.algo == "c51":
        actor = CategoricalQValueActor(
            body, num_actions, v_min=cfg.v_min, v_max=cfg.v_max, num_atoms=cfg.num_atoms
        )
        return actor, C51Loss(actor, **common)
    if cfg.algo == "qrdqn":
        actor = QuantileQValueActor(body, num_actions, num_quantiles=cfg.num_quantiles)
        return actor, QRDQNLoss(actor, **common)
    qnet = QValueActor(body)
    return qnet, DQNLoss(qnet, loss_function="smooth_l1", **common)


def main(cfg: Config) -> dict[str, float]:
    """Train DQN; returns the final greedy evaluation, the best one, and the counters."""
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    trainers.require_local_collector(cfg, "dqn.py", "its env wrappers and epsilon live here")
    pixel_options = dict(frame_stack=cfg.frame_stack) if cfg.frame_stack > 1 else {}
    life_loss = dict(terminal_on_life_loss=True) if cfg.terminal_on_life_loss else {}
    env, eval_env = trainers.setup(
        cfg, actions="discrete", env_kwargs=pixel_options, train_env_kwargs=life_loss
    )

    # 2. networks: greedy Q actor; epsilon-greedy on top acts only while collecting (RANDOM mode)
    qnet, loss = q_network_and_loss(cfg, env.observation_spec, env.action_spec)
    num_actions = int(env.action_spec.space.n)
    alone = cfg.noisy and not cfg.noisy_epsilon  # noisy nets explore alone (Hessel et al.)
    eps = (0.0, 0.0) if alone else (cfg.eps_init, cfg.eps_end)
    exploration = EpsilonGreedy(
        num_actions, eps_init=eps[0], eps_end=eps[1], annealing_num_steps=cfg.eps_frames
    )
    policy = TensorDictSequential(qnet, exploration)
    if cfg.noisy:
        policy = TensorDictSequential(ResampleNoise(qnet), qnet, exploration)

    # 3. loss (above), target update, optimiser, buffer
    target_updater = HardUpdate(loss, value_network_update_interval=cfg.target_update_interval)
    trainers.to_device(cfg, loss, policy)  # --device: networks, targets, estimator
    # FQF's fraction proposal network learns at its own (tiny) rate, in its own group.
    fraction = list(qnet.fraction_net.parameters()) if cfg.algo == "fqf" else []
    rest = [p for p in qnet.parameters() if all(p is not f for f in fraction)]
    groups = [{"params": rest}] + [{"params": fraction, "lr": cfg.fraction_lr}] * bool(fraction)
    optimizer = torch.optim.Adam(groups, lr=cfg.lr, fused=True)
    frames_once = store_frames_once(env.observation_spec, cfg.frame_stack)
    buffer = trainers.make_replay_buffer(
        cfg.buffer_size,
        prioritized=cfg.prioritized,
        alpha=cfg.per_alpha,
        beta=cfg.per_beta,
        n_steps=cfg.n_steps,
        gamma=cfg.gamma,
        seed=cfg.seed,
        device=cfg.torch_device,
        # stacks and large frames: each frame stored once (tdrl.data.frames)
        frame_keys=[keys.OBSERVATION] if frames_once else None,
        frame_stack=cfg.frame_stack if frames_once else 1,
    )
    collector = Collector(
        env, policy, cfg.frames_per_batch, cfg.total_frames, cfg.init_random_frames
    )
    state = {"loss": loss, "optimizer": optimizer, "policy": policy}
    title = {"dqn": "DQN", "c51": "C51", "qrdqn": "QR-DQN", "iqn": "IQN", "fqf": "FQF"}[cfg.algo]

    def after_step(sample: TensorDictBase, out: TensorDictBase) -> None:
        if cfg.prioritized:
            update_priority(buffer, sample, out)  # the loss's own per-sample priorities
        if cfg.noisy:
            reset_noise(loss)  # new noise for the next gradient step, online and target nets

    def on_batch(frames: int) -> None:  # after each stored batch, before its gradient steps
        exploration.step(frames - int(exploration.frames))  # epsilon follows the env steps
        if isinstance(buffer, PrioritizedReplayBuffer):
            # Anneal the importance-weight exponent to 1 by the end (Schaul et al., 3.4).
            buffer.beta = linear_schedule(cfg.per_beta, 1.0, cfg.total_frames, frames)

    step = trainers.q_learning_step(
        loss, optimizer, target_updater, exploration=exploration,
        max_grad_norm=cfg.max_grad_norm, after_step=after_step,
    )  # fmt: skip
    # 4. loop: collect a batch -> store -> schedules -> gradient steps (PER priorities) -> log,
    #    evaluate, checkpoint (trainers.train_off_policy; --resume continues a run)
    # 5. report: final evaluation (and the best one), curve.png, CSV and TensorBoard logs
    return trainers.train_off_policy(
        cfg, title, state, collector, buffer, step, eval_env=eval_env, policy=qnet,
        on_batch=on_batch, transform=RewardClipping(-1.0, 1.0) if cfg.clip_rewards else None,
    )  # fmt: skip


if __name__ == "__main__":
    main(trainers.parse(Config))
