"""PPO (Schulman et al. 2017, arXiv 1707.06347) on a MuJoCo task, or any gymnasium task.

Defaults are Tianshou's MuJoCo PPO benchmark (examples/mujoco/mujoco_ppo.py): 8 envs x 256 steps
per batch, 10 epochs of minibatch 64, Adam lr 3e-4 decayed linearly to 0, gamma 0.99, GAE lambda
0.95, clip 0.2, critic coefficient 0.25, no entropy bonus, gradient norm 0.5, 64x64 tanh MLPs,
initial log-std -0.5, observation normalization, raw advantages. Rewards are divided by the
running std of the discounted return (--scale-rewards, as SB3 and CleanRL), and GAE runs once
per batch (--recompute-advantage: before every epoch, as Tianshou).

    python recipes/ppo.py                                   # Hopper-v5, short budget
    python recipes/ppo.py --total-frames 1000000            # the 1M-step benchmark setting
    python recipes/ppo.py --resume                          # continue runs/ppo/Hopper-v5/seed0
    python recipes/ppo.py --env-id CartPole-v1 --frames-per-batch 256 --minibatch-size 256 \
        --lr 3e-3 --no-lr-decay --gamma 0.98 --lmbda 0.8 --critic-coeff 0.5 \
        --no-normalize-observations --normalize-advantage --no-scale-rewards
    python recipes/ppo.py --env-id CartPoleNoVel-v1 --recurrent lstm --frames-per-batch 1024 \
        --minibatch-size 256 --seq-len 16 --epochs 4 --lr 3e-3 --no-lr-decay --gamma 0.98 \
        --lmbda 0.8 --critic-coeff 0.5 --no-normalize-observations --normalize-advantage \
        --no-scale-rewards                                  # a POMDP: memory needed
    python recipes/ppo.py --env-id MountainCar-v0 --intrinsic-coeff 1 --extrinsic-coeff 2
    python recipes/ppo.py --env-id MountainCar-v0 --intrinsic-coeff 1 --intrinsic icm

    python recipes/ppo.py --env-id tdrl/Breakout-v5 --env-backend envpool --num-envs 8 \
        --frame-stack 4 --terminal-on-life-loss --clip-rewards --frames-per-batch 1024 \
        --epochs 4 --minibatch-size 256 --lr 2.5e-4 --clip-epsilon 0.1 --critic-coeff 0.5 \
        --entropy-coeff 0.01 --normalize-advantage --no-scale-rewards --adam-eps 1e-5 \
        --no-eval-deterministic

The fifth and sixth add an exploration bonus: RND (Burda et al. 2018) at CleanRL's coefficients,
and ICM (Pathak et al. 2017). The last is CleanRL's ppo_atari_envpool.py settings on envpool's
Atari (the Nature CNN under both heads; evaluation on gymnasium's ALE with the same
preprocessing, of the sampling policy as CleanRL's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from tdrl import trainers
from tdrl.trainers import config

if TYPE_CHECKING:
    from tensordict import TensorDictBase


@trainers.configclass
class Config:
    compiled_steps: ClassVar[bool] = True  # --compile and --cudagraphs apply to its updates
    run: config.RunConfig = config.RunConfig()
    workers: config.WorkersConfig = config.WorkersConfig()
    onpolicy: config.OnPolicyConfig = config.OnPolicyConfig(
        normalize_advantage=False, scale_rewards=True
    )
    net: config.NetworkConfig = config.NetworkConfig()
    adv: config.AdvantageConfig = config.AdvantageConfig(critic_coeff=0.25)
    ppo: config.PPOConfig = config.PPOConfig()
    explore: config.IntrinsicConfig = config.IntrinsicConfig()
    pixels: config.PixelConfig = config.PixelConfig()
    adam_eps: float = 1e-8
    """Adam's epsilon (PyTorch's default; SB3's on-policy policies use 1e-5)."""


def main(cfg: Config) -> dict[str, float]:
    """Train PPO as configured; returns the last evaluation and the last update's metrics."""
    # the library loads here, after the command line: --help answers without it
    import torch
    from torchrl.modules import set_recurrent_mode

    from tdrl.data import minibatches
    from tdrl.envs import RewardClipping
    from tdrl.estimators import GAE
    from tdrl.objectives import ClipPPOLoss, total_loss

    cfg.net.refuse_captured_sequences("ppo.py", cudagraphs=cfg.run.cudagraphs)
    if cfg.run.compile or cfg.run.cudagraphs:  # one compiled step serves every minibatch
        cfg.ppo.check_compiled(cfg.onpolicy.frames_per_batch, cfg.net.sequence_length,
                               cudagraphs=cfg.run.cudagraphs)  # fmt: skip

    # 1. envs: seeds and threads, the training envs and a separate evaluation env (Atari: frame
    #    stacks; a lost life ends a training episode); the reward clipping the learner sees
    both, train = cfg.pixels.env_kwargs(cfg.run.env_id)
    env, eval_env = trainers.make_envs(cfg.run, env_kwargs=both, train_env_kwargs=train)
    device = cfg.run.torch_device
    clip = RewardClipping(-1.0, 1.0) if cfg.pixels.clip_rewards else None

    # 2. networks: actor and critic, observation normalization inside both (on frames: a CNN,
    #    --network picks which)
    nets = cfg.net.build(env.observation_spec, env.action_spec, network=cfg.pixels.network)

    # 3. loss, estimator (run on the whole rollout before minibatching), optimizer, schedule
    loss = ClipPPOLoss(
        nets.actor, nets.critic, clip_epsilon=cfg.ppo.clip_epsilon,
        entropy_coeff=cfg.adv.entropy_coeff, critic_coeff=cfg.adv.critic_coeff,
        normalize_advantage=cfg.onpolicy.normalize_advantage,
    ).to(device)  # fmt: skip
    estimator = GAE(gamma=cfg.onpolicy.gamma, lmbda=cfg.adv.lmbda, value_network=nets.critic)
    estimator.to(device)
    # --intrinsic-coeff: RND's or ICM's reward, critic and non-episodic estimator (or None)
    bonus = cfg.explore.build(env.observation_spec, env.action_spec, nets, lmbda=cfg.adv.lmbda,
                              critic_coeff=cfg.adv.critic_coeff, device=device)  # fmt: skip
    # with a bonus: the loss adds its models' and critic's, the advantage mixes in its own
    objective, estimator = bonus.attach(loss, estimator) if bonus else (loss, estimator)
    optimizer = torch.optim.Adam(
        objective.parameters(), lr=cfg.onpolicy.lr, eps=cfg.adam_eps, fused=True
    )
    scheduler = cfg.onpolicy.lr_schedule(optimizer, cfg.run.total_frames)
    scaler = cfg.onpolicy.reward_scaler(device)  # --scale-rewards: the critic learns scaled returns
    state = nets.state(optimizer=optimizer, scheduler=scheduler, reward_scaler=scaler)
    if bonus is not None:
        state.update(bonus.state())
    collector = trainers.make_collector(
        cfg.run, env, nets.acting, cfg.onpolicy.frames_per_batch, workers=cfg.workers
    )
    # --recompute-advantage: the estimator runs again before every epoch
    passes = [1] * cfg.ppo.epochs if cfg.ppo.recompute_advantage else [cfg.ppo.epochs]
    seq_len = cfg.net.sequence_length  # --recurrent: minibatches of whole sequences

    # 4. the minibatch step, compiled (--compile) and/or captured in a CUDA graph (--cudagraphs)
    def learn(minibatch: TensorDictBase) -> TensorDictBase:
        out = objective(minibatch)
        trainers.optimizer_step(total_loss(out), optimizer, max_grad_norm=cfg.adv.max_grad_norm)
        return out.detach()

    update = trainers.compiled_step(learn, optimizer, **cfg.run.compile_options())

    # 5. the loop: collect a rollout, estimate advantages, minibatch epochs
    with trainers.Run.from_config(cfg, "PPO", state, eval_env=eval_env, policy=nets.policy) as run:
        for batch in run.resume(collector):
            if clip is not None:  # after the collector logged the env's own returns
                batch = clip(batch)
            if scaler is not None:
                scaler(batch)
            # --clip-decay: the clip range decays over the run (the zoo's Atari PPO)
            before = collector.frames - cfg.onpolicy.frames_per_batch
            loss.clip_epsilon = cfg.ppo.clip_range(before, cfg.run.total_frames)
            if bonus is not None:  # ("next", "intrinsic_reward"), before the estimators
                bonus.module.intrinsic_reward(batch)
            for epochs in passes:
                with torch.no_grad():
                    estimator(batch)  # with a bonus: the intrinsic advantage mixed in
                with set_recurrent_mode(seq_len is not None):
                    for minibatch in minibatches(
                        batch, cfg.ppo.minibatch_size, epochs=epochs, in_keys=objective.in_keys,
                        seq_len=seq_len,
                    ):  # fmt: skip
                        run.record(update(minibatch))  # each train row: the mean of its steps
                        run.updates += 1
            scheduler.step()
            nets.update_obs_norm(batch)  # after the update, which saw the collection's stats
            run.step()  # push weights to workers, log, evaluate, checkpoint when due
        # 6. report: final evaluation, curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
