"""TD3 (Fujimoto et al. 2018, arXiv 1802.09477) on MuJoCo; DDPG (Lillicrap et al. 2015, arXiv
1509.02971) with --algo ddpg: one critic, the actor every step, no target smoothing. SB3 builds its
DDPG the same way, as TD3 with those three parts turned off.

Defaults are Tianshou's MuJoCo TD3 benchmark (examples/mujoco/mujoco_td3.py): actor and critic lr
3e-4, tau 0.005, gamma 0.99, Gaussian exploration noise 0.1, target policy noise 0.2 clipped at
0.5 (half-range units), actor and targets updated every 2 critic steps, batch 256, 256x256 ReLU
MLPs, 25k uniform random steps, 1 env, 1 gradient step per env step, a 1M buffer. The twin
critics are one batched ensemble; one Adam holds both groups (the actor group has no gradient on
critic-only steps, so it is skipped). Tianshou's DDPG benchmark (examples/mujoco/mujoco_ddpg.py)
is the same but for lr 1e-3 (the third line); ``--noise ou`` uses DDPG's paper's
Ornstein-Uhlenbeck noise instead of Gaussian. At a 100k-step budget the MuJoCo table runs
rl-zoo3's settings (10k random steps, lr 1e-3, 400x300 nets), as its SB3 cells do (the second
line; with --algo ddpg for DDPG's row):

    python recipes/td3.py --env-id Hopper-v5 --total-frames 1000000
    python recipes/td3.py --env-id HalfCheetah-v5 --total-frames 100000 \
        --init-random-frames 10000 --actor-lr 1e-3 --critic-lr 1e-3 --hidden-sizes 400 300
    python recipes/td3.py --algo ddpg --env-id HalfCheetah-v5 --actor-lr 1e-3 --critic-lr 1e-3
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from tdrl import keys, trainers
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
    algo: Literal["td3", "ddpg"] = "td3"
    """td3 (twin critics, delayed actor, smoothed target) or ddpg (one critic, none of those:
    --policy-delay, --policy-noise and --noise-clip are ignored)."""
    noise: Literal["gaussian", "ou"] = "gaussian"
    """exploration noise: Gaussian or Ornstein-Uhlenbeck (restarted at every episode start)."""
    exploration_noise: float = 0.1
    """scale of the exploration noise (half-range units; OU: its sigma)."""
    residual: bool = False
    """SimBa's residual LayerNorm blocks (Lee et al. 2024) for actor and critics, one per
    hidden width (all equal)."""


def main(cfg: Config) -> dict[str, float]:
    """Train TD3 or DDPG; returns the final deterministic evaluation and the counters."""
    # the library loads here, after the command line: --help answers without it
    from tensordict.nn import TensorDictSequential
    from torch import nn

    from tdrl.data import make_replay_buffer, transitions
    from tdrl.modules import (
        AdditiveGaussianNoise,
        OrnsteinUhlenbeckNoise,
        StateActionCritic,
        action_bounds,
        deterministic_actor,
        flat_dims,
        mlp,
        q_ensemble,
        torch_default_init_,
    )
    from tdrl.objectives import DDPGLoss, SoftUpdate, TD3Loss, total_loss

    ddpg = cfg.algo == "ddpg"
    if ddpg and cfg.residual:
        raise ValueError("--residual builds TD3's residual critics; --algo ddpg has one MLP critic")
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.make_envs(cfg.run, actions="continuous")
    device = cfg.run.torch_device
    low, high = action_bounds(env.action_spec)

    # 2. networks: deterministic actor (the noise on top acts only while collecting); twin
    #    critics in one batched ensemble (ddpg: one critic). A dict observation: vector entries
    #    concatenated, image entries through a CNN in each network
    inputs = cfg.goals.inputs(env.observation_spec, images=True)
    actor = deterministic_actor(inputs.spec, env.action_spec, cfg.ac.hidden_sizes,
                                residual=cfg.residual, observation_key=inputs.key)  # fmt: skip
    actor = inputs.attach(actor)
    bounds = {"action_low": low, "action_high": high}
    if cfg.noise == "ou":
        noise = OrnsteinUhlenbeckNoise(len(low), sigma=cfg.exploration_noise, **bounds)
    else:
        noise = AdditiveGaussianNoise(len(low), sigma_init=cfg.exploration_noise, **bounds)
    greedy = inputs.policy(actor)  # acts on the env's own observation, deterministic
    policy = TensorDictSequential(greedy, noise)
    if ddpg:
        obs_dim, action_dim = flat_dims(inputs.spec, env.action_spec)
        critic_net = mlp(obs_dim + action_dim, 1, cfg.ac.hidden_sizes, activation=nn.ReLU)
        critic = StateActionCritic(
            torch_default_init_(critic_net), in_keys=(inputs.key, keys.ACTION)
        )
    else:
        critic = q_ensemble(inputs.spec, env.action_spec, cfg.ac.hidden_sizes,
                            residual=cfg.residual, observation_key=inputs.key)  # fmt: skip
    critic = inputs.attach(critic, own=True)

    # 3. loss, target update, optimizer (a group per part), buffer, collector acting with noise
    if ddpg:
        loss = DDPGLoss(actor, critic, gamma=cfg.ac.gamma).to(device)
    else:
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

    # 4. the update steps: critics, actor and targets (every policy_delay-th; ddpg: every step),
    #    or the critics alone (the actor's forward skipped), compiled (--compile) and/or
    #    captured in a CUDA graph (--cudagraphs)
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
    delay = 1 if ddpg else cfg.td3.policy_delay
    title = cfg.algo.upper()
    with trainers.Run.from_config(cfg, title, state, eval_env=eval_env, policy=greedy) as run:
        for batch in run.resume(collector):
            buffer.extend(transitions(batch))
            for step in run.gradient_steps(cfg.replay.init_random_frames, cfg.replay.utd_ratio):
                sample = buffer.sample(cfg.replay.batch_size)
                if step % delay == 0:
                    run.record(update(sample))
                else:
                    critic_update(sample)
            run.step()  # log (critic-only batches: the last metrics), evaluate, checkpoint
        # 6. report: final evaluation, curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
