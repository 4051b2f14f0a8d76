"""Value estimators: tdrl vs TorchRL (vectorized and loop), Tianshou's numba GAE, numpy (or a GPU).

One run, float32, ``[num_envs, T]`` batches with terminated and truncated steps. Every JIT is
warmed up before timing; each figure is the median of repeated calls; ratios are to tdrl's
default (compiled) op in the same run. ``torch.set_num_threads(1)`` for all, so every library
gets one core. Run: ``python benchmarks/estimators.py``; ``--device cuda`` times the GPU paths
(tdrl's Triton and torch scans, TorchRL's estimators, and tdrl's CPU kernel on a copy, round
trip included); ``--head-to-head 400`` times only GAE against Tianshou's kernel, in 400
interleaved rounds (the figure to quote for that pair on a shared machine).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import torch
from tensordict import TensorDict
from torchrl.objectives import value as trl
from torchrl.objectives.value.functional import vtrace_advantage_estimate

from tdrl import estimators as E
from tdrl.ops import gae, td_lambda_return, vtrace

GAMMA, LMBDA = 0.99, 0.95


def _sync() -> None:
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


def timeit(fn: Callable[[], object], budget_s: float = 1.0, max_reps: int = 200) -> float:
    """Median seconds per call, after a warm-up call (JIT compile, caches); on a GPU each call
    is timed until its kernels have finished."""
    fn()
    _sync()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < 5 or time.perf_counter() - start < budget_s):
        t0 = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def make(b: int, t: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    terminated = torch.rand(b, t, 1, generator=g) < 0.005
    truncated = (torch.rand(b, t, 1, generator=g) < 0.005) & ~terminated
    return {
        "reward": torch.randn(b, t, 1, generator=g),
        "value": torch.randn(b, t, 1, generator=g),
        "next_value": torch.randn(b, t, 1, generator=g),
        "log_rho": 0.3 * torch.randn(b, t, 1, generator=g),
        "terminated": terminated,
        "truncated": truncated,
        "done": terminated | truncated,
    }


def as_td(x: dict[str, torch.Tensor]) -> TensorDict:
    b, t = x["reward"].shape[:2]
    return TensorDict(
        {
            "state_value": x["value"],
            "sample_log_prob": torch.zeros(b, t),
            "next": {
                "state_value": x["next_value"],
                "reward": x["reward"],
                "terminated": x["terminated"],
                "truncated": x["truncated"],
                "done": x["done"],
            },
        },
        batch_size=[b, t],
    )


def numpy_gae(r, v, nv, term, done, gamma=GAMMA, lmbda=LMBDA):
    """The usual loop over time, vectorized over envs (CleanRL style)."""
    adv = np.zeros_like(r)
    last = np.zeros(r.shape[0], r.dtype)
    for t in reversed(range(r.shape[1])):
        cont = 0.0 if t == r.shape[1] - 1 else 1.0 - done[:, t]
        delta = r[:, t] + gamma * nv[:, t] * (1.0 - term[:, t]) - v[:, t]
        last = delta + gamma * lmbda * cont * last
        adv[:, t] = last
    return adv, adv + v


def numpy_td_lambda(r, nv, term, done, gamma=GAMMA, lmbda=LMBDA):
    ret = np.zeros_like(r)
    g = np.zeros(r.shape[0], r.dtype)
    for t in reversed(range(r.shape[1])):
        boot = nv[:, t] * (1.0 - term[:, t])
        cont = 0.0 if t == r.shape[1] - 1 else 1.0 - done[:, t]
        g = r[:, t] + gamma * ((1.0 - lmbda * cont) * boot + lmbda * cont * g)
        ret[:, t] = g
    return ret


def numpy_vtrace(r, v, nv, log_rho, term, done, gamma=GAMMA):
    rho = np.exp(log_rho)
    rho_bar, c = np.minimum(rho, 1.0), np.minimum(rho, 1.0)
    boot = nv * (1.0 - term)
    delta = rho_bar * (r + gamma * boot - v)
    acc = np.zeros(r.shape[0], r.dtype)
    vs = np.zeros_like(r)
    for t in reversed(range(r.shape[1])):
        cont = 0.0 if t == r.shape[1] - 1 else 1.0 - done[:, t]
        acc = delta[:, t] + gamma * c[:, t] * cont * acc
        vs[:, t] = v[:, t] + acc
    vs_next = np.concatenate([vs[:, 1:], boot[:, -1:]], 1)
    q = np.where(done > 0, boot, vs_next)
    q[:, -1] = boot[:, -1]
    return rho_bar * (r + gamma * q - v), vs


def tianshou_calls(x: dict[str, torch.Tensor]) -> tuple[Callable[[], object], Callable[[], object]]:
    """Tianshou 2.0.1's numba kernel ``_gae`` and its full ``compute_episodic_return`` call on the
    same data, flattened env-major as its VectorReplayBuffer stores it."""
    from tianshou.algorithm.algorithm_base import Algorithm, _gae

    b, t = x["reward"].shape[:2]
    flat = {k: x[k].reshape(-1).numpy() for k in x}
    end = flat["done"].copy()
    end.reshape(b, t)[:, -1] = True
    v_s, v_s_ = flat["value"], flat["next_value"] * ~flat["terminated"]
    indices = np.arange(b * t)
    unfinished = np.array([i * t + t - 1 for i in range(b) if not flat["done"][i * t + t - 1]])
    batch = SimpleNamespace(
        rew=flat["reward"], terminated=flat["terminated"], truncated=flat["truncated"]
    )
    buffer = SimpleNamespace(terminated=flat["terminated"], unfinished_index=lambda: unfinished)

    def kernel() -> object:
        return _gae(v_s, v_s_, flat["reward"], end, GAMMA, LMBDA)

    def full() -> object:
        return Algorithm.compute_episodic_return(
            batch, buffer, indices, v_s_=x["next_value"], v_s=x["value"], gamma=GAMMA,
            gae_lambda=LMBDA,
        )  # fmt: skip

    return kernel, full


def rows_for(b: int, t: int, device: str = "cpu") -> list[tuple[str, str, float]]:
    """Every implementation's time on ``[b, t]``; on a GPU, the libraries' ops on the GPU and
    tdrl's CPU kernel on a copy (the round trip timed), since that is the other choice a user
    with a GPU rollout has."""
    x = {k: value.to(device) for k, value in make(b, t).items()}
    r, v, nv, lr = x["reward"], x["value"], x["next_value"], x["log_rho"]
    term, trunc, done = x["terminated"], x["truncated"], x["done"]
    td = as_td(x)
    out: list[tuple[str, str, float]] = []

    def add(op: str, name: str, fn: Callable[[], object]) -> None:
        out.append((op, name, timeit(fn)))

    if device != "cpu":
        rows_on_gpu(add, x, td)
        return out
    npx = {k: x[k].squeeze(-1).numpy().astype(np.float32) for k in x}

    # --- GAE
    add("GAE", "tdrl ops.gae (numba)", lambda: gae(r, v, nv, term, done, truncated=trunc,
                                                   gamma=GAMMA, lmbda=LMBDA))  # fmt: skip
    add("GAE", "tdrl ops.gae (torch scan)", lambda: gae(r, v, nv, term, done, truncated=trunc,
        gamma=GAMMA, lmbda=LMBDA, backend="torch"))  # fmt: skip
    ours = E.GAE(gamma=GAMMA, lmbda=LMBDA, value_network=None)
    add("GAE", "tdrl GAE module", lambda: ours(td.copy()))
    for vec in (True, False):
        theirs = trl.GAE(gamma=GAMMA, lmbda=LMBDA, value_network=None, vectorized=vec)
        add("GAE", f"TorchRL GAE vectorized={vec}", lambda m=theirs: m(td.copy()))
    kernel, full = tianshou_calls(x)
    add("GAE", "Tianshou _gae numba kernel", kernel)
    add("GAE", "Tianshou compute_episodic_return", full)
    add("GAE", "numpy loop", lambda: numpy_gae(npx["reward"], npx["value"], npx["next_value"],
                                               npx["terminated"], npx["done"]))  # fmt: skip
    # --- TD(lambda)
    add("TD(lambda)", "tdrl ops.td_lambda_return (numba)", lambda: td_lambda_return(
        r, nv, term, done, truncated=trunc, gamma=GAMMA, lmbda=LMBDA))  # fmt: skip
    add("TD(lambda)", "tdrl ops.td_lambda_return (torch scan)", lambda: td_lambda_return(
        r, nv, term, done, truncated=trunc, gamma=GAMMA, lmbda=LMBDA, backend="torch"))  # fmt: skip
    for vec in (True, False):
        theirs = trl.TDLambdaEstimator(gamma=GAMMA, lmbda=LMBDA, value_network=None,
                                       vectorized=vec)  # fmt: skip
        add("TD(lambda)", f"TorchRL TDLambda vectorized={vec}", lambda m=theirs: m(td.copy()))
    add("TD(lambda)", "numpy loop", lambda: numpy_td_lambda(
        npx["reward"], npx["next_value"], npx["terminated"], npx["done"]))  # fmt: skip
    # --- V-trace (TorchRL has one, loop-based, implementation: its functional is timed, since
    # its module also re-runs the actor)
    add("V-trace", "tdrl ops.vtrace (numba)", lambda: vtrace(
        r, v, nv, lr, term, done, truncated=trunc, gamma=GAMMA))  # fmt: skip
    add("V-trace", "tdrl ops.vtrace (torch scan)", lambda: vtrace(
        r, v, nv, lr, term, done, truncated=trunc, gamma=GAMMA, backend="torch"))  # fmt: skip
    add("V-trace", "TorchRL vtrace_advantage_estimate", lambda: vtrace_advantage_estimate(
        GAMMA, lr, torch.zeros_like(lr), v, nv, r, done, term))  # fmt: skip
    add("V-trace", "numpy loop", lambda: numpy_vtrace(
        npx["reward"], npx["value"], npx["next_value"], npx["log_rho"], npx["terminated"],
        npx["done"]))  # fmt: skip
    return out


Add = Callable[[str, str, Callable[[], object]], None]


def rows_on_gpu(add: Add, x: dict[str, torch.Tensor], td: TensorDict) -> None:
    """The GPU rows: tdrl's ops (``backend="auto"``: the Triton scan; and the blockwise torch
    scan) and modules, TorchRL's estimators, and tdrl's numba kernel on a CPU copy with the
    result moved back."""
    r, v, nv, lr = x["reward"], x["value"], x["next_value"], x["log_rho"]
    term, trunc, done = x["terminated"], x["truncated"], x["done"]
    kw = dict(truncated=trunc, gamma=GAMMA)

    def round_trip(op: Callable[..., object], *args: torch.Tensor, **k: object) -> Callable:
        def call() -> object:
            host = [a.cpu() for a in args]
            out = op(*host, **{**k, "truncated": k["truncated"].cpu()})  # type: ignore[union-attr]
            return [o.to(r.device, non_blocking=True) for o in out]  # type: ignore[attr-defined]

        return call

    add("GAE", "tdrl ops.gae (Triton, GPU)",
        lambda: gae(r, v, nv, term, done, lmbda=LMBDA, **kw))  # fmt: skip
    add("GAE", "tdrl ops.gae (torch scan, GPU)",
        lambda: gae(r, v, nv, term, done, lmbda=LMBDA, backend="torch", **kw))  # fmt: skip
    ours = E.GAE(gamma=GAMMA, lmbda=LMBDA, value_network=None)
    add("GAE", "tdrl GAE module (GPU)", lambda: ours(td.copy()))
    for vec in (True, False):
        theirs = trl.GAE(gamma=GAMMA, lmbda=LMBDA, value_network=None, vectorized=vec)
        add("GAE", f"TorchRL GAE vectorized={vec} (GPU)", lambda m=theirs: m(td.copy()))
    add("GAE", "tdrl ops.gae (numba on a CPU copy)",
        round_trip(gae, r, v, nv, term, done, lmbda=LMBDA, **kw))  # fmt: skip
    add("TD(lambda)", "tdrl ops.td_lambda_return (Triton, GPU)",
        lambda: td_lambda_return(r, nv, term, done, lmbda=LMBDA, **kw))  # fmt: skip
    add("TD(lambda)", "tdrl ops.td_lambda_return (torch scan, GPU)",
        lambda: td_lambda_return(r, nv, term, done, lmbda=LMBDA, backend="torch",
                                 **kw))  # fmt: skip
    for vec in (True, False):
        theirs = trl.TDLambdaEstimator(gamma=GAMMA, lmbda=LMBDA, value_network=None,
                                       vectorized=vec)  # fmt: skip
        add("TD(lambda)", f"TorchRL TDLambda vectorized={vec} (GPU)", lambda m=theirs: m(td.copy()))
    add("V-trace", "tdrl ops.vtrace (Triton, GPU)",
        lambda: vtrace(r, v, nv, lr, term, done, **kw))  # fmt: skip
    add("V-trace", "tdrl ops.vtrace (torch scan, GPU)",
        lambda: vtrace(r, v, nv, lr, term, done, backend="torch", **kw))  # fmt: skip
    add("V-trace", "TorchRL vtrace_advantage_estimate (GPU)", lambda: vtrace_advantage_estimate(
        GAMMA, lr, torch.zeros_like(lr), v, nv, r, done, term))  # fmt: skip
    add("V-trace", "tdrl ops.vtrace (numba on a CPU copy)",
        round_trip(vtrace, r, v, nv, lr, term, done, **kw))  # fmt: skip


def head_to_head(b: int, t: int, rounds: int = 400, seed: int = 0) -> dict[str, list[float]]:
    """GAE on CPU, tdrl against Tianshou's numba kernel, in interleaved rounds: each round calls
    every implementation once, in a shuffled order, so a load that comes and goes (a shared
    machine) or the order of calls (caches, the CPU's clock) weighs on all alike. Returns the
    seconds of every call, by implementation."""
    import random

    x = make(b, t)
    r, v, nv = x["reward"], x["value"], x["next_value"]
    term, trunc, done = x["terminated"], x["truncated"], x["done"]
    kernel, full = tianshou_calls(x)
    ours = E.GAE(gamma=GAMMA, lmbda=LMBDA, value_network=None)
    unchecked = E.GAE(gamma=GAMMA, lmbda=LMBDA, value_network=None, validate=False)
    td = as_td(x)
    # The module writes into the same batch on every call (each call's outputs replace the
    # last's), as a loop calls it once on each batch: copying the batch is not its work.
    calls: dict[str, Callable[[], object]] = {
        "tdrl ops.gae (numba)": lambda: gae(
            r, v, nv, term, done, truncated=trunc, gamma=GAMMA, lmbda=LMBDA
        ),  # fmt: skip
        "tdrl GAE module": lambda: ours(td),
        "tdrl GAE module, validate=False": lambda: unchecked(td),
        "Tianshou _gae numba kernel": kernel,
        "Tianshou compute_episodic_return": full,
    }
    for call in calls.values():
        call()  # compile, warm the caches
    times: dict[str, list[float]] = {name: [] for name in calls}
    order, shuffle = list(calls), random.Random(seed).shuffle
    for _ in range(rounds):
        shuffle(order)
        for name in order:
            t0 = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def print_head_to_head(b: int, t: int, rounds: int) -> None:
    times = head_to_head(b, t, rounds)
    base = statistics.median(times["tdrl ops.gae (numba)"])
    print(f"[{b}, {t}] GAE head to head, {rounds} interleaved rounds (shuffled order each round)")
    print(f"  {'implementation':<40} {'median ms':>10} {'min ms':>8} {'ratio':>8}")
    for name, sec in times.items():
        med = statistics.median(sec)
        print(f"  {name:<40} {med * 1e3:>10.3f} {min(sec) * 1e3:>8.3f} {med / base:>8.2f}")
    kernel = statistics.median(times["Tianshou _gae numba kernel"])
    for name in ("tdrl GAE module", "tdrl GAE module, validate=False"):
        speed = kernel / statistics.median(times[name])
        print(f"  {name}: {speed:.2f}x the speed of Tianshou's bare kernel")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu, or cuda: every op on the GPU")
    parser.add_argument(
        "--head-to-head", type=int, default=0, metavar="ROUNDS",
        help="only GAE against Tianshou's kernel on CPU, in ROUNDS interleaved rounds",
    )  # fmt: skip
    args = parser.parse_args()
    device = args.device
    if args.head_to_head:
        torch.set_num_threads(1)
        print("GAE, float32, CPU, torch.set_num_threads(1); ratio = median / tdrl ops.gae's\n")
        for b, t in ((64, 2048), (8, 256)):
            print_head_to_head(b, t, args.head_to_head)
        return
    torch.set_num_threads(1)
    where = "CPU" if device == "cpu" else torch.cuda.get_device_name(device)
    print(f"value estimators, float32, {where}, torch.set_num_threads(1); median ms per call;")
    base_kind = "(numba)" if device == "cpu" else "(Triton, GPU)"
    print(f"ratio = time / tdrl's op {base_kind} of the same estimator and shape\n")
    shapes = ((64, 2048), (8, 256)) if device == "cpu" else ((8, 2048), (64, 2048), (1024, 1000))
    for b, t in shapes:
        rows = rows_for(b, t, device)
        base = {op: ms for op, name, ms in rows if base_kind in name}
        print(f"[{b}, {t}]")
        print(f"  {'estimator':<11} {'implementation':<40} {'ms':>9} {'ratio':>8}")
        for op, name, sec in rows:
            print(f"  {op:<11} {name:<40} {sec * 1e3:>9.3f} {sec / base[op]:>8.2f}")
        print()


if __name__ == "__main__":
    main()
