"""Soft actor-critic (Haarnoja et al. 2018, arXiv 1801.01290, 1812.05905) on MuJoCo; TQC
(Kuznetsov et al. 2020, arXiv 2005.04269): critics of return quantiles whose pooled target drops
the largest atoms (--algo tqc); CrossQ (Bhatt et al. 2024, arXiv 1902.05605): no target networks,
batch-renormalized networks, the critic run on (s, a) and (s', a') as one batch (--algo crossq);
REDQ (Chen et al. 2021, arXiv 2101.05982): an ensemble of N critics, a random subset of M in each
target, the actor on their mean, many gradient steps per env step (--algo redq); DroQ (Hiraoka et
al. 2022, arXiv 2110.02034): REDQ's loop with 2 critics of dropout and LayerNorm.

Defaults are Tianshou's MuJoCo SAC benchmark (examples/mujoco/mujoco_sac.py): lr 1e-3 for actor
and critics, automatic entropy tuning (target -|A|, alpha lr 3e-4, alpha starting at 1), tau
0.005, gamma 0.99, batch 256, 256x256 ReLU MLPs, 10k random steps, 1 env, 1 gradient step per env
step, a 1M buffer. The critics are one batched ensemble, and one Adam holds a group per part
(the same updates as one Adam each). TQC at sb3-contrib's settings (rl-baselines3-zoo's
hyperparams/tqc.yml) is the third line: 2 critics of 25 quantiles, 2 dropped per critic, lr 3e-4.
CrossQ at sb3-contrib's (the zoo's crossq.yml) is the fourth: 2048x2048 critics, the actor every
third step, Adam betas (0.5, 0.999) (for alpha too; sb3-contrib's alpha keeps 0.9), lr 1e-3
everywhere, 5k random steps, batch renorm warmed up over 100k batches. REDQ at Tianshou's MuJoCo
REDQ benchmark (examples/mujoco/mujoco_redq.py) is the fifth: 10 critics, 2 in each target, 20
critic steps per env step, the actor every 20th; DroQ at the paper's MuJoCo settings the sixth
(dropout 0.01).

    python recipes/sac.py --env-id HalfCheetah-v5 --total-frames 1000000
    python recipes/sac.py --env-id Pendulum-v1 --total-frames 20000 --init-random-frames 1000
    python recipes/sac.py --algo tqc --actor-lr 3e-4 --critic-lr 3e-4 --env-id Hopper-v5
    python recipes/sac.py --algo crossq --critic-hidden-sizes 2048 2048 --policy-delay 3 \
        --adam-beta1 0.5 --alpha-lr 1e-3 --init-random-frames 5000 --env-id Hopper-v5
    python recipes/sac.py --algo redq --num-critics 10 --utd-ratio 20 --policy-delay 20
    python recipes/sac.py --algo redq --utd-ratio 20 --policy-delay 20 --critic-dropout 0.01 \
        --critic-layer-norm
    python recipes/sac.py --residual --hidden-sizes 128 --critic-hidden-sizes 512 512

The last is SimBa's SAC (Lee et al. 2024, arXiv 2410.09754): a 128-wide actor of one residual
block, 512-wide critics of two. On a dict observation with image entries the actor and the
critics each have a CNN encoder; --augment shift shifts the sampled images (DrQ's random shift,
Kostrikov et al. 2020).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from tdrl import trainers
from tdrl.trainers import config

if TYPE_CHECKING:
    from tensordict import TensorDictBase


@trainers.configclass
class Config:
    compiled_steps: ClassVar[bool] = True  # --compile and --cudagraphs apply to its updates
    run: config.RunConfig = config.OFF_POLICY_RUN
    workers: config.WorkersConfig = config.WorkersConfig()
    replay: config.ReplayConfig = config.ReplayConfig()
    ac: config.ActorCriticConfig = config.ActorCriticConfig()
    entropy: config.EntropyConfig = config.EntropyConfig()
    goals: config.GoalConfig = config.GoalConfig()
    aug: config.AugmentConfig = config.AugmentConfig()
    algo: Literal["sac", "tqc", "crossq", "redq"] = "sac"
    """sac (a clipped double-Q target), tqc (quantile critics, a truncated pooled target),
    crossq (no target networks; batch-renormalized actor and critics) or redq (the target's
    minimum over a random subset of the critics, the actor on their mean; REDQ's own settings
    add --num-critics 10 --utd-ratio 20 --policy-delay 20)."""
    critic_hidden_sizes: tuple[int, ...] = ()
    """the critics' hidden widths (empty: --hidden-sizes)."""
    policy_delay: int = 1
    """critic steps per actor and alpha step."""
    adam_beta1: float = 0.9
    """Adam's beta1."""
    renorm_warmup: int = 100_000
    """crossq: learning batches of plain batch norm before the renorm clips apply."""
    residual: bool = False
    """SimBa's residual blocks (Lee et al. 2024) for actor and critics, one per hidden width
    (all equal); their norms are LayerNorms, batch renorm for crossq."""
    num_critics: int = 2
    """critics in the ensemble."""
    sub_sample_len: int = 2
    """redq: critics in each target's minimum (M)."""
    critic_dropout: float = 0.0
    """dropout rate after each hidden layer of the critics (DroQ: 0.01)."""
    critic_layer_norm: bool = False
    """LayerNorm after each hidden layer (and its dropout) of the critics (DroQ)."""
    num_quantiles: int = 25
    """tqc: return quantiles per critic."""
    top_quantiles_to_drop: int = 2
    """tqc: the largest pooled target atoms dropped per critic (the paper: 5 on Hopper, 0 on
    HalfCheetah, 2 elsewhere)."""
    update_order: Literal["joint", "critics_first"] = "joint"
    """joint: one backward of the summed losses and one optimizer step, the actor's loss on the
    critics before their step (TorchRL's losses); critics_first: the critics stepped, then the
    actor and alpha on the updated critics (SB3 and sb3-contrib)."""


def main(cfg: Config) -> dict[str, float]:
    """Train SAC, TQC, CrossQ or REDQ; returns the final deterministic evaluation and the
    counters."""
    # the library loads here, after the command line: --help answers without it
    from tensordict import TensorDict

    from tdrl import keys
    from tdrl.data import make_replay_buffer, transitions
    from tdrl.modules import q_ensemble, tanh_gaussian_actor
    from tdrl.objectives import CrossQLoss, REDQLoss, SACLoss, SoftUpdate, TQCLoss, total_loss

    if cfg.update_order == "critics_first" and cfg.algo == "redq":
        raise ValueError("--update-order critics_first takes --algo sac, tqc or crossq, not redq")
    if cfg.algo == "crossq" and (cfg.run.compile or cfg.run.cudagraphs):
        # batch renorm's warm-up is a step count in Python: a compiled step would recompile
        # at every count, a captured one keep the count it was captured at
        raise ValueError("--algo crossq does not take --compile or --cudagraphs")
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.make_envs(cfg.run, actions="continuous")
    device = cfg.run.torch_device

    # 2. networks: a tanh-Gaussian actor and the critics in one batched ensemble (tqc: each with
    #    num_quantiles outputs; crossq: batch renorm before every linear layer of both), reading
    #    a dict observation's entries concatenated (image entries: a CNN encoder in each)
    tqc = cfg.algo == "tqc"
    renorm = {"warmup_steps": cfg.renorm_warmup} if cfg.algo == "crossq" else None
    inputs = cfg.goals.inputs(env.observation_spec, images=True)
    actor = tanh_gaussian_actor(inputs.spec, env.action_spec, cfg.ac.hidden_sizes,
                                batch_renorm=renorm, residual=cfg.residual,
                                observation_key=inputs.key)  # fmt: skip
    critic = q_ensemble(
        inputs.spec, env.action_spec, cfg.critic_hidden_sizes or cfg.ac.hidden_sizes,
        cfg.num_critics, num_outputs=cfg.num_quantiles if tqc else 1, batch_renorm=renorm,
        residual=cfg.residual, dropout=cfg.critic_dropout, layer_norm=cfg.critic_layer_norm,
        observation_key=inputs.key,
    )  # fmt: skip
    actor, critic = inputs.attach(actor), inputs.attach(critic, own=True)

    # 3. loss, target update (none for crossq), optimizer (a group per part), buffer, collector
    entropy = dict(alpha_init=cfg.entropy.alpha_init, target_entropy=cfg.entropy.entropy_target())
    if tqc:
        loss = TQCLoss(actor, critic, top_quantiles_to_drop=cfg.top_quantiles_to_drop,
                       gamma=cfg.ac.gamma, **entropy).to(device)  # fmt: skip
    elif cfg.algo == "redq":
        loss = REDQLoss(actor, critic, num_qvalue_nets=cfg.num_critics, gamma=cfg.ac.gamma,
                        sub_sample_len=cfg.sub_sample_len, **entropy).to(device)  # fmt: skip
    else:
        algo = CrossQLoss if cfg.algo == "crossq" else SACLoss
        loss = algo(actor, critic, num_qvalue_nets=cfg.num_critics, gamma=cfg.ac.gamma,
                    **entropy).to(device)  # fmt: skip
    target = SoftUpdate(loss, tau=cfg.ac.tau) if loss.target_pairs() else None
    optimizer = trainers.adam(
        (actor.parameters(), cfg.ac.actor_lr),
        (critic.parameters(), cfg.ac.critic_lr),
        ([loss.log_alpha], cfg.entropy.alpha_lr),
        betas=(cfg.adam_beta1, 0.999),
    )
    # her: goals relabelled, then image entries shifted (--augment shift), then the network input
    buffer = make_replay_buffer(
        cfg.replay.buffer_size, generator=cfg.run.seed, device=device,
        transform=cfg.aug.sample_transform(env.observation_spec, then=inputs.transform),
        **cfg.goals.replay_kwargs(cfg.run.env_id),
    )  # fmt: skip
    policy = inputs.policy(actor)  # acts on the env's own observation
    collector = trainers.make_collector(
        cfg.run, env, policy, workers=cfg.workers, init_random_frames=cfg.replay.init_random_frames
    )

    # 4. the update steps: the whole loss every policy_delay-th (one step, or the critics' and
    #    then the actor's and alpha's: --update-order), the others the critics alone, compiled
    #    (--compile) and/or captured in a CUDA graph (--cudagraphs)
    def full_step(sample: TensorDictBase) -> TensorDictBase:
        out = loss(sample)
        trainers.optimizer_step(total_loss(out), optimizer)
        if target is not None:
            target.step()
        return out.detach()

    def critics_first_step(sample: TensorDictBase) -> TensorDictBase:
        alpha = loss.alpha  # the targets' and the actor's, read before any step (as SB3)
        loss_qvalue, td_error = loss.qvalue_loss(sample, alpha)
        trainers.optimizer_step(loss_qvalue, optimizer)
        loss_actor, log_prob = loss.actor_loss(sample, alpha)
        loss_alpha = loss.alpha_loss(log_prob, sample)
        trainers.optimizer_step(loss_actor + loss_alpha, optimizer)
        if target is not None:
            target.step()
        out = {keys.LOSS_ACTOR: loss_actor, keys.LOSS_QVALUE: loss_qvalue,
               loss.tensor_keys.priority: td_error, keys.LOSS_ALPHA: loss_alpha,
               keys.ALPHA: alpha, keys.ENTROPY: -log_prob.mean()}  # fmt: skip
        return TensorDict(out).detach()  # the entries the whole loss's forward returns

    def critic_step(sample: TensorDictBase) -> None:
        trainers.optimizer_step(loss.qvalue_loss(sample)[0], optimizer)
        if target is not None:
            target.step()

    step = critics_first_step if cfg.update_order == "critics_first" else full_step
    update = trainers.compiled_step(step, optimizer, **cfg.run.compile_options())
    critic_update = trainers.compiled_step(critic_step, optimizer, **cfg.run.compile_options())

    # 5. the loop: store each batch, then the gradient steps due at the update ratio
    state = {"loss": loss, "optimizer": optimizer, "buffer": buffer}
    title = {"crossq": "CrossQ"}.get(cfg.algo, cfg.algo.upper())
    title = "DroQ" if cfg.algo == "redq" and cfg.critic_dropout else title
    with trainers.Run.from_config(cfg, title, state, eval_env=eval_env, policy=policy) as run:
        for batch in run.resume(collector):
            buffer.extend(transitions(batch))
            for step in run.gradient_steps(cfg.replay.init_random_frames, cfg.replay.utd_ratio):
                sample = buffer.sample(cfg.replay.batch_size)
                if step % cfg.policy_delay == 0:
                    run.record(update(sample))  # each train row: the mean of its steps
                else:
                    critic_update(sample)
            run.step()  # push weights to workers, log, evaluate, checkpoint when due
        # 6. report: final evaluation, curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
