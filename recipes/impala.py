"""IMPALA (Espeholt et al. 2018, arXiv 1802.01561): actors act with stale weights on Ray
workers, the learner corrects with V-trace.

Each of ``num_workers`` Ray actors runs ``num_envs`` envs and sends back ``frames_per_batch``-step
rollouts (num_envs x the unroll length) as soon as they are done (``RayCollector(sync=False)``);
the learner takes them in the order they arrive, takes one RMSprop step on the whole rollout with
the A2C loss on V-trace targets and advantages (``VTrace``: the clipped importance ratio of the
current policy to the behaviour policy's stored ``"action_log_prob"``), and sends its new weights
(one ``ray.put``). A batch acted by weights more than ``max_policy_lag`` updates old is dropped
(counted). ``"rho_deviation"`` in the logs is the mean |pi/mu - 1| of a batch (0 without
staleness) and ``"policy_lag"`` the number of updates between the weights that acted and the
learner's. --scale-rewards does not apply: the batches come from the actors in arrival order, so
no per-env return can be carried across them.

Defaults follow the paper's single-learner setting where it carries over (RMSprop with alpha
0.99; entropy 0.01; baseline 0.5; gradient norm 40; rho_bar = c_bar = 1; unroll 20; 4 envs a
worker), with a larger constant learning rate for CartPole (2e-3; the paper's 6e-4 solved it
more slowly), eps 1e-5, observation normalization and 64x64 tanh MLPs.

    python recipes/impala.py                                  # CartPole-v1, 2 local Ray workers
    python recipes/impala.py --env-id Hopper-v5 --total-frames 300000 --num-workers 2
    python recipes/impala.py --ray-address auto               # on a cluster (`ray start --head`)
    python recipes/impala.py --collector local                # one process, no staleness
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from tdrl import keys, trainers
from tdrl.trainers import config

if TYPE_CHECKING:
    from tensordict import TensorDictBase


@trainers.configclass
class Config:
    compiled_steps: ClassVar[bool] = True  # --compile and --cudagraphs apply to its updates
    run: config.RunConfig = config.RunConfig(
        env_id="CartPole-v1", num_envs=4, checkpoint_every=100_000
    )
    workers: config.WorkersConfig = config.WorkersConfig(collector="ray")
    onpolicy: config.OnPolicyConfig = config.OnPolicyConfig(
        frames_per_batch=80, lr=2e-3, lr_decay=False, normalize_advantage=False
    )
    net: config.NetworkConfig = config.NetworkConfig()
    adv: config.AdvantageConfig = config.AdvantageConfig(entropy_coeff=0.01, max_grad_norm=40.0)
    max_policy_lag: int = 4
    """drop a rollout acted by weights more than this many updates old."""
    rho_thresh: float = 1.0
    """V-trace rho_bar (clip of the importance ratio in the targets and the advantage)."""
    c_thresh: float = 1.0
    """V-trace c_bar (clip of the trace-cutting ratio)."""


def main(cfg: Config) -> dict[str, float]:
    """Train IMPALA as configured; returns the last evaluation and the last update's metrics."""
    # the library loads here, after the command line: --help answers without it
    import torch
    from torchrl.modules import set_recurrent_mode

    from tdrl.collectors import WorkerCollector
    from tdrl.data import minibatches
    from tdrl.estimators import VTrace
    from tdrl.objectives import A2CLoss, total_loss

    if cfg.onpolicy.scale_rewards:  # no per-env return across batches in arrival order
        raise ValueError("--scale-rewards does not apply to IMPALA")
    cfg.net.refuse_captured_sequences("impala.py", cudagraphs=cfg.run.cudagraphs)
    # 1. envs: seeds and threads, the training envs (with Ray, the workers make their own) and a
    #    separate evaluation env
    env, eval_env = trainers.make_envs(cfg.run)
    device = cfg.run.torch_device

    # 2. networks: actor and critic, observation normalization inside both
    nets = cfg.net.build(env.observation_spec, env.action_spec)

    # 3. loss on V-trace targets; the estimator scores the taken actions with the current actor
    loss = A2CLoss(
        nets.actor, nets.critic, entropy_coeff=cfg.adv.entropy_coeff,
        critic_coeff=cfg.adv.critic_coeff, normalize_advantage=cfg.onpolicy.normalize_advantage,
    ).to(device)  # fmt: skip
    estimator = VTrace(
        gamma=cfg.onpolicy.gamma, actor_network=nets.actor, value_network=nets.critic,
        rho_thresh=cfg.rho_thresh, c_thresh=cfg.c_thresh,
    ).to(device)  # fmt: skip
    # first finished rollout first (sync=False): the workers act with stale weights
    collector = trainers.make_collector(
        cfg.run, env, nets.acting, cfg.onpolicy.frames_per_batch, workers=cfg.workers,
        sync=False, max_policy_lag=cfg.max_policy_lag,
    )  # fmt: skip
    optimizer = torch.optim.RMSprop(
        loss.parameters(), lr=cfg.onpolicy.lr, alpha=0.99, eps=1e-5, foreach=True
    )
    scheduler = cfg.onpolicy.lr_schedule(optimizer, cfg.run.total_frames)
    state = nets.state(optimizer=optimizer, scheduler=scheduler)
    seq_len = cfg.net.sequence_length  # --recurrent: the rollout as whole sequences

    # 4. the V-trace update on a whole rollout, compiled (--compile) and/or captured in a CUDA
    #    graph (--cudagraphs)
    def learn(minibatch: TensorDictBase) -> TensorDictBase:
        out = loss(minibatch)
        trainers.optimizer_step(total_loss(out), optimizer, max_grad_norm=cfg.adv.max_grad_norm)
        return out.detach()

    update = trainers.compiled_step(learn, optimizer, **cfg.run.compile_options())

    # 5. the loop: the first finished rollout, its V-trace update, the new weights out
    with trainers.Run.from_config(
        cfg, "IMPALA", state, eval_env=eval_env, policy=nets.policy
    ) as run:
        for batch in run.resume(collector):
            with torch.no_grad():  # how far the learner's policy is from the one that acted
                log_pi = nets.actor.get_dist(batch).log_prob(batch.get(keys.ACTION))
                log_mu = batch.get(keys.ACTION_LOG_PROB)
                deviation = (log_pi - log_mu.reshape(log_pi.shape)).exp().sub(1).abs().mean()
                estimator(batch)
            with set_recurrent_mode(seq_len is not None):
                for minibatch in minibatches(batch, None, in_keys=loss.in_keys, seq_len=seq_len):
                    run.record(update(minibatch))
                    run.updates += 1
            scheduler.step()
            metrics = {"rho_deviation": float(deviation)}
            if isinstance(collector, WorkerCollector):  # updates between acting and learning
                acted = int(batch.get(keys.COLLECTOR_POLICY_VERSION)[0, 0])
                metrics["policy_lag"] = float(collector.version - acted)
                metrics["dropped_batches"] = float(collector.dropped_batches)
            nets.update_obs_norm(batch)  # after the update, which saw the collection's stats
            run.step(metrics)  # push weights to workers, log, evaluate, checkpoint when due
        # 6. report: final evaluation, curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
