"""MAPPO (Yu et al. 2022, arXiv 2103.01955) and IPPO (de Witt et al. 2020, arXiv 2011.09533):
PPO for a group of agents. Every agent acts from its own observation; MAPPO's critic reads all
agents' observations (centralized), IPPO's only the agent's own (--critic local).

Defaults are BenchMARL 1.5.1's (its conf/experiment/base_experiment.yaml, conf/algorithm/mappo.yaml
and ippo.yaml, conf/model/layers/mlp.yaml): 6000 frames a batch from 10 envs, 45 passes over it
(BenchMARL's on_policy_n_minibatch_iters) in minibatches of 400, Adam lr 5e-5 with eps 1e-6,
actor and critic gradients clipped apart to norm 5, gamma 0.99, GAE lambda 0.9, clip 0.2, critic
coefficient 1, no entropy bonus, raw advantages, 256x256 Tanh MLPs (TorchRL's MultiAgentMLP), a
TanhNormal policy, one actor and one critic shared by the agents. The tasks take BenchMARL's task
configs (tdrl.trainers.config.MULTIAGENT_TASKS); evaluation is deterministic.

    python recipes/mappo.py                                        # VMAS navigation, 3 agents
    python recipes/mappo.py --critic local                         # IPPO
    python recipes/mappo.py --no-share-params                      # an actor and critic each
    python recipes/mappo.py --env-id mpe2/simple_spread_v3         # MPE's simple_spread
    python recipes/mappo.py --env-id mpe2/simple_spread_v3 --discrete --total-frames 300000
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from tdrl import trainers
from tdrl.trainers import config

if TYPE_CHECKING:
    from tensordict import TensorDictBase


@trainers.configclass
class Config:
    compiled_steps: ClassVar[bool] = True  # --compile applies to its updates (it runs on the CPU)
    run: config.RunConfig = config.MULTIAGENT_RUN
    onpolicy: config.OnPolicyConfig = config.OnPolicyConfig(
        frames_per_batch=6_000, lr=5e-5, lr_decay=False, normalize_advantage=False
    )
    adv: config.AdvantageConfig = config.AdvantageConfig(
        lmbda=0.9, critic_coeff=1.0, max_grad_norm=5.0
    )
    ppo: config.PPOConfig = config.PPOConfig(epochs=45, minibatch_size=400)
    adam_eps: float = 1e-6
    """Adam's epsilon."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """hidden widths of actor and critic."""
    critic: Literal["central", "local"] = "central"
    """central: MAPPO's critic of all agents' observations; local: IPPO's of the agent's own."""
    share_params: bool = True
    """one actor and one critic for all agents (--no-share-params: one each)."""
    discrete: bool = False
    """the env's discrete actions (a categorical policy) instead of its continuous ones; where the
    env gives ("agents", "action_mask"), the policy samples only the valid actions."""


def main(cfg: Config) -> dict[str, float]:
    """Train MAPPO or IPPO; returns the final deterministic evaluation and the last metrics."""
    if cfg.onpolicy.scale_rewards:
        raise ValueError("--scale-rewards scales one reward per step; MAPPO has one per agent")
    if cfg.run.compile:  # one compiled step serves every minibatch
        cfg.ppo.check_compiled(cfg.onpolicy.frames_per_batch, None, cudagraphs=False)
    cfg.run.refuse_cudagraphs("mappo.py", "runs its networks on the CPU")
    # the library loads here, after the command line: --help answers without it
    import torch
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torch import nn
    from torchrl.modules import MaskedCategorical, MultiAgentMLP, ProbabilisticActor, TanhNormal

    from tdrl import keys
    from tdrl.data import minibatches
    from tdrl.estimators import GAE
    from tdrl.objectives import ClipPPOLoss, total_loss

    group = keys.AGENTS
    obs_key, value_key = (group, keys.OBSERVATION), (group, keys.STATE_VALUE)

    # 1. envs: BenchMARL's task settings; continuous actions unless --discrete
    task = {**config.MULTIAGENT_TASKS.get(cfg.run.env_id, {}), "continuous": not cfg.discrete}
    actions = "discrete" if cfg.discrete else "continuous"
    env, eval_env = trainers.make_envs(cfg.run, actions, env_kwargs=task)
    n_agents, obs_dim = env.n_agents, env.observation_spec[obs_key].shape[-1]

    # 2. networks: per-agent MLPs (shared or not); the critic sees every agent (central) or one
    def mlp(outputs: int, centralized: bool = False) -> MultiAgentMLP:
        return MultiAgentMLP(
            obs_dim, outputs, n_agents, centralized=centralized, share_params=cfg.share_params,
            num_cells=list(cfg.hidden_sizes), activation_class=nn.Tanh,
        )  # fmt: skip

    if cfg.discrete:
        n_actions = int(env.action_spec.space.n)
        body = TensorDictModule(mlp(n_actions), [obs_key], [(group, keys.LOGITS)])
        params: Any = {"logits": (group, keys.LOGITS)}
        dist: dict = dict(distribution_class=torch.distributions.Categorical)
        if keys.ACTION_MASK in env.observation_spec[group].keys():  # valid actions only
            params["mask"] = (group, keys.ACTION_MASK)
            dist = dict(distribution_class=MaskedCategorical)
    else:
        action_dim = env.action_spec.shape[-1]
        body = TensorDictModule(nn.Sequential(mlp(2 * action_dim), NormalParamExtractor()),
                                [obs_key], [(group, keys.LOC), (group, keys.SCALE)])  # fmt: skip
        params = body.out_keys
        low, high = env.action_spec.space.low, env.action_spec.space.high
        dist = dict(distribution_class=TanhNormal,
                    distribution_kwargs={"low": low[0, 0], "high": high[0, 0]})  # fmt: skip
    actor = ProbabilisticActor(body, in_keys=params, out_keys=[(group, keys.ACTION)],
                               return_log_prob=True, **dist)  # fmt: skip
    critic = TensorDictModule(mlp(1, centralized=cfg.critic == "central"), [obs_key], [value_key])

    # 3. loss and estimator on the agents' entries (per-agent rewards and flags), optimizer
    loss = ClipPPOLoss(
        actor, critic, clip_epsilon=cfg.ppo.clip_epsilon, critic_coeff=cfg.adv.critic_coeff,
        entropy_coeff=cfg.adv.entropy_coeff, normalize_advantage=cfg.onpolicy.normalize_advantage,
    )  # fmt: skip
    per_agent = {name: (group, name) for name in ("advantage", "value_target", "action")}
    loss.set_keys(
        **per_agent,
        value=value_key,
        sample_log_prob=(group, keys.ACTION_LOG_PROB),
        mask=(group, keys.MASK),
    )  # an agent gone from an episode: its steps left out
    estimator = GAE(gamma=cfg.onpolicy.gamma, lmbda=cfg.adv.lmbda, value_network=critic)
    estimator.set_keys(
        advantage=(group, keys.ADVANTAGE), value_target=(group, keys.VALUE_TARGET),
        value=value_key, reward=(group, keys.REWARD), done=(group, keys.DONE),
        terminated=(group, keys.TERMINATED), truncated=(group, keys.TRUNCATED),
    )  # fmt: skip
    optimizer = torch.optim.Adam(loss.parameters(), lr=cfg.onpolicy.lr, eps=cfg.adam_eps)
    scheduler = cfg.onpolicy.lr_schedule(optimizer, cfg.run.total_frames)
    collector = trainers.make_collector(cfg.run, env, actor, cfg.onpolicy.frames_per_batch)
    # --recompute-advantage: the estimator runs again before every epoch
    passes = [1] * cfg.ppo.epochs if cfg.ppo.recompute_advantage else [cfg.ppo.epochs]

    # 4. the minibatch step (actor and critic clipped apart, as BenchMARL), compiled (--compile)
    def learn(minibatch: TensorDictBase) -> TensorDictBase:
        out = loss(minibatch)
        trainers.optimizer_step(
            total_loss(out), optimizer, max_grad_norm=cfg.adv.max_grad_norm,
            clip_groups=(actor.parameters(), critic.parameters()),
        )  # fmt: skip
        return out.detach()

    update = trainers.compiled_step(learn, optimizer, **cfg.run.compile_options())

    # 5. the loop: collect, estimate per agent, minibatch epochs over env steps
    title = "MAPPO" if cfg.critic == "central" else "IPPO"
    state = {"loss": loss, "optimizer": optimizer, "scheduler": scheduler}
    with trainers.Run.from_config(cfg, title, state, eval_env=eval_env, policy=actor) as run:
        for batch in run.resume(collector):
            before = collector.frames - cfg.onpolicy.frames_per_batch
            loss.clip_epsilon = cfg.ppo.clip_range(before, cfg.run.total_frames)
            for epochs in passes:
                estimator(batch)  # no gradients: the estimator is not differentiable
                for minibatch in minibatches(batch, cfg.ppo.minibatch_size, epochs=epochs):
                    run.record(update(minibatch))  # each train row: the mean of its steps
                    run.updates += 1
            scheduler.step()
            run.step()  # log, evaluate, checkpoint when due
        # 6. report: final evaluation, curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
