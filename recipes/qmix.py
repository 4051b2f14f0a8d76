"""QMIX (Rashid et al. 2018, arXiv 1803.11485) and VDN (Sunehag et al. 2017, arXiv 1706.05296):
Q-learning of a team's value as a mix of the agents' own Q values, for discrete actions. QMIX
mixes them with a monotonic network whose weights a hypernetwork makes from the global state;
VDN sums them (--mixer vdn).

Defaults are BenchMARL 1.5.1's (its conf/experiment/base_experiment.yaml, conf/algorithm/qmix.yaml
and vdn.yaml, conf/model/layers/mlp.yaml): 6000 frames a batch from 10 envs, 1000 gradient steps
a batch of 128 transitions, a 1M buffer, epsilon-greedy per agent from 0.8 to 0.01 over a third
of the run, Adam lr 5e-5 with eps 1e-6, gradient norm 5, gamma 0.99, targets updated softly with
tau 0.005 every step, the squared TD error, a local Q network of 256x256 Tanh shared by the agents
(TorchRL's MultiAgentMLP), TorchRL's QMixer (embedding 32) or VDNMixer. The team's reward is the
mean of the agents' (as BenchMARL makes it); the episode's flags are the env's. Evaluation is
greedy.

    python recipes/qmix.py                                 # MPE simple_spread, 3 agents
    python recipes/qmix.py --mixer vdn
    python recipes/qmix.py --env-id vmas/navigation --mixer vdn   # VMAS, discrete actions
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from tdrl import trainers
from tdrl.trainers import config

if TYPE_CHECKING:
    from tensordict import TensorDictBase


@trainers.configclass
class Config:
    compiled_steps: ClassVar[bool] = True  # --compile applies to its updates (it runs on the CPU)
    run: config.RunConfig = trainers.configure(
        config.MULTIAGENT_RUN, env_id="mpe2/simple_spread_v3"
    )
    replay: config.ReplayConfig = config.MULTIAGENT_REPLAY
    q: config.QLearningConfig = config.QLearningConfig(
        frames_per_batch=6_000, lr=5e-5, eps_init=0.8, eps_end=0.01, eps_frames=400_000,
        gamma=0.99, max_grad_norm=5.0, hidden_sizes=(256, 256),
    )  # fmt: skip
    mixer: Literal["qmix", "vdn"] = "qmix"
    """qmix: a monotonic mixing network conditioned on the state; vdn: the sum."""
    mixing_embed_dim: int = 32
    """qmix: the mixing network's width."""
    tau: float = 0.005
    """soft target update rate, every gradient step; 0: a hard copy every
    --target-update-interval gradient steps."""
    adam_eps: float = 1e-6
    """Adam's epsilon."""


def main(cfg: Config) -> dict[str, float]:
    """Train QMIX or VDN; returns the final greedy evaluation and the counters."""
    cfg.run.refuse_cudagraphs("qmix.py", "runs its networks on the CPU")
    # the library loads here, after the command line: --help answers without it
    import torch
    from tensordict.nn import TensorDictSequential
    from torch import nn
    from torchrl.modules import MultiAgentMLP, QMixer, VDNMixer

    from tdrl import keys
    from tdrl.data import make_replay_buffer, transitions
    from tdrl.modules import EpsilonGreedy, OnGroup, QValueActor
    from tdrl.objectives import HardUpdate, QMixLoss, SoftUpdate

    group = keys.AGENTS

    # 1. envs: BenchMARL's task settings, discrete actions
    task = {**config.MULTIAGENT_TASKS.get(cfg.run.env_id, {}), "continuous": False}
    env, eval_env = trainers.make_envs(cfg.run, actions="discrete",
                                       env_kwargs=task)  # fmt: skip
    n_agents, n_actions = env.n_agents, int(env.action_spec.space.n)
    obs_dim = env.observation_spec[group, keys.OBSERVATION].shape[-1]
    if cfg.mixer == "qmix" and not env.has_state:
        raise ValueError(f"--mixer qmix reads the global state, which {cfg.run.env_id} has not")

    # 2. networks: one local Q network for all agents, greedy per agent; epsilon-greedy on top
    #    while collecting; the mixer
    local = MultiAgentMLP(obs_dim, n_actions, n_agents, centralized=False, share_params=True,
                          num_cells=list(cfg.q.hidden_sizes), activation_class=nn.Tanh)  # fmt: skip
    # a masked env's ("agents", "action_mask"): greedy and random actions among the valid ones
    masked = keys.ACTION_MASK in env.observation_spec[group].keys()
    mask_key = keys.ACTION_MASK if masked else None
    greedy = OnGroup(QValueActor(local, mask_key=mask_key))  # ("agents", "action") per agent
    exploration = EpsilonGreedy(
        n_actions, eps_init=cfg.q.eps_init, eps_end=cfg.q.eps_end,
        annealing_num_steps=cfg.q.eps_frames, mask_key=mask_key,
    )  # fmt: skip
    policy = TensorDictSequential(greedy, OnGroup(exploration))
    if cfg.mixer == "qmix":
        state_shape = tuple(env.observation_spec[keys.STATE].shape[1:])
        mixer: nn.Module = QMixer(state_shape, cfg.mixing_embed_dim, n_agents, device="cpu")
    else:
        mixer = VDNMixer(n_agents, device="cpu")

    # 3. loss (team reward, double Q off as BenchMARL's), targets, optimizer, buffer
    loss = QMixLoss(greedy, mixer, n_agents=n_agents, gamma=cfg.q.gamma,
                    state_key=keys.STATE if cfg.mixer == "qmix" else None)  # fmt: skip
    hard = HardUpdate(loss, value_network_update_interval=cfg.q.target_update_interval)
    target = SoftUpdate(loss, tau=cfg.tau) if cfg.tau > 0 else None
    optimizer = torch.optim.Adam(loss.parameters(), lr=cfg.q.lr, eps=cfg.adam_eps)
    buffer = make_replay_buffer(cfg.replay.buffer_size, generator=cfg.run.seed)
    collector = trainers.make_collector(
        cfg.run, env, policy, cfg.q.frames_per_batch,
        init_random_frames=cfg.replay.init_random_frames,
    )  # fmt: skip

    # 4. the update step: the mixed TD loss, one clipped gradient step, the soft targets,
    #    compiled (--compile); a hard target copy (--tau 0) outside
    def learn(sample: TensorDictBase) -> TensorDictBase:
        out = loss(sample)
        trainers.optimizer_step(out[keys.LOSS], optimizer, max_grad_norm=cfg.q.max_grad_norm)
        if target is not None:
            target.step()
        return out.detach()

    update = trainers.compiled_step(learn, optimizer, **cfg.run.compile_options())

    # 5. the loop: the team's reward, store, epsilon's schedule, the gradient steps due
    state = {"loss": loss, "optimizer": optimizer, "buffer": buffer}
    title = "QMIX" if cfg.mixer == "qmix" else "VDN"
    with trainers.Run.from_config(cfg, title, state, eval_env=eval_env, policy=greedy) as run:
        for batch in run.resume(collector):
            batch[keys.NEXT, keys.REWARD] = batch[keys.NEXT, group, keys.REWARD].mean(-2)
            buffer.extend(transitions(batch))
            exploration.step(collector.frames - int(exploration.frames))  # epsilon: env steps
            for step in run.gradient_steps(cfg.replay.init_random_frames, cfg.replay.utd_ratio):
                out = update(buffer.sample(cfg.replay.batch_size))
                if target is None:  # counted from the run's steps: on time after a resume
                    hard.step(step)
                run.record({keys.LOSS: out[keys.LOSS], "q_tot": out[keys.CHOSEN_ACTION_VALUE]})
            run.step({"epsilon": exploration.eps})  # log, evaluate, checkpoint when due
        # 6. report: final evaluation, curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
