"""tdrl's DQN update against SB3's on equal weights and equal batches: the same numbers or not.

A learning-curve gap between two libraries that claim the same settings is either a difference in
the update or the spread of seeds. This script takes the first out: it builds recipes/dqn.py's Q
network and loss with the MinAtar table's settings (``minatar_table.PUBLISHED``: Huber loss, no
double Q, Adam lr 2.5e-4, gradient norm 10, gamma 0.99) and SB3's ``DQN`` with the table's
arguments and tdrl's MinAtarCNN body (``minatar_table.run_sb3``'s policy), copies tdrl's initial
weights into SB3's online and target networks, and steps both on the same batches of real
transitions: tdrl's loss, ``optimizer_step`` and ``HardUpdate`` as the recipe writes them, SB3's
own ``DQN.train`` (its replay buffer's ``sample`` answers with the batch) and ``_on_step`` (its
target copy). It prints each library's loss and the largest parameter difference after each
update. ``--task CartPole-v1`` runs the rl-baselines3-zoo CartPole network (256x256 MLP) instead.

    python benchmarks/parity_dqn.py                       # MinAtar/Breakout-v1, 30 updates
    python benchmarks/parity_dqn.py --task CartPole-v1 --updates 50

Float32 on the CPU, one thread: the same maths in the same order, through other kernels (tdrl's
fused Adam and its own gradient clip, SB3's single-tensor Adam and ``clip_grad_norm_``), so the
weights differ by rounding (about one float32 ulp of the largest weights, up to a few 1e-8 here)
unless the update differs. ``--max-grad-norm`` sets both libraries' clip (the table's 10 rarely
binds on these losses; a small one makes every update clip).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import minatar_table as mtab  # noqa: E402


def transitions(env: Any, count: int, seed: int) -> dict[str, torch.Tensor]:
    """``count`` uniformly random transitions of a gymnasium env (a terminated step's next
    observation is the real one; an episode end resets)."""
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    rows: dict[str, list[Any]] = {k: [] for k in ("obs", "action", "reward", "next", "term")}
    while len(rows["obs"]) < count:
        action = env.action_space.sample()
        nxt, reward, term, trunc, _ = env.step(action)
        for key, value in zip(rows, (obs, action, reward, nxt, term), strict=True):
            rows[key].append(value)
        obs = env.reset()[0] if term or trunc else nxt
    return {k: torch.as_tensor(np.stack(v)) for k, v in rows.items()}


class Step(NamedTuple):
    """One update of both libraries: their losses and the largest weight difference after it."""

    loss_tdrl: float
    loss_sb3: float
    max_weight_difference: float


def compare(
    task: str, updates: int, batch_size: int, target_every: int, max_grad_norm: float = 10.0
) -> tuple[list[Step], float]:
    """Both libraries' DQN from tdrl's initial weights, stepped on the same ``updates`` batches
    of ``batch_size`` random transitions of ``task``, gradients clipped at ``max_grad_norm``;
    ``(steps, largest weight)``."""
    import gymnasium as gym
    from stable_baselines3 import DQN
    from stable_baselines3.common.type_aliases import ReplayBufferSamples
    from tensordict import TensorDict

    import tdrl.envs  # noqa: F401  # registers MinAtar/<Game>-v1
    from recipes import dqn
    from tdrl import keys, trainers
    from tdrl.objectives import HardUpdate

    minatar = task.startswith("MinAtar/")
    values = dict(mtab.PUBLISHED, target_update_interval=target_every, double_dqn=False,
                  max_grad_norm=max_grad_norm)  # fmt: skip
    if not minatar:
        values["hidden_sizes"] = (256, 256)
    cfg = trainers.configure(dqn.Config, env_id=task, **values)
    env, _ = trainers.make_envs(cfg.run, actions="discrete")
    inputs = cfg.goals.inputs(env.observation_spec, images=True)
    qnet, loss = dqn.q_network_and_loss(cfg, inputs, env.action_spec)
    target = HardUpdate(loss, value_network_update_interval=cfg.q.target_update_interval)
    optimizer = trainers.adam((qnet.parameters(), cfg.q.lr))

    sb3_env = gym.make(task)
    kwargs = mtab.sb3_settings("dqn", task)
    assert kwargs is not None
    kwargs |= dict(target_update_interval=target_every, max_grad_norm=max_grad_norm)
    if minatar:
        policy = "CnnPolicy"
        policy_kwargs = dict(features_extractor_class=mtab.minatar_features(), net_arch=[],
                             normalize_images=False)  # fmt: skip
    else:
        policy, policy_kwargs = "MlpPolicy", dict(net_arch=[256, 256])
    model = DQN(policy, sb3_env, seed=0, device="cpu", policy_kwargs=policy_kwargs, **kwargs)
    model._setup_learn(total_timesteps=10 * updates)
    ours, theirs = list(qnet.parameters()), list(model.q_net.parameters())
    shapes = [tuple(p.shape) for p in ours], [tuple(p.shape) for p in theirs]
    if shapes[0] != shapes[1]:
        raise ValueError(f"the networks differ: tdrl {shapes[0]}, SB3 {shapes[1]}")
    with torch.no_grad():
        for mine, peer in zip(ours, theirs, strict=True):
            peer.copy_(mine)
    model.q_net_target.load_state_dict(model.q_net.state_dict())

    data = transitions(sb3_env, updates * batch_size, seed=1)
    steps = []
    for update in range(updates):
        rows = slice(update * batch_size, (update + 1) * batch_size)
        obs, action, reward = data["obs"][rows], data["action"][rows], data["reward"][rows]
        nxt, term = data["next"][rows], data["term"][rows]
        batch = TensorDict({
            keys.OBSERVATION: obs, keys.ACTION: action[:, None],
            keys.NEXT: {keys.OBSERVATION: nxt, keys.REWARD: reward[:, None].float(),
                        keys.TERMINATED: term[:, None], keys.DONE: term[:, None],
                        keys.TRUNCATED: torch.zeros_like(term[:, None])},
        }, [batch_size])  # fmt: skip
        out = loss(batch)
        trainers.optimizer_step(out[keys.LOSS], optimizer, max_grad_norm=cfg.q.max_grad_norm)
        target.step(update + 1)

        samples = ReplayBufferSamples(
            obs.float(), action[:, None].long(), nxt.float(), term[:, None].float(),
            reward[:, None].float(), None,
        )  # fmt: skip
        model.replay_buffer.sample = lambda *_, s=samples, **__: s  # type: ignore[union-attr]
        model.train(gradient_steps=1, batch_size=batch_size)
        model.num_timesteps += 1
        model._on_step()  # SB3's target copy: every target_update_interval calls
        diff = max((a - b).abs().max().item() for a, b in zip(ours, theirs, strict=True))
        steps.append(Step(out[keys.LOSS].item(), model.logger.name_to_value["train/loss"], diff))
    return steps, max(p.abs().max().item() for p in ours)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="MinAtar/Breakout-v1")
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--target-every", type=int, default=10, help="updates between copies")
    parser.add_argument("--max-grad-norm", type=float, default=10.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    steps, scale = compare(
        args.task, args.updates, args.batch_size, args.target_every, args.max_grad_norm
    )
    print(f"{args.task}: {args.updates} updates of {args.batch_size} random transitions; "
          f"target copied every {args.target_every}; gradient norm clipped at "
          f"{args.max_grad_norm:g}")  # fmt: skip
    for update, step in enumerate(steps, 1):
        if update <= 3 or update % 10 == 0 or update == len(steps):
            print(f"  update {update:3d}: loss tdrl {step.loss_tdrl:.9f}  SB3 {step.loss_sb3:.9f}"
                  f"  max |weight difference| {step.max_weight_difference:.2e}")  # fmt: skip
    worst = max(step.max_weight_difference for step in steps)
    print(f"largest weight difference over the run: {worst:.2e} (largest weight {scale:.3f})")


if __name__ == "__main__":
    main()
