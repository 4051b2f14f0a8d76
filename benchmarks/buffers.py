"""Replay buffer speed: tdrl against SB3, Tianshou and TorchRL in one run.

Workload: add 1M HalfCheetah-shaped transitions (obs 17, action 6, reward, flags, next obs) in
chunks of 8 (one step of 8 envs), a second 1M around the full ring (the "wrapped" column: the
steady state of a run longer than the capacity, every buffer's memory allocated and touched;
tdrl allocates its storage at its first extend, inside the first column's timing, SB3 and
Tianshou in their constructors), then 10k samples of 256: uniform, and prioritized
(sample + priority update). Each library gets its native input (numpy arrays for SB3, Tianshou
Batches, TensorDicts for TorchRL and tdrl, on device "cpu" as tdrl's ``VecEnv.step`` and
TorchRL's envs return them), pre-built in a pool of 64 chunks so that making data is not timed.
The TensorDicts hold the transition content SB3 stores (observation, action, ("next",
observation / reward / done / terminated / truncated): 7 leaves); the row "tdrl full batch"
stores the whole 11-leaf collector layout of docs/design.md (root flags, traj ids); the row "tdrl
flat [8] chunks" the same chunks into a buffer of one stream (8 time steps each).
One thread for torch (torch.set_num_threads(1)): the peers run single-threaded here too.
Rows marked "(plain)" run tdrl with its fast paths off (``tdrl.set_fast(False)``, as
``TDRL_FAST=0``): the public-API twins of the compiled copies, so a reader sees what they buy.

Last, each buffer constructed and filled with 200k transitions in chunks of 8, construction
timed (SB3 allocates in its constructor, tdrl at its first extend), as [8] env streams and as
flat [8] chunks of one stream.

    python benchmarks/buffers.py [--quick]
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch
from tensordict import TensorDict

import tdrl as tdrl_lib
from tdrl.data import PrioritizedReplayBuffer, ReplayBuffer

N_ENVS, OBS, ACT, BATCH, POOL = 8, 17, 6, 256, 64
ALPHA, BETA = 0.6, 0.4
TIME_LIMIT_S = 120.0  # per phase; a peer past it is reported as not finished


def numpy_pool(rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
    return [
        {
            "obs": rng.standard_normal((N_ENVS, OBS), dtype=np.float32),
            "act": rng.standard_normal((N_ENVS, ACT), dtype=np.float32),
            "rew": rng.standard_normal(N_ENVS, dtype=np.float32),
            "terminated": rng.random(N_ENVS) < 0.001,
            "truncated": rng.random(N_ENVS) < 0.001,
            "obs_next": rng.standard_normal((N_ENVS, OBS), dtype=np.float32),
        }
        for _ in range(POOL)
    ]


def td_pool(pool: list[dict[str, np.ndarray]], full: bool = False) -> list[TensorDict]:
    out = []
    for i, c in enumerate(pool):
        flag = lambda x: torch.from_numpy(x).unsqueeze(-1)  # noqa: E731
        td = {
            "observation": torch.from_numpy(c["obs"]),
            "action": torch.from_numpy(c["act"]),
            "next": {
                "observation": torch.from_numpy(c["obs_next"]),
                "reward": torch.from_numpy(c["rew"]).unsqueeze(-1),
                "terminated": flag(c["terminated"]),
                "truncated": flag(c["truncated"]),
                "done": flag(c["terminated"] | c["truncated"]),
            },
        }
        if full:
            false = torch.zeros(N_ENVS, 1, dtype=torch.bool)
            td.update(done=false, terminated=false.clone(), truncated=false.clone())
            td["collector"] = {"traj_ids": torch.arange(N_ENVS) + i}
        # device="cpu": what tdrl's VecEnv.step and TorchRL's envs return for one step
        out.append(TensorDict(td, batch_size=[N_ENVS], device="cpu"))
    return out


def interleaved(
    fns: dict[str, Callable[[int], None]], calls: int, rounds: int = 10
) -> dict[str, tuple[float, str]]:
    """Calls per second of each fn(i), run in interleaved rounds so that the load of a shared
    machine spreads evenly over the peers; a peer past the time limit is dropped with a note."""
    elapsed = dict.fromkeys(fns, 0.0)
    done = dict.fromkeys(fns, 0)
    notes = dict.fromkeys(fns, "")
    for r in range(rounds):
        lo, hi = calls * r // rounds, calls * (r + 1) // rounds
        for name, fn in fns.items():
            if notes[name]:
                continue
            previous = tdrl_lib.set_fast("(plain)" not in name)
            start = time.perf_counter()
            for i in range(lo, hi):
                fn(i)
            elapsed[name] += time.perf_counter() - start
            tdrl_lib.set_fast(previous)
            done[name] = hi
            if elapsed[name] > TIME_LIMIT_S and hi < calls:
                notes[name] = f"did not finish: {hi}/{calls} calls in {elapsed[name]:.0f} s"
    return {n: (0.0 if notes[n] else calls / elapsed[n], notes[n]) for n in fns}


def sb3(capacity: int, pool: list[dict[str, np.ndarray]]) -> tuple[Callable, Callable]:
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer as SB3Buffer

    box = lambda n: spaces.Box(-np.inf, np.inf, (n,), np.float32)  # noqa: E731
    # SB3 divides buffer_size by n_envs itself (capacity // N_ENVS rows of N_ENVS transitions)
    rb = SB3Buffer(capacity, box(OBS), box(ACT), device="cpu", n_envs=N_ENVS)
    infos = [[{"TimeLimit.truncated": bool(t)} for t in c["truncated"]] for c in pool]
    dones = [c["terminated"] | c["truncated"] for c in pool]

    def add(i: int) -> None:
        c = pool[i % POOL]
        rb.add(c["obs"], c["obs_next"], c["act"], c["rew"], dones[i % POOL], infos[i % POOL])

    return add, lambda i: rb.sample(BATCH)


def tianshou(
    capacity: int, pool: list[dict[str, np.ndarray]], prioritized: bool
) -> tuple[Callable, Callable]:
    from tianshou.data import Batch, PrioritizedVectorReplayBuffer, VectorReplayBuffer

    if prioritized:
        rb = PrioritizedVectorReplayBuffer(capacity, N_ENVS, alpha=ALPHA, beta=BETA)
    else:
        rb = VectorReplayBuffer(capacity, N_ENVS)
    batches = [Batch(**c, info={}) for c in pool]
    priority = np.random.default_rng(1).random((POOL, BATCH))

    def sample(i: int) -> None:
        _, index = rb.sample(BATCH)
        if prioritized:
            rb.update_weight(index, priority[i % POOL])

    return lambda i: rb.add(batches[i % POOL]), sample


def torchrl(capacity: int, pool: list[TensorDict], prioritized: bool) -> tuple[Callable, Callable]:
    from torchrl.data import LazyTensorStorage, PrioritizedSampler, TensorDictReplayBuffer

    kwargs = {"sampler": PrioritizedSampler(capacity, ALPHA, BETA)} if prioritized else {}
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), batch_size=BATCH, **kwargs)
    priority = torch.rand(POOL, BATCH)

    def sample(i: int) -> None:
        td = rb.sample()
        if prioritized:
            rb.update_priority(td["index"], priority[i % POOL])

    return lambda i: rb.extend(pool[i % POOL]), sample


def tdrl(
    capacity: int, pool: list[TensorDict], prioritized: bool, streams: int = N_ENVS
) -> tuple[Callable, Callable]:
    if prioritized:
        rb: ReplayBuffer = PrioritizedReplayBuffer(
            capacity, alpha=ALPHA, beta=BETA, num_streams=streams, generator=0
        )
    else:
        rb = ReplayBuffer(capacity, num_streams=streams, generator=0)
    priority = torch.rand(POOL, BATCH)

    def sample(i: int) -> None:
        td = rb.sample(BATCH)
        if prioritized:
            rb.update_priority(td["index"], priority[i % POOL])  # type: ignore[attr-defined]

    return lambda i: rb.extend(pool[i % POOL]), sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k adds and 1k samples")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    adds, samples = (100_000, 1_000) if args.quick else (1_000_000, 10_000)
    capacity = adds
    np_pool = numpy_pool(np.random.default_rng(0))
    tds, full_tds = td_pool(np_pool), td_pool(np_pool, full=True)
    peers = [
        ("SB3 ReplayBuffer", lambda cap: sb3(cap, np_pool)),
        ("Tianshou VectorReplayBuffer", lambda cap: tianshou(cap, np_pool, False)),
        ("TorchRL ReplayBuffer(LazyTensorStorage)", lambda cap: torchrl(cap, tds, False)),
        ("tdrl ReplayBuffer", lambda cap: tdrl(cap, tds, False)),
        ("tdrl ReplayBuffer (plain)", lambda cap: tdrl(cap, tds, False)),
        ("tdrl ReplayBuffer, full batch (11 leaves)", lambda cap: tdrl(cap, full_tds, False)),
        # the same [8] chunks as 8 time steps of one stream: a flat batch (a user's own loop,
        # a dataset, a TorchRL batch)
        ("tdrl ReplayBuffer, flat [8] chunks", lambda cap: tdrl(cap, tds, False, streams=1)),
        ("Tianshou PrioritizedVectorReplayBuffer", lambda cap: tianshou(cap, np_pool, True)),
        ("TorchRL + PrioritizedSampler", lambda cap: torchrl(cap, tds, True)),
        ("tdrl PrioritizedReplayBuffer", lambda cap: tdrl(cap, tds, True)),
        ("tdrl PrioritizedReplayBuffer (plain)", lambda cap: tdrl(cap, tds, True)),
    ]
    calls = adds // N_ENVS
    print(f"{adds} adds in chunks of {N_ENVS}, {samples} samples of {BATCH}; torch threads = 1")
    adders, samplers, notes = {}, {}, {}
    for name, make in peers:
        try:
            # warm-up on a small throwaway buffer (numba kernels compile on first use, caches
            # fill), then a fresh buffer for the timed run
            warm_add, warm_sample = make(4096)
            for i in range(64):
                warm_add(i)
            for i in range(8):
                warm_sample(i)
            adders[name], samplers[name] = make(capacity)
        except Exception as err:  # a peer that cannot run here is reported, not hidden
            notes[name] = f"fails: {str(err).splitlines()[0][:60]}"
    add_rates = interleaved(adders, calls)
    # A second pass around the full ring: the steady state of a run longer than the capacity
    # (every buffer's memory is allocated and touched by now; tdrl allocates its storage at the
    # first extend, inside the first pass's timing, SB3 and Tianshou in their constructors).
    wrapped = interleaved({n: f for n, f in adders.items() if not add_rates[n][1]}, calls)
    sample_rates = interleaved({n: f for n, f in samplers.items() if not add_rates[n][1]}, samples)
    print(f"{'buffer':44s} {'adds/s':>12s} {'wrapped':>12s} {'samples/s':>12s}  note")
    rows = {}
    for name, _ in peers:
        add_rate, note = add_rates.get(name, (0.0, notes.get(name, "")))
        sample_rate, note2 = sample_rates.get(name, (0.0, ""))
        rows[name] = (add_rate * N_ENVS, sample_rate)
        again = wrapped.get(name, (0.0, ""))[0] * N_ENVS
        fmt = lambda x: f"{x:12,.0f}" if x else f"{'-':>12s}"  # noqa: E731
        kind = " (sample+update)" if "rioritized" in name else ""
        print(
            f"{name:44s} {fmt(rows[name][0])} {fmt(again)} {fmt(sample_rate)}  "
            f"{note or note2}{kind}"
        )
    sb3_add, sb3_sample = rows["SB3 ReplayBuffer"]
    ours_add, ours_sample = rows["tdrl ReplayBuffer"]
    wrapped_ratio = wrapped["tdrl ReplayBuffer"][0] / wrapped["SB3 ReplayBuffer"][0]
    print(f"\ntdrl / SB3, add into the wrapped ring (second pass): {wrapped_ratio:.2f}x", end="")
    ts_per = rows["Tianshou PrioritizedVectorReplayBuffer"][1]
    print(f"\ntdrl / SB3: add {ours_add / sb3_add:.2f}x, sample {ours_sample / sb3_sample:.2f}x")
    full_add = rows["tdrl ReplayBuffer, full batch (11 leaves)"][0]
    print(f"tdrl full 11-leaf batch / SB3: add {full_add / sb3_add:.2f}x")
    flat_add = rows["tdrl ReplayBuffer, flat [8] chunks"][0]
    print(f"tdrl flat [8] chunks / SB3: add {flat_add / sb3_add:.2f}x (target >= 1.2x)")
    per = rows["tdrl PrioritizedReplayBuffer"][1]
    print(f"tdrl prioritized / Tianshou prioritized: sample+update {per / ts_per:.2f}x")
    plain_add, plain_sample = rows["tdrl ReplayBuffer (plain)"]
    print(
        f"tdrl plain (TDRL_FAST=0) / SB3: add {plain_add / sb3_add:.2f}x, sample "
        f"{plain_sample / sb3_sample:.2f}x; the fast paths buy add "
        f"{ours_add / plain_add - 1:+.0%}, sample {ours_sample / plain_sample - 1:+.0%}"
    )
    fill_from_empty(tds, np_pool)


def fill_from_empty(pool: list[TensorDict], np_pool: list[dict[str, np.ndarray]]) -> None:
    """Construct a buffer of 200k and fill it in chunks of 8, construction timed (SB3 and
    Tianshou allocate in their constructors, tdrl at its first extend): 5 interleaved rounds,
    the median; tdrl's [8] chunks as 8 env streams and as 8 steps of one stream (flat)."""
    capacity, rounds = 200_000, 5
    makers = {
        "SB3 ReplayBuffer": lambda: sb3(capacity, np_pool)[0],
        "tdrl ReplayBuffer, [8] streams": lambda: tdrl(capacity, pool, False)[0],
        "tdrl ReplayBuffer, flat [8] chunks": lambda: tdrl(capacity, pool, False, streams=1)[0],
    }
    times: dict[str, list[float]] = {name: [] for name in makers}
    for _ in range(rounds):
        for name, make in makers.items():
            start = time.perf_counter()
            add = make()
            for i in range(capacity // N_ENVS):
                add(i)
            times[name].append(time.perf_counter() - start)
            # freed before the next one is built: every construction meets the same allocator
            # state (else SB3, allocating in its constructor, runs while the previous buffer
            # still holds its memory, and tdrl, allocating at its first add, after it is freed)
            del add
    print(f"\nconstruct + fill {capacity:,} transitions in chunks of {N_ENVS}, median of {rounds}")
    median = {name: sorted(t)[rounds // 2] for name, t in times.items()}
    for name, t in median.items():
        print(f"{name:44s} {capacity / t:12,.0f} transitions/s  vs SB3 "
              f"{median['SB3 ReplayBuffer'] / t:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
