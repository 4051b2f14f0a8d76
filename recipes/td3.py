"""TD3 (Fujimoto et al. 2018, arXiv 1802.09477) on MuJoCo.

Defaults are Tianshou's MuJoCo TD3 benchmark (examples/mujoco/mujoco_td3.py): actor and critic lr
3e-4, tau 0.005, gamma 0.99, Gaussian exploration noise 0.1, target policy noise 0.2 clipped at
0.5 (half-range units), actor and targets updated every 2 critic steps, batch 256, 256x256 ReLU
MLPs, 25k uniform random steps, 1 env, 1 gradient step per env step, a 1M buffer. The twin
critics are one batched ensemble; one Adam holds both groups (the actor group has no gradient on
critic-only steps, so it is skipped). At a 100k-step budget the MuJoCo table runs rl-zoo3's
settings (10k random steps, lr 1e-3, 400x300 nets), as its SB3 cells do:

    python recipes/td3.py --env-id Hopper-v5 --total-frames 1000000
    python recipes/td3.py --env-id HalfCheetah-v5 --total-frames 100000 \
        --init-random-frames 10000 --actor-lr 1e-3 --critic-lr 1e-3 --hidden-sizes 400 300
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
    run: config.RunConfig = config.OFF_POLICY_RUN.replace(env_id="Hopper-v5")
    workers: config.WorkersConfig = config.WorkersConfig()
    replay: config.ReplayConfig = config.ReplayConfig(init_random_frames=25_000)
    ac: config.ActorCriticConfig = config.ActorCriticConfig(actor_lr=3e-4, critic_lr=3e-4)
    td3: config.TD3Config = config.TD3Config()
    goals: config.GoalConfig = config.GoalConfig()
    exploration_noise: float = 0.1
    """Gaussian exploration noise (half-range units)."""
    residual: bool = False
    """SimBa's residual LayerNorm blocks (Lee et al. 2024) for actor and critics, one per
    hidden width (all equal)."""


def main(cfg: Config) -> dict[str, float]:
    """Train TD3; returns the final deterministic evaluation and the counters."""
    # the library loads here, after the command line: --help answers without it
    from tensordict.nn import TensorDictSequential

    from tdrl.data import make_replay_buffer, transitions
    from tdrl.modules import AdditiveGaussianNoise, action_bounds, deterministic_actor, q_ensemble
    from tdrl.objectives import SoftUpdate, TD3Loss, total_loss

    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.make_envs(cfg.run, actions="continuous")
    device = cfg.run.torch_device
    low, high = action_bounds(env.action_spec)

    # 2. networks: deterministic actor (Gaussian noise on top acts only while collecting), twin
    #    critics in one batched ensemble
    # a dict observation: vector entries concatenated, image entries through a CNN in each network
    inputs = cfg.goals.inputs(env.observation_spec, images=True)
    actor = deterministic_actor(inputs.spec, env.action_spec, cfg.ac.hidden_sizes,
                                residual=cfg.residual, observation_key=inputs.key)  # fmt: skip
    actor = inputs.attach(actor)
    noise = AdditiveGaussianNoise(
        len(low), sigma_init=cfg.exploration_noise, action_low=low, action_high=high
    )
    greedy = inputs.policy(actor)  # acts on the env's own observation, deterministic
    policy = TensorDictSequential(greedy, noise)
    critic = q_ensemble(inputs.spec, env.action_spec, cfg.ac.hidden_sizes, residual=cfg.residual,
                        observation_key=inputs.key)  # fmt: skip
    critic = inputs.attach(critic, own=True)

    # 3. loss, target update, optimizer (a group per part), buffer, collector acting with noise
    loss = TD3Loss(
        actor, critic, policy_noise=cfg.td3.policy_noise, noise_clip=cfg.td3.noise_clip,
        gamma=cfg.ac.gamma,
    ).to(device)  # fmt: skip
    policy.to(device)
    target = SoftUpdate(loss, tau=cfg.ac.tau)
    optimizer = trainers.adam(
        (actor.parameters(), cfg.ac.actor_lr), (critic.parameters(), cfg.ac.critic_lr)
    )
    buffer = make_replay_buffer(  # her: goals relabelled, then the network input (transform)
        cfg.replay.buffer_size, generator=cfg.run.seed, device=device,
        transform=inputs.transform, **cfg.goals.replay_kwargs(cfg.run.env_id),
    )  # fmt: skip
    collector = trainers.make_collector(
        cfg.run, env, policy, workers=cfg.workers, init_random_frames=cfg.replay.init_random_frames
    )

    # 4. the update steps: critics, actor and targets (every policy_delay-th), or the critics
    #    alone (the actor's forward skipped), compiled (--compile) and/or captured (--cudagraphs)
    def full_step(sample: TensorDictBase) -> TensorDictBase:
        out = loss(sample)
        trainers.optimizer_step(total_loss(out), optimizer)
        target.step()
        return out.detach()

    def critic_step(sample: TensorDictBase) -> None:
        trainers.optimizer_step(loss.qvalue_loss(sample)[0], optimizer)

    update = trainers.compiled_step(full_step, optimizer, **cfg.run.compile_options())
    critic_update = trainers.compiled_step(critic_step, optimizer, **cfg.run.compile_options())

    # 5. the loop: store each batch, then the gradient steps due at the update ratio
    state = {"loss": loss, "optimizer": optimizer, "noise": noise, "buffer": buffer}
    with trainers.Run.from_config(cfg, "TD3", state, eval_env=eval_env, policy=greedy) as run:
        for batch in run.resume(collector):
            buffer.extend(transitions(batch))
            for step in run.gradient_steps(cfg.replay.init_random_frames, cfg.replay.utd_ratio):
                sample = buffer.sample(cfg.replay.batch_size)
                if step % cfg.td3.policy_delay == 0:
                    run.record(update(sample))
                else:
                    critic_update(sample)
            run.step()  # log (critic-only batches: the last metrics), evaluate, checkpoint
        # 6. report: final evaluation, curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
