"""Soft actor-critic for discrete actions (Christodoulou 2019, arXiv 1910.07207).

Defaults are Tianshou's CartPole discrete-SAC test (test/discrete/test_discrete_sac.py): actor lr
1e-4, critic lr 1e-3, a fixed alpha of 0.05 (``--auto-alpha`` tunes it with lr 3e-4 toward
``--target-entropy``, by default 0.98 log n), gamma 0.95, tau 0.005, 3-step returns, batch 64,
64x64 ReLU MLPs, 10 envs, 10 env steps per batch, 0.1 gradient steps per env step, a 20k buffer.
The twin critics are one batched ensemble, and 1k uniform random steps fill the buffer first.

    python recipes/discrete_sac.py --env-id CartPole-v1 --total-frames 50000
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
    run: config.RunConfig = config.configure(config.Q_LEARNING_RUN, num_envs=10)
    workers: config.WorkersConfig = config.WorkersConfig()
    replay: config.ReplayConfig = config.ReplayConfig(
        buffer_size=20_000, batch_size=64, init_random_frames=1_000, utd_ratio=0.1
    )
    ac: config.ActorCriticConfig = config.ActorCriticConfig(
        hidden_sizes=(64, 64), actor_lr=1e-4, gamma=0.95
    )
    entropy: config.EntropyConfig = config.EntropyConfig(alpha_init=0.05)
    n_steps: int = 3
    """n-step returns from the buffer."""
    auto_alpha: bool = False
    """tune alpha toward --target-entropy ("auto": 0.98 log(actions)); else alpha_init stays."""


def main(cfg: Config) -> dict[str, float]:
    """Train discrete SAC; returns the final deterministic evaluation and the counters."""
    # the library loads here, after the command line: --help answers without it
    from torch import nn

    from tdrl.data import ReplayBuffer, transitions
    from tdrl.keys import ACTION_VALUE, OBSERVATION
    from tdrl.modules import (
        CategoricalActor,
        EnsembleCritic,
        EnsembleMLP,
        flat_dims,
        mlp,
        torch_default_init_,
    )
    from tdrl.objectives import DiscreteSACLoss, SoftUpdate, total_loss

    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.make_envs(cfg.run, actions="discrete")
    device = cfg.run.torch_device
    obs_dim, num_actions = flat_dims(env.observation_spec, env.action_spec)

    # 2. networks: a categorical actor and twin critics Q_e(s, .) in one batched ensemble
    actor_net = mlp(obs_dim, num_actions, cfg.ac.hidden_sizes, activation=nn.ReLU)
    actor = CategoricalActor(torch_default_init_(actor_net))
    critic = EnsembleCritic(
        EnsembleMLP(obs_dim, num_actions, cfg.ac.hidden_sizes, num_members=2),
        in_keys=(OBSERVATION,),
        out_key=ACTION_VALUE,
    )

    # 3. loss, target update, optimizer (a group per part), n-step buffer, collector
    loss = DiscreteSACLoss(
        actor, critic, num_actions=num_actions, alpha_init=cfg.entropy.alpha_init,
        fixed_alpha=not cfg.auto_alpha, target_entropy=cfg.entropy.entropy_target(),
        gamma=cfg.ac.gamma,
    ).to(device)  # fmt: skip
    target = SoftUpdate(loss, tau=cfg.ac.tau)
    groups = [(actor.parameters(), cfg.ac.actor_lr), (critic.parameters(), cfg.ac.critic_lr)]
    if cfg.auto_alpha:  # a fixed alpha's term is constant
        groups.append(([loss.log_alpha], cfg.entropy.alpha_lr))
    optimizer = trainers.adam(*groups)
    buffer = ReplayBuffer(
        cfg.replay.buffer_size, n_steps=cfg.n_steps, gamma=cfg.ac.gamma,
        generator=cfg.run.seed, device=device,
    )  # fmt: skip
    collector = trainers.make_collector(
        cfg.run, env, actor, workers=cfg.workers, init_random_frames=cfg.replay.init_random_frames
    )

    # 4. the update step: actor, critics (and alpha), then the targets, compiled (--compile)
    #    and/or captured in a CUDA graph (--cudagraphs)
    def learn(sample: TensorDictBase) -> TensorDictBase:
        out = loss(sample)
        trainers.optimizer_step(total_loss(out), optimizer)
        target.step()
        return out.detach()

    update = trainers.compiled_step(learn, optimizer, **cfg.run.compile_options())

    # 5. the loop: store each batch, then the gradient steps due at the update ratio
    state = {"loss": loss, "optimizer": optimizer, "buffer": buffer}
    with trainers.Run.from_config(
        cfg, "Discrete SAC", state, eval_env=eval_env, policy=actor
    ) as run:
        for batch in run.resume(collector):
            buffer.extend(transitions(batch))
            for _ in run.gradient_steps(cfg.replay.init_random_frames, cfg.replay.utd_ratio):
                run.record(update(buffer.sample(cfg.replay.batch_size)))
            run.step()  # push weights to workers, log, evaluate, checkpoint when due
        # 6. report: final evaluation, curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
