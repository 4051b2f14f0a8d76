"""DQN (Mnih et al. 2015) with double Q (van Hasselt et al. 2015, arXiv 1509.06461), dueling
heads (Wang et al. 2016, 1511.06581), n-step returns and prioritized replay (Schaul et al. 2015,
1511.05952) as options, on flat observations or uint8 frames (a CNN; frames stored once per step).
The distributional family and Rainbow are recipes/rainbow.py.

Defaults: rl-baselines3-zoo's tuned CartPole-v1 DQN (hyperparams/dqn.yml): lr 2.3e-3, batch 64,
256x256 MLP, 1k random steps, epsilon 1 -> 0.04 over 8k steps, utd 0.5, gamma 0.99, Huber loss,
gradient norm 10, a target copy every 128 gradient steps (the zoo's every 10 env steps, as SB3
trains in bursts); double Q on. docs/algorithms/dqn.md has the sources and the results.

    python recipes/dqn.py                                  # CartPole-v1
    python recipes/dqn.py --n-steps 3 --prioritized --no-double-dqn
    python recipes/dqn.py --env-id MinAtar/Breakout-v1     # uint8 frames: a CNN Q network
    python recipes/dqn.py --env-id MinAtar/Breakout-v1 --augment shift --shift-pad 1
    python recipes/dqn.py --env-id tdrl/Pong-v5 --frame-stack 4 --clip-rewards \
        --terminal-on-life-loss --buffer-size 1000000    # Atari: 7.1 GB of frames when full
    python recipes/dqn.py --env-id MountainCar-v0 --intrinsic-coeff 1 --intrinsic icm
    python recipes/dqn.py --env-id tdrl/BitFlipping15-v0 --her future --gamma 0.98

The fourth trains on randomly shifted frames (DrQ, Kostrikov et al. 2020; its pad of 4 is for
84x84 frames). The sixth adds ICM's curiosity (Pathak et al. 2017) to the stored rewards;
--intrinsic rnd: RND's.
The last reads the goal env's dict observation (every entry, concatenated) and relabels goals
with hindsight replay (Andrychowicz et al. 2017).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from tdrl import keys, trainers
from tdrl.trainers import config

if TYPE_CHECKING:
    from tensordict import TensorDictBase
    from torchrl.data import TensorSpec

    from tdrl.modules import NetworkInputs, QValueActor
    from tdrl.objectives import DQNLoss


@trainers.configclass
class Config:
    compiled_steps: ClassVar[bool] = True  # --compile and --cudagraphs apply to its updates
    run: config.RunConfig = config.Q_LEARNING_RUN
    replay: config.ReplayConfig = config.Q_LEARNING_REPLAY
    q: config.QLearningConfig = config.Q_LEARNING_Q
    dueling: bool = False
    """dueling value/advantage head."""
    double_dqn: bool = True
    """select the bootstrap action with the online network."""
    per: config.PERConfig = config.PERConfig()
    pixels: config.PixelConfig = config.PixelConfig()
    aug: config.AugmentConfig = config.AugmentConfig()
    explore: config.IntrinsicConfig = config.IntrinsicConfig()
    goals: config.GoalConfig = config.GoalConfig()


def q_network_and_loss(
    cfg: Config, inputs: NetworkInputs, action_spec: TensorSpec
) -> tuple[QValueActor, DQNLoss]:
    """The greedy Q actor (an MLP or a CNN with SB3's init, which the zoo tuned; on a dict
    observation it reads what ``inputs`` gives: the vector entries concatenated, image entries
    through a CNN each inside the network) and its loss."""
    from tdrl.modules import QValueActor
    from tdrl.modules.networks import q_network
    from tdrl.objectives import DQNLoss

    body = q_network(
        inputs.spec, action_spec, cfg.q.hidden_sizes, network=cfg.pixels.network,
        dueling=cfg.dueling,
    )  # fmt: skip
    qnet = inputs.attach(QValueActor(body, in_key=inputs.key))
    loss = DQNLoss(qnet, loss_function="smooth_l1", double_dqn=cfg.double_dqn, gamma=cfg.q.gamma)
    return qnet, loss


def main(cfg: Config) -> dict[str, float]:
    """Train DQN; returns the final greedy evaluation, the best one, and the counters."""
    cfg.goals.refuse_rewritten_rewards(clip_rewards=cfg.pixels.clip_rewards,
                                       intrinsic_coeff=cfg.explore.intrinsic_coeff)  # fmt: skip
    # the library loads here, after the command line: --help answers without it
    from tensordict.nn import TensorDictSequential

    from tdrl.data import make_replay_buffer, transitions
    from tdrl.envs import RewardClipping
    from tdrl.modules import EpsilonGreedy
    from tdrl.objectives import HardUpdate, total_loss, update_priority

    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    # frame stacks, a MiniGrid layout; Atari's life loss (training only)
    both, train = cfg.pixels.env_kwargs(cfg.run.env_id)
    env, eval_env = trainers.make_envs(
        cfg.run, actions="discrete", env_kwargs=both, train_env_kwargs=train
    )
    device = cfg.run.torch_device

    # 2. networks: greedy Q actor; epsilon-greedy on top acts only while collecting (RANDOM mode)
    inputs = cfg.goals.inputs(env.observation_spec, images=True)  # a dict: entries, images
    qnet, loss = q_network_and_loss(cfg, inputs, env.action_spec)
    greedy = inputs.policy(qnet)
    exploration = EpsilonGreedy(
        int(env.action_spec.space.n), eps_init=cfg.q.eps_init, eps_end=cfg.q.eps_end,
        annealing_num_steps=cfg.q.eps_frames,
    )  # fmt: skip
    policy = TensorDictSequential(greedy, exploration)

    # 3. target copies, optimizer, buffer (stacks and large frames: each frame stored once),
    #    collector, the reward clipping the buffer sees
    target = HardUpdate(loss, value_network_update_interval=cfg.q.target_update_interval)
    loss.to(device)
    policy.to(device)
    bonus = cfg.explore.model(env.observation_spec, env.action_spec, device)  # or None
    bonus_group = [] if bonus is None else [(bonus.parameters(), cfg.q.lr)]
    optimizer = trainers.adam((qnet.parameters(), cfg.q.lr), *bonus_group)
    # sampled frames shifted (--augment shift), then a dict observation's entries concatenated
    augment = cfg.aug.sample_transform(env.observation_spec, then=inputs.transform)
    buffer = make_replay_buffer(
        cfg.replay.buffer_size, **cfg.per.buffer_kwargs(), gamma=cfg.q.gamma,
        generator=cfg.run.seed, device=device, observation_spec=env.observation_spec,
        frame_stack=cfg.pixels.frame_stack, **cfg.goals.replay_kwargs(cfg.run.env_id),
        transform=augment,
    )  # fmt: skip
    collector = trainers.make_collector(
        cfg.run, env, policy, cfg.q.frames_per_batch,
        init_random_frames=cfg.replay.init_random_frames,
    )  # fmt: skip
    clip = RewardClipping(-1.0, 1.0) if cfg.pixels.clip_rewards else None

    # 4. the update step: the TD loss (and the bonus's model losses: one clip norm), compiled
    #    (--compile) and/or captured (--cudagraphs); the target copies and priorities outside
    def learn(sample: TensorDictBase) -> TensorDictBase:
        out = loss(sample)
        total = out[keys.LOSS]
        if bonus is not None:  # the bonus's models learn from the replay
            out["bonus"] = bonus(sample)
            total = total + total_loss(out["bonus"])
        trainers.optimizer_step(total, optimizer, max_grad_norm=cfg.q.max_grad_norm)
        return out.detach()

    update = trainers.compiled_step(learn, optimizer, **cfg.run.compile_options())

    # 5. the loop: store each batch, step the schedules, then the gradient steps due
    state = {"loss": loss, "optimizer": optimizer, "policy": policy, "buffer": buffer}
    if bonus is not None:
        state["bonus"] = bonus
    with trainers.Run.from_config(cfg, "DQN", state, eval_env=eval_env, policy=greedy) as run:
        for batch in run.resume(collector):
            if clip is not None:  # after the collector logged the env's own returns
                batch = clip(batch)
            if bonus is not None:  # the stored reward gains the intrinsic one
                batch = cfg.explore.add_reward(bonus, batch)
            buffer.extend(transitions(batch))
            exploration.step(collector.frames - int(exploration.frames))  # epsilon: env steps
            cfg.per.anneal(buffer, collector.frames, cfg.run.total_frames)  # PER's beta -> 1
            for step in run.gradient_steps(cfg.replay.init_random_frames, cfg.replay.utd_ratio):
                sample = buffer.sample(cfg.replay.batch_size)
                out = update(sample)
                if bonus is not None:
                    run.record(out["bonus"])
                if cfg.per.prioritized:
                    update_priority(buffer, sample, out)  # the loss's per-sample priorities
                target.step(step)  # counted from the run's steps: on time after a resume
                run.record({keys.LOSS: out[keys.LOSS], "q": out[keys.CHOSEN_ACTION_VALUE]})
            run.step({"epsilon": exploration.eps})  # push weights, log, evaluate, checkpoint
        # 6. report: final evaluation (and the best one), curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
