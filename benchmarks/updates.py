"""Update throughput of tdrl against SB3, Tianshou and TorchRL, all in one run.

PPO section: one PPO update phase on a fixed batch of Hopper shapes (observation 11, action 3),
16,384 samples, 10 epochs of minibatch 64, 64x64 tanh MLPs for actor and critic, Gaussian policy
with a state-independent log-std, advantages and returns precomputed, Adam (lr 3e-4), gradient
clipping at 0.5, clip epsilon 0.2, advantage normalization, no entropy bonus. Every library runs
its own update code on the same data: SB3 ``PPO.train()`` on a filled rollout buffer, Tianshou
``PPO._update_with_batch``, TorchRL ``ClipPPOLoss`` in an index-and-step loop (plain indexing is
cheaper than its replay-buffer sampler, so this favours TorchRL), tdrl ``ppo_update``. Every
library runs on one thread (``torch.set_num_threads(1)``): the figure is the library overhead
around the same small networks, and ratios within a run are what to compare.

Usage: ``python benchmarks/updates.py [--quick] [--sections ppo]``.
Sections for other algorithms (SAC, DQN) are added to ``SECTIONS``.
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

OBS_DIM, ACT_DIM = 11, 3
LR, MAX_GRAD_NORM, CLIP = 3e-4, 0.5, 0.2


def ppo_data(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """A synthetic rollout: actions from N(0, 1), whose log-prob is the behaviour log-prob."""
    g = torch.Generator().manual_seed(seed)
    action = torch.randn(n, ACT_DIM, generator=g)
    log_prob = (-0.5 * action.pow(2) - 0.5 * math.log(2 * math.pi)).sum(-1)
    value = torch.randn(n, 1, generator=g)
    advantage = torch.randn(n, 1, generator=g)
    return {
        "observation": torch.randn(n, OBS_DIM, generator=g),
        "action": action,
        "action_log_prob": log_prob,
        "state_value": value,
        "advantage": advantage,
        "value_target": value + advantage,
    }


def bench_tdrl(data: dict[str, torch.Tensor], epochs: int, minibatch: int) -> float:
    from tensordict import TensorDict

    from tdrl.modules import POLICY_GAIN, GaussianActor, ValueCritic, mlp
    from tdrl.objectives import ClipPPOLoss, ppo_update

    actor = GaussianActor(mlp(OBS_DIM, ACT_DIM, output_gain=POLICY_GAIN), ACT_DIM)
    critic = ValueCritic(mlp(OBS_DIM, 1))
    loss = ClipPPOLoss(actor, critic, clip_epsilon=CLIP, critic_coeff=0.5)
    optimizer = torch.optim.Adam(loss.parameters(), lr=LR, eps=1e-5, fused=True)
    batch = TensorDict(data, batch_size=[len(data["action"])])
    start = time.perf_counter()
    ppo_update(
        loss, optimizer, batch, epochs=epochs, minibatch_size=minibatch, max_grad_norm=MAX_GRAD_NORM
    )
    return time.perf_counter() - start


def bench_sb3(data: dict[str, torch.Tensor], epochs: int, minibatch: int) -> float:
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import DummyVecEnv

    class Shapes(gym.Env):
        observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
        action_space = gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)

    n_envs = 8
    n_steps = len(data["action"]) // n_envs
    model = PPO(
        "MlpPolicy",
        DummyVecEnv([Shapes] * n_envs),
        learning_rate=LR,
        n_steps=n_steps,
        batch_size=minibatch,
        n_epochs=epochs,
        clip_range=CLIP,
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=MAX_GRAD_NORM,
        device="cpu",
        seed=0,
    )
    model.set_logger(configure(None, [""]))
    buffer = model.rollout_buffer

    def fill(name: str, value: torch.Tensor) -> None:
        getattr(buffer, name)[:] = value.numpy().reshape(getattr(buffer, name).shape)

    fill("observations", data["observation"])
    fill("actions", data["action"])
    fill("log_probs", data["action_log_prob"])
    fill("values", data["state_value"])
    fill("advantages", data["advantage"])
    fill("returns", data["value_target"])
    buffer.full = True
    model._current_progress_remaining = 1.0
    start = time.perf_counter()
    model.train()
    return time.perf_counter() - start


def bench_tianshou(data: dict[str, torch.Tensor], epochs: int, minibatch: int) -> float:
    import gymnasium as gym
    from tianshou.algorithm import PPO
    from tianshou.algorithm.modelfree.reinforce import ProbabilisticActorPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Batch
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.continuous import ContinuousActorProbabilistic, ContinuousCritic
    from torch.distributions import Independent, Normal

    # As in Tianshou's MuJoCo PPO example (examples/mujoco/mujoco_ppo.py).
    net_a = Net(state_shape=OBS_DIM, hidden_sizes=[64, 64], activation=nn.Tanh)
    actor = ContinuousActorProbabilistic(preprocess_net=net_a, action_shape=ACT_DIM, unbounded=True)
    net_c = Net(state_shape=OBS_DIM, hidden_sizes=[64, 64], activation=nn.Tanh)
    critic = ContinuousCritic(preprocess_net=net_c)

    def dist_fn(loc_scale: tuple[torch.Tensor, torch.Tensor]) -> Independent:
        return Independent(Normal(*loc_scale), 1)

    policy = ProbabilisticActorPolicy(
        actor=actor,
        dist_fn=dist_fn,
        action_space=gym.spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32),
    )
    algorithm = PPO(
        policy=policy,
        critic=critic,
        optim=AdamOptimizerFactory(lr=LR),
        eps_clip=CLIP,
        vf_coef=0.5,
        ent_coef=0.0,
        max_grad_norm=MAX_GRAD_NORM,
    )
    # The types Tianshou's own preprocessing gives: numpy observations, torch for the rest.
    batch = Batch(
        obs=data["observation"].numpy(),
        act=data["action"],
        logp_old=data["action_log_prob"],
        v_s=data["state_value"].flatten(),
        adv=data["advantage"].flatten(),
        returns=data["value_target"].flatten(),
        info=Batch(),
    )
    start = time.perf_counter()
    algorithm._update_with_batch(batch, batch_size=minibatch, repeat=epochs)
    return time.perf_counter() - start


def bench_torchrl(data: dict[str, torch.Tensor], epochs: int, minibatch: int) -> float:
    from tensordict import TensorDict
    from tensordict.nn import AddStateIndependentNormalScale, TensorDictModule
    from torchrl.modules import MLP, IndependentNormal, ProbabilisticActor, ValueOperator
    from torchrl.objectives import ClipPPOLoss

    def net(out: int) -> nn.Module:
        return MLP(
            in_features=OBS_DIM, out_features=out, num_cells=[64, 64], activation_class=nn.Tanh
        )

    actor = ProbabilisticActor(
        TensorDictModule(
            nn.Sequential(net(ACT_DIM), AddStateIndependentNormalScale(ACT_DIM)),
            in_keys=["observation"],
            out_keys=["loc", "scale"],
        ),
        in_keys=["loc", "scale"],
        distribution_class=IndependentNormal,
        return_log_prob=True,
    )
    critic = ValueOperator(net(1), in_keys=["observation"])
    loss = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=CLIP,
        entropy_coeff=0.0,
        critic_coeff=0.5,
        loss_critic_type="l2",
        normalize_advantage=True,
    )
    optimizer = torch.optim.Adam(loss.parameters(), lr=LR)
    n = len(data["action"])
    batch = TensorDict(data, batch_size=[n])
    start = time.perf_counter()
    for _ in range(epochs):
        perm = torch.randperm(n)
        for i in range(0, n, minibatch):
            out = loss(batch[perm[i : i + minibatch]])
            total = out["loss_objective"] + out["loss_critic"]
            optimizer.zero_grad()
            total.backward()
            torch.nn.utils.clip_grad_norm_(loss.parameters(), MAX_GRAD_NORM)
            optimizer.step()
    return time.perf_counter() - start


PPO_PEERS: dict[str, Callable[[dict[str, torch.Tensor], int, int], float]] = {
    "tdrl": bench_tdrl,
    "SB3": bench_sb3,
    "Tianshou": bench_tianshou,
    "TorchRL": bench_torchrl,
}


def section_ppo(quick: bool) -> None:
    samples, epochs, minibatch = (2048, 2, 64) if quick else (16384, 10, 64)
    data = ppo_data(samples)
    print(f"PPO update: {samples} samples x {epochs} epochs, minibatch {minibatch}, 1 thread")
    rates = {}
    for name, bench in PPO_PEERS.items():
        bench(ppo_data(256), 1, minibatch)  # warm-up: imports, allocator, first-call costs
        seconds = bench(data, epochs, minibatch)
        rates[name] = samples * epochs / seconds
    best_peer = max(rate for name, rate in rates.items() if name != "tdrl")
    print(f"{'library':<10} {'samples/s':>10} {'vs tdrl':>8}")
    for name, rate in rates.items():
        print(f"{name:<10} {rate:>10,.0f} {rate / rates['tdrl']:>8.2f}")
    print(f"tdrl / fastest peer: {rates['tdrl'] / best_peer:.2f}x (target >= 1.3x)")


SECTIONS: dict[str, Callable[[bool], None]] = {"ppo": section_ppo}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small batch, 2 epochs (smoke run)")
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=list(SECTIONS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=UserWarning)  # Tianshou's action-bound notice
    for name in args.sections:
        SECTIONS[name](args.quick)


if __name__ == "__main__":
    main()
