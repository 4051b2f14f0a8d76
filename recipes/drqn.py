"""DRQN (Hausknecht & Stone 2015, arXiv 1507.06527) with R2D2's stored state and burn-in
(Kapturowski et al. 2019) on a partially observed task.

An LSTM on the observation, then a Q head; epsilon-greedy on top while collecting (from the first
step: the collector always runs the policy, so every stored step carries the recurrent state it
acted from). Gradient steps sample ``batch_size`` slices of ``slice_len`` steps of one episode
from the replay buffer, replay each from its stored state, leave the first ``burn_in`` steps out
of the loss, and bootstrap from a hard-updated target network with double Q (see
``tdrl.objectives.DRQNLoss``). Slices never cross an episode end and episodes shorter than
``slice_len`` are never replayed, so ``slice_len`` must stay below the typical episode length of
a poor policy (8 on CartPole), or terminal steps are hardly ever learned from.

Status: on CartPole-v1 (60k steps) the greedy evaluation reaches 150-215. On CartPoleNoVel-v1
these settings have not learned within 100k steps (neither did a longer burn-in, larger batches,
more gradient steps or a faster epsilon decay): the recurrent PPO recipe (``ppo.py --recurrent
lstm``) is the one that solves it. A likely cause, not yet fixed: slices stay inside one
episode, so an episode's last steps, the terminal one included, are covered by fewer slices than
its middle steps (R2D2 pads sequences across episode ends instead). ``--init-random-frames``
only delays learning here: the policy acts from the first step.

    python recipes/drqn.py --env-id CartPole-v1 --total-frames 60000
    python recipes/drqn.py                                  # CartPoleNoVel-v1 (see Status)
"""

from __future__ import annotations

from tdrl import keys, trainers
from tdrl.trainers import config


@trainers.configclass
class Config:
    run: config.RunConfig = config.RunConfig(
        env_id="CartPoleNoVel-v1", total_frames=100_000, num_envs=8, eval_every=5_000,
        log_every=1_000, checkpoint_every=50_000,
    )  # fmt: skip
    replay: config.ReplayConfig = config.ReplayConfig(
        buffer_size=50_000, batch_size=32, init_random_frames=2_000, utd_ratio=0.125
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
    per: config.PERConfig = config.PERConfig()
    value_rescaling: bool = False
    """learn h(Q), R2D2's invertible value rescaling."""


def main(cfg: Config) -> dict[str, float]:
    """Train DRQN; returns the final greedy evaluation, the best one, and the counters."""
    # the library loads here, after the command line: --help answers without it
    import torch
    from tensordict.nn import TensorDictSequential

    from tdrl.data import make_replay_buffer, transitions
    from tdrl.keys import EMBED, OBSERVATION
    from tdrl.modules import EpsilonGreedy, LSTMModule, QValueActor, flat_dims, mlp
    from tdrl.objectives import DRQNLoss, HardUpdate, update_priority

    # 1. envs: seeds and threads, the training envs and a separate evaluation env
    env, eval_env = trainers.make_envs(cfg.run, actions="discrete")
    device = cfg.run.torch_device
    obs_dim, num_actions = flat_dims(env.observation_spec, env.action_spec)

    # 2. networks: LSTM -> Q head (greedy); epsilon-greedy on top acts only while collecting
    lstm = LSTMModule(obs_dim, cfg.recurrent_size, in_key=OBSERVATION, out_key=EMBED)
    head = QValueActor(mlp(cfg.recurrent_size, num_actions, cfg.q.hidden_sizes), in_key=EMBED)
    qnet = TensorDictSequential(lstm, head)
    exploration = EpsilonGreedy(
        num_actions, eps_init=cfg.q.eps_init, eps_end=cfg.q.eps_end,
        annealing_num_steps=cfg.q.eps_frames,
    )  # fmt: skip
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

    # 4. the loop: store each batch, step epsilon, then the gradient steps due on slices
    state = {"loss": loss, "optimizer": optimizer, "policy": policy}
    with trainers.Run.from_config(
        cfg.run, "DRQN", state, eval_env=eval_env, policy=qnet, buffer=buffer, config=cfg
    ) as run:
        for batch in run.resume(collector):
            buffer.extend(transitions(batch))
            exploration.step(collector.frames - int(exploration.frames))  # epsilon: env steps
            cfg.per.anneal(buffer, collector.frames, cfg.run.total_frames)  # PER's beta -> 1
            for update in run.gradient_steps(cfg.replay.init_random_frames, cfg.replay.utd_ratio):
                slices = buffer.sample_slices(cfg.replay.batch_size, cfg.slice_len, pad=cfg.pad)
                out = loss(slices)
                if cfg.per.prioritized:  # each slice's start: 0.9 max + 0.1 mean |TD error|
                    update_priority(buffer, slices, out)
                trainers.optimizer_step(
                    out[keys.LOSS], optimizer, max_grad_norm=cfg.q.max_grad_norm
                )
                target.step(update)  # counted from the run's steps: on time after a resume
                run.record({keys.LOSS: out[keys.LOSS], "q": out[keys.CHOSEN_ACTION_VALUE]})
            run.step({"epsilon": exploration.eps})  # push weights, log, evaluate, checkpoint
        # 5. report: final evaluation (and the best one), curve.png, CSV and TensorBoard logs
        return run.report()


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
