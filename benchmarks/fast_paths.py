"""What each of tdrl's fast paths (``tdrl._fast``) buys, per step of the operation it serves.

Every row times one operation twice in the same process, in interleaved rounds (median of
``--rounds``): with all fast paths on, and with that one fast path replaced by its plain
public-API twin (the rest left on); the last rows of each operation switch all of them off
(``tdrl.set_fast(False)``, as ``TDRL_FAST=0``). docs/design.md keeps a fast path only if it
buys about 1% of its step or more. Rows marked "dropped" time fast paths that were removed for
buying less: they are rebuilt here only to show the figure.

Operations (one CPU thread, subnormals flushed as in the recipes):
- DQN gradient step: CartPole shapes, batch 64, 256x256 MLP, Huber, clip 10 (the recipe's loop).
- SAC gradient step: HalfCheetah shapes, batch 256, 256x256 MLPs, twin critics, auto alpha.
- PPO minibatch step: Hopper shapes, 64x64 MLPs, minibatch 64 (recipes/ppo.py's epoch loop,
  LambdaLR on).
- collector step: HalfCheetah-v5 x 8 sync envs, a 64x64 tanh Gaussian MLP policy; and Hopper-v5 x 1
  env, one step a batch (the SAC/TD3 recipes' default), alone and with each batch added to a buffer.
- buffer add of one [8] step / sample of 256: HalfCheetah-shaped transitions.

    python benchmarks/fast_paths.py [--rounds 5] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

import tdrl
from tdrl._fast import optim as fast_optim
from tdrl._fast import policy as fast_policy
from tdrl._fast.storage import RowCopier
from tdrl._fast.tdict import new_unchecked

Setup = Callable[[], Callable[[int], None]]  # builds state, returns run(steps)


@contextmanager
def patched(obj: object, name: str, value: object) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


@contextmanager
def patched_item(box: list, value: object) -> Iterator[None]:
    old, box[0] = box[0], value
    try:
        yield
    finally:
        box[0] = old


@contextmanager
def all_off() -> Iterator[None]:
    previous = tdrl.set_fast(False)
    try:
        yield
    finally:
        tdrl.set_fast(previous)


@contextmanager
def nothing() -> Iterator[None]:
    yield


def timed(setup: Setup, steps: int, context: Callable[[], object]) -> float:
    """Seconds per step of ``setup()``'s run, built and run under ``context``."""
    with context():  # type: ignore[attr-defined]
        run = setup()
        run(max(steps // 10, 2))  # warm-up
        start = time.perf_counter()
        run(steps)
        return (time.perf_counter() - start) / steps


# --- operations --------------------------------------------------------------------------------
def _gradient_steps(
    loss: Callable[[Any], Any],
    make_data: Callable[[int], Any],
    batch_size: int,
    finish: Callable[[Any], None],
) -> Callable[[int], None]:
    """``run(steps)``: ``finish(loss(sample))`` on batches from a 10k buffer of ``make_data``."""
    import updates

    from tdrl.data import ReplayBuffer

    buffer = ReplayBuffer(10_000, generator=0)
    buffer.extend(updates._td(make_data(10_000)))

    def run(steps: int) -> None:
        for _ in range(steps):
            finish(loss(buffer.sample(batch_size)))

    return run


def dqn_step() -> Callable[[int], None]:
    import updates

    from tdrl.keys import LOSS
    from tdrl.modules import QValueActor, q_mlp
    from tdrl.objectives import DQNLoss, HardUpdate
    from tdrl.trainers import optimizer_step

    qnet = QValueActor(q_mlp(updates.DQN_OBS, updates.DQN_ACTIONS, updates.DQN_HIDDEN))
    loss = DQNLoss(qnet, loss_function="smooth_l1", double_dqn=False)
    updater = HardUpdate(loss, value_network_update_interval=10)
    optimizer = torch.optim.Adam(qnet.parameters(), lr=2.3e-3, fused=True)

    def finish(out: Any) -> None:
        optimizer_step(out[LOSS], optimizer, max_grad_norm=10.0)
        updater.step()

    return _gradient_steps(loss, updates.dqn_data, updates.DQN_BATCH, finish)


# A soft-update function to use instead of SoftUpdate.step (the dropped fast path's row).
SOFT_UPDATE: list[Callable[..., None] | None] = [None]


def sac_step() -> Setup:
    def setup() -> Callable[[int], None]:
        soft_update = SOFT_UPDATE[0]
        import updates

        from tdrl.keys import LOSS_ACTOR, LOSS_ALPHA, LOSS_QVALUE
        from tdrl.modules import EnsembleCritic, EnsembleMLP, TanhGaussianActor, mlp
        from tdrl.objectives import SACLoss, SoftUpdate
        from tdrl.trainers import optimizer_step

        obs, act, hidden = updates.SAC_OBS, updates.SAC_ACT, updates.SAC_HIDDEN
        actor = TanhGaussianActor(mlp(obs, 2 * act, hidden, activation=torch.nn.ReLU), act)
        critic = EnsembleCritic(EnsembleMLP(obs + act, 1, hidden, num_members=2))
        loss = SACLoss(actor, critic)
        updater = SoftUpdate(loss, tau=0.005)
        optimizer = torch.optim.Adam(loss.parameters(), lr=1e-3, fused=True)

        def finish(out: Any) -> None:
            optimizer_step(out[LOSS_ACTOR] + out[LOSS_QVALUE] + out[LOSS_ALPHA], optimizer)
            if soft_update is None:
                updater.step()
            else:
                for online, target in loss.target_pairs():
                    soft_update(target, online, 0.005)

        return _gradient_steps(loss, updates.sac_data, updates.SAC_BATCH, finish)

    return setup


def ppo_step() -> Callable[[int], None]:
    import updates

    from tdrl.modules import POLICY_GAIN, GaussianActor, ValueCritic, mlp
    from tdrl.objectives import ClipPPOLoss
    from tdrl.trainers import linear_decay

    actor = GaussianActor(mlp(updates.OBS_DIM, updates.ACT_DIM, output_gain=POLICY_GAIN), 3)
    critic = ValueCritic(mlp(updates.OBS_DIM, 1))
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.2, critic_coeff=0.5)
    optimizer = torch.optim.Adam(loss.parameters(), lr=3e-4, eps=1e-5, fused=True)
    scheduler = linear_decay(optimizer, 10**6)
    data = updates.ppo_data(64 * 64)
    batch = TensorDict(data, batch_size=[len(data["action"])])

    def run(steps: int) -> None:  # steps: minibatch steps, in passes of 64
        for _ in range(max(steps // 64, 1)):
            updates.recipe_ppo_update(loss, optimizer, batch, epochs=1, minibatch=64)
            scheduler.step()

    return run


def collector_step() -> Callable[[int], None]:
    import collector as bench_collector
    from tensordict.nn import TensorDictModule

    from tdrl.collectors import Collector
    from tdrl.envs import make_vec_env

    env = make_vec_env("HalfCheetah-v5", 8, seed=0)
    net = bench_collector.GaussianMLP(17, 6)
    policy = TensorDictModule(net, ["observation"], ["action", "loc", "scale", "action_log_prob"])
    collector = Collector(env, policy, frames_per_batch=8 * 100, total_frames=-1)

    def run(steps: int) -> None:  # steps: vector steps, in batches of 100
        for _ in range(max(steps // 100, 1)):
            collector.rollout()

    return run


def _one_step_collector() -> Any:
    """One env, one step a batch (the off-policy recipes' SAC/TD3 default, MinAtar's DQN), a
    64x64 Gaussian policy on Hopper-v5."""
    import collector as bench_collector
    from tensordict.nn import TensorDictModule

    from tdrl.collectors import Collector
    from tdrl.envs import make_vec_env

    env = make_vec_env("Hopper-v5", 1, seed=0)
    net = bench_collector.GaussianMLP(11, 3)
    policy = TensorDictModule(net, ["observation"], ["action", "loc", "scale", "action_log_prob"])
    return Collector(env, policy, frames_per_batch=1, total_frames=-1)


def collector_step_one() -> Callable[[int], None]:
    collector = _one_step_collector()

    def run(steps: int) -> None:
        for _ in range(steps):
            collector.rollout()

    return run


def collector_add_one() -> Callable[[int], None]:
    """:func:`collector_step_one` with each one-step batch added to a replay buffer."""
    from tdrl.data import ReplayBuffer

    collector, buffer = _one_step_collector(), ReplayBuffer(100_000)

    def run(steps: int) -> None:
        for _ in range(steps):
            buffer.extend(collector.rollout())

    return run


def _transitions(n: int) -> list[TensorDict]:
    import buffers as bench_buffers

    return bench_buffers.td_pool(bench_buffers.numpy_pool(np.random.default_rng(0)))[:n]


def buffer_add() -> Callable[[int], None]:
    from tdrl.data import ReplayBuffer

    pool = _transitions(64)
    buffer = ReplayBuffer(1_000_000, num_streams=8, generator=0)

    def run(steps: int) -> None:
        for i in range(steps):
            buffer.extend(pool[i % 64])

    return run


def buffer_sample() -> Callable[[int], None]:
    from tdrl.data import ReplayBuffer

    pool = _transitions(64)
    buffer = ReplayBuffer(100_000, num_streams=8, generator=0)
    for i in range(2000):
        buffer.extend(pool[i % 64])

    def run(steps: int) -> None:
        for _ in range(steps):
            buffer.sample(256)

    return run


# --- dropped fast paths, rebuilt here for their figure ------------------------------------------
@torch.no_grad()
def foreach_soft_update(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    """The dropped multi-tensor Polyak update (one fused call for all parameters)."""
    torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)
    for b_t, b in zip(target.buffers(), online.buffers(), strict=True):
        b_t.copy_(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="short runs, 2 rounds")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    rounds = 2 if args.quick else args.rounds
    scale = 0.2 if args.quick else 1.0
    from tdrl.objectives import offpolicy as offpolicy_losses

    unchecked_output = staticmethod(lambda out: new_unchecked(out, torch.Size([])))
    foreach = lambda: patched_item(SOFT_UPDATE, foreach_soft_update)  # noqa: E731
    # (fast path, its plain twin, operation, steps, setup, context that swaps in the twin)
    rows: list = []
    ops: list[tuple[str, int, Setup]] = [
        ("DQN gradient step", 2000, dqn_step),
        ("SAC gradient step", 300, sac_step()),
        ("PPO minibatch step", 1280, ppo_step),
        ("collector step (x8 envs)", 1000, collector_step),
        ("collector step (1 env, T=1)", 2000, collector_step_one),
        ("collect + add (1 env, T=1)", 2000, collector_add_one),
        ("buffer add ([8] step)", 50_000, buffer_add),
        ("buffer sample (256)", 5000, buffer_sample),
    ]
    adam = ("fused Adam step (_fast.optim.adam_step)", "optimizer.step()")
    clip = ("grad clip (_fast.optim.clip_grad_norm_)", "torch.nn.utils.clip_grad_norm_")
    zero = ("zero_grad (_fast.optim.zero_grad)", "optimizer.zero_grad()")
    no_adam = lambda: patched(fast_optim, "adam_step", lambda o: False)  # noqa: E731
    no_clip = lambda: patched(fast_optim, "clip_grad_norm_", lambda g, m: None)  # noqa: E731
    no_zero = lambda: patched(fast_optim, "zero_grad", lambda o: False)  # noqa: E731
    output = lambda: patched(offpolicy_losses.OffPolicyLoss, "_output", unchecked_output)  # noqa: E731
    no_gather = lambda: patched(RowCopier, "gather", lambda self, i: None)  # noqa: E731
    # The storage calls the generated writers directly: without them every add is checked.
    no_write = lambda: patched(RowCopier, "learn", lambda self, batch_size: None)  # noqa: E731
    no_direct = lambda: patched(fast_policy, "plain_module", lambda p: None)  # noqa: E731

    for name, steps, setup in ops[:3]:
        rows += [
            (*adam, name, steps, setup, no_adam),
            (*clip, name, steps, setup, no_clip) if name != "SAC gradient step" else None,
            (*zero, name, steps, setup, no_zero),
        ]
    gather = ("compiled gather (_fast.storage)", "index_select per leaf")
    rows += [
        (*gather, "DQN gradient step", 2000, dqn_step, no_gather),
        (*gather, "buffer sample (256)", 5000, buffer_sample, no_gather),
        ("compiled write (_fast.storage)", "checked copy_ per leaf", "buffer add ([8] step)",
         50_000, buffer_add, no_write),
        ("direct module call (_fast.policy)", "policy(td)", "collector step (x8 envs)", 1000,
         collector_step, no_direct),
        ("direct module call (_fast.policy)", "policy(td)", "collector step (1 env, T=1)", 2000,
         collector_step_one, no_direct),
        ("compiled write (_fast.storage)", "checked copy_ per leaf", "collect + add (1 env, T=1)",
         2000, collector_add_one, no_write),
        ("multi-tensor Polyak update (dropped)", "lerp_ per tensor", "SAC gradient step", 300,
         sac_step(), nothing, foreach),  # plain: per tensor (as shipped); fast: foreach
        ("unchecked loss output (dropped)", "TensorDict(...)", "DQN gradient step", 2000,
         dqn_step, nothing, output),  # plain: checked (as shipped); fast: _fast.tdict
    ]  # fmt: skip
    rows += [
        ("all fast paths", "TDRL_FAST=0", name, steps, setup, all_off) for name, steps, setup in ops
    ]
    print(
        f"tdrl fast paths: time per step with the fast path and with its plain twin, median of "
        f"{rounds} interleaved rounds, 1 thread"
    )
    print(
        f"{'fast path':40s} {'twin':32s} {'operation':26s} {'fast':>9s} {'plain':>9s} {'gain':>7s}"
    )
    for row in rows:
        if row is None:
            continue
        fast_name, twin, op, steps, setup, swap, *rest = row
        fast_context = rest[0] if rest else nothing
        steps = max(int(steps * scale), 10)
        fast_times, plain_times = [], []
        for _ in range(rounds):
            fast_times.append(timed(setup, steps, fast_context))
            plain_times.append(timed(setup, steps, swap))
        fast, slow = statistics.median(fast_times), statistics.median(plain_times)
        unit = 1e6
        print(
            f"{fast_name:40s} {twin:32s} {op:26s} {fast * unit:8.1f}us {slow * unit:8.1f}us "
            f"{slow / fast - 1:+7.1%}",
            flush=True,
        )


if __name__ == "__main__":
    main()
