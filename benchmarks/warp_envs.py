"""MuJoCo Warp's worlds against gymnasium's CPU envs: env steps per second, same task, same run.

Rows (Hopper-v5 by default):
- "gymnasium sync N": gymnasium's SyncVectorEnv of N envs, random actions (the raw CPU loop);
- "tdrl Collector, N gymnasium envs": tdrl's Collector over them with the 64x64 tanh Gaussian
  policy of ``benchmarks/collector.py`` (on ``--device``);
- "warp N worlds": ``WarpVecEnv.step`` with random actions drawn on the device;
- "tdrl DeviceCollector, N worlds": the same policy collecting ``[N, T]`` batches from them.
Each figure is the best of ``--rounds`` interleaved rounds after a warm-up (the first call
captures the graphs and, on a fresh machine, compiles Warp's kernels); ratios are against the
first gymnasium row of the same run.

    python benchmarks/warp_envs.py                                   # CPU: 16, 64, 256 worlds
    python benchmarks/warp_envs.py --device cuda --worlds 1024 4096 16384
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import torch
from collector import GaussianMLP
from tensordict.nn import TensorDictModule

from tdrl.collectors import Collector, DeviceCollector
from tdrl.envs import make_vec_env


def policy_module(obs_dim: int, act_dim: int, device: torch.device) -> TensorDictModule:
    net = GaussianMLP(obs_dim, act_dim).to(device)
    return TensorDictModule(
        net, in_keys=["observation"], out_keys=["action", "loc", "scale", "action_log_prob"]
    )


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gym_random(env_id: str, n: int, seconds: float) -> float:
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * n)
    envs.reset(seed=0)
    envs.action_space.seed(0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        envs.step(envs.action_space.sample())
        steps += n
    envs.close()
    return steps / (time.perf_counter() - start)


def collector_rate(collector: Collector | DeviceCollector, device: torch.device,
                   seconds: float) -> float:  # fmt: skip
    collector.rollout()  # warm-up: graphs, kernels, allocator
    sync(device)
    frames, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        collector.rollout()
        frames += collector.frames_per_batch
    sync(device)
    return frames / (time.perf_counter() - start)


def warp_random(env_id: str, n: int, device: torch.device, seconds: float) -> float:
    env = make_vec_env(env_id, n, seed=0, backend="mujoco_warp", device=device)
    env.reset()
    g = torch.Generator().manual_seed(0)
    for _ in range(3):  # warm-up: capture
        env.step(env.rand_action(g))
    sync(device)
    steps, start = 0, time.perf_counter()
    low, high = env._low, env._high
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            action = low + (high - low) * torch.rand(env.action_spec.shape, device=device)
            env.step(action)
        sync(device)
        steps += 10 * n
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env-id", default="Hopper-v5")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--worlds", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--cpu-envs", type=int, default=16)
    parser.add_argument("--steps-per-batch", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    probe = gym.make(args.env_id)
    obs_dim, act_dim = probe.observation_space.shape[0], probe.action_space.shape[0]
    probe.close()
    rows: dict[str, list[float]] = {}

    def record(name: str, value: float) -> None:
        rows.setdefault(name, []).append(value)

    cpu_env = make_vec_env(args.env_id, args.cpu_envs, seed=0)
    cpu_collector = Collector(cpu_env, policy_module(obs_dim, act_dim, device),
                              args.cpu_envs * args.steps_per_batch)  # fmt: skip
    warp = {}
    for n in args.worlds:
        env = make_vec_env(args.env_id, n, seed=0, backend="mujoco_warp", device=device)
        warp[n] = DeviceCollector(env, policy_module(obs_dim, act_dim, device),
                                  n * args.steps_per_batch)  # fmt: skip
    for _ in range(args.rounds):
        record(f"gymnasium sync {args.cpu_envs}, random", gym_random(args.env_id, args.cpu_envs,
                                                                     args.seconds))  # fmt: skip
        record(f"tdrl Collector, {args.cpu_envs} gymnasium envs, MLP",
               collector_rate(cpu_collector, device, args.seconds))  # fmt: skip
        for n in args.worlds:
            record(f"warp {n} worlds, random", warp_random(args.env_id, n, device, args.seconds))
            record(f"tdrl DeviceCollector, {n} worlds, MLP",
                   collector_rate(warp[n], device, args.seconds))  # fmt: skip
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{args.env_id} on {name}: env steps/s, best of {args.rounds} rounds of "
          f"{args.seconds:.0f} s; policy on {device}")  # fmt: skip
    base = max(rows[f"gymnasium sync {args.cpu_envs}, random"])
    for row, values in rows.items():
        best = max(values)
        print(f"  {row:<44} {best:>12,.0f}   {best / base:7.2f}x gymnasium sync")


if __name__ == "__main__":
    main()
