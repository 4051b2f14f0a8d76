"""A2C (Mnih et al. 2016, arXiv 1602.01783; synchronous) on a MuJoCo task, or any gymnasium task.

Defaults are Tianshou's MuJoCo A2C benchmark (examples/mujoco/mujoco_a2c.py): 16 envs x 5 steps
= 80 per batch, one full-batch step per batch, RMSprop (lr 7e-4, alpha 0.99, eps 1e-5) decayed
linearly to 0 over 3M env steps or the run, whichever is longer (Tianshou's 100 epochs of 30k
steps; its table reads the first 1M, where the rate is still 2/3 of its start), gamma 0.99, GAE
lambda 0.95, critic coefficient 0.5, entropy coefficient 0.01, gradient norm 0.5, 64x64 tanh
MLPs, initial log-std -0.5, observation normalization, raw advantages. The critic learns its
value targets divided by the running std of the returns, the advantages staying in reward units,
as Tianshou's ``return_scaling`` does (ValueTargetScaling; --no-scale-value-targets turns it
off). --scale-rewards (the rewards divided by that std, so the advantages too) is another thing.
Differences from Tianshou: a short default budget, and each change of that std rescales the
critic's output layer so its values in reward units stay put (PopArt's output preservation, van
Hasselt et al. 2016; --no-preserve-value-outputs is Tianshou's procedure, whose std ran away on
Hopper-v5: docs/algorithms/a2c.md).

    python recipes/a2c.py                                   # Hopper-v5, short budget
    python recipes/a2c.py --env-id CartPole-v1 --lr 1e-3
    python recipes/a2c.py --env-id MountainCar-v0 --intrinsic-coeff 1 --intrinsic icm

The last adds ICM's exploration bonus (Pathak et al. 2017, whose agent is A3C); --intrinsic rnd
is RND's (ppo.py's docstring has its CleanRL coefficients).
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
    run: config.RunConfig = config.RunConfig(num_envs=16, log_every=2_000)
    workers: config.WorkersConfig = config.WorkersConfig()
    onpolicy: config.OnPolicyConfig = config.OnPolicyConfig(
        frames_per_batch=80, lr=7e-4, lr_decay_frames=3_000_000, normalize_advantage=False
    )
    net: config.NetworkConfig = config.NetworkConfig()
    adv: config.AdvantageConfig = config.AdvantageConfig(entropy_coeff=0.01)
    explore: config.IntrinsicConfig = config.IntrinsicConfig()
    scale_value_targets: bool = True
    """the critic learns its value targets divided by the running std of the returns, the
    advantages staying in reward units (Tianshou's return_scaling; ValueTargetScaling)."""
    preserve_value_outputs: bool = True
    """with --scale-value-targets: each change of scale rescales the critic's output layer, so
    its values in reward units stay put (PopArt's output preservation); off is Tianshou's
    procedure, whose scale can run away."""


def main(cfg: Config) -> dict[str, float]:
    """Train A2C as configured; returns the last evaluation and the last update's metrics."""
    # the library loads here, after the command line: --help answers without it
    import torch
    from tensordict.nn import TensorDictModuleBase
    from torchrl.modules import set_recurrent_mode

    from tdrl.data import minibatches
    from tdrl.estimators import GAE
    from tdrl.modules import ValueTargetScaling
    from tdrl.objectives import A2CLoss, total_loss

    cfg.net.refuse_captured_sequences("a2c.py", cudagraphs=cfg.run.cudagraphs)
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.make_envs(cfg.run)
    device = cfg.run.torch_device

    # 2. networks: actor and critic, observation normalization inside both
    nets = cfg.net.build(env.observation_spec, env.action_spec)

    # 3. loss, estimator (run on the whole rollout), optimizer, schedule
    loss = A2CLoss(
        nets.actor, nets.critic, entropy_coeff=cfg.adv.entropy_coeff,
        critic_coeff=cfg.adv.critic_coeff, normalize_advantage=cfg.onpolicy.normalize_advantage,
    ).to(device)  # fmt: skip
    estimator: TensorDictModuleBase = GAE(
        gamma=cfg.onpolicy.gamma, lmbda=cfg.adv.lmbda, value_network=nets.critic
    )
    if cfg.scale_value_targets:
        # its statistics go in the checkpoints
        estimator = ValueTargetScaling(estimator, preserve_outputs=cfg.preserve_value_outputs)
    scaling = estimator.to(device)
    # --intrinsic-coeff: RND's or ICM's reward, critic and non-episodic estimator (or None)
    bonus = cfg.explore.build(env.observation_spec, env.action_spec, nets, lmbda=cfg.adv.lmbda,
                              critic_coeff=cfg.adv.critic_coeff, device=device)  # fmt: skip
    # with a bonus: the loss adds its models' and critic's, the advantage mixes in its own
    objective, estimator = bonus.attach(loss, estimator) if bonus else (loss, estimator)
    optimizer = torch.optim.RMSprop(
        objective.parameters(), lr=cfg.onpolicy.lr, alpha=0.99, eps=1e-5, foreach=True
    )
    scheduler = cfg.onpolicy.lr_schedule(optimizer, cfg.run.total_frames)
    scaler = cfg.onpolicy.reward_scaler(device)  # --scale-rewards: the critic learns scaled returns
    state = nets.state(optimizer=optimizer, scheduler=scheduler, reward_scaler=scaler)
    if cfg.scale_value_targets:
        state["value_target_scaling"] = scaling
    if bonus is not None:
        state.update(bonus.state())
    collector = trainers.make_collector(
        cfg.run, env, nets.acting, cfg.onpolicy.frames_per_batch, workers=cfg.workers
    )
    seq_len = cfg.net.sequence_length  # --recurrent: the rollout as whole sequences

    # 4. the full-batch step (with a bonus, its model losses too), compiled (--compile) and/or
    #    captured in a CUDA graph (--cudagraphs)
    def learn(minibatch: TensorDictBase) -> TensorDictBase:
        out = objective(minibatch)
        trainers.optimizer_step(total_loss(out), optimizer, max_grad_norm=cfg.adv.max_grad_norm)
        return out.detach()

    update = trainers.compiled_step(learn, optimizer, **cfg.run.compile_options())

    # 5. the loop: collect a rollout, estimate advantages on it, one full-batch step
    with trainers.Run.from_config(cfg, "A2C", state, eval_env=eval_env, policy=nets.policy) as run:
        for batch in run.resume(collector):
            if scaler is not None:
                scaler(batch)
            if bonus is not None:  # ("next", "intrinsic_reward"), before the estimators
                bonus.module.intrinsic_reward(batch)
            with torch.no_grad():
                estimator(batch)  # with a bonus: the intrinsic advantage mixed in
            with set_recurrent_mode(seq_len is not None):
                for minibatch in minibatches(
                    batch, None, in_keys=objective.in_keys, seq_len=seq_len
                ):
                    run.record(update(minibatch))  # each train row: the mean of its steps
                    run.updates += 1
            scheduler.step()
            nets.update_obs_norm(batch)  # after the update, which saw the collection's stats
            run.step()  # push weights to workers, log, evaluate, checkpoint when due
        # 6. report: final evaluation, curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
