"""GAIL (Ho & Ermon 2016, arXiv 1606.03476): PPO on a discriminator's reward -log(1 - D(s, a)),
from expert demonstrations in a Minari dataset (recipes/make_dataset.py makes them).

Defaults: the generator at Tianshou's MuJoCo PPO settings (advantages normalized per minibatch,
raw rewards); the discriminator two 100-unit tanh layers, Adam 3e-4, 10 steps of 512 pairs a side
per batch, on pairs standardized with the demonstrations' statistics (tuned on Hopper-v5). The
logged and evaluated returns are the env's own. docs/algorithms/gail.md has the update, the
results and the limits (the positive reward also pays for surviving).

    python recipes/ppo.py --env-id Hopper-v5 --total-frames 1000000 --stop-at-return 3300 \
        --log-dir runs/expert-hopper                                      # the expert
    python recipes/make_dataset.py --kind policy --run runs/expert-hopper \
        --deterministic --steps 20000 --num-envs 4 --dataset-id tdrl/hopper-expert-v0
    python recipes/gail.py --dataset tdrl/hopper-expert-v0 --expert-episodes 10 \
        --total-frames 1000000
"""

from __future__ import annotations

from tdrl import keys, trainers
from tdrl.trainers import config


@trainers.configclass
class Config:
    run: config.RunConfig = config.RunConfig()
    workers: config.WorkersConfig = config.WorkersConfig()
    onpolicy: config.OnPolicyConfig = config.OnPolicyConfig()
    net: config.NetworkConfig = config.NetworkConfig()
    adv: config.AdvantageConfig = config.AdvantageConfig(critic_coeff=0.25)
    ppo: config.PPOConfig = config.PPOConfig()
    dataset: str = "tdrl/hopper-policy-v0"
    """Minari dataset id of the expert's demonstrations (under MINARI_DATASETS_PATH)."""
    expert_episodes: int = 10
    """expert episodes used (the dataset's first ones)."""
    disc_hidden_sizes: tuple[int, ...] = (100, 100)
    """hidden layer widths of the discriminator (tanh)."""
    disc_lr: float = 3e-4
    """discriminator learning rate (Adam)."""
    disc_steps: int = 10
    """discriminator steps per batch."""
    disc_batch_size: int = 512
    """pairs of each kind per discriminator step (at most the batch's own)."""
    disc_normalize: bool = True
    """standardize the discriminator's input with the expert pairs' mean and std (fixed)."""
    use_grad_penalty: bool = False
    """gradient penalty on the discriminator (WGAN-GP's, on mixed pairs)."""
    gp_lambda: float = 10.0
    """weight of the gradient penalty."""


def main(cfg: Config) -> dict[str, float]:
    """Train GAIL as configured; returns the last evaluation and the last update's metrics."""
    # the library loads here, after the command line: --help answers without it
    import torch
    from torch import nn
    from torchrl.modules import set_recurrent_mode

    from tdrl.data import minibatches
    from tdrl.data.expert import ExpertPairs
    from tdrl.estimators import GAE
    from tdrl.modules import StateActionCritic, flat_dims, mlp
    from tdrl.objectives import ClipPPOLoss, GAILLoss, gail_reward, total_loss

    if cfg.onpolicy.scale_rewards:  # the rewards are the discriminator's
        raise ValueError("--scale-rewards does not apply to GAIL")
    if cfg.ppo.clip_decay:
        raise ValueError("gail.py has no --clip-decay (its clip range is constant)")
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.make_envs(cfg.run)
    device = cfg.run.torch_device

    # 2. networks: the PPO generator's actor and critic, the expert's pairs (actions clipped to
    #    the box, as the env executes the policy's; standardized with their own statistics), the
    #    discriminator. Box actions only.
    nets = cfg.net.build(env.observation_spec, env.action_spec)
    expert = ExpertPairs.from_minari(
        cfg.dataset, cfg.expert_episodes, env.observation_spec, env.action_spec,
        env_id=cfg.run.env_id, standardize=cfg.disc_normalize,
    ).to(device)  # fmt: skip
    net = mlp(sum(flat_dims(env.observation_spec, env.action_spec)), 1, cfg.disc_hidden_sizes,
              activation=nn.Tanh)  # fmt: skip
    discriminator = StateActionCritic(net, out_key=keys.D_LOGITS)

    # 3. losses (PPO's and the discriminator's), estimator, optimizers, schedule, collector
    loss = ClipPPOLoss(
        nets.actor, nets.critic, clip_epsilon=cfg.ppo.clip_epsilon,
        entropy_coeff=cfg.adv.entropy_coeff, critic_coeff=cfg.adv.critic_coeff,
        normalize_advantage=cfg.onpolicy.normalize_advantage,
    ).to(device)  # fmt: skip
    disc_loss = GAILLoss(
        discriminator, use_grad_penalty=cfg.use_grad_penalty, gp_lambda=cfg.gp_lambda
    ).to(device)
    estimator = GAE(gamma=cfg.onpolicy.gamma, lmbda=cfg.adv.lmbda, value_network=nets.critic)
    estimator.to(device)
    optimizer = torch.optim.Adam(loss.parameters(), lr=cfg.onpolicy.lr, fused=True)
    disc_optimizer = torch.optim.Adam(discriminator.parameters(), lr=cfg.disc_lr)
    scheduler = cfg.onpolicy.lr_schedule(optimizer, cfg.run.total_frames)
    state = nets.state(optimizer=optimizer, scheduler=scheduler, discriminator=discriminator,
                       disc_optimizer=disc_optimizer, expert=expert)  # fmt: skip
    collector = trainers.make_collector(
        cfg.run, env, nets.acting, cfg.onpolicy.frames_per_batch, workers=cfg.workers
    )
    passes = [1] * cfg.ppo.epochs if cfg.ppo.recompute_advantage else [cfg.ppo.epochs]
    seq_len = cfg.net.sequence_length  # --recurrent: minibatches of whole sequences

    # 4. the loop: collect a rollout, discriminator steps, relabel its rewards, PPO's update
    with trainers.Run.from_config(cfg, "GAIL", state, eval_env=eval_env, policy=nets.policy) as run:
        for batch in run.resume(collector):
            obs, action = expert.prepare(batch.get(keys.OBSERVATION), batch.get(keys.ACTION))
            for _ in range(cfg.disc_steps):  # pairs drawn with torch's global generator
                disc_out = disc_loss(expert.draw(obs, action, cfg.disc_batch_size))
                trainers.optimizer_step(disc_out[keys.LOSS], disc_optimizer)
            # the policy learns from the discriminator's reward, not the env's
            reward = gail_reward(discriminator, obs, action)
            batch.set((keys.NEXT, keys.REWARD), reward)
            for epochs in passes:
                estimator(batch)  # no gradients: the estimator is not differentiable
                with set_recurrent_mode(seq_len is not None):
                    for minibatch in minibatches(
                        batch, cfg.ppo.minibatch_size, epochs=epochs, in_keys=loss.in_keys,
                        seq_len=seq_len,
                    ):  # fmt: skip
                        out = loss(minibatch)
                        trainers.optimizer_step(
                            total_loss(out), optimizer, max_grad_norm=cfg.adv.max_grad_norm
                        )
                        run.record(out)
                        run.updates += 1
            metrics = {
                "disc_loss": disc_out[keys.LOSS], "gail_reward": reward.mean(),
                "disc_expert": disc_out[keys.DISCRIMINATOR_EXPERT],
                "disc_policy": disc_out[keys.DISCRIMINATOR_POLICY],
            }  # fmt: skip
            scheduler.step()
            nets.update_obs_norm(batch)  # after the update, which saw the collection's stats
            run.step(metrics)  # push weights, log (the env's returns), evaluate, checkpoint
        # 5. report: final evaluation, curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
