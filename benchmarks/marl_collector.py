"""Multi-agent collector throughput: tdrl's ``MultiAgentCollector`` over its VMAS env against
TorchRL's ``Collector`` over TorchRL's ``VmasEnv``, and raw VMAS, on the same scenario.

Both collectors run the same policy module, TorchRL's ``ProbabilisticActor`` over one
``MultiAgentMLP`` (shared parameters, 2x64 Tanh, TanhNormal), on the CPU, on VMAS navigation with
3 agents and 100-step episodes (BenchMARL's task config), for ``--envs`` batched worlds; the raw
loop steps VMAS with random actions and no TensorDict at all (the simulator's own cost). The unit
is env steps per second (one step of every agent of one world). Every measurement is repeated
``--rounds`` times, interleaved, and the best round is kept; the ratios are within this run.

    python benchmarks/marl_collector.py                # 64 and 512 worlds
    python benchmarks/marl_collector.py --quick        # a smoke run
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn

# fmt: off
TASK = dict(n_agents=3, collisions=True, agents_with_same_goal=1, split_goals=False,
            observe_all_goals=False, shared_rew=False, lidar_range=0.35, agent_radius=0.1)
# fmt: on


def policy(obs_dim: int, n_agents: int, action_dim: int) -> TensorDictModule:
    from torchrl.modules import MultiAgentMLP, ProbabilisticActor, TanhNormal

    torch.manual_seed(0)
    net = MultiAgentMLP(obs_dim, 2 * action_dim, n_agents, centralized=False, share_params=True,
                        num_cells=[64, 64], activation_class=nn.Tanh)  # fmt: skip
    outputs = [("agents", "loc"), ("agents", "scale")]
    body = TensorDictModule(nn.Sequential(net, NormalParamExtractor()),
                            [("agents", "observation")], outputs)  # fmt: skip
    return ProbabilisticActor(body, in_keys=body.out_keys, out_keys=[("agents", "action")],
                              distribution_class=TanhNormal, return_log_prob=True,
                              distribution_kwargs={"low": -1.0, "high": 1.0})  # fmt: skip


def tdrl_steps(envs: int, steps: int) -> Callable[[], float]:
    from tdrl.collectors import MultiAgentCollector
    from tdrl.envs import make_vec_env

    env = make_vec_env("vmas/navigation", envs, seed=0, max_steps=100, **TASK)
    actor = policy(env.observation_spec["agents", "observation"].shape[-1], 3, 2)
    collector = MultiAgentCollector(env, actor, envs * steps)
    collector.rollout()  # warm-up: the first reset

    def run() -> float:
        start = time.perf_counter()
        collector.rollout()
        return envs * steps / (time.perf_counter() - start)

    return run


def torchrl_steps(envs: int, steps: int) -> Callable[[], float]:
    from torchrl.collectors import Collector
    from torchrl.envs import VmasEnv

    env = VmasEnv("navigation", num_envs=envs, max_steps=100, seed=0, **TASK)
    actor = policy(env.observation_spec["agents", "observation"].shape[-1], 3, 2)
    collector = Collector(env, actor, frames_per_batch=envs * steps, total_frames=-1)
    batches = iter(collector)
    next(batches)  # warm-up

    def run() -> float:
        start = time.perf_counter()
        next(batches)
        return envs * steps / (time.perf_counter() - start)

    return run


def raw_steps(envs: int, steps: int) -> Callable[[], float]:
    import vmas

    env = vmas.make_env("navigation", num_envs=envs, max_steps=100, seed=0, **TASK)
    env.reset()

    def run() -> float:
        start = time.perf_counter()
        for _ in range(steps):  # VMAS's own loop: a list of actions in, lists of tensors out
            actions = [torch.rand(envs, 2) * 2 - 1 for _ in env.agents]
            _, _, dones, _ = env.step(actions)
            if dones.any():
                env.reset()
        return envs * steps / (time.perf_counter() - start)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", type=int, default=[64, 512])
    parser.add_argument("--steps", type=int, default=200, help="steps of every world a batch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.envs, args.steps, args.rounds = [16], 20, 1
    torch.set_num_threads(1)
    print(f"env steps/s, best of {args.rounds} rounds, {args.steps} steps a batch, 1 thread")
    print(f"{'worlds':>7} {'raw VMAS':>10} {'TorchRL':>10} {'tdrl':>10} {'tdrl/TorchRL':>13}")
    for envs in args.envs:
        runners = {"raw": raw_steps(envs, args.steps), "torchrl": torchrl_steps(envs, args.steps),
                   "tdrl": tdrl_steps(envs, args.steps)}  # fmt: skip
        best = dict.fromkeys(runners, 0.0)
        with torch.no_grad():
            for _ in range(args.rounds):
                for name, run in runners.items():
                    best[name] = max(best[name], run())
        print(f"{envs:>7} {best['raw']:>10.0f} {best['torchrl']:>10.0f} {best['tdrl']:>10.0f} "
              f"{best['tdrl'] / best['torchrl']:>13.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
