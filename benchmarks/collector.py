"""Collector throughput: tdrl against raw gymnasium, TorchRL, Tianshou and Stable-Baselines3.

One run prints one table (transitions per second, 8 envs) for HalfCheetah-v5 and Hopper-v5, with a
uniform random policy and with the same 64x64 tanh MLP Gaussian policy wherever the library takes
a user network (TorchRL, tdrl, the raw loops and SB3's DummyVecEnv loop run exactly
``GaussianMLP``; Tianshou and SB3's PPO build their own 64x64 tanh Gaussian actor, and SB3's PPO
also runs its value head, as its ``collect_rollouts`` always does). Every measurement is repeated
``--rounds`` times, interleaved across libraries, and the best round is kept: the machine is
shared, and the best round is the least disturbed one. Ratios are within this one run.
The unit is the transition (what a learner receives): the raw gymnasium and envpool loops run
next-step autoreset, where an env spends the step after an episode end on its reset alone, so
those steps are not counted (on Hopper with a random policy, about one step in twenty).

    python benchmarks/collector.py            # full run (about 8 minutes on 2 shared cores)
    python benchmarks/collector.py --quick    # smoke run (under a minute)
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict.nn import TensorDictModule
from torch import nn

import tdrl
from tdrl import keys
from tdrl.collectors import Collector
from tdrl.envs import make_vec_env

Runner = Callable[[str, bool, int, int], float]
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class GaussianMLP(nn.Module):
    """obs -> (action, loc, scale, log_prob): a 64x64 tanh MLP mean and a state-free log-std."""

    def __init__(self, obs_dim: int, action_dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(obs_dim, 64),
            nn.Tanh(),
            nn.Linear(64, 64),
            nn.Tanh(),
            nn.Linear(64, action_dim),
        )
        self.log_std = nn.Parameter(torch.zeros(action_dim))

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, ...]:
        loc = self.net(observation)
        scale = self.log_std.exp().expand_as(loc)
        noise = torch.randn_like(loc)
        action = loc + scale * noise
        log_prob = -0.5 * noise.pow(2).sum(-1) - (self.log_std.sum() + loc.shape[-1] * LOG_SQRT_2PI)
        return action, loc, scale, log_prob


def _dims(env_id: str) -> tuple[int, int]:
    env = gym.make(env_id)
    dims = env.observation_space.shape[0], env.action_space.shape[0]
    env.close()
    return dims


def _rate(frames: int, start: float) -> float:
    return frames / (time.perf_counter() - start)


def _loop_rate(
    obs: Any,
    step: Callable[[Any], Any],
    random_action: Callable[[], Any],
    policy: Callable[[torch.Tensor], Any] | None,
    num_envs: int,
    frames: int,
    action_dtype: torch.dtype = torch.float32,
) -> float:
    """Transitions per second of a raw loop ``obs, transitions = step(action)`` (``policy``'s
    action, or ``random_action()`` without one), after a 10% warm-up."""
    steps = frames // num_envs
    start, transitions = 0.0, 0
    with torch.no_grad():
        for t in range(steps + steps // 10):
            if t == steps // 10:
                start, transitions = time.perf_counter(), 0
            if policy is not None:
                action = policy(torch.as_tensor(obs, dtype=torch.float32))[0]
                action = action.to(action_dtype).numpy()
            else:
                action = random_action()
            obs, n = step(action)
            transitions += n
    return _rate(transitions, start)


def _next_step_autoreset(step: Callable[[Any], tuple], num_envs: int) -> Callable[[Any], Any]:
    """``step`` of a vector env with next-step autoreset (gymnasium's default, envpool's) as
    ``action -> (obs, transitions)``: an env whose previous step ended spends this step on its
    reset, which collects no transition (tdrl, SB3, Tianshou and TorchRL reset within the step
    and count only transitions)."""
    ended = np.zeros(num_envs, dtype=bool)

    def counted(action: Any) -> tuple[Any, int]:
        nonlocal ended
        obs, _, terminated, truncated, _ = step(action)
        transitions = num_envs - int(ended.sum())
        ended = np.logical_or(terminated, truncated)
        return obs, transitions

    return counted


# ------------------------------------------------------------------------------ raw gymnasium
def _raw(asynchronous: bool) -> Runner:
    def run(env_id: str, mlp: bool, num_envs: int, frames: int) -> float:
        fns = [lambda: gym.make(env_id)] * num_envs
        if asynchronous:
            envs: gym.vector.VectorEnv = gym.vector.AsyncVectorEnv(fns, context="fork")
        else:
            envs = gym.vector.SyncVectorEnv(fns)
        envs.action_space.seed(0)
        policy = GaussianMLP(*_dims(env_id)) if mlp else None
        obs, _ = envs.reset(seed=0)
        step = _next_step_autoreset(envs.step, num_envs)
        rate = _loop_rate(obs, step, envs.action_space.sample, policy, num_envs, frames)
        envs.close()
        return rate

    return run


# ------------------------------------------------------------------------------ envpool
def _raw_envpool(env_id: str, mlp: bool, num_envs: int, frames: int) -> float:
    """envpool's own synchronous step loop (its next-step autoreset, no final observations;
    a step that only resets an env is not counted)."""
    try:
        import envpool
    except ImportError:
        return math.nan
    pool = envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, seed=0)
    policy = GaussianMLP(*_dims(env_id)) if mlp else None
    space = pool.action_space
    rng = np.random.default_rng(0)
    obs, _ = pool.reset()
    return _loop_rate(
        obs, _next_step_autoreset(pool.step, num_envs),
        lambda: rng.uniform(space.low, space.high, (num_envs, *space.shape)),
        policy, num_envs, frames, action_dtype=torch.float64,
    )  # fmt: skip


# ------------------------------------------------------------------------------ tdrl
def _tdrl(mode: str, backend: str = "gymnasium", fast: bool = True) -> Runner:
    def run(env_id: str, mlp: bool, num_envs: int, frames: int) -> float:
        if backend == "envpool":
            try:
                import envpool  # noqa: F401
            except ImportError:
                return math.nan
        previous = tdrl.set_fast(fast)
        try:
            return _tdrl_rate(env_id, mlp, num_envs, frames, mode, backend)
        finally:
            tdrl.set_fast(previous)

    return run


def _tdrl_rate(
    env_id: str, mlp: bool, num_envs: int, frames: int, mode: str, backend: str
) -> float:
    env = make_vec_env(env_id, num_envs, mode=mode, seed=0, backend=backend)
    out_keys = [keys.ACTION, keys.LOC, keys.SCALE, keys.ACTION_LOG_PROB]
    policy = (
        TensorDictModule(GaussianMLP(*_dims(env_id)), [keys.OBSERVATION], out_keys) if mlp else None
    )
    per_batch = max(num_envs, frames // 4 // num_envs * num_envs)
    collector = Collector(env, policy, per_batch)
    collector.rollout()  # warm-up
    start = time.perf_counter()
    for _ in range(4):
        collector.rollout()
    rate = _rate(4 * per_batch, start)
    env.close()
    return rate


# ------------------------------------------------------------------------------ TorchRL
def _torchrl(env_id: str, mlp: bool, num_envs: int, frames: int) -> float:
    from torchrl.collectors import Collector as TorchRLCollector
    from torchrl.envs import DoubleToFloat, GymEnv, SerialEnv, TransformedEnv

    env = TransformedEnv(SerialEnv(num_envs, lambda: GymEnv(env_id)), DoubleToFloat())
    out_keys = [keys.ACTION, keys.LOC, keys.SCALE, keys.ACTION_LOG_PROB]
    policy = (
        TensorDictModule(GaussianMLP(*_dims(env_id)), [keys.OBSERVATION], out_keys) if mlp else None
    )
    per_batch = max(num_envs, frames // 4 // num_envs * num_envs)
    collector = TorchRLCollector(env, policy, frames_per_batch=per_batch, total_frames=-1)
    iterator = iter(collector)
    next(iterator)
    start = time.perf_counter()
    for _ in range(4):
        next(iterator)
    rate = _rate(4 * per_batch, start)
    collector.shutdown()
    return rate


# ------------------------------------------------------------------------------ Tianshou
def _tianshou(env_id: str, mlp: bool, num_envs: int, frames: int) -> float:
    from tianshou.algorithm.modelfree.reinforce import ProbabilisticActorPolicy
    from tianshou.data import Collector as TianshouCollector
    from tianshou.data import VectorReplayBuffer
    from tianshou.env import DummyVectorEnv
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.continuous import ContinuousActorProbabilistic

    envs = DummyVectorEnv([lambda: gym.make(env_id)] * num_envs)
    obs_dim, action_dim = _dims(env_id)
    net = Net(state_shape=obs_dim, hidden_sizes=[64, 64], activation=nn.Tanh)
    actor = ContinuousActorProbabilistic(
        preprocess_net=net, action_shape=action_dim, unbounded=True
    )

    def dist_fn(loc_scale: tuple[torch.Tensor, torch.Tensor]) -> torch.distributions.Distribution:
        return torch.distributions.Independent(torch.distributions.Normal(*loc_scale), 1)

    policy = ProbabilisticActorPolicy(
        actor=actor, dist_fn=dist_fn, action_space=envs.action_space[0], action_scaling=False
    )
    buffer = VectorReplayBuffer(frames + 10 * num_envs, num_envs)
    collector = TianshouCollector(policy, envs, buffer)
    collector.reset()
    collector.collect(n_step=frames // 10 + num_envs, random=not mlp)
    start = time.perf_counter()
    stats = collector.collect(n_step=frames, random=not mlp)
    rate = _rate(stats.n_collected_steps, start)
    envs.close()
    return rate


# ------------------------------------------------------------------------------ SB3
def _sb3_dummy(env_id: str, mlp: bool, num_envs: int, frames: int) -> float:
    from stable_baselines3.common.vec_env import DummyVecEnv

    envs = DummyVecEnv([lambda: gym.make(env_id)] * num_envs)
    envs.seed(0)
    obs = envs.reset()
    policy = GaussianMLP(*_dims(env_id)) if mlp else None
    low, high = envs.action_space.low, envs.action_space.high
    rng = np.random.default_rng(0)
    rate = _loop_rate(
        obs, lambda a: (envs.step(a)[0], num_envs),  # same-step autoreset: all transitions
        lambda: rng.uniform(low, high, size=(num_envs, *low.shape)).astype(np.float32),
        policy, num_envs, frames,
    )  # fmt: skip
    envs.close()
    return rate


def _sb3_ppo(env_id: str, mlp: bool, num_envs: int, frames: int) -> float:
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    if not mlp:
        return float("nan")  # collect_rollouts always runs PPO's own policy
    envs = DummyVecEnv([lambda: gym.make(env_id)] * num_envs)
    steps = max(1, frames // num_envs)
    arch = {"pi": [64, 64], "vf": [64, 64]}
    model = PPO(
        "MlpPolicy",
        envs,
        n_steps=steps,
        batch_size=steps * num_envs,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": arch},
    )
    _, callback = model._setup_learn(10 * steps * num_envs, callback=None)
    callback.on_training_start(locals(), globals())
    model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=steps)
    start = time.perf_counter()
    model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=steps)
    rate = _rate(steps * num_envs, start)
    envs.close()
    return rate


RUNNERS: dict[str, Runner] = {
    "gymnasium sync (raw loop)": _raw(asynchronous=False),
    "gymnasium async (raw loop)": _raw(asynchronous=True),
    "TorchRL Collector, SerialEnv": _torchrl,
    "Tianshou Collector, DummyVectorEnv": _tianshou,
    "SB3 DummyVecEnv (raw loop)": _sb3_dummy,
    "SB3 PPO collect_rollouts": _sb3_ppo,
    "tdrl Collector, sync": _tdrl("sync"),
    "tdrl Collector, sync, plain (TDRL_FAST=0)": _tdrl("sync", fast=False),
    "tdrl Collector, async": _tdrl("async"),
    "envpool (raw loop)": _raw_envpool,
    "tdrl Collector, envpool": _tdrl("sync", backend="envpool"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run, one round")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--frames", type=int, default=None, help="frames per measurement")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--envs", nargs="+", default=["HalfCheetah-v5", "Hopper-v5"])
    args = parser.parse_args()
    frames = args.frames or (1_600 if args.quick else 8_000)
    rounds = args.rounds or (1 if args.quick else 2)
    torch.set_num_threads(1)  # every library runs its policy on one thread
    warnings.filterwarnings("ignore")

    columns = [(env_id, mlp) for env_id in args.envs for mlp in (False, True)]
    best: dict[tuple[str, str, bool], float] = {}
    for _ in range(rounds):
        for name, runner in RUNNERS.items():
            for env_id, mlp in columns:
                rate = runner(env_id, mlp, args.num_envs, frames)
                key = (name, env_id, mlp)
                best[key] = max(best.get(key, 0.0), rate) if not math.isnan(rate) else rate

    heads = [f"{env_id.split('-')[0]} {'MLP' if mlp else 'random'}" for env_id, mlp in columns]
    print(f"\ntransitions/s, {args.num_envs} envs, best of {rounds} round(s) of {frames} frames;")
    print("(x) = ratio to gymnasium sync with the same policy; [x] = ratio to SB3 PPO rollouts\n")
    width = 36
    print(f"{'':{width}}" + "".join(f"{h:>26}" for h in heads))
    raw = "gymnasium sync (raw loop)"
    for name in RUNNERS:
        cells = []
        for env_id, mlp in columns:
            rate = best[(name, env_id, mlp)]
            if math.isnan(rate):
                cells.append(f"{'-':>26}")
                continue
            cell = f"{rate:8.0f} ({rate / best[(raw, env_id, mlp)]:.2f}x)"
            if mlp:
                cell += f" [{rate / best[('SB3 PPO collect_rollouts', env_id, True)]:.2f}x]"
            cells.append(f"{cell:>26}")
        print(f"{name:{width}}" + "".join(cells))
    print(
        "\ntargets: tdrl random >= 0.90x gymnasium sync (random); "
        "tdrl MLP >= 1.50x SB3 PPO collect_rollouts"
    )
    pool, ours = "envpool (raw loop)", "tdrl Collector, envpool"
    if not math.isnan(best.get((pool, columns[0][0], False), math.nan)):
        print("envpool: tdrl Collector on envpool / raw envpool loop (same policy):")
        for env_id, mlp in columns:
            ratio = best[(ours, env_id, mlp)] / best[(pool, env_id, mlp)]
            kind = "MLP" if mlp else "random"
            print(f"  {env_id} {kind}: {ratio:.2f}x (target >= 0.9x)")


if __name__ == "__main__":
    main()
