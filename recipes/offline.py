"""Offline RL on a Minari dataset: behaviour cloning, TD3+BC (Fujimoto & Gu 2021, arXiv
2106.06860), IQL (Kostrikov et al. 2021, arXiv 2110.06169), CQL (Kumar et al. 2020, arXiv
2006.04779), CRR (Wang et al. 2020, arXiv 2006.15134) or BCQ (Fujimoto et al. 2019, arXiv
1812.02900), evaluated in the real env.

python recipes/offline.py --dataset tdrl/hopper-medium-v0 --algo iql
python recipes/offline.py --dataset tdrl/hopper-medium-v0 --algo td3bc --total-frames 200000

``--total-frames`` counts gradient steps (evaluation, logs and checkpoints too). The dataset is a
Minari dataset id under ``MINARI_DATASETS_PATH`` (``tdrl.data.save_minari`` writes one). The
settings are the papers' MuJoCo ones: batch 256, 256x256 ReLU networks, Adam 3e-4, tau 0.005,
gamma 0.99; TD3+BC alpha 2.5 with TD3's policy noise and actor delay 2; IQL expectile 0.7,
beta 3.0, a Gaussian actor with a state-independent std; CQL(H) on SAC with weight 5 and 10
sampled actions per kind (the fixed-weight variant here; ``CQLLoss(with_lagrange=True)`` is the
automatic one); BCQ's perturbation range 0.05, lambda 0.75 and 10 sampled actions, its VAE
trained with the actor's optimizer group (the authors' 750x750 VAE and 400x300 perturbation model
take --hidden-sizes here, and Adam 3e-4 for their 1e-3). TD3+BC normalizes states by the
dataset's mean and std, as its authors do (--normalize-states auto; on or off for any
algorithm). Where tdrl differs: no cosine learning-rate decay of IQL's actor; BC regresses the
deterministic actor's action (its MSE).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from tensordict.nn import TensorDictSequential

from tdrl import trainers
from tdrl.data import load_minari
from tdrl.modules import (
    actor_critic,
    bcq_perturbation,
    bcq_vae,
    deterministic_actor,
    q_ensemble,
    tanh_gaussian_actor,
)
from tdrl.objectives import (
    BCLoss,
    BCQActor,
    BCQLoss,
    CQLLoss,
    CRRLoss,
    IQLLoss,
    TD3BCLoss,
    total_loss,
)

# The algorithms whose authors normalize states by the dataset's statistics (TD3+BC: Fujimoto &
# Gu 2021, sec. 5). On HalfCheetah medium at 10k steps (seed 0) it lifted TD3+BC's normalized
# score from 17.1 to 44.2 (docs/benchmarks/session_2026-11-25e.txt; the cells are in
# offline_table.jsonl and offline_table_superseded.jsonl).
NORMALIZED_BY_AUTHORS = ("td3bc",)


@dataclass(frozen=True)
class Config(trainers.TD3Config, trainers.EntropyConfig):
    """Fields beyond tdrl.trainers.TD3Config's (td3bc) and EntropyConfig's (cql) (--help lists
    all, with defaults)."""

    env_id: str = "Hopper-v5"
    dataset: str = "tdrl/hopper-medium-v0"
    """Minari dataset id (under MINARI_DATASETS_PATH)."""
    algo: Literal["bc", "td3bc", "iql", "cql", "crr", "bcq"] = "iql"
    """the offline algorithm."""
    total_frames: int = 100_000
    """gradient steps in total (1M in the papers)."""
    eval_every: int = 5_000
    checkpoint_every: int = 50_000
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    alpha: float = 2.5
    """td3bc: weight of the Q term against the behaviour-cloning term."""
    expectile: float = 0.7
    """iql: expectile of the value loss."""
    beta: float = 3.0
    """iql: inverse temperature of the advantage weights."""
    cql_weight: float = 5.0
    """cql: weight of the conservative term."""
    crr_mode: Literal["binary", "exp"] = "binary"
    """crr: the advantage filter."""
    crr_advantage: Literal["mean", "max"] = "mean"
    """crr: the baseline over the sampled policy actions (the paper's A_mean or A_max)."""
    bcq_phi: float = 0.05
    """bcq: the perturbation range, a fraction of the half action range."""
    bcq_lmbda: float = 0.75
    """bcq: weight of the minimum over the critics in the soft clipped double-Q target."""
    normalize_states: Literal["auto", "on", "off"] = "auto"
    """normalize observations by the dataset's mean and std + 1e-3, the evaluation policy
    applying the same transform to the env's; auto: as the algorithm's authors (on for td3bc)."""


def main(cfg: Config) -> dict[str, float]:
    """Train ``cfg.algo`` on ``cfg.dataset``; returns the final evaluation and the counters."""
    # 1. envs (evaluation only) and the dataset as a replay buffer
    env, eval_env = trainers.setup(cfg, actions="continuous")
    env.close()
    buffer = load_minari(cfg.dataset, generator=cfg.seed)
    obs_spec, act_spec = eval_env.observation_spec, eval_env.action_spec
    stored = buffer.storage
    for key, spec in (("observation", obs_spec["observation"]), ("action", act_spec)):
        if stored[key].shape[2:] != spec.shape[1:]:
            raise ValueError(
                f"dataset {cfg.dataset!r}: {key} of shape {tuple(stored[key].shape[2:])} does "
                f"not fit {cfg.env_id}'s {tuple(spec.shape[1:])}"
            )
    normalize = cfg.normalize_states == "on" or (
        cfg.normalize_states == "auto" and cfg.algo in NORMALIZED_BY_AUTHORS
    )
    obs_norm = trainers.normalize_dataset_observations(buffer) if normalize else None

    # 2-3. networks, loss, optimizer and gradient step of the chosen algorithm
    hidden = cfg.hidden_sizes
    extra: dict[str, Any] = {}
    policy: Any = None  # the evaluation policy, when it is not the actor
    if cfg.algo == "bc":
        actor = deterministic_actor(obs_spec, act_spec, hidden)
        loss: Any = BCLoss(actor)
        optimizer = torch.optim.Adam(actor.parameters(), lr=cfg.actor_lr)

        def step(sample: Any, k: int) -> Any:
            out = loss(sample)
            trainers.optimizer_step(total_loss(out), optimizer)
            return out

    else:
        if cfg.algo == "td3bc":
            actor = deterministic_actor(obs_spec, act_spec, hidden)
            critic: Any = q_ensemble(obs_spec, act_spec, hidden)
            loss = TD3BCLoss(
                actor, critic, alpha=cfg.alpha, policy_noise=cfg.policy_noise,
                noise_clip=cfg.noise_clip, gamma=cfg.gamma,
            )  # fmt: skip
            every, with_actor = cfg.policy_delay, True
        elif cfg.algo == "cql":  # SAC's actor, critics and entropy tuning
            actor = tanh_gaussian_actor(obs_spec, act_spec, hidden)
            critic = q_ensemble(obs_spec, act_spec, hidden)
            loss = CQLLoss(
                actor, critic, weight=cfg.cql_weight, alpha_init=cfg.alpha_init,
                target_entropy=cfg.target_entropy, gamma=cfg.gamma,
            )  # fmt: skip
            every, with_actor = 1, False
        elif cfg.algo == "bcq":  # perturbation model, critics, and the VAE of the data's actions
            actor = bcq_perturbation(obs_spec, act_spec, hidden, phi=cfg.bcq_phi)
            critic = q_ensemble(obs_spec, act_spec, hidden)
            vae = bcq_vae(obs_spec, act_spec, hidden)
            loss = BCQLoss(actor, critic, vae, lmbda=cfg.bcq_lmbda, gamma=cfg.gamma)
            policy = BCQActor(vae, actor, loss.qvalue_network)
            actor = torch.nn.ModuleList([actor, vae])  # one optimizer group for both
            every, with_actor = 1, False
        else:  # iql, crr: a Gaussian actor (tanh mean, state-independent std); iql: V(s)
            actor, value, _ = actor_critic(
                obs_spec, act_spec, hidden_sizes=hidden, normalize_observations=False,
                activation=torch.nn.ReLU,
            )  # fmt: skip
            critic = q_ensemble(obs_spec, act_spec, hidden)
            if cfg.algo == "crr":
                loss = CRRLoss(
                    actor, critic, mode=cfg.crr_mode, advantage=cfg.crr_advantage, gamma=cfg.gamma
                )
            else:
                loss = IQLLoss(
                    actor, critic, value, expectile=cfg.expectile, beta=cfg.beta, gamma=cfg.gamma
                )
                critic = torch.nn.ModuleList([critic, value])  # one optimizer group for both
            every, with_actor = 1, False
        log_alpha = loss.log_alpha if cfg.algo == "cql" else None
        optimizer, target_updater = trainers.actor_critic_optimizer(
            cfg, loss, actor, critic, log_alpha=log_alpha
        )
        step = trainers.actor_critic_step(
            loss, optimizer, target_updater, actor_every=every, targets_with_actor=with_actor
        )
        extra["critic"] = critic

    # 4-5. loop: gradient steps -> log, evaluate, checkpoint; report
    policy = actor if policy is None else policy
    if obs_norm is not None:  # the env gives raw observations; the networks learned normalized
        policy = TensorDictSequential(obs_norm, policy)
        extra["obs_norm"] = obs_norm  # in checkpoints, with the networks it belongs to
    state = {"loss": loss, "optimizer": optimizer, **extra}
    titles = {"bc": "BC", "td3bc": "TD3+BC", "iql": "IQL", "cql": "CQL", "crr": "CRR", "bcq": "BCQ"}
    return trainers.train_offline(
        cfg, titles[cfg.algo], state, buffer, step, eval_env=eval_env, policy=policy
    )


if __name__ == "__main__":
    main(trainers.parse(Config))
