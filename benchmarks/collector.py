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
    python benchmarks/collector.py --ray      # Ray scaling: 1 and 2 workers, and a projection
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
# Where the MLP policy runs (``--policy-device``): the envs step on the CPU either way, so on a
# GPU every step moves observations there and actions back, in every library alike.
POLICY_DEVICE = torch.device("cpu")
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


def _mlp(env_id: str, mlp: bool) -> GaussianMLP | None:
    """The benchmark's policy for ``env_id`` on ``POLICY_DEVICE`` (None: random actions)."""
    return GaussianMLP(*_dims(env_id)).to(POLICY_DEVICE) if mlp else None


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
                observation = torch.as_tensor(obs, dtype=torch.float32, device=POLICY_DEVICE)
                action = policy(observation)[0].to(action_dtype).cpu().numpy()
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
        policy = _mlp(env_id, mlp)
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
    policy = _mlp(env_id, mlp)
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
    net = _mlp(env_id, mlp)
    policy = TensorDictModule(net, [keys.OBSERVATION], out_keys) if net is not None else None
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
    net = _mlp(env_id, mlp)
    policy = TensorDictModule(net, [keys.OBSERVATION], out_keys) if net is not None else None
    per_batch = max(num_envs, frames // 4 // num_envs * num_envs)
    collector = TorchRLCollector(
        env, policy, frames_per_batch=per_batch, total_frames=-1, env_device="cpu",
        policy_device=POLICY_DEVICE, storing_device=POLICY_DEVICE,
    )  # fmt: skip
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
    policy = _mlp(env_id, mlp)
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
        device=POLICY_DEVICE,
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


# ------------------------------------------------------------------------------ Ray scaling
def _torchrl_env(env_id: str, num_envs: int) -> Callable[[], Any]:
    def make() -> Any:
        from torchrl.envs import DoubleToFloat, GymEnv, SerialEnv, TransformedEnv

        return TransformedEnv(SerialEnv(num_envs, lambda: GymEnv(env_id)), DoubleToFloat())

    return make


def _batches_rate(collector: Any, batches: int) -> float:
    """Frames per second over ``batches`` batches, after one warm-up batch."""
    iterator = iter(collector)
    next(iterator)
    start, frames = time.perf_counter(), 0
    for _ in range(batches):
        frames += next(iterator).numel()
    return _rate(frames, start)


def ray_scaling(env_id: str, num_envs: int, steps: int, batches: int) -> None:
    """Env steps per second with 1 and 2 Ray workers (tdrl's RayCollector, sync and async, and
    TorchRL's Ray collector) against the local collector, then the measured cost of each part of
    a Ray batch and what they project for 8, 32 and 128 workers."""
    import ray
    from torchrl.collectors.distributed import RayCollector as TorchRLRayCollector

    from tdrl.collectors import RayCollector

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    obs_dim, act_dim = _dims(env_id)
    out_keys = [keys.ACTION, keys.LOC, keys.SCALE, keys.ACTION_LOG_PROB]
    policy = TensorDictModule(GaussianMLP(obs_dim, act_dim), [keys.OBSERVATION], out_keys)
    per_worker = num_envs * steps
    rows: dict[str, float] = {}
    env = make_vec_env(env_id, num_envs, seed=0)
    rows[f"tdrl Collector, local, {num_envs} envs"] = _batches_rate(
        Collector(env, policy, per_worker), batches
    )
    env.close()
    env = make_vec_env(env_id, 2 * num_envs, seed=0)
    rows[f"tdrl Collector, local, {2 * num_envs} envs"] = _batches_rate(
        Collector(env, policy, 2 * per_worker), batches
    )
    env.close()
    for workers in (1, 2):
        for sync in (True, False):
            frames = per_worker * workers if sync else per_worker
            with RayCollector(
                env_id, policy, frames, num_workers=workers, num_envs=num_envs, seed=0, sync=sync
            ) as collector:
                name = f"tdrl RayCollector, {workers} worker(s), {'sync' if sync else 'async'}"
                rows[name] = _batches_rate(collector, batches if sync else batches * workers)
        frames = per_worker * workers
        theirs = TorchRLRayCollector(
            [_torchrl_env(env_id, num_envs)] * workers, policy, frames_per_batch=frames,
            total_frames=frames * (batches + 2), sync=True, remote_configs={"num_cpus": 1},
        )  # fmt: skip
        rows[f"TorchRL RayCollector, {workers} worker(s), sync"] = _batches_rate(theirs, batches)
        theirs.shutdown()
    local = rows[f"tdrl Collector, local, {num_envs} envs"]
    print(f"\nRay scaling, {env_id}, MLP policy, {num_envs} envs per worker, {steps} steps each:")
    for name, rate in rows.items():
        print(f"  {name:46s} {rate:8.0f} env steps/s ({rate / local:.2f}x local {num_envs} envs)")

    # Parts of one async Ray batch, measured here (one machine: the object store is local memory)
    with RayCollector(env_id, policy, per_worker, num_workers=1, num_envs=num_envs, seed=0) as rc:
        batch = rc.rollout()
        rollout_s = per_worker / local  # a worker's collection time for its batch
        echo = ray.remote(num_cpus=1)(_Echo).remote(batch)
        ray.get(echo.batch.remote())
        start = time.perf_counter()
        for _ in range(20):
            ray.get(echo.batch.remote())
        call_s = (time.perf_counter() - start) / 20  # ask, serialize, move, deserialize
        ready = echo.batch.remote()
        ray.wait([ready])
        start = time.perf_counter()
        ray.get(ready)
        get_s = time.perf_counter() - start  # the driver's share: deserialize a ready batch
        parts = [batch.clone() for _ in range(2)]
        start = time.perf_counter()
        for _ in range(20):
            for part in parts:
                rc._tag(0, part, 0)
        tag_s = (time.perf_counter() - start) / 40
        weights = dict(policy.state_dict())
        start = time.perf_counter()
        for _ in range(20):
            ref = ray.put(weights)
        put_s = (time.perf_counter() - start) / 20
        ray.get(echo.load.remote(ref))
        start = time.perf_counter()
        for _ in range(20):
            ray.get(echo.load.remote(ray.put(weights)))
        load_s = (time.perf_counter() - start) / 20 - put_s
        ray.kill(echo)
    driver_s = get_s + tag_s
    print(
        f"\nper-batch parts ({per_worker} frames, {batch.bytes() / 1e6:.2f} MB; weights "
        f"{sum(v.numel() * v.element_size() for v in weights.values()) / 1e3:.1f} kB):\n"
        f"  worker: collect {rollout_s * 1e3:.1f} ms, weight load {load_s * 1e3:.2f} ms; "
        f"call round trip (serialize + move) {call_s * 1e3:.2f} ms\n"
        f"  driver: deserialize {get_s * 1e3:.2f} ms + tag {tag_s * 1e3:.2f} ms per batch; "
        f"weight put {put_s * 1e3:.2f} ms per update (once, any number of workers)"
    )
    print("projection, async, one machine per worker's cores, no learner time:")
    for workers in (8, 32, 128):
        produced = workers * per_worker / (rollout_s + load_s + call_s)
        consumed = per_worker / driver_s
        bound = "driver" if consumed < produced else "workers"
        print(
            f"  {workers:4d} workers: {min(produced, consumed):10.0f} env steps/s "
            f"(workers make {produced:.0f}, the driver takes {consumed:.0f}: {bound}-bound)"
        )
    print(
        "  (a cluster adds the network: a batch and each worker's weight copy cross it once; "
        "the weights go out in one put, so their cost on the driver does not grow with workers)"
    )


class _Echo:
    """A Ray actor that returns a stored batch, and loads weights: the transfer costs alone."""

    def __init__(self, batch: Any) -> None:
        self._batch = batch

    def batch(self) -> Any:
        return self._batch

    def load(self, weights: dict[str, torch.Tensor]) -> int:
        return len(weights)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run, one round")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--frames", type=int, default=None, help="frames per measurement")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--envs", nargs="+", default=["HalfCheetah-v5", "Hopper-v5"])
    parser.add_argument(
        "--ray", action="store_true", help="only the Ray scaling table (the ray extra)"
    )
    parser.add_argument(
        "--policy-device",
        default="cpu",
        help="where the MLP policy runs (cuda: MLP columns only, the libraries that take a device)",
    )
    args = parser.parse_args()
    global POLICY_DEVICE
    POLICY_DEVICE = torch.device(args.policy_device)
    runners = RUNNERS if POLICY_DEVICE.type == "cpu" else {
        name: runner for name, runner in RUNNERS.items()
        if not any(cpu_only in name for cpu_only in ("async", "envpool", "Tianshou"))
    }  # fmt: skip
    if args.ray:
        torch.set_num_threads(1)
        warnings.filterwarnings("ignore")
        ray_scaling(args.envs[0], num_envs=4, steps=200, batches=3 if args.quick else 10)
        return
    frames = args.frames or (1_600 if args.quick else 8_000)
    rounds = args.rounds or (1 if args.quick else 2)
    torch.set_num_threads(1)  # every library runs its policy on one thread
    warnings.filterwarnings("ignore")

    kinds = (False, True) if POLICY_DEVICE.type == "cpu" else (True,)
    columns = [(env_id, mlp) for env_id in args.envs for mlp in kinds]
    best: dict[tuple[str, str, bool], float] = {}
    for _ in range(rounds):
        for name, runner in runners.items():
            for env_id, mlp in columns:
                # TorchRL's SerialEnv.close() raises torch's thread count (batched_envs.py):
                # every runner starts on one thread again
                torch.set_num_threads(1)
                try:
                    rate = runner(env_id, mlp, args.num_envs, frames)
                except ModuleNotFoundError as err:  # a peer not installed on this machine
                    print(f"{name}: not installed ({err.name})")
                    rate = math.nan
                key = (name, env_id, mlp)
                best[key] = max(best.get(key, 0.0), rate) if not math.isnan(rate) else rate

    heads = [f"{env_id.split('-')[0]} {'MLP' if mlp else 'random'}" for env_id, mlp in columns]
    where = "" if POLICY_DEVICE.type == "cpu" else f", policy on {torch.cuda.get_device_name()}"
    print(
        f"\ntransitions/s, {args.num_envs} envs, best of {rounds} round(s) of {frames} frames"
        f"{where};"
    )
    print("(x) = ratio to gymnasium sync with the same policy; [x] = ratio to SB3 PPO rollouts\n")
    width = 36
    print(f"{'':{width}}" + "".join(f"{h:>26}" for h in heads))
    raw = "gymnasium sync (raw loop)"
    for name in runners:
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
