"""DRQN (Hausknecht & Stone 2015, arXiv 1507.06527) with R2D2's replay (Kapturowski et al. 2019,
"Recurrent experience replay in distributed reinforcement learning"): stored recurrent state and
burn-in, sequences padded past episode ends, n-step double Q on rescaled values, prioritized
sequences, an epsilon per env (its actors'); on a partially observed task.

An LSTM on the observation, then a Q head; epsilon-greedy on top while collecting (from the first
step: the collector always runs the policy, so every stored step carries the recurrent state it
acted from). Gradient steps sample ``batch_size`` slices of ``slice_len`` steps that start at
any stored step, drawn by priority, and are padded past their episode's end; each is replayed
from its stored state, its first ``burn_in`` steps left out of the loss (see
``tdrl.objectives.DRQNLoss``). A slice's priority is 0.9 max + 0.1 mean of its absolute TD
errors (R2D2's eta).

Defaults: CartPoleNoVel-v1 (CartPole without its velocities), 100k steps, 8 envs, slices of 8
with a burn-in of 2, 3-step targets, value rescaling (eps 1e-3), PER alpha 0.6 and beta 0.4 ->
1, 0.25 gradient steps per env step, an LSTM of 64 and a 64-unit head, Adam 1e-3, epsilon 1 ->
each env's own Ape-X epsilon (0.4^(1 + i) for env i of 8) over 20k steps, a hard target copy
every 200 gradient steps. These were chosen on seeds 50 and 51 (the per-env epsilons on 60-62);
docs/algorithms/drqn.md has the runs on other seeds. --no-apex-epsilon: one epsilon, 1 -> 0.05.
--no-pad --n-steps 1 --no-prioritized --no-value-rescaling --utd-ratio 0.125 --no-apex-epsilon
are the settings before R2D2's parts.

    python recipes/drqn.py                                  # CartPoleNoVel-v1
    python recipes/drqn.py --env-id AcrobotNoVel-v1         # a swing-up without velocities
    python recipes/drqn.py --env-id CartPole-v1 --total-frames 60000
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from tdrl import keys, trainers
from tdrl.trainers import config

if TYPE_CHECKING:
    from tensordict import TensorDictBase


@trainers.configclass
class Config:
    compiled_steps: ClassVar[bool] = True  # --compile applies to its updates (not --cudagraphs)
    run: config.RunConfig = config.configure(
        config.Q_LEARNING_RUN, env_id="CartPoleNoVel-v1", total_frames=100_000, num_envs=8,
        checkpoint_every=50_000,
    )  # fmt: skip
    replay: config.ReplayConfig = config.ReplayConfig(
        buffer_size=50_000, batch_size=32, init_random_frames=2_000, utd_ratio=0.25
    )
    q: config.QLearningConfig = config.QLearningConfig(
        frames_per_batch=64, hidden_sizes=(64,), eps_frames=20_000
    )
    slice_len: int = 8
    """steps per replayed sequence."""
    burn_in: int = 2
    """steps at the start of each sequence that only warm the state up."""
    recurrent_size: int = 64
    """LSTM width."""
    pad: bool = True
    """R2D2's sequences: a slice starts at any stored step and is padded past its episode's end
    (masked out of the loss), so an episode's last steps are replayed as often as its others;
    --no-pad: only slices that fit inside one episode."""
    per: config.PERConfig = config.PERConfig(n_steps=3, prioritized=True)
    value_rescaling: bool = True
    """learn h(Q), R2D2's invertible value rescaling (--no-value-rescaling: Q itself)."""
    apex_epsilon: bool = True
    """each env anneals (over --eps-frames) to its own final epsilon, 0.4^(1 + 7 i/(N - 1)) for
    env i of N, Ape-X's and R2D2's actors' (which hold them fixed: --eps-frames 0); --eps-end is
    then unused (--no-apex-epsilon: every env anneals to --eps-end)."""


def main(cfg: Config) -> dict[str, float]:
    """Train DRQN; returns the final greedy evaluation, the best one, and the counters."""
    # the library loads here, after the command line: --help answers without it
    import torch
    from tensordict.nn import TensorDictSequential

    from tdrl.data import make_replay_buffer, transitions
    from tdrl.keys import EMBED, OBSERVATION
    from tdrl.modules import EpsilonGreedy, LSTMModule, QValueActor, apex_epsilons, flat_dims, mlp
    from tdrl.objectives import DRQNLoss, HardUpdate, update_priority

    cfg.run.refuse_cudagraphs(
        "drqn.py", "cannot be captured: its LSTM cuts each replayed slice where an episode "
        "starts and its loss checks the slices' masks, both read on the host",
    )  # fmt: skip
    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.make_envs(cfg.run, actions="discrete")
    device = cfg.run.torch_device
    obs_dim, num_actions = flat_dims(env.observation_spec, env.action_spec)

    # 2. networks: LSTM -> Q head (greedy); epsilon-greedy on top acts only while collecting
    lstm = LSTMModule(obs_dim, cfg.recurrent_size, in_key=OBSERVATION, out_key=EMBED)
    head = QValueActor(mlp(cfg.recurrent_size, num_actions, cfg.q.hidden_sizes), in_key=EMBED)
    qnet = TensorDictSequential(lstm, head)
    eps_end = apex_epsilons(cfg.run.num_envs) if cfg.apex_epsilon else cfg.q.eps_end
    exploration = EpsilonGreedy(
        num_actions, eps_init=cfg.q.eps_init, eps_end=eps_end, annealing_num_steps=cfg.q.eps_frames
    )
    policy = TensorDictSequential(qnet, exploration)

    # 3. loss, target copies, optimizer, buffer of per-env streams (slices stay in one episode),
    #    collector acting with the policy from the first step (epsilon starts at 1: no uniform
    #    random warm-up, so every stored step carries the recurrent state it acted from)
    loss = DRQNLoss(qnet, burn_in=cfg.burn_in, n_steps=cfg.per.n_steps,
                    value_rescaling=cfg.value_rescaling, gamma=cfg.q.gamma)  # fmt: skip
    target = HardUpdate(loss, value_network_update_interval=cfg.q.target_update_interval)
    loss.to(device)
    policy.to(device)
    optimizer = torch.optim.Adam(qnet.parameters(), lr=cfg.q.lr)
    if cfg.per.prioritized and not cfg.pad:
        raise ValueError("--prioritized draws padded slices by priority: it needs --pad")
    # the n-step return is the loss's, inside each slice: the buffer returns single steps
    per = {**cfg.per.buffer_kwargs(), "n_steps": 1}
    buffer = make_replay_buffer(cfg.replay.buffer_size, **per, generator=cfg.run.seed,
                                device=device)  # fmt: skip
    collector = trainers.make_collector(cfg.run, env, policy, cfg.q.frames_per_batch)

    # 4. the update step on a batch of slices, compiled (--compile); the priorities and the
    #    target copies outside
    def learn(slices: TensorDictBase) -> TensorDictBase:
        out = loss(slices)
        trainers.optimizer_step(out[keys.LOSS], optimizer, max_grad_norm=cfg.q.max_grad_norm)
        return out.detach()

    update = trainers.compiled_step(learn, optimizer, **cfg.run.compile_options())

    # 5. the loop: store each batch, step epsilon, then the gradient steps due on slices
    state = {"loss": loss, "optimizer": optimizer, "policy": policy, "buffer": buffer}
    with trainers.Run.from_config(cfg, "DRQN", state, eval_env=eval_env, policy=qnet) as run:
        for batch in run.resume(collector):
            buffer.extend(transitions(batch))
            exploration.step(collector.frames - int(exploration.frames))  # epsilon: env steps
            cfg.per.anneal(buffer, collector.frames, cfg.run.total_frames)  # PER's beta -> 1
            for step in run.gradient_steps(cfg.replay.init_random_frames, cfg.replay.utd_ratio):
                slices = buffer.sample_slices(cfg.replay.batch_size, cfg.slice_len, pad=cfg.pad)
                out = update(slices)
                if cfg.per.prioritized:  # each slice's start: 0.9 max + 0.1 mean |TD error|
                    update_priority(buffer, slices, out)
                target.step(step)  # counted from the run's steps: on time after a resume
                run.record({keys.LOSS: out[keys.LOSS], "q": out[keys.CHOSEN_ACTION_VALUE]})
            run.step({"epsilon": exploration.eps})  # push weights, log, evaluate, checkpoint
        # 6. report: final evaluation (and the best one), curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
