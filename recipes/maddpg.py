"""MADDPG (Lowe et al. 2017, arXiv 1706.02275): deterministic actors, each of its agent's own
observation, and for every agent a critic of all agents' observations and actions (centralized
training, decentralized execution), for continuous actions.

Defaults are BenchMARL 1.5.1's (its conf/experiment/base_experiment.yaml,
conf/algorithm/maddpg.yaml, conf/model/layers/mlp.yaml): 6000 frames a batch from 10 envs, 1000
gradient steps a batch of 128 transitions, a 1M buffer, Gaussian exploration noise per agent from
0.8 to 0.01 half-ranges over a third of the run, Adam lr 5e-5 with eps 1e-6, actor and critic
gradients clipped apart to norm 5, gamma 0.99, a target critic updated softly with tau 0.005 and
no target actor (TorchRL's DDPGLoss default, which BenchMARL keeps), the squared TD error,
256x256 Tanh networks (TorchRL's MultiAgentMLP), one actor and one critic shared by the agents,
tanh onto the action box. Evaluation is deterministic.

    python recipes/maddpg.py                                   # VMAS navigation, 3 agents
    python recipes/maddpg.py --env-id mpe2/simple_spread_v3    # MPE's continuous actions
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from tdrl import trainers
from tdrl.trainers import config

if TYPE_CHECKING:
    from tensordict import TensorDictBase


@trainers.configclass
class Config:
    compiled_steps: ClassVar[bool] = True  # --compile applies to its updates (it runs on the CPU)
    run: config.RunConfig = config.MULTIAGENT_RUN
    replay: config.ReplayConfig = config.MULTIAGENT_REPLAY
    ac: config.ActorCriticConfig = config.ActorCriticConfig(
        hidden_sizes=(256, 256), actor_lr=5e-5, critic_lr=5e-5, gamma=0.99, tau=0.005
    )
    frames_per_batch: int = 6_000
    """env steps a batch (all envs)."""
    noise_init: float = 0.8
    """exploration noise at the start (half-range units)."""
    noise_end: float = 0.01
    """exploration noise at the end of its schedule."""
    noise_frames: int = 400_000
    """env steps over which the noise decays."""
    max_grad_norm: float = 5.0
    """global gradient-norm clip."""
    adam_eps: float = 1e-6
    """Adam's epsilon."""
    share_params: bool = True
    """one actor and one critic for all agents (--no-share-params: one each)."""


def main(cfg: Config) -> dict[str, float]:
    """Train MADDPG; returns the final deterministic evaluation and the counters."""
    cfg.run.refuse_cudagraphs("maddpg.py", "runs its networks on the CPU")
    # the library loads here, after the command line: --help answers without it
    from tensordict.nn import TensorDictSequential
    from torch import nn
    from torchrl.modules import MultiAgentMLP

    from tdrl import keys
    from tdrl.data import make_replay_buffer, transitions
    from tdrl.modules import AdditiveGaussianNoise, OnGroup, StateActionCritic
    from tdrl.modules.deterministic import DeterministicActor
    from tdrl.objectives import MADDPGLoss, SoftUpdate, total_loss

    # 1. envs: BenchMARL's task settings, continuous actions
    task = {**config.MULTIAGENT_TASKS.get(cfg.run.env_id, {}), "continuous": True}
    env, eval_env = trainers.make_envs(cfg.run, actions="continuous",
                                       env_kwargs=task)  # fmt: skip
    n_agents, action_dim = env.n_agents, env.action_spec.shape[-1]
    obs_dim = env.observation_spec[keys.AGENTS, keys.OBSERVATION].shape[-1]
    low, high = env.action_spec.space.low[0, 0], env.action_spec.space.high[0, 0]

    # 2. networks: per-agent deterministic actors on the action box, noise on top while
    #    collecting; critics of all agents' observations and actions
    def mlp(inputs: int, outputs: int, centralized: bool) -> MultiAgentMLP:
        return MultiAgentMLP(
            inputs, outputs, n_agents, centralized=centralized, share_params=cfg.share_params,
            num_cells=list(cfg.ac.hidden_sizes), activation_class=nn.Tanh,
        )  # fmt: skip

    actor = OnGroup(DeterministicActor(mlp(obs_dim, action_dim, False), action_dim,
                                       action_low=low, action_high=high))  # fmt: skip
    noise = AdditiveGaussianNoise(action_dim, sigma_init=cfg.noise_init, sigma_end=cfg.noise_end,
                                  annealing_num_steps=cfg.noise_frames, action_low=low,
                                  action_high=high)  # fmt: skip
    policy = TensorDictSequential(actor, OnGroup(noise))
    critic = OnGroup(StateActionCritic(mlp(obs_dim + action_dim, 1, True),
                                       in_keys=(keys.OBSERVATION, keys.ACTION)))  # fmt: skip

    # 3. loss (per-agent rewards and flags), soft targets, optimizer (a group per part), buffer
    loss = MADDPGLoss(actor, critic, gamma=cfg.ac.gamma, delay_actor=False)  # BenchMARL's: no
    # target actor (TorchRL's DDPGLoss default), a target critic
    target = SoftUpdate(loss, tau=cfg.ac.tau)
    optimizer = trainers.adam(
        (actor.parameters(), cfg.ac.actor_lr), (critic.parameters(), cfg.ac.critic_lr),
        eps=cfg.adam_eps,
    )  # fmt: skip
    buffer = make_replay_buffer(cfg.replay.buffer_size, generator=cfg.run.seed)
    collector = trainers.make_collector(
        cfg.run, env, policy, cfg.frames_per_batch,
        init_random_frames=cfg.replay.init_random_frames,
    )  # fmt: skip

    # 4. the update step: actors and critics (clipped apart, as BenchMARL), then the soft
    #    targets, compiled (--compile)
    def learn(sample: TensorDictBase) -> TensorDictBase:
        out = loss(sample)
        trainers.optimizer_step(
            total_loss(out), optimizer, max_grad_norm=cfg.max_grad_norm,
            clip_groups=(actor.parameters(), critic.parameters()),
        )  # fmt: skip
        target.step()
        return out.detach()

    update = trainers.compiled_step(learn, optimizer, **cfg.run.compile_options())

    # 5. the loop: store, the noise's schedule, the gradient steps due
    state = {"loss": loss, "optimizer": optimizer, "noise": noise, "buffer": buffer}
    with trainers.Run.from_config(cfg, "MADDPG", state, eval_env=eval_env, policy=actor) as run:
        for batch in run.resume(collector):
            buffer.extend(transitions(batch))
            noise.step(collector.frames - int(noise.frames))  # sigma: env steps
            for _ in run.gradient_steps(cfg.replay.init_random_frames, cfg.replay.utd_ratio):
                run.record(update(buffer.sample(cfg.replay.batch_size)))
            run.step({"sigma": noise.sigma})  # log, evaluate, checkpoint when due
        # 6. report: final evaluation, curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
