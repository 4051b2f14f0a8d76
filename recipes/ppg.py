"""Phasic policy gradient (Cobbe et al. 2020, arXiv 2009.04416) on a MuJoCo task, or any gymnasium
task.

A policy phase of PPO with separate policy and value networks, and every --policy-iterations
rollouts an auxiliary phase over those rollouts' states: a value head on the policy network's
hidden layers learns the value targets under a behavioural-cloning KL to the policy as the phase
began (--beta-clone), and the value network trains further. The phases are CleanRL's
ppg_procgen.py (N_pi 32, one policy and one value epoch per rollout, 6 auxiliary epochs, beta_clone
1); the rest is recipes/ppo.py's defaults (Tianshou's MuJoCo PPO: 8 envs x 256 steps, minibatch
64, Adam 3e-4 decayed linearly, GAE 0.95, clip 0.2, critic coefficient 0.25, gradient norm 0.5,
64x64 tanh MLPs, observation normalization, rewards scaled by the return's running std).

    python recipes/ppg.py                                   # Hopper-v5, short budget
    python recipes/ppg.py --env-id CartPole-v1 --frames-per-batch 256 --policy-iterations 8 \
        --no-normalize-observations --no-scale-rewards
"""

from __future__ import annotations

from tdrl import trainers
from tdrl.trainers import config


@trainers.configclass
class Config:
    run: config.RunConfig = config.RunConfig()
    workers: config.WorkersConfig = config.WorkersConfig()
    onpolicy: config.OnPolicyConfig = config.OnPolicyConfig(
        normalize_advantage=False, scale_rewards=True
    )
    net: config.NetworkConfig = config.NetworkConfig()
    adv: config.AdvantageConfig = config.AdvantageConfig(critic_coeff=0.25)
    ppo: config.PPOConfig = config.PPOConfig(epochs=1)  # the policy phase: E_pi = E_V = 1
    ppg: config.PPGConfig = config.PPGConfig()
    adam_eps: float = 1e-8
    """Adam's epsilon (PyTorch's default; SB3's and CleanRL's: 1e-5)."""


def main(cfg: Config) -> dict[str, float]:
    """Train PPG as configured; returns the last evaluation and the last update's metrics."""
    # the library loads here, after the command line: --help answers without it
    import torch

    from tdrl.data import ReplayBuffer, minibatches
    from tdrl.estimators import GAE
    from tdrl.modules import aux_value_head
    from tdrl.objectives import ClipPPOLoss, PPGAuxLoss, total_loss

    if cfg.ppo.recompute_advantage:  # the estimator runs once per rollout
        raise ValueError("ppg.py has no --recompute-advantage (GAE runs once per rollout)")
    phase = cfg.ppg.policy_iterations * cfg.onpolicy.frames_per_batch
    if phase > cfg.run.total_frames:  # and the store of that many states would be allocated
        raise ValueError(
            f"--policy-iterations {cfg.ppg.policy_iterations} x --frames-per-batch "
            f"{cfg.onpolicy.frames_per_batch} = {phase} env steps before the first auxiliary "
            f"phase, more than --total-frames {cfg.run.total_frames}: it would never run"
        )
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.make_envs(cfg.run)
    device = cfg.run.torch_device

    # 2. networks: separate policy and value networks (on frames a CNN each), the policy's own
    #    value head on its hidden layers
    nets = cfg.net.build(env.observation_spec, env.action_spec, recipe="ppg.py", memory=False,
                         shared_encoder=False)  # fmt: skip
    aux_value = aux_value_head(nets.actor)

    # 3. the policy phase's loss (PPO's) and estimator, the auxiliary phase's loss and the store
    #    of the last N_pi rollouts' states and value targets; one Adam for every part
    loss = ClipPPOLoss(
        nets.actor, nets.critic, clip_epsilon=cfg.ppo.clip_epsilon,
        entropy_coeff=cfg.adv.entropy_coeff, critic_coeff=cfg.adv.critic_coeff,
        normalize_advantage=cfg.onpolicy.normalize_advantage,
    ).to(device)  # fmt: skip
    estimator = GAE(gamma=cfg.onpolicy.gamma, lmbda=cfg.adv.lmbda, value_network=nets.critic)
    estimator.to(device)
    aux_loss = PPGAuxLoss(nets.actor, aux_value, nets.critic, beta_clone=cfg.ppg.beta_clone)
    aux_loss.to(device)
    stored = ReplayBuffer(  # a ring of exactly N_pi rollouts, checkpointed with the run
        cfg.ppg.policy_iterations * cfg.onpolicy.frames_per_batch, num_streams=cfg.run.num_envs,
        generator=cfg.run.seed, device=device,
    )  # fmt: skip
    params = dict.fromkeys([*loss.parameters(), *aux_loss.parameters()])
    optimizer = torch.optim.Adam(params, lr=cfg.onpolicy.lr, eps=cfg.adam_eps, fused=True)
    scheduler = cfg.onpolicy.lr_schedule(optimizer, cfg.run.total_frames)
    scaler = cfg.onpolicy.reward_scaler(device)  # --scale-rewards: the critic learns scaled returns
    state = nets.state(optimizer=optimizer, scheduler=scheduler, reward_scaler=scaler,
                       aux_value=aux_value, stored=stored)  # fmt: skip
    collector = trainers.make_collector(
        cfg.run, env, nets.acting, cfg.onpolicy.frames_per_batch, workers=cfg.workers
    )

    # 4. the loop: collect a rollout, its advantages, the policy phase's minibatch epochs; every
    #    N_pi-th rollout the auxiliary phase over the stored ones
    with trainers.Run.from_config(cfg, "PPG", state, eval_env=eval_env, policy=nets.policy) as run:
        for batch in run.resume(collector):
            if scaler is not None:
                scaler(batch)
            # --clip-decay: the clip range decays over the run (the zoo's Atari PPO)
            before = collector.frames - cfg.onpolicy.frames_per_batch
            loss.clip_epsilon = cfg.ppo.clip_range(before, cfg.run.total_frames)
            estimator(batch)  # no gradients: the estimator is not differentiable
            for minibatch in minibatches(
                batch, cfg.ppo.minibatch_size, epochs=cfg.ppo.epochs, in_keys=loss.in_keys
            ):
                out = loss(minibatch)
                trainers.optimizer_step(
                    total_loss(out), optimizer, max_grad_norm=cfg.adv.max_grad_norm
                )
                run.record(out)
                run.updates += 1
            stored.extend(batch.select(*aux_loss.in_keys))  # states and value targets
            if collector.frames // cfg.onpolicy.frames_per_batch % cfg.ppg.policy_iterations == 0:
                data = aux_loss.snapshot(stored.storage.reshape(-1).clone())  # pi_old
                for minibatch in minibatches(
                    data, cfg.ppg.aux_minibatch_size, epochs=cfg.ppg.aux_epochs
                ):
                    out = aux_loss(minibatch)
                    trainers.optimizer_step(
                        total_loss(out), optimizer, max_grad_norm=cfg.adv.max_grad_norm
                    )
                    run.record({f"aux_{key}": value for key, value in out.items()})
                    run.updates += 1
            scheduler.step()
            nets.update_obs_norm(batch)  # after the updates, which saw the collection's stats
            run.step()  # push weights to workers, log, evaluate, checkpoint when due
        # 5. report: final evaluation, curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
