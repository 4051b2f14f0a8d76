"""Distributional DQN: C51 (Bellemare et al. 2017, arXiv 1707.06887), QR-DQN (Dabney et al. 2017,
1710.10044), IQN (Dabney et al. 2018, 1806.06923) and FQF (Yang et al. 2019, 1911.02140), with
noisy nets (Fortunato et al. 2017, 1706.10295), dueling heads, n-step returns and prioritized
replay as options: Rainbow (Hessel et al. 2017, 1710.02298) is --algo c51 --noisy --dueling
--prioritized --n-steps 3. --algo dqn keeps the scalar Q of recipes/dqn.py (its Huber loss) with
the same options: Rainbow without its distribution, the ablation of Hessel et al.

Defaults are recipes/dqn.py's (rl-baselines3-zoo's CartPole-v1 DQN settings, double Q), a C51
support of 51 atoms on [0, 100] (CartPole's discounted returns), 25 quantiles (QR-DQN), 8+8
fractions (IQN), 32 proposed fractions at the paper's fraction lr (FQF), and every linear layer
noisy with no epsilon under --noisy (Hessel et al.; Tianshou's Rainbow: --noisy-layers heads
--noisy-std 0.1 --noisy-epsilon). On uint8 frames the network is a CNN, as in dqn.py.

    python recipes/rainbow.py                              # C51 on CartPole-v1
    python recipes/rainbow.py --algo qrdqn --num-quantiles 10 --target-update-interval 32
    python recipes/rainbow.py --algo c51 --noisy --dueling --prioritized --n-steps 3
    python recipes/rainbow.py --env-id tdrl/Pong-v5 --frame-stack 4 --clip-rewards \
        --terminal-on-life-loss --noisy --dueling --prioritized --n-steps 3 \
        --v-min -10 --v-max 10                             # Rainbow on Atari (C51's support)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from tdrl import keys, trainers
from tdrl.trainers import config

TITLES = {"c51": "C51", "qrdqn": "QR-DQN", "iqn": "IQN", "fqf": "FQF", "dqn": "Scalar DQN"}

if TYPE_CHECKING:
    from tensordict import TensorDictBase
    from torch import nn
    from torchrl.data import Composite, TensorSpec

    from tdrl.objectives import C51Loss, DQNLoss, FQFLoss, IQNLoss, QRDQNLoss


@trainers.configclass
class Config:
    compiled_steps: ClassVar[bool] = True  # --compile and --cudagraphs apply to its updates
    run: config.RunConfig = config.Q_LEARNING_RUN
    replay: config.ReplayConfig = config.Q_LEARNING_REPLAY
    q: config.QLearningConfig = config.Q_LEARNING_Q
    dist: config.DistributionalConfig = config.DistributionalConfig()
    noise: config.NoisyConfig = config.NoisyConfig()
    dueling: bool = False
    """dueling value/advantage head, per atom (c51 and qrdqn; dqn: per action)."""
    double_dqn: bool = True
    """select the bootstrap action with the online network."""
    per: config.PERConfig = config.PERConfig()
    pixels: config.PixelConfig = config.PixelConfig()
    aug: config.AugmentConfig = config.AugmentConfig()


def q_network_and_loss(
    cfg: Config, observation_spec: Composite, action_spec: TensorSpec
) -> tuple[nn.Module, C51Loss | QRDQNLoss | IQNLoss | FQFLoss | DQNLoss]:
    """The greedy Q actor of ``--algo`` (SB3's init, which the zoo tuned; noisy layers where
    asked) and its loss: distributional, or dqn.py's scalar Q and Huber loss (``--algo dqn``)."""
    from tdrl.objectives import C51Loss, DQNLoss, FQFLoss, IQNLoss, QRDQNLoss

    qnet = cfg.dist.build(observation_spec, action_spec, cfg.q.hidden_sizes, dueling=cfg.dueling,
                          network=cfg.pixels.network, noise=cfg.noise)  # fmt: skip
    common = dict(double_dqn=cfg.double_dqn, gamma=cfg.q.gamma)
    if cfg.dist.algo == "fqf":
        return qnet, FQFLoss(qnet, entropy_coeff=cfg.dist.fraction_entropy_coeff, **common)
    if cfg.dist.algo == "dqn":  # no distribution: dqn.py's Huber TD loss
        return qnet, DQNLoss(qnet, loss_function="smooth_l1", **common)
    losses = {"c51": C51Loss, "qrdqn": QRDQNLoss, "iqn": IQNLoss}
    return qnet, losses[cfg.dist.algo](qnet, **common)


def main(cfg: Config) -> dict[str, float]:
    """Train the DQN of ``--algo`` (distributional, or scalar with ``dqn``); returns the final
    greedy evaluation, the best one, and the counters."""
    # the library loads here, after the command line: --help answers without it
    from tensordict.nn import TensorDictSequential

    from tdrl.data import make_replay_buffer, transitions
    from tdrl.envs import RewardClipping
    from tdrl.modules import EpsilonGreedy, ResampleNoise, reset_noise
    from tdrl.objectives import HardUpdate, update_priority

    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    # frame stacks, a MiniGrid layout; Atari's life loss (training only)
    both, train = cfg.pixels.env_kwargs(cfg.run.env_id)
    env, eval_env = trainers.make_envs(
        cfg.run, actions="discrete", env_kwargs=both, train_env_kwargs=train
    )
    device = cfg.run.torch_device

    # 2. networks: greedy Q actor; epsilon-greedy on top acts only while collecting, and noisy
    #    nets draw new noise every env step (they explore alone unless --noisy-epsilon)
    qnet, loss = q_network_and_loss(cfg, env.observation_spec, env.action_spec)
    noisy = cfg.noise.noisy
    eps = (0.0, 0.0) if noisy and not cfg.noise.noisy_epsilon else (cfg.q.eps_init, cfg.q.eps_end)
    exploration = EpsilonGreedy(
        int(env.action_spec.space.n), eps_init=eps[0], eps_end=eps[1],
        annealing_num_steps=cfg.q.eps_frames,
    )  # fmt: skip
    acting = (ResampleNoise(qnet), qnet, exploration) if noisy else (qnet, exploration)
    policy = TensorDictSequential(*acting)

    # 3. target copies, optimizer (FQF's fraction proposal network in its own group at its own
    #    tiny rate), buffer (stacks and large frames: each frame once), collector, reward clip
    target = HardUpdate(loss, value_network_update_interval=cfg.q.target_update_interval)
    loss.to(device)
    policy.to(device)
    fraction = list(qnet.fraction_net.parameters()) if cfg.dist.algo == "fqf" else []
    rest = [p for p in qnet.parameters() if all(p is not f for f in fraction)]
    groups = [(rest, cfg.q.lr)] + ([(fraction, cfg.dist.fraction_lr)] if fraction else [])
    optimizer = trainers.adam(*groups)
    buffer = make_replay_buffer(
        cfg.replay.buffer_size, **cfg.per.buffer_kwargs(), gamma=cfg.q.gamma,
        generator=cfg.run.seed, device=device, observation_spec=env.observation_spec,
        frame_stack=cfg.pixels.frame_stack,
        transform=cfg.aug.sample_transform(env.observation_spec),  # --augment shift
    )  # fmt: skip
    collector = trainers.make_collector(
        cfg.run, env, policy, cfg.q.frames_per_batch,
        init_random_frames=cfg.replay.init_random_frames,
    )  # fmt: skip
    clip = RewardClipping(-1.0, 1.0) if cfg.pixels.clip_rewards else None

    # 4. the update step: the distributional (or scalar) TD loss and one clipped gradient step,
    #    compiled (--compile) and/or captured (--cudagraphs); the priorities, the new noise and
    #    the target copies outside
    def learn(sample: TensorDictBase) -> TensorDictBase:
        out = loss(sample)
        trainers.optimizer_step(out[keys.LOSS], optimizer, max_grad_norm=cfg.q.max_grad_norm)
        return out.detach()

    update = trainers.compiled_step(learn, optimizer, **cfg.run.compile_options())

    # 5. the loop: store each batch, step the schedules, then the gradient steps due
    state = {"loss": loss, "optimizer": optimizer, "policy": policy, "buffer": buffer}
    with trainers.Run.from_config(
        cfg, TITLES[cfg.dist.algo], state, eval_env=eval_env, policy=qnet
    ) as run:
        for batch in run.resume(collector):
            if clip is not None:  # after the collector logged the env's own returns
                batch = clip(batch)
            buffer.extend(transitions(batch))
            exploration.step(collector.frames - int(exploration.frames))  # epsilon: env steps
            cfg.per.anneal(buffer, collector.frames, cfg.run.total_frames)  # PER's beta -> 1
            for step in run.gradient_steps(cfg.replay.init_random_frames, cfg.replay.utd_ratio):
                sample = buffer.sample(cfg.replay.batch_size)
                out = update(sample)
                if cfg.per.prioritized:
                    update_priority(buffer, sample, out)  # the loss's per-sample priorities
                if noisy:
                    reset_noise(loss)  # new noise for the next step, online and target nets
                target.step(step)  # counted from the run's steps: on time after a resume
                run.record({keys.LOSS: out[keys.LOSS], "q": out[keys.CHOSEN_ACTION_VALUE]})
            run.step({"epsilon": exploration.eps})  # push weights, log, evaluate, checkpoint
        # 6. report: final evaluation (and the best one), curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
