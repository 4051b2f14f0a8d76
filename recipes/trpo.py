"""TRPO (Schulman et al. 2015, arXiv 1502.05477) and NPG (Kakade 2001; normalized step:
Rajeswaran et al. 2017, arXiv 1703.02660) on a MuJoCo or any gymnasium task: one recipe, the
actor's natural-gradient step chosen by --algo.

Defaults are Tianshou's MuJoCo TRPO and NPG benchmarks (examples/mujoco/mujoco_trpo.py and
mujoco_npg.py, which share them): 16 envs x 64 steps = 1024 per batch; the actor takes one
natural-gradient step per batch (conjugate gradient, 10 iterations, damping 0.1; TRPO: KL bound
0.01, backtracking ratio 0.8, 10 backtracks; NPG: a step whose quadratic KL model equals 0.01,
where Tianshou takes a fixed step size); the critic takes 20 full-batch Adam steps (lr 1e-3,
decayed linearly to 0); gamma 0.99, GAE lambda 0.95, advantages normalized, 64x64 tanh MLPs,
initial log-std -0.5, observation normalization, and scaled rewards (--scale-rewards: divided by
the running std of the discounted return, so the critic learns targets of unit scale; Tianshou's
``rew_norm`` divides the returns by their running std for the same end). Differences: that
scaling's form (the rewards, as SB3's VecNormalize, rather than the returns), NPG's step (see
above) and a short default budget.

    python recipes/trpo.py                                   # TRPO, Hopper-v5, short budget
    python recipes/trpo.py --algo npg                        # NPG
    python recipes/trpo.py --env-id Pendulum-v1 --num-envs 4
"""

from __future__ import annotations

from typing import Literal

from tdrl import trainers
from tdrl.trainers import config


@trainers.configclass
class Config:
    run: config.RunConfig = config.RunConfig(num_envs=16)
    workers: config.WorkersConfig = config.WorkersConfig()
    onpolicy: config.OnPolicyConfig = config.OnPolicyConfig(
        frames_per_batch=1024, lr=1e-3, scale_rewards=True
    )
    net: config.NetworkConfig = config.NetworkConfig()
    algo: Literal["trpo", "npg"] = "trpo"
    """the actor's step: TRPO (KL-bounded line search) or NPG (normalized natural gradient)."""
    critic_steps: int = 20
    """critic passes over the batch per batch (full-batch steps by default)."""
    critic_minibatch_size: int | None = None
    """the critic's minibatch (None: the whole batch, Tianshou's; SB3's TRPO: 128)."""
    lmbda: float = 0.95
    """GAE lambda."""
    max_kl: float = 0.01
    """KL bound of the actor's step (NPG: the KL of its quadratic model)."""
    backtrack_ratio: float = 0.8
    """line-search step shrink factor (TRPO)."""
    max_backtracks: int = 10
    """line-search trials (TRPO)."""
    damping: float = 0.1
    """added to the Fisher matrix in the conjugate-gradient solve."""
    cg_iters: int = 10
    """conjugate-gradient iterations."""


def main(cfg: Config) -> dict[str, float]:
    """Train TRPO or NPG as configured; returns the last evaluation and update's metrics."""
    # the library loads here, after the command line: --help answers without it
    import itertools

    import torch

    from tdrl.data import minibatches
    from tdrl.estimators import GAE
    from tdrl.objectives import NPGLoss, TRPOLoss, total_loss

    cfg.net.refuse_memory("trpo.py")  # feed-forward, state-independent log-std policies only
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.make_envs(cfg.run)
    device = cfg.run.torch_device

    # 2. networks: actor and critic, observation normalization inside both
    # (on frames a CNN each: the critic's steps must not move the policy's trust region)
    nets = cfg.net.build(env.observation_spec, env.action_spec, recipe="trpo.py", memory=False,
                         shared_encoder=False)  # fmt: skip

    # 3. loss (actor_step for the actor, "loss_critic" for the critic), estimator, the critic's
    #    optimizer and schedule
    common = dict(
        max_kl=cfg.max_kl, damping=cfg.damping, cg_iters=cfg.cg_iters,
        normalize_advantage=cfg.onpolicy.normalize_advantage,
    )  # fmt: skip
    if cfg.algo == "trpo":
        loss = TRPOLoss(
            nets.actor, nets.critic, backtrack_ratio=cfg.backtrack_ratio,
            max_backtracks=cfg.max_backtracks, **common,
        )  # fmt: skip
    else:
        loss = NPGLoss(nets.actor, nets.critic, **common)
    loss.to(device)
    estimator = GAE(gamma=cfg.onpolicy.gamma, lmbda=cfg.lmbda, value_network=nets.critic)
    estimator.to(device)
    optimizer = torch.optim.Adam(nets.critic.parameters(), lr=cfg.onpolicy.lr, fused=True)
    scheduler = cfg.onpolicy.lr_schedule(optimizer, cfg.run.total_frames)
    scaler = cfg.onpolicy.reward_scaler(device)  # --scale-rewards: the critic learns scaled returns
    state = nets.state(optimizer=optimizer, scheduler=scheduler, reward_scaler=scaler)
    collector = trainers.make_collector(
        cfg.run, env, nets.acting, cfg.onpolicy.frames_per_batch, workers=cfg.workers
    )

    # 4. the loop: collect a rollout, GAE on it, the natural-gradient actor step, then the
    #    critic's regression on the value targets computed before the actor moved
    with trainers.Run.from_config(
        cfg, cfg.algo.upper(), state, eval_env=eval_env, policy=nets.policy
    ) as run:
        for batch in run.resume(collector):
            if scaler is not None:
                scaler(batch)
            estimator(batch)  # no gradients: the estimator is not differentiable
            flat = batch.reshape(-1)
            critic_batches = minibatches(
                flat, cfg.critic_minibatch_size, epochs=cfg.critic_steps, in_keys=loss.in_keys
            )
            # drawing the first one checks the batch (a NaN or inf advantage or value target
            # is named) before the actor moves
            first = next(critic_batches)
            actor_metrics = loss.actor_step(flat)
            run.updates += 1
            for minibatch in itertools.chain([first], critic_batches):
                out = loss(minibatch)
                trainers.optimizer_step(total_loss(out), optimizer)
                run.record(out)
                run.updates += 1
            scheduler.step()
            nets.update_obs_norm(batch)  # after the update, which saw the collection's stats
            run.step(actor_metrics)  # push weights to workers, log, evaluate, checkpoint when due
        # 5. report: final evaluation, curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
