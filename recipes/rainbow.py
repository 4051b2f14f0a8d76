"""Distributional DQN: C51 (Bellemare et al. 2017, arXiv 1707.06887), QR-DQN (Dabney et al. 2017,
1710.10044), IQN (Dabney et al. 2018, 1806.06923) and FQF (Yang et al. 2019, 1911.02140), with
noisy nets (Fortunato et al. 2017, 1706.10295), dueling heads, n-step returns and prioritized
replay as options: Rainbow (Hessel et al. 2017, 1710.02298) is --algo c51 --noisy --dueling
--prioritized --n-steps 3.

Defaults are recipes/dqn.py's (rl-baselines3-zoo's CartPole-v1 DQN settings, double Q) with
--algo c51: a support of 51 atoms on [0, 100] (CartPole's discounted returns; Bellemare et al.'s
Atari support is [-10, 10] on clipped rewards), 25 quantiles for QR-DQN (the paper's 200 compare
40,000 pairs a sample), 8 online and 8 target fractions for IQN, 32 proposed fractions for FQF at
the paper's fraction learning rate (Atari's, also Tianshou's CartPole test; Adam instead of the
paper's RMSprop, the proposal network a group of the one optimizer). Noisy nets: every linear
layer noisy and no epsilon, as Hessel et al.; Tianshou's Rainbow makes only the heads' output
layers noisy (--noisy-layers heads, --noisy-std 0.1) and keeps epsilon (--noisy-epsilon).

    python recipes/rainbow.py                              # C51 on CartPole-v1
    python recipes/rainbow.py --algo qrdqn --num-quantiles 10
    python recipes/rainbow.py --algo c51 --noisy --dueling --prioritized --n-steps 3
    python recipes/rainbow.py --env-id tdrl/Pong-v5 --frame-stack 4 --clip-rewards \
        --terminal-on-life-loss --noisy --dueling --prioritized --n-steps 3 \
        --v-min -10 --v-max 10                             # Rainbow on Atari (C51's support)

On uint8 frames the network is a CNN (--network auto, as in dqn.py; IQN and FQF embed its hidden
features), and stacked or large frames are stored once per step.
"""

from __future__ import annotations

from typing import Literal

from tensordict.nn import TensorDictSequential
from torch import nn
from torchrl.data import Composite, TensorSpec

from tdrl import keys, trainers
from tdrl.data import PrioritizedReplayBuffer, make_replay_buffer, transitions
from tdrl.envs import RewardClipping
from tdrl.modules import (
    CategoricalQValueActor,
    EpsilonGreedy,
    FQFQValueActor,
    IQNQValueActor,
    QuantileQValueActor,
    ResampleNoise,
    flat_dims,
    linear_schedule,
    q_mlp,
    reset_noise,
    to_noisy,
    torch_default_init_,
)
from tdrl.modules.networks import pixel_network, q_network
from tdrl.objectives import C51Loss, FQFLoss, HardUpdate, IQNLoss, QRDQNLoss, update_priority
from tdrl.trainers.config import (
    Q_LEARNING_RUN,
    PERConfig,
    PixelConfig,
    QLearningConfig,
    ReplayConfig,
    RunConfig,
)

TITLES = {"c51": "C51", "qrdqn": "QR-DQN", "iqn": "IQN", "fqf": "FQF"}


@trainers.configclass
class Config:
    run: RunConfig = Q_LEARNING_RUN
    replay: ReplayConfig = ReplayConfig(
        buffer_size=100_000, batch_size=64, init_random_frames=1_000, utd_ratio=0.5
    )
    q: QLearningConfig = QLearningConfig(
        lr=2.3e-3, eps_end=0.04, eps_frames=8_000, target_update_interval=128
    )
    algo: Literal["c51", "qrdqn", "iqn", "fqf"] = "c51"
    """the return distribution: atoms (c51), quantiles (qrdqn), sampled (iqn) or proposed (fqf)."""
    num_atoms: int = 51
    """c51: atoms of the support."""
    v_min: float = 0.0
    """c51: lowest return of the support (returns beyond it are clamped; Atari: -10)."""
    v_max: float = 100.0
    """c51: highest return of the support (CartPole's discounted returns lie in [0, 100])."""
    num_quantiles: int = 25
    """qrdqn: quantiles per action (the paper: 200; the loss compares N x N pairs a sample)."""
    num_fractions: int = 32
    """fqf: fractions per state (32 in the paper)."""
    fraction_lr: float = 2.5e-9
    """fqf: learning rate of the fraction proposal network (the paper's, with Adam here)."""
    fraction_entropy_coeff: float = 0.0
    """fqf: weight of the proposal's entropy bonus."""
    noisy: bool = False
    """noisy linear layers (new noise every env and gradient step) explore instead of epsilon."""
    noisy_std: float = 0.5
    """--noisy: initial sigma_0 of every noisy layer (Fortunato et al.: 0.5; Tianshou: 0.1)."""
    noisy_layers: Literal["all", "heads"] = "all"
    """--noisy: every linear layer (Hessel et al.) or each head's output layer (Tianshou)."""
    noisy_epsilon: bool = False
    """--noisy: keep epsilon-greedy on top of the noise (Tianshou's Rainbow; Hessel et al.: off)."""
    dueling: bool = False
    """dueling value/advantage head, per atom (c51 and qrdqn)."""
    double_dqn: bool = True
    """select the bootstrap action with the online network."""
    per: PERConfig = PERConfig()
    pixels: PixelConfig = PixelConfig()


def q_network_and_loss(
    cfg: Config, observation_spec: Composite, action_spec: TensorSpec
) -> tuple[nn.Module, C51Loss | QRDQNLoss | IQNLoss | FQFLoss]:
    """The greedy distributional Q actor of ``cfg.algo`` (SB3's init, which the zoo tuned;
    noisy layers where asked) and its loss."""
    if cfg.dueling and cfg.algo in ("iqn", "fqf"):
        raise ValueError(f"--dueling is for --algo c51 and qrdqn, not {cfg.algo}")
    common = dict(double_dqn=cfg.double_dqn, gamma=cfg.q.gamma)
    num_actions = int(action_spec.space.n)
    if cfg.algo in ("c51", "qrdqn"):  # num_actions x atoms outputs
        atoms = cfg.num_atoms if cfg.algo == "c51" else cfg.num_quantiles
        body = q_network(
            observation_spec, action_spec, cfg.q.hidden_sizes, network=cfg.pixels.network,
            dueling=cfg.dueling, atoms=atoms,
        )  # fmt: skip
        if cfg.noisy:
            to_noisy(body, cfg.noisy_std, heads_only=cfg.noisy_layers == "heads")
        if cfg.algo == "c51":
            actor = CategoricalQValueActor(
                body, num_actions, v_min=cfg.v_min, v_max=cfg.v_max, num_atoms=cfg.num_atoms
            )
            return actor, C51Loss(actor, **common)
        quantiles = QuantileQValueActor(body, num_actions, num_quantiles=cfg.num_quantiles)
        return quantiles, QRDQNLoss(quantiles, **common)
    # IQN, FQF: state features of the last hidden width times the fraction embedding, a head
    cnn = pixel_network(observation_spec, cfg.pixels.network)
    if cnn is None:
        obs_dim, _ = flat_dims(observation_spec, action_spec)
        *hidden, width = cfg.q.hidden_sizes
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


def main(cfg: Config) -> dict[str, float]:
    """Train the distributional DQN of ``cfg.algo``; returns the final greedy evaluation, the
    best one, and the counters."""
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    both, train = cfg.pixels.env_kwargs()  # frame stacks; Atari's life loss (training only)
    env, eval_env = trainers.make_envs(
        cfg.run, actions="discrete", env_kwargs=both, train_env_kwargs=train
    )
    device = cfg.run.torch_device

    # 2. networks: greedy Q actor; epsilon-greedy on top acts only while collecting, and noisy
    #    nets draw new noise every env step (they explore alone unless --noisy-epsilon)
    qnet, loss = q_network_and_loss(cfg, env.observation_spec, env.action_spec)
    eps = (0.0, 0.0) if cfg.noisy and not cfg.noisy_epsilon else (cfg.q.eps_init, cfg.q.eps_end)
    exploration = EpsilonGreedy(
        int(env.action_spec.space.n), eps_init=eps[0], eps_end=eps[1],
        annealing_num_steps=cfg.q.eps_frames,
    )  # fmt: skip
    acting = (ResampleNoise(qnet), qnet, exploration) if cfg.noisy else (qnet, exploration)
    policy = TensorDictSequential(*acting)

    # 3. target copies, optimizer (FQF's fraction proposal network in its own group at its own
    #    tiny rate), buffer (stacks and large frames: each frame once), collector, reward clip
    target = HardUpdate(loss, value_network_update_interval=cfg.q.target_update_interval)
    loss.to(device)
    policy.to(device)
    fraction = list(qnet.fraction_net.parameters()) if cfg.algo == "fqf" else []
    rest = [p for p in qnet.parameters() if all(p is not f for f in fraction)]
    groups = [(rest, cfg.q.lr)] + ([(fraction, cfg.fraction_lr)] if fraction else [])
    optimizer = trainers.adam(*groups)
    buffer = make_replay_buffer(
        cfg.replay.buffer_size, prioritized=cfg.per.prioritized, alpha=cfg.per.per_alpha,
        beta=cfg.per.per_beta, n_steps=cfg.per.n_steps, gamma=cfg.q.gamma,
        generator=cfg.run.seed, device=device, observation_spec=env.observation_spec,
        frame_stack=cfg.pixels.frame_stack,
    )  # fmt: skip
    collector = trainers.make_collector(
        cfg.run, env, policy, cfg.q.frames_per_batch,
        init_random_frames=cfg.replay.init_random_frames,
    )  # fmt: skip
    clip = RewardClipping(-1.0, 1.0) if cfg.pixels.clip_rewards else None

    # 4. the loop: store each batch, step the schedules, then the gradient steps due
    state = {"loss": loss, "optimizer": optimizer, "policy": policy}
    with trainers.Run.from_config(
        cfg.run, TITLES[cfg.algo], state, eval_env=eval_env, policy=qnet, buffer=buffer,
        config=cfg,
    ) as run:  # fmt: skip
        for batch in run.resume(collector):
            if clip is not None:  # after the collector logged the env's own returns
                batch = clip(batch)
            buffer.extend(transitions(batch))
            exploration.step(collector.frames - int(exploration.frames))  # epsilon: env steps
            if isinstance(buffer, PrioritizedReplayBuffer):  # importance weights -> 1 at the end
                buffer.beta = linear_schedule(
                    cfg.per.per_beta, 1.0, cfg.run.total_frames, collector.frames
                )
            metrics = None
            for _ in range(run.updates_due(cfg.replay.init_random_frames, cfg.replay.utd_ratio)):
                run.updates += 1
                sample = buffer.sample(cfg.replay.batch_size)
                out = loss(sample)
                trainers.optimizer_step(
                    out[keys.LOSS], optimizer, max_grad_norm=cfg.q.max_grad_norm
                )
                if cfg.per.prioritized:
                    update_priority(buffer, sample, out)  # the loss's per-sample priorities
                if cfg.noisy:
                    reset_noise(loss)  # new noise for the next step, online and target nets
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
