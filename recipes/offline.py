"""Offline RL on a Minari dataset, evaluated in the real env: behaviour cloning, TD3+BC (Fujimoto
& Gu 2021, arXiv 2106.06860), IQL (Kostrikov et al. 2021, 2110.06169), CQL (Kumar et al. 2020,
2006.04779), CRR (Wang et al. 2020, 2006.15134) or BCQ (Fujimoto et al. 2019, 1812.02900).

``--total-frames`` counts gradient steps. Defaults are the papers' MuJoCo settings (batch 256,
256x256 ReLU networks, Adam 3e-4, tau 0.005, gamma 0.99, and each algorithm's own coefficients);
TD3+BC normalizes states by the dataset's statistics, as its authors do. docs/algorithms/offline.md
lists every setting, its source and where tdrl differs; recipes/make_dataset.py writes datasets.

    python recipes/offline.py --dataset tdrl/hopper-medium-v0 --algo iql
    python recipes/offline.py --dataset tdrl/hopper-medium-v0 --algo td3bc --total-frames 200000
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from tdrl import trainers
from tdrl.trainers import config

if TYPE_CHECKING:
    from tensordict import TensorDictBase

# The algorithms whose authors normalize states by the dataset's statistics (TD3+BC: Fujimoto &
# Gu 2021, sec. 5).
NORMALIZED_BY_AUTHORS = ("td3bc",)
# The algorithms whose authors scale MuJoCo rewards by 1000 over the dataset's spread of episode
# returns (IQL: Kostrikov et al. 2021, appendix, and their code).
REWARDS_SCALED_BY_AUTHORS = ("iql",)
TITLES = {"bc": "BC", "td3bc": "TD3+BC", "iql": "IQL", "cql": "CQL", "crr": "CRR", "bcq": "BCQ"}


@trainers.configclass
class Config:
    compiled_steps: ClassVar[bool] = True  # --compile and --cudagraphs apply to its updates
    run: config.RunConfig = config.RunConfig(
        env_id="Hopper-v5", total_frames=100_000, num_envs=1, eval_every=5_000,
        log_every=1_000, checkpoint_every=50_000,
    )  # fmt: skip
    ac: config.ActorCriticConfig = config.ActorCriticConfig(actor_lr=3e-4, critic_lr=3e-4)
    td3: config.TD3Config = config.TD3Config()  # td3bc
    entropy: config.EntropyConfig = config.EntropyConfig()  # cql
    dataset: str = "tdrl/hopper-medium-v0"
    """Minari dataset id (under MINARI_DATASETS_PATH)."""
    algo: Literal["bc", "td3bc", "iql", "cql", "crr", "bcq"] = "iql"
    """the offline algorithm."""
    batch_size: int = 256
    """transitions per gradient step."""
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
    scale_rewards: Literal["auto", "on", "off"] = "auto"
    """multiply the rewards by 1000 / (highest - lowest episode return of the dataset); auto: as
    the algorithm's authors on MuJoCo locomotion data (on for iql)."""
    cql_bc_steps: int = 40_000
    """cql: how many first gradient steps train the actor by maximum likelihood of the data's
    actions, with the entropy term (the authors' warm-up, policy_eval_start)."""
    cql_deterministic_backup: bool = True
    """cql: leave the entropy term out of the critics' target (the authors' default)."""


def main(cfg: Config) -> dict[str, float]:
    """Train ``cfg.algo`` on ``cfg.dataset``; returns the final evaluation and the counters."""
    # the library loads here, after the command line: --help answers without it
    import torch
    from tensordict.nn import TensorDictSequential

    from tdrl import modules, objectives
    from tdrl.trainers.offline import load_dataset_for

    # 1. envs (evaluation only) and the dataset as a replay buffer, checked against the env's
    #    spaces, its actions clipped into the box, states normalized and rewards scaled where
    #    asked
    env, eval_env = trainers.make_envs(cfg.run, actions="continuous")
    env.close()
    device = cfg.run.torch_device
    normalize = cfg.normalize_states == "on" or (
        cfg.normalize_states == "auto" and cfg.algo in NORMALIZED_BY_AUTHORS
    )
    scale = cfg.scale_rewards == "on" or (
        cfg.scale_rewards == "auto" and cfg.algo in REWARDS_SCALED_BY_AUTHORS
    )
    buffer, obs_norm = load_dataset_for(cfg.dataset, eval_env, normalize=normalize,
                                        scale_rewards=scale, generator=cfg.run.seed,
                                        device=device, env_name=cfg.run.env_id)  # fmt: skip
    obs_spec, act_spec = eval_env.observation_spec, eval_env.action_spec

    # 2. networks: the actor of the algorithm's family, then (all but BC) a critic ensemble
    hidden, gamma = cfg.ac.hidden_sizes, cfg.ac.gamma
    if cfg.algo in ("bc", "td3bc"):
        actor = modules.deterministic_actor(obs_spec, act_spec, hidden)
    elif cfg.algo == "cql":  # SAC's actor, critics and entropy tuning
        actor = modules.tanh_gaussian_actor(obs_spec, act_spec, hidden)
    elif cfg.algo == "bcq":  # a perturbation model of the data's actions
        actor = modules.bcq_perturbation(obs_spec, act_spec, hidden, phi=cfg.bcq_phi)
    else:  # iql, crr: a Gaussian actor (tanh mean, state-independent std); iql: V(s)
        actor, value, _ = modules.actor_critic(
            obs_spec, act_spec, hidden_sizes=hidden, normalize_observations=False,
            activation=torch.nn.ReLU,
        )  # fmt: skip
    critic: Any = None if cfg.algo == "bc" else modules.q_ensemble(obs_spec, act_spec, hidden)

    # 2b. the loss (and where it needs them: the evaluation policy, the steps of the whole loss)
    policy: Any = actor
    every = 1  # whole-loss steps every this many (TD3+BC's delayed actor and targets)
    if cfg.algo == "bc":
        loss: Any = objectives.BCLoss(actor)
    elif cfg.algo == "td3bc":
        loss = objectives.TD3BCLoss(
            actor, critic, alpha=cfg.alpha, policy_noise=cfg.td3.policy_noise,
            noise_clip=cfg.td3.noise_clip, gamma=gamma,
        )  # fmt: skip
        every = cfg.td3.policy_delay
    elif cfg.algo == "cql":
        loss = objectives.CQLLoss(
            actor, critic, weight=cfg.cql_weight, alpha_init=cfg.entropy.alpha_init,
            target_entropy=cfg.entropy.target_entropy, gamma=gamma,
            deterministic_backup=cfg.cql_deterministic_backup,
        )  # fmt: skip
    elif cfg.algo == "bcq":  # and a VAE of the data's actions, which the policy samples
        vae = modules.bcq_vae(obs_spec, act_spec, hidden)
        loss = objectives.BCQLoss(actor, critic, vae, lmbda=cfg.bcq_lmbda, gamma=gamma)
        policy = objectives.BCQActor(vae, actor, loss.qvalue_network)
        actor = torch.nn.ModuleList([actor, vae])  # one optimizer group for both
    elif cfg.algo == "crr":
        mode, advantage = cfg.crr_mode, cfg.crr_advantage
        loss = objectives.CRRLoss(actor, critic, mode=mode, advantage=advantage, gamma=gamma)
    else:
        loss = objectives.IQLLoss(
            actor, critic, value, expectile=cfg.expectile, beta=cfg.beta, gamma=gamma
        )
        critic = torch.nn.ModuleList([critic, value])  # one optimizer group for both

    # 3. optimizer (a group per part) and target update; the evaluation policy and the state
    loss.to(device)
    target = None
    if cfg.algo == "bc":
        optimizer = torch.optim.Adam(actor.parameters(), lr=cfg.ac.actor_lr)
    else:
        groups = [(actor.parameters(), cfg.ac.actor_lr), (critic.parameters(), cfg.ac.critic_lr)]
        if cfg.algo == "cql":
            groups.append(([loss.log_alpha], cfg.entropy.alpha_lr))
        optimizer = trainers.adam(*groups)
        target = objectives.SoftUpdate(loss, tau=cfg.ac.tau)
    state = {"loss": loss, "optimizer": optimizer}
    if critic is not None:
        state["critic"] = critic
    if obs_norm is not None:  # the env gives raw observations; the networks learned normalized
        policy = TensorDictSequential(obs_norm, policy)
        state["obs_norm"] = obs_norm  # in checkpoints, with the networks it belongs to

    # 4. the update steps: the whole loss and the targets, or (TD3+BC's steps between its
    #    delayed actor steps) the critics alone, compiled (--compile) and/or captured in a CUDA
    #    graph (--cudagraphs)
    def full_step(sample: TensorDictBase) -> TensorDictBase:
        out = loss(sample)
        trainers.optimizer_step(objectives.total_loss(out), optimizer)
        if target is not None:
            target.step()
        return out.detach()

    def critic_step(sample: TensorDictBase) -> None:  # its targets move with the actor
        trainers.optimizer_step(loss.qvalue_loss(sample)[0], optimizer)

    update = trainers.compiled_step(full_step, optimizer, **cfg.run.compile_options())
    critic_update = trainers.compiled_step(critic_step, optimizer, **cfg.run.compile_options())
    # CQL's warm-up steps: a step of their own (a CUDA graph replays the objective it captured)
    warm_update = trainers.compiled_step(full_step, optimizer, **cfg.run.compile_options())

    # 5. the loop: batches of gradient steps on the dataset (TD3+BC: the actor and the targets
    #    every policy_delay-th step), then log, evaluate, checkpoint when due
    with trainers.Run.from_config(
        cfg, TITLES[cfg.algo], state, eval_env=eval_env, policy=policy
    ) as run:
        for steps in run.resume(trainers.OfflineSteps(buffer, cfg.run, dataset=cfg.dataset)):
            for _ in range(steps):
                run.updates += 1
                warm = False
                if cfg.algo == "cql":  # the actor's warm-up, then SAC's objective
                    warm = loss.behavior_cloning = run.updates <= cfg.cql_bc_steps
                sample = buffer.sample(cfg.batch_size)
                if run.updates % every == 0:
                    run.record((warm_update if warm else update)(sample))
                else:  # TD3+BC's critic-only steps
                    critic_update(sample)
            run.step()
        # 6. report: final evaluation, curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
