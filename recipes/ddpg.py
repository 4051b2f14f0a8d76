"""DDPG (Lillicrap et al. 2015, arXiv 1509.02971) on MuJoCo.

Defaults are Tianshou's MuJoCo DDPG benchmark (examples/mujoco/mujoco_ddpg.py): actor and critic
lr 1e-3, tau 0.005, gamma 0.99, Gaussian exploration noise 0.1 (half-range units), batch 256,
256x256 ReLU MLPs, 25k uniform random steps, 1 env, 1 gradient step per env step, a 1M buffer.
``--noise ou`` uses the paper's Ornstein-Uhlenbeck noise instead. One Adam holds actor and critic
with their own learning rates. At a 100k-step budget the MuJoCo table runs rl-zoo3's settings
(10k random steps, 400x300 nets), as its SB3 cells do:

    python recipes/ddpg.py --env-id HalfCheetah-v5 --total-frames 1000000
    python recipes/ddpg.py --env-id HalfCheetah-v5 --total-frames 100000 \
        --init-random-frames 10000 --hidden-sizes 400 300
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
    run: config.RunConfig = config.OFF_POLICY_RUN
    workers: config.WorkersConfig = config.WorkersConfig()
    replay: config.ReplayConfig = config.ReplayConfig(init_random_frames=25_000)
    ac: config.ActorCriticConfig = config.ActorCriticConfig()
    goals: config.GoalConfig = config.GoalConfig()
    noise: Literal["gaussian", "ou"] = "gaussian"
    """exploration noise: Gaussian or Ornstein-Uhlenbeck (restarted at every episode start)."""
    exploration_noise: float = 0.1
    """scale of the exploration noise (half-range units; OU: its sigma)."""


def main(cfg: Config) -> dict[str, float]:
    """Train DDPG; returns the final deterministic evaluation and the counters."""
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
        torch_default_init_,
    )
    from tdrl.objectives import DDPGLoss, SoftUpdate, total_loss

    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.make_envs(cfg.run, actions="continuous")
    device = cfg.run.torch_device
    # a dict observation: vector entries concatenated, image entries through a CNN in each network
    inputs = cfg.goals.inputs(env.observation_spec, images=True)
    obs_dim, action_dim = flat_dims(inputs.spec, env.action_spec)
    low, high = action_bounds(env.action_spec)

    # 2. networks: deterministic actor (the noise on top acts only while collecting), a critic
    actor = deterministic_actor(inputs.spec, env.action_spec, cfg.ac.hidden_sizes,
                                observation_key=inputs.key)  # fmt: skip
    actor = inputs.attach(actor)
    bounds = {"action_low": low, "action_high": high}
    if cfg.noise == "ou":
        noise = OrnsteinUhlenbeckNoise(action_dim, sigma=cfg.exploration_noise, **bounds)
    else:
        noise = AdditiveGaussianNoise(action_dim, sigma_init=cfg.exploration_noise, **bounds)
    greedy = inputs.policy(actor)  # acts on the env's own observation, deterministic
    policy = TensorDictSequential(greedy, noise)
    critic_net = mlp(obs_dim + action_dim, 1, cfg.ac.hidden_sizes, activation=nn.ReLU)
    critic = StateActionCritic(torch_default_init_(critic_net), in_keys=(inputs.key, keys.ACTION))
    critic = inputs.attach(critic, own=True)

    # 3. loss, target update, optimizer (a group per part), buffer, collector acting with noise
    loss = DDPGLoss(actor, critic, gamma=cfg.ac.gamma).to(device)
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

    # 4. the update step: actor and critic, then the targets, compiled (--compile) and/or
    #    captured in a CUDA graph (--cudagraphs)
    def learn(sample: TensorDictBase) -> TensorDictBase:
        out = loss(sample)
        trainers.optimizer_step(total_loss(out), optimizer)
        target.step()
        return out.detach()

    update = trainers.compiled_step(learn, optimizer, **cfg.run.compile_options())

    # 5. the loop: store each batch, then the gradient steps due at the update ratio
    state = {"loss": loss, "optimizer": optimizer, "noise": noise, "buffer": buffer}
    with trainers.Run.from_config(cfg, "DDPG", state, eval_env=eval_env, policy=greedy) as run:
        for batch in run.resume(collector):
            buffer.extend(transitions(batch))
            for _ in run.gradient_steps(cfg.replay.init_random_frames, cfg.replay.utd_ratio):
                sample = buffer.sample(cfg.replay.batch_size)
                run.record(update(sample))  # each train row: the mean of its steps
            run.step()  # push weights to workers, log, evaluate, checkpoint when due
        # 6. report: final evaluation, curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
