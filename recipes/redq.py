"""REDQ (Chen et al. 2021, arXiv 2101.05982): SAC with an ensemble of N critics, a random pair
in each target, and many gradient steps per env step.

Defaults are Tianshou's MuJoCo REDQ benchmark (examples/mujoco/mujoco_redq.py): 10 critics, a
subset of 2 in the target, 20 critic steps per env step, the actor updated once per 20 (its
``actor_delay``), actor and critic lr 1e-3, automatic entropy tuning (alpha lr 3e-4), tau 0.005,
gamma 0.99, batch 256, 256x256 ReLU MLPs, 10k uniform random steps, 1 env, a 1M buffer. All N
critics are one batched ensemble call, and the actor loss uses the mean over the N critics (the
paper's Alg. 1 line 13; Tianshou's "min" target mode only affects the target).

DroQ (Hiraoka et al. 2022, arXiv 2110.02034) is this loop with 2 critics, each hidden layer
followed by dropout (rate 0.01, the paper's MuJoCo setting) and LayerNorm: the second command.

    python recipes/redq.py --env-id HalfCheetah-v5 --total-frames 300000
    python recipes/redq.py --num-qvalue-nets 2 --critic-dropout 0.01 --critic-layer-norm
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
    run: config.RunConfig = config.OFF_POLICY_RUN
    workers: config.WorkersConfig = config.WorkersConfig()
    replay: config.ReplayConfig = config.ReplayConfig(utd_ratio=20.0)  # the paper's G
    ac: config.ActorCriticConfig = config.ActorCriticConfig()
    entropy: config.EntropyConfig = config.EntropyConfig()
    actor_delay: int = 20
    """critic steps per actor and alpha step."""
    num_qvalue_nets: int = 10
    """ensemble size N."""
    sub_sample_len: int = 2
    """critics in each target's minimum (M)."""
    critic_dropout: float = 0.0
    """dropout rate after each hidden layer of the critics (DroQ: 0.01)."""
    critic_layer_norm: bool = False
    """LayerNorm after each hidden layer (and its dropout) of the critics (DroQ)."""


def main(cfg: Config) -> dict[str, float]:
    """Train REDQ; returns the final deterministic evaluation and the counters."""
    # the library loads here, after the command line: --help answers without it
    from tdrl.data import ReplayBuffer, transitions
    from tdrl.modules import q_ensemble, tanh_gaussian_actor
    from tdrl.objectives import REDQLoss, SoftUpdate, total_loss

    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.make_envs(cfg.run, actions="continuous")
    device = cfg.run.torch_device

    # 2. networks: a tanh-Gaussian actor and all N critics in one batched ensemble (DroQ: with
    #    dropout and LayerNorm)
    actor = tanh_gaussian_actor(env.observation_spec, env.action_spec, cfg.ac.hidden_sizes)
    critic = q_ensemble(
        env.observation_spec, env.action_spec, cfg.ac.hidden_sizes, cfg.num_qvalue_nets,
        dropout=cfg.critic_dropout, layer_norm=cfg.critic_layer_norm,
    )  # fmt: skip

    # 3. loss, target update, optimizer (a group per part), buffer, collector
    loss = REDQLoss(
        actor, critic, num_qvalue_nets=cfg.num_qvalue_nets, sub_sample_len=cfg.sub_sample_len,
        alpha_init=cfg.entropy.alpha_init, target_entropy=cfg.entropy.entropy_target(),
        gamma=cfg.ac.gamma,
    ).to(device)  # fmt: skip
    target = SoftUpdate(loss, tau=cfg.ac.tau)
    optimizer = trainers.adam(
        (actor.parameters(), cfg.ac.actor_lr),
        (critic.parameters(), cfg.ac.critic_lr),
        ([loss.log_alpha], cfg.entropy.alpha_lr),
    )
    buffer = ReplayBuffer(cfg.replay.buffer_size, generator=cfg.run.seed, device=device)
    collector = trainers.make_collector(
        cfg.run, env, actor, workers=cfg.workers, init_random_frames=cfg.replay.init_random_frames
    )

    # 4. the update steps, each with its target update: the whole loss (actor and alpha too)
    #    every actor_delay-th, the critics alone (the actor's forward skipped) between them;
    #    compiled (--compile) and/or captured in a CUDA graph (--cudagraphs)
    def full_step(sample: TensorDictBase) -> TensorDictBase:
        out = loss(sample)
        trainers.optimizer_step(total_loss(out), optimizer)
        target.step()
        return out.detach()

    def critic_step(sample: TensorDictBase) -> None:
        trainers.optimizer_step(loss.qvalue_loss(sample)[0], optimizer)
        target.step()

    update = trainers.compiled_step(full_step, optimizer, **cfg.run.compile_options())
    critic_update = trainers.compiled_step(critic_step, optimizer, **cfg.run.compile_options())

    # 5. the loop: store each batch, then G critic steps per env step
    state = {"loss": loss, "optimizer": optimizer, "buffer": buffer}
    title = "DroQ" if cfg.critic_dropout else "REDQ"
    with trainers.Run.from_config(cfg, title, state, eval_env=eval_env, policy=actor) as run:
        for batch in run.resume(collector):
            buffer.extend(transitions(batch))
            for step in run.gradient_steps(cfg.replay.init_random_frames, cfg.replay.utd_ratio):
                sample = buffer.sample(cfg.replay.batch_size)
                if step % cfg.actor_delay == 0:
                    run.record(update(sample))
                else:
                    critic_update(sample)
            run.step()  # log (critic-only batches: the last metrics), evaluate, checkpoint
        # 6. report: final evaluation, curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
