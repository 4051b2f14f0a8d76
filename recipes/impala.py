"""IMPALA (Espeholt et al. 2018, arXiv 1802.01561): actors act with stale weights on Ray
workers, the learner corrects with V-trace.

python recipes/impala.py                                  # CartPole-v1, 2 local Ray workers
python recipes/impala.py --env-id Hopper-v5 --total-frames 300000 --num-workers 2
python recipes/impala.py --ray-address auto               # on a cluster (`ray start --head`)
python recipes/impala.py --collector local                # one process, no staleness

Each of ``num_workers`` Ray actors runs ``num_envs`` envs and sends back ``frames_per_batch``-step
rollouts as soon as they are done (``RayCollector(sync=False)``); the learner takes them in the
order they arrive, takes one RMSprop step on the whole rollout with the A2C loss on V-trace
targets and advantages (``VTrace``: the clipped importance ratio of the current policy to the
behaviour policy's stored ``"action_log_prob"``), and sends its new weights (one ``ray.put``).
A batch acted by weights more than ``max_policy_lag`` updates old is dropped (counted).
``"rho_deviation"`` in the logs is the mean |pi/mu - 1| of a batch (0 without staleness) and
``"policy_lag"`` the number of updates between the weights that acted and the learner's.

Defaults follow the paper's single-learner setting where it carries over (RMSprop with alpha
0.99; entropy 0.01; baseline 0.5; gradient norm 40; rho_bar = c_bar = 1; unroll 20), with a
larger learning rate for CartPole (2e-3, see ``lr``), eps 1e-5, observation normalization and
64x64 tanh MLPs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDictBase

from tdrl import keys, trainers
from tdrl.collectors import WorkerCollector
from tdrl.estimators import VTrace
from tdrl.objectives import A2CLoss


@dataclass(frozen=True)
class Config(trainers.AdvantageConfig):
    """Fields beyond tdrl.trainers.AdvantageConfig's (--help lists all, with defaults)."""

    env_id: str = "CartPole-v1"
    num_envs: int = 4
    """envs per worker."""
    frames_per_batch: int = 80
    """steps per rollout of one worker (num_envs x the unroll length)."""
    lr: float = 2e-3
    """RMSprop learning rate (6e-4 in the paper; 2e-3 solved CartPole-v1 within 40k steps on
    tuning seeds 100-102, 6e-4 took 160k on seed 100)."""
    lr_decay: bool = False
    entropy_coeff: float = 0.01
    normalize_advantage: bool = False
    max_grad_norm: float = 40.0
    checkpoint_every: int = 100_000
    collector: Literal["local", "ray", "process"] = "ray"
    """ray: rollouts from num_workers Ray actors, first done first used; process: the same on
    local subprocesses; local: tdrl's Collector (no staleness)."""
    max_policy_lag: int = 4
    """drop a rollout acted by weights more than this many updates old."""
    rho_thresh: float = 1.0
    """V-trace rho_bar (clip of the importance ratio in the targets and the advantage)."""
    c_thresh: float = 1.0
    """V-trace c_bar (clip of the trace-cutting ratio)."""


def main(cfg: Config) -> dict[str, float]:
    """Train IMPALA as configured; returns the last evaluation and the last update's metrics."""
    # 1-2. envs and networks (with Ray, the workers make their own envs)
    parts = trainers.on_policy_setup(cfg)
    # 3. loss on V-trace targets; the estimator scores the taken actions with the current actor
    loss = A2CLoss(parts.actor, parts.critic, **cfg.loss_terms)
    estimator = VTrace(
        gamma=cfg.gamma, actor_network=parts.actor, value_network=parts.critic,
        rho_thresh=cfg.rho_thresh, c_thresh=cfg.c_thresh,
    )  # fmt: skip
    trainers.to_device(cfg, loss, estimator)  # before the collector: it acts where the actor is
    # first finished rollout first (sync=False): the workers act with stale weights
    collector = trainers.make_collector(
        cfg, parts.env, parts.acting, cfg.frames_per_batch, sync=False,
        max_policy_lag=cfg.max_policy_lag,
    )  # fmt: skip
    optimizer = torch.optim.RMSprop(
        loss.parameters(), lr=cfg.lr, alpha=0.99, eps=1e-5, foreach=True
    )

    def update(batch: TensorDictBase) -> dict[str, float]:
        with torch.no_grad():  # how far the learner's policy is from the one that acted
            log_pi = parts.actor.get_dist(batch).log_prob(batch.get(keys.ACTION))
            log_mu = batch.get(keys.ACTION_LOG_PROB)
            deviation = float((log_pi - log_mu.reshape(log_pi.shape)).exp().sub(1).abs().mean())
        metrics = trainers.on_policy_update(
            batch, loss, estimator, optimizer, max_grad_norm=cfg.max_grad_norm,
            seq_len=cfg.sequence_length,  # --recurrent: the rollout as whole sequences
        )  # fmt: skip
        if isinstance(collector, WorkerCollector):  # updates between acting and learning
            acted = int(batch.get(keys.COLLECTOR_POLICY_VERSION)[0, 0])
            metrics["policy_lag"] = float(collector.version - acted)
            metrics["dropped_batches"] = float(collector.dropped_batches)
        return {**metrics, "rho_deviation": deviation}  # the loop then sends the new weights

    # 4. loop: first finished rollout -> V-trace update -> weights out -> log, evaluate,
    #    checkpoint; 5. report (trainers.run_on_policy)
    return trainers.run_on_policy(
        cfg, "IMPALA", parts, optimizer, update, collector=collector, reward_scaling=False
    )


if __name__ == "__main__":
    main(trainers.parse(Config))
