"""Update throughput of tdrl against SB3, Tianshou and TorchRL, all in one run.

PPO section: one PPO update phase on a fixed batch of Hopper shapes (observation 11, action 3),
16,384 samples, 10 epochs of minibatch 64, 64x64 tanh MLPs for actor and critic, Gaussian policy
with a state-independent log-std, advantages and returns precomputed, Adam (lr 3e-4), gradient
clipping at 0.5, clip epsilon 0.2, advantage normalization, no entropy bonus. Every library runs
its own update code on the same data: SB3 ``PPO.train()`` on a filled rollout buffer, Tianshou
``PPO._update_with_batch``, TorchRL ``ClipPPOLoss`` in an index-and-step loop (plain indexing is
cheaper than its replay-buffer sampler, so this favours TorchRL), tdrl's minibatch epochs as
recipes/ppo.py writes them. Every
library runs on one thread (``torch.set_num_threads(1)``): the figure is the library overhead
around the same small networks, and ratios within a run are what to compare.

SAC section: gradient steps per second on HalfCheetah shapes (observation 17, action 6), batch
256, 256x256 ReLU MLPs for the actor and both critics, automatic entropy tuning, Polyak targets,
each library sampling from its own replay buffer of 10,000 random transitions (Tianshou's
``SAC.update``, SB3's ``SAC.train``, TorchRL's ``SACLoss`` loop as in its sota-implementations,
tdrl's recipes/sac.py loop). DQN section: the same on CartPole shapes (observation 4, 2 actions),
batch 64, 256x256 MLP (rl-baselines3-zoo's CartPole setting), Huber loss, no double Q (SB3 has
none), hard target copy every 10 steps (SB3 copies in ``_on_step``, outside ``train``, so its
section copies between ``train`` calls of 10 steps), gradients clipped at 10 (SB3 always clips;
Tianshou's DQN has no clipping, which favours it). QR-DQN section (``qrdqn``): the DQN section's
work with QR-DQN's head, rl-zoo3's CartPole entry (10 quantiles, quantile Huber loss), against
sb3-contrib's ``QRDQN.train`` and Tianshou's ``QRDQN`` (which always runs the online network on
the next observations to pick the bootstrap action, and clips nothing).

Optimizer: tdrl's loops step torch's fused Adam (``fused=True``, and a ``foreach`` gradient
clip); the peers run their own defaults (TorchRL's loops here, as in its sota-implementations,
SB3 and Tianshou: torch's single-tensor Adam on the CPU), so part of each ratio is that choice,
which each peer could make too. An Adam step on the PPO section's parameters took 847 us
default, 463 us foreach and 164 us fused, and the PPO section's peers ran faster with fused Adam
by 20% (TorchRL) and 10% (SB3), interleaved under load. ``--fused-peers`` adds a
row per peer ("SB3 fused", ...) running the peer's own code with torch's Adam defaulting to
``fused=True`` (``fused_adam_default``: every ``torch.optim.Adam`` the peer builds, its entropy
coefficient's included), so each ratio can be read with the optimizer's share taken out; the
"fastest peer" then counts those rows too.

Float mode: every library runs with subnormal floats flushed to zero, as tdrl's recipes do
(``RunConfig.flush_denormal``); otherwise Adam's moments of dead ReLU units decay into
subnormals, which the CPU handles tens of times slower, and the rates swing with how many have
(DQN, one run under load: tdrl 439 and SB3 394 steps/s kept, 636 and 480 flushed).
``--keep-denormals`` keeps torch's default for everyone.

The SAC and DQN sections time each library in 3 rounds, the libraries taking turns within a
round, and report the median rate (the PPO section: one update phase per library a round).

Recurrent PPO section (``ppo_lstm``): one update phase on CartPoleNoVel shapes with an LSTM
actor, tdrl's epochs over whole sequences (``tdrl.data.minibatches(seq_len=...)``) against
sb3-contrib ``RecurrentPPO.train()`` on the same
filled rollout (see ``section_ppo_lstm``), median of 3 interleaved rounds.

CQL and IQL sections (offline): the SAC section's shapes and data, each library's own loss
(tdrl ``CQLLoss`` / ``IQLLoss`` as recipes/offline.py steps them, TorchRL's ``CQLLoss`` /
``IQLLoss``, Tianshou's ``CQL``; SB3 has neither, Tianshou no IQL) at one set of settings (see
``_offline_tdrl``), 3 interleaved rounds, median.

TQC and CrossQ sections: the SAC section's shapes and data at the MuJoCo table's settings
(sb3-contrib's: TQC 2 critics of 25 quantiles, 2 dropped each, lr 3e-4; CrossQ batch renorm
before every linear layer, 256x256 critics, no targets, the actor every 3rd step, Adam betas
(0.5, 0.999)), tdrl recipes/sac.py's step (TQC's critics first, as the table runs it) against
sb3-contrib's ``train`` and TorchRL's losses, 3 interleaved rounds, median (the "SB3" row is
sb3-contrib).

TD3 and DDPG sections: the SAC section's shapes and data at the MuJoCo table's TD3 and DDPG
settings (rl-zoo3's: 400x300 MLPs, lr 1e-3; TD3's actor and targets every 2nd critic step), each
library's own update (see ``_deterministic_peers``), 3 interleaved rounds, median.

Usage: ``python benchmarks/updates.py [--quick] [--sections ppo sac td3 ...]`` (``--help`` lists
the sections); ``--device cuda --sections ppo sac dqn td3`` runs those sections on a GPU (every
library that takes a device; one CPU thread each, as on CPU). ``--compile`` adds, in the PPO,
SAC, DQN and TD3 sections, the rows of tdrl's update steps through ``trainers.compiled_step``:
compiled with torch.compile and, on CUDA, captured in a CUDA graph, eager or compiled (their
first steps untimed: compile and capture).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import nn

OBS_DIM, ACT_DIM = 11, 3
LR, MAX_GRAD_NORM, CLIP = 3e-4, 0.5, 0.2
ROUNDS = 3  # SAC and DQN sections: interleaved rounds per library (median reported)
# Where the networks, losses and buffers live (``--device``); the PPO, SAC and DQN sections run on
# CUDA too, with every library that takes a device (Tianshou's rows are CPU-only here).
DEVICE = torch.device("cpu")
CUDA_SECTIONS = ("ppo", "sac", "dqn", "td3")


# The recipes' gradient steps, as the recipes write them in their loops (recipes/ppo.py,
# recipes/sac.py (REDQ: its --algo redq), recipes/td3.py, recipes/dqn.py), so tdrl is timed on the
# same work its recipes do: each update step a function, through trainers.compiled_step with the
# options of the row being timed (--compile adds the compiled and captured rows).
CAPTURE: dict[str, Any] = {}  # compiled_step's options while a "tdrl compiled" row runs
CAPTURE_WARMUP = 8  # untimed steps before a compiled row's clock starts: compile and capture
CAPTURE_ROWS = {
    "tdrl compiled": {"compile": True},
    "tdrl cudagraphs": {"cudagraphs": True},
    "tdrl compiled+graphs": {"compile": True, "cudagraphs": True},
}


def ppo_minibatch_step(loss: Any, optimizer: Any) -> Callable[[Any], Any]:
    """recipes/ppo.py's minibatch step (no bonus), compiled as the row asks."""
    from tdrl.objectives import total_loss
    from tdrl.trainers import compiled_step, optimizer_step

    def learn(minibatch: Any) -> Any:
        out = loss(minibatch)
        optimizer_step(total_loss(out), optimizer, max_grad_norm=MAX_GRAD_NORM)
        return out.detach()

    return compiled_step(learn, optimizer, **CAPTURE)


def recipe_ppo_update(
    loss: Any,
    update: Callable[[Any], Any],
    batch: Any,
    *,
    epochs: int,
    minibatch: int,
    seq_len: int | None = None,
) -> None:
    from torchrl.modules import set_recurrent_mode

    from tdrl.data import minibatches

    outs = []
    with set_recurrent_mode(seq_len is not None):
        for minibatch_td in minibatches(
            batch, minibatch, epochs=epochs, in_keys=loss.in_keys, seq_len=seq_len
        ):
            outs.append(update(minibatch_td))
    torch.stack(outs).mean()


def warm_ppo_step(loss: Any, update: Callable[[Any], Any], batch: Any, minibatch: int) -> None:
    """A compiled row's untimed first minibatch steps (compile, capture)."""
    if CAPTURE:
        recipe_ppo_update(loss, update, batch[: CAPTURE_WARMUP * minibatch], epochs=1,
                          minibatch=minibatch)  # fmt: skip


def recipe_actor_critic_step(
    loss: Any,
    optimizer: Any,
    target: Any,
    *,
    actor_every: int = 1,
    targets_with_actor: bool = False,
    critics_first: bool = False,
) -> Callable[[Any, int], None]:
    """recipes/sac.py's gradient steps: the whole loss every ``actor_every``-th step (one backward
    of the summed losses, or with ``critics_first`` the critics' step and then the actor's and
    alpha's, as its ``--update-order critics_first``), the critics alone between."""
    from tensordict import TensorDict

    from tdrl import keys
    from tdrl.objectives import total_loss
    from tdrl.trainers import compiled_step, optimizer_step

    def joint_step(sample: Any) -> Any:
        out = loss(sample)
        optimizer_step(total_loss(out), optimizer)
        if target is not None:  # CrossQ has none
            target.step()
        return out.detach()

    def critics_first_step(sample: Any) -> Any:
        alpha = loss.alpha
        loss_qvalue, td_error = loss.qvalue_loss(sample, alpha)
        optimizer_step(loss_qvalue, optimizer)
        loss_actor, log_prob = loss.actor_loss(sample, alpha)
        loss_alpha = loss.alpha_loss(log_prob, sample)
        optimizer_step(loss_actor + loss_alpha, optimizer)
        if target is not None:
            target.step()
        out = {keys.LOSS_ACTOR: loss_actor, keys.LOSS_QVALUE: loss_qvalue,
               loss.tensor_keys.priority: td_error, keys.LOSS_ALPHA: loss_alpha,
               keys.ALPHA: alpha, keys.ENTROPY: -log_prob.mean()}  # fmt: skip
        return TensorDict(out).detach()

    full_step = critics_first_step if critics_first else joint_step

    def critic_step(sample: Any) -> None:
        optimizer_step(loss.qvalue_loss(sample)[0], optimizer)
        if target is not None and not targets_with_actor:
            target.step()

    full = compiled_step(full_step, optimizer, **CAPTURE)
    critic = compiled_step(critic_step, optimizer, **CAPTURE)

    def step(sample: Any, k: int) -> None:
        if k % actor_every == 0:
            full(sample)
        else:
            critic(sample)

    return step


def recipe_q_learning_step(
    loss: Any, optimizer: Any, target: Any, *, max_grad_norm: float, after: Any = None
) -> Callable[[Any, int], None]:
    from tdrl import keys
    from tdrl.trainers import compiled_step, optimizer_step

    def learn(sample: Any) -> Any:
        out = loss(sample)
        optimizer_step(out[keys.LOSS], optimizer, max_grad_norm=max_grad_norm)
        return out.detach()

    update = compiled_step(learn, optimizer, **CAPTURE)

    def step(sample: Any, k: int) -> None:
        out = update(sample)
        if after is not None:
            after(sample, out)
        target.step(k)

    return step


def _elapsed(start: float) -> float:
    """Seconds since ``start``, after the queued GPU work has finished (on CUDA)."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _timed_steps(
    step: Callable[[Any, int], None], buffer: Any, batch_size: int, steps: int
) -> float:
    """Seconds for ``step(buffer.sample(batch_size), k)`` at k = 1 .. ``steps``: tdrl's gradient
    steps as its recipes' loops take them, sampling included (a compiled row's warm-up steps
    first, untimed)."""
    for k in range(1, CAPTURE_WARMUP + 1 if CAPTURE else 1):
        step(buffer.sample(batch_size), k)
    if DEVICE.type == "cuda":  # the warm-up's GPU work done
        torch.cuda.synchronize()
    start = time.perf_counter()
    for k in range(1, steps + 1):
        step(buffer.sample(batch_size), k)
    return _elapsed(start)


def plain(bench: Callable[..., float]) -> Callable[..., float]:
    """``bench`` with tdrl's fast paths off (their public-API twins, as ``TDRL_FAST=0``)."""

    def run(*args: Any) -> float:
        import tdrl

        previous = tdrl.set_fast(False)
        try:
            return bench(*args)
        finally:
            tdrl.set_fast(previous)

    return run


@contextlib.contextmanager
def fused_adam_default() -> Iterator[None]:
    """Every ``torch.optim.Adam`` built inside defaults to ``fused=True`` (unless its caller
    asks for ``foreach`` or ``fused``): the peers' own code, with tdrl's choice of optimizer."""
    init = torch.optim.Adam.__init__

    def fused_init(self: torch.optim.Adam, params: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("foreach") is None and kwargs.get("fused") is None:
            kwargs["fused"] = True
        init(self, params, *args, **kwargs)

    torch.optim.Adam.__init__ = fused_init  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.optim.Adam.__init__ = init  # type: ignore[method-assign]


def fused(bench: Callable[..., float]) -> Callable[..., float]:
    """``bench`` (a peer's) with torch's Adam defaulting to fused, as tdrl steps it."""

    def run(*args: Any) -> float:
        with fused_adam_default():
            return bench(*args)

    return run


PEER_NAMES = ("SB3", "Tianshou", "TorchRL")
PEER_TABLES: list[dict[str, Callable[..., float]]] = []  # every section's, for --fused-peers


def with_capture(bench: Callable[..., float], options: dict[str, Any]) -> Callable[..., float]:
    """``bench`` with tdrl's update steps through ``compiled_step(**options)``."""

    def run(*args: Any) -> float:
        CAPTURE.update(options)
        try:
            return bench(*args)
        finally:
            CAPTURE.clear()

    return run


def add_capture_rows() -> None:
    """``--compile``: the compiled rows after "tdrl plain" in the sections whose tdrl update
    steps go through ``compiled_step`` with an untimed warm-up (:data:`CAPTURE_TABLES`; the CUDA
    graph rows on CUDA only)."""
    import torch._dynamo

    torch._dynamo.config.recompile_limit = 64  # each round builds its networks anew
    for table in CAPTURE_TABLES:
        rows = list(table.items())
        table.clear()
        for name, bench in rows:
            table[name] = bench
            if name != "tdrl plain":
                continue
            for row, options in CAPTURE_ROWS.items():
                if DEVICE.type == "cuda" or not options.get("cudagraphs"):
                    table[row] = with_capture(table["tdrl"], options)


def add_fused_rows() -> None:
    """``--fused-peers``: a "<peer> fused" row after the rows of every section's table."""
    for table in PEER_TABLES:
        for name in [name for name in table if not name.startswith("tdrl")]:
            table[f"{name} fused"] = fused(table[name])


def peers(
    tdrl_bench: Callable[..., float],
    sb3: Callable[..., float] | None,
    tianshou: Callable[..., float] | None,
    torchrl: Callable[..., float] | None,
) -> dict[str, Callable[..., float]]:
    """One section's libraries in table order; "tdrl plain" runs tdrl with its fast paths off;
    a library without the algorithm (None) has no row."""
    table = {"tdrl": tdrl_bench, "tdrl plain": plain(tdrl_bench)}
    others = dict(zip(PEER_NAMES, (sb3, tianshou, torchrl), strict=True))
    table.update({name: bench for name, bench in others.items() if bench is not None})
    PEER_TABLES.append(table)
    return table


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
    from tdrl.objectives import ClipPPOLoss

    actor = GaussianActor(mlp(OBS_DIM, ACT_DIM, output_gain=POLICY_GAIN), ACT_DIM)
    critic = ValueCritic(mlp(OBS_DIM, 1))
    loss = ClipPPOLoss(actor, critic, clip_epsilon=CLIP, critic_coeff=0.5).to(DEVICE)
    optimizer = torch.optim.Adam(loss.parameters(), lr=LR, eps=1e-5, fused=True)
    batch = TensorDict(data, batch_size=[len(data["action"])], device=DEVICE)
    update = ppo_minibatch_step(loss, optimizer)
    warm_ppo_step(loss, update, batch, minibatch)
    start = time.perf_counter()
    recipe_ppo_update(loss, update, batch, epochs=epochs, minibatch=minibatch)
    return _elapsed(start)


def bench_sb3(data: dict[str, torch.Tensor], epochs: int, minibatch: int) -> float:
    import gymnasium as gym
    from stable_baselines3 import PPO
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
        device=DEVICE,
        seed=0,
    )
    fill_sb3_rollout(model, data)
    start = time.perf_counter()
    model.train()
    return _elapsed(start)


def fill_sb3_rollout(model: Any, data: dict[str, torch.Tensor], time_major: bool = False) -> Any:
    """Fill an SB3 rollout buffer with ``data`` and mark it ready to train; ``time_major``:
    ``data`` is tdrl's ``[envs, steps]`` layout, turned into SB3's ``[steps, envs]``."""
    from stable_baselines3.common.logger import configure

    model.set_logger(configure(None, [""]))
    model._current_progress_remaining = 1.0
    buffer = model.rollout_buffer
    names = {
        "observations": "observation", "actions": "action", "log_probs": "action_log_prob",
        "values": "state_value", "advantages": "advantage", "returns": "value_target",
    }  # fmt: skip
    for name, key in names.items():
        value = data[key].transpose(0, 1) if time_major else data[key]
        target = getattr(buffer, name)
        target[:] = value.numpy().reshape(target.shape)
    buffer.full = True
    return buffer


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
    return _elapsed(start)


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
    ).to(DEVICE)
    optimizer = torch.optim.Adam(loss.parameters(), lr=LR)
    n = len(data["action"])
    batch = TensorDict(data, batch_size=[n], device=DEVICE)
    start = time.perf_counter()
    for _ in range(epochs):
        perm = torch.randperm(n, device=DEVICE)
        for i in range(0, n, minibatch):
            out = loss(batch[perm[i : i + minibatch]])
            total = out["loss_objective"] + out["loss_critic"]
            optimizer.zero_grad()
            total.backward()
            torch.nn.utils.clip_grad_norm_(loss.parameters(), MAX_GRAD_NORM)
            optimizer.step()
    return _elapsed(start)


PPO_PEERS = peers(bench_tdrl, bench_sb3, bench_tianshou, bench_torchrl)


def _ppo_epochs(bench: Callable[..., float], minibatch: int, data: Any, epochs: int) -> float:
    return bench(data, epochs, minibatch)


def section_ppo(quick: bool) -> None:
    samples, epochs, minibatch = (2048, 2, 64) if quick else (16384, 10, 64)
    data = ppo_data(samples)
    peers = {name: partial(_ppo_epochs, bench, minibatch) for name, bench in PPO_PEERS.items()}
    _steps_table(
        f"PPO update: {samples} samples x {epochs} epochs, minibatch {minibatch}, 1 thread, "
        f"median of {ROUNDS} interleaved rounds",
        peers, data, epochs, warmup=1, scale=samples, unit="samples/s",
    )  # fmt: skip


# --- recurrent PPO: one update phase on CartPoleNoVel shapes -----------------------------------
# Observation 2, 2 actions, 8 envs x 256 steps with an episode start every 32 steps; an LSTM of 64
# on the observation, then 64x64 tanh heads; a feed-forward critic (sb3-contrib's
# enable_critic_lstm=False: its critic maps the observation features through one linear layer to
# the LSTM width, then its 64x64 head; tdrl's is a 64x64 MLP on the observation). 10 epochs of
# 256-step minibatches: tdrl's are 8 whole 32-step sequences, sb3-contrib cuts its minibatches
# at the episode starts, which fall on the same 32-step boundaries.
LSTM_OBS, LSTM_ACTIONS, LSTM_SIZE, LSTM_ENVS, LSTM_STEPS, LSTM_EPISODE = 2, 2, 64, 8, 256, 32


def lstm_data(seed: int = 0) -> dict[str, torch.Tensor]:
    """A synthetic recurrent rollout ``[envs, steps]``: uniform actions (log-prob log 1/2),
    random stored LSTM states, zero where an episode starts."""
    g = torch.Generator().manual_seed(seed)
    shape = (LSTM_ENVS, LSTM_STEPS)
    is_init = torch.zeros(*shape, 1, dtype=torch.bool)
    is_init[:, ::LSTM_EPISODE] = True
    state = [0.1 * torch.randn(*shape, 1, LSTM_SIZE, generator=g) for _ in range(2)]
    state = [torch.where(is_init[..., None], 0.0, x) for x in state]
    value, advantage = torch.randn(*shape, 1, generator=g), torch.randn(*shape, 1, generator=g)
    return {
        "observation": torch.randn(*shape, LSTM_OBS, generator=g),
        "action": torch.randint(LSTM_ACTIONS, shape, generator=g),
        "action_log_prob": torch.full(shape, -math.log(LSTM_ACTIONS)),
        "state_value": value, "advantage": advantage, "value_target": value + advantage,
        "is_init": is_init, "recurrent_state_h": state[0], "recurrent_state_c": state[1],
    }  # fmt: skip


def lstm_tdrl(data: dict[str, torch.Tensor], epochs: int, minibatch: int) -> float:
    from tensordict import TensorDict

    from tdrl.modules import (
        POLICY_GAIN,
        CategoricalActor,
        LSTMModule,
        RecurrentActor,
        ValueCritic,
        mlp,
    )
    from tdrl.objectives import ClipPPOLoss

    actor = RecurrentActor(
        LSTMModule(LSTM_OBS, LSTM_SIZE, in_key="observation", out_key="embed"),
        CategoricalActor(mlp(LSTM_SIZE, LSTM_ACTIONS, output_gain=POLICY_GAIN), in_key="embed"),
    )
    critic = ValueCritic(mlp(LSTM_OBS, 1))
    loss = ClipPPOLoss(actor, critic, clip_epsilon=CLIP, critic_coeff=0.5)
    optimizer = torch.optim.Adam(loss.parameters(), lr=LR, eps=1e-5, fused=True)
    batch = TensorDict(data, batch_size=data["action"].shape)
    update = ppo_minibatch_step(loss, optimizer)
    start = time.perf_counter()
    recipe_ppo_update(loss, update, batch, epochs=epochs, minibatch=minibatch, seq_len=LSTM_EPISODE)
    return _elapsed(start)


def lstm_sb3_contrib(data: dict[str, torch.Tensor], epochs: int, minibatch: int) -> float:
    import gymnasium as gym
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    class Shapes(gym.Env):
        observation_space = gym.spaces.Box(-np.inf, np.inf, (LSTM_OBS,), np.float32)
        action_space = gym.spaces.Discrete(LSTM_ACTIONS)

    envs, steps = data["action"].shape
    model = RecurrentPPO(
        "MlpLstmPolicy", DummyVecEnv([Shapes] * envs), learning_rate=LR, n_steps=steps,
        batch_size=minibatch, n_epochs=epochs, clip_range=CLIP, ent_coef=0.0, vf_coef=0.5,
        max_grad_norm=MAX_GRAD_NORM, device="cpu", seed=0,
        policy_kwargs=dict(lstm_hidden_size=LSTM_SIZE, enable_critic_lstm=False),
    )  # fmt: skip
    buffer = fill_sb3_rollout(model, data, time_major=True)
    buffer.episode_starts[:] = data["is_init"].transpose(0, 1).float().numpy()[..., 0]
    for name, key in (
        ("hidden_states_pi", "recurrent_state_h"),
        ("cell_states_pi", "recurrent_state_c"),
        ("hidden_states_vf", "recurrent_state_h"),
        ("cell_states_vf", "recurrent_state_c"),
    ):
        # SB3's [steps, layers, envs, hidden] from tdrl's [envs, steps, layers, hidden]
        getattr(buffer, name)[:] = data[key].permute(1, 2, 0, 3).numpy()
    start = time.perf_counter()
    model.train()
    return _elapsed(start)


LSTM_PEERS = {"tdrl": lstm_tdrl, "tdrl plain": plain(lstm_tdrl), "sb3-contrib": lstm_sb3_contrib}
PEER_TABLES.append(LSTM_PEERS)


def section_ppo_lstm(quick: bool) -> None:
    epochs, minibatch = (2, 256) if quick else (10, 256)
    data = lstm_data()
    samples = LSTM_ENVS * LSTM_STEPS
    print(f"\nRecurrent PPO update: {LSTM_ENVS} envs x {LSTM_STEPS} steps x {epochs} epochs, "
          f"minibatch {minibatch} ({minibatch // LSTM_EPISODE} sequences of {LSTM_EPISODE}), "
          f"LSTM {LSTM_SIZE}, 1 thread")  # fmt: skip
    peers = dict(LSTM_PEERS)
    times: dict[str, list[float]] = {name: [] for name in peers}
    for bench in peers.values():
        bench(data, 1, minibatch)  # warm-up
    for _ in range(ROUNDS):
        for name, bench in peers.items():
            times[name].append(bench(data, epochs, minibatch))
    rates = {name: samples * epochs / statistics.median(t) for name, t in times.items()}
    print(f"{'library':<18} {'samples/s':>10} {'vs tdrl':>8}")
    for name, rate in rates.items():
        print(f"{name:<18} {rate:>10,.0f} {rate / rates['tdrl']:>8.2f}")
    print(f"tdrl / sb3-contrib RecurrentPPO: {rates['tdrl'] / rates['sb3-contrib']:.2f}x "
          f"(target >= 1.5x); plain (TDRL_FAST=0): "
          f"{rates['tdrl plain'] / rates['sb3-contrib']:.2f}x")  # fmt: skip
    if "sb3-contrib fused" in rates:
        print(
            f"tdrl / sb3-contrib with fused Adam: {rates['tdrl'] / rates['sb3-contrib fused']:.2f}x"
        )


# --- SAC: gradient steps on HalfCheetah shapes ------------------------------------------------
SAC_OBS, SAC_ACT, SAC_BATCH, SAC_HIDDEN, SAC_BUFFER = 17, 6, 256, [256, 256], 20_000


def sac_data(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random transitions with HalfCheetah's shapes (the update cost does not depend on values)."""
    g = torch.Generator().manual_seed(seed)
    return {
        "observation": torch.randn(n, SAC_OBS, generator=g),
        "action": torch.rand(n, SAC_ACT, generator=g) * 2 - 1,
        "next_observation": torch.randn(n, SAC_OBS, generator=g),
        "reward": torch.randn(n, generator=g),
        "terminated": torch.rand(n, generator=g) < 0.01,
    }


def _td(data: dict[str, torch.Tensor]):  # noqa: ANN202
    from tensordict import TensorDict

    n = len(data["reward"])
    term = data["terminated"].view(n, 1)
    return TensorDict(
        {
            "observation": data["observation"],
            "action": data["action"],
            ("next", "observation"): data["next_observation"],
            ("next", "reward"): data["reward"].view(n, 1),
            ("next", "terminated"): term,
            ("next", "truncated"): torch.zeros_like(term),
            ("next", "done"): term,
        },
        batch_size=[n],
    )


def _replay(data: dict[str, torch.Tensor], device: torch.device | None = None) -> Any:
    """tdrl's ``ReplayBuffer`` (the SAC section's capacity) holding ``data``, on ``device``
    (default: ``--device``, read when called)."""
    from tdrl.data import ReplayBuffer

    device = DEVICE if device is None else device
    buffer = ReplayBuffer(SAC_BUFFER, generator=0, device=device)
    buffer.extend(_td(data).to(device))
    return buffer


def sac_tdrl(data: dict[str, torch.Tensor], steps: int) -> float:
    """The loop of recipes/sac.py: sample, loss, one backward, fused Adam, soft update."""
    from tdrl.modules import EnsembleCritic, EnsembleMLP, TanhGaussianActor, mlp
    from tdrl.objectives import SACLoss, SoftUpdate

    actor = TanhGaussianActor(mlp(SAC_OBS, 2 * SAC_ACT, SAC_HIDDEN, activation=nn.ReLU), SAC_ACT)
    critic = EnsembleCritic(EnsembleMLP(SAC_OBS + SAC_ACT, 1, SAC_HIDDEN, num_members=2))
    loss = SACLoss(actor, critic).to(DEVICE)
    updater = SoftUpdate(loss, tau=0.005)
    optimizer = torch.optim.Adam(
        [
            {"params": actor.parameters(), "lr": 1e-3},
            {"params": critic.parameters(), "lr": 1e-3},
            {"params": [loss.log_alpha], "lr": 3e-4},
        ],
        fused=True,
    )

    step = recipe_actor_critic_step(loss, optimizer, updater)
    return _timed_steps(step, _replay(data), SAC_BATCH, steps)


def _sb3_model(
    cls: Any,
    space: Any,
    data: dict[str, torch.Tensor],
    policy: str = "MlpPolicy",
    buffer_size: int = 0,
    **kwargs: Any,
) -> Any:
    """An SB3 off-policy model on ``space`` (a gymnasium env class) at the benchmark's settings,
    its replay buffer (``buffer_size``, default the SAC section's) filled with ``data``, ready
    for ``model.train``."""
    from stable_baselines3.common.logger import configure

    model = cls(policy, space(), buffer_size=buffer_size or SAC_BUFFER, learning_starts=0,
                device=DEVICE, seed=0, **kwargs)  # fmt: skip
    model.set_logger(configure(None, [""]))
    rb, n = model.replay_buffer, len(data["reward"])
    rb.observations[:n, 0] = data["observation"].numpy()
    rb.next_observations[:n, 0] = data["next_observation"].numpy()
    rb.actions[:n, 0] = data["action"].reshape(n, -1).numpy()
    rb.rewards[:n, 0] = data["reward"].numpy()
    rb.dones[:n, 0] = data["terminated"].numpy()
    rb.pos, rb.full = n % rb.buffer_size, n >= rb.buffer_size
    model._current_progress_remaining = 1.0
    return model


def _tianshou_updates(
    algorithm: Any, data: dict[str, torch.Tensor], steps: int, batch_size: int, buffer: Any = None
) -> float:
    """Seconds for ``steps`` Tianshou ``algorithm.update`` calls on a buffer (default: a plain
    one of the SAC section's size) holding ``data`` (added one transition at a time, as its
    collector does)."""
    from tianshou.algorithm.algorithm_base import policy_within_training_step
    from tianshou.data import Batch, ReplayBuffer

    buffer = ReplayBuffer(SAC_BUFFER) if buffer is None else buffer
    for i in range(len(data["reward"])):
        action = data["action"][i]
        buffer.add(
            Batch(
                obs=data["observation"][i].numpy(),
                act=action.numpy() if action.ndim else int(action),
                rew=float(data["reward"][i]),
                terminated=bool(data["terminated"][i]),
                truncated=False,
                obs_next=data["next_observation"][i].numpy(),
                info={},
            )
        )
    start = time.perf_counter()
    with policy_within_training_step(algorithm.policy):
        for _ in range(steps):
            algorithm.update(buffer=buffer, sample_size=batch_size)
    return _elapsed(start)


def sb3_train(model: Any, steps: int) -> float:
    """Seconds for ``steps`` gradient steps of an SB3 model's ``train`` at the SAC batch."""
    start = time.perf_counter()
    model.train(gradient_steps=steps, batch_size=SAC_BATCH)
    return _elapsed(start)


def sac_shapes() -> type:
    """A gymnasium env class with the SAC section's spaces, for SB3's constructors."""
    import gymnasium as gym

    class Shapes(gym.Env):
        observation_space = gym.spaces.Box(-np.inf, np.inf, (SAC_OBS,), np.float32)
        action_space = gym.spaces.Box(-1.0, 1.0, (SAC_ACT,), np.float32)

    return Shapes


def sac_sb3(data: dict[str, torch.Tensor], steps: int) -> float:
    from stable_baselines3 import SAC

    model = _sb3_model(
        SAC, sac_shapes(), data, learning_rate=1e-3, batch_size=SAC_BATCH,
        policy_kwargs={"net_arch": SAC_HIDDEN},
    )  # fmt: skip
    return sb3_train(model, steps)


def _tianshou_sac_parts(cls: Any, lr: float, alpha_lr: float, **kwargs: Any) -> Any:
    """Tianshou's ``cls`` (SAC, or CQL on SAC's policy) with its MuJoCo SAC networks (as in
    examples/mujoco/mujoco_sac.py): a 256x256 Gaussian actor, two 256x256 critics, Adam at
    ``lr`` for all three and automatic entropy tuning at ``alpha_lr``."""
    import gymnasium as gym
    from tianshou.algorithm.modelfree.sac import AutoAlpha, SACPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.continuous import ContinuousActorProbabilistic, ContinuousCritic

    actor = ContinuousActorProbabilistic(
        preprocess_net=Net(state_shape=SAC_OBS, hidden_sizes=SAC_HIDDEN), action_shape=SAC_ACT,
        unbounded=True, conditioned_sigma=True,
    )  # fmt: skip

    def critic() -> ContinuousCritic:
        net = Net(state_shape=SAC_OBS, action_shape=SAC_ACT, hidden_sizes=SAC_HIDDEN, concat=True)
        return ContinuousCritic(preprocess_net=net)

    space = gym.spaces.Box(-1.0, 1.0, (SAC_ACT,), np.float32)
    return cls(
        policy=SACPolicy(actor=actor, action_space=space),
        policy_optim=AdamOptimizerFactory(lr=lr),
        critic=critic(),
        critic_optim=AdamOptimizerFactory(lr=lr),
        critic2=critic(),
        critic2_optim=AdamOptimizerFactory(lr=lr),
        tau=0.005,
        gamma=0.99,
        alpha=AutoAlpha(-float(SAC_ACT), 0.0, AdamOptimizerFactory(lr=alpha_lr)),
        **kwargs,
    )


def sac_tianshou(data: dict[str, torch.Tensor], steps: int) -> float:
    from tianshou.algorithm import SAC

    algorithm = _tianshou_sac_parts(SAC, 1e-3, 3e-4)
    return _tianshou_updates(algorithm, data, steps, SAC_BATCH)


def _torchrl_updates(  # noqa: ANN202
    loss, optimizer, updater, data, steps: int, batch_size: int, max_grad_norm: float = 0.0
) -> float:
    """Seconds for ``steps`` gradient steps of a TorchRL loss (its ``loss_*`` terms summed) on
    samples from TorchRL's own replay buffer, as a TorchRL user writes them."""
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    storage = LazyTensorStorage(SAC_BUFFER, device=DEVICE)
    buffer = TensorDictReplayBuffer(storage=storage, batch_size=batch_size)
    buffer.extend(data.to(DEVICE))
    start = time.perf_counter()
    for _ in range(steps):
        out = loss(buffer.sample())
        total = sum(v for k, v in out.items() if k.startswith("loss"))
        optimizer.zero_grad()
        total.backward()
        if max_grad_norm:
            torch.nn.utils.clip_grad_norm_(loss.parameters(), max_grad_norm)
        optimizer.step()
        updater.step()
    return _elapsed(start)


def torchrl_mlp(inputs: int, outputs: int, hidden: list[int] = SAC_HIDDEN) -> nn.Module:
    """TorchRL's ``MLP`` with ReLU, as its sota-implementations build actors and critics."""
    from torchrl.modules import MLP

    return MLP(in_features=inputs, out_features=outputs, num_cells=hidden, activation_class=nn.ReLU)


def _torchrl_actor_and_critic() -> tuple[Any, Any]:
    """TorchRL's SAC actor (tanh-normal, biased-softplus scale) and one critic, 256x256 ReLU
    MLPs on the SAC section's shapes, as in its sota-implementations/sac and redq."""
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator

    net = torchrl_mlp
    actor_net = nn.Sequential(
        net(SAC_OBS, 2 * SAC_ACT), NormalParamExtractor(scale_mapping="biased_softplus_1.0")
    )
    actor = ProbabilisticActor(
        TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": -1.0, "high": 1.0},
    )
    qvalue = ValueOperator(net(SAC_OBS + SAC_ACT, 1), in_keys=["action", "observation"])
    return actor, qvalue


def sac_torchrl(data: dict[str, torch.Tensor], steps: int) -> float:
    from torchrl.objectives import SACLoss, SoftUpdate

    # As in TorchRL's sota-implementations/sac (one backward of the summed losses).
    actor, qvalue = _torchrl_actor_and_critic()
    loss = SACLoss(
        actor, qvalue, num_qvalue_nets=2, delay_qvalue=True, target_entropy=-float(SAC_ACT)
    ).to(DEVICE)
    loss.make_value_estimator(gamma=0.99)
    updater = SoftUpdate(loss, eps=0.995)
    optimizer = torch.optim.Adam(
        [
            {"params": loss.actor_network_params.flatten_keys().values(), "lr": 1e-3},
            {"params": loss.qvalue_network_params.flatten_keys().values(), "lr": 1e-3},
            {"params": [loss.log_alpha], "lr": 3e-4},
        ]
    )
    return _torchrl_updates(loss, optimizer, updater, _td(data), steps, SAC_BATCH)


SAC_PEERS = peers(sac_tdrl, sac_sb3, sac_tianshou, sac_torchrl)


# --- DQN: gradient steps on CartPole shapes ---------------------------------------------------
DQN_OBS, DQN_ACTIONS, DQN_BATCH, DQN_HIDDEN, DQN_TARGET_EVERY = 4, 2, 64, [256, 256], 10


def dqn_data(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "observation": torch.randn(n, DQN_OBS, generator=g),
        "action": torch.randint(DQN_ACTIONS, (n,), generator=g),
        "next_observation": torch.randn(n, DQN_OBS, generator=g),
        "reward": torch.ones(n),
        "terminated": torch.rand(n, generator=g) < 0.05,
    }


def dqn_tdrl(data: dict[str, torch.Tensor], steps: int) -> float:
    """The loop of recipes/dqn.py (double Q off, as SB3 has none)."""
    from tdrl.modules import QValueActor, q_mlp
    from tdrl.objectives import DQNLoss, HardUpdate

    qnet = QValueActor(q_mlp(DQN_OBS, DQN_ACTIONS, DQN_HIDDEN)).to(DEVICE)
    loss = DQNLoss(qnet, loss_function="smooth_l1", double_dqn=False).to(DEVICE)
    updater = HardUpdate(loss, value_network_update_interval=DQN_TARGET_EVERY)
    optimizer = torch.optim.Adam(qnet.parameters(), lr=2.3e-3, fused=True)
    step = recipe_q_learning_step(loss, optimizer, updater, max_grad_norm=10.0)
    return _timed_steps(step, _replay(data), DQN_BATCH, steps)


def dqn_shapes() -> type:
    """A gymnasium env class with the DQN section's spaces, for SB3's constructors."""
    import gymnasium as gym

    class Shapes(gym.Env):
        observation_space = gym.spaces.Box(-np.inf, np.inf, (DQN_OBS,), np.float32)
        action_space = gym.spaces.Discrete(DQN_ACTIONS)

    return Shapes


def dqn_sb3(data: dict[str, torch.Tensor], steps: int) -> float:
    from stable_baselines3 import DQN

    model = _sb3_model(
        DQN, dqn_shapes(), data, learning_rate=2.3e-3, batch_size=DQN_BATCH,
        target_update_interval=DQN_TARGET_EVERY, policy_kwargs={"net_arch": DQN_HIDDEN},
    )  # fmt: skip
    return _sb3_q_train(model, steps, model.q_net, model.q_net_target)


def _sb3_q_train(model: Any, steps: int, online: nn.Module, target: nn.Module) -> float:
    """Seconds for ``steps`` gradient steps of an SB3 Q-learning model. SB3 copies the target
    network in ``_on_step`` (once per env step), not in ``train``: ``train`` runs between copies
    and the copy is made as ``_on_step`` makes it, so SB3 does the target updates that the other
    libraries do inside their measured steps."""
    from stable_baselines3.common.utils import polyak_update

    every, batch_size = model.target_update_interval, model.batch_size
    start = time.perf_counter()
    done = 0
    while done < steps:
        chunk = min(every, steps - done)
        model.train(gradient_steps=chunk, batch_size=batch_size)
        done += chunk
        if done % every == 0:
            polyak_update(online.parameters(), target.parameters(), model.tau)
            polyak_update(model.batch_norm_stats, model.batch_norm_stats_target, 1.0)
    return _elapsed(start)


def dqn_tianshou(data: dict[str, torch.Tensor], steps: int) -> float:
    import gymnasium as gym
    from tianshou.algorithm import DQN
    from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.utils.net.common import Net

    net = Net(state_shape=DQN_OBS, action_shape=DQN_ACTIONS, hidden_sizes=DQN_HIDDEN)
    policy = DiscreteQLearningPolicy(model=net, action_space=gym.spaces.Discrete(DQN_ACTIONS))
    algorithm = DQN(
        policy=policy,
        optim=AdamOptimizerFactory(lr=2.3e-3),
        gamma=0.99,
        target_update_freq=DQN_TARGET_EVERY,
        is_double=False,
        huber_loss_delta=1.0,
    )
    return _tianshou_updates(algorithm, data, steps, DQN_BATCH)


def dqn_torchrl(data: dict[str, torch.Tensor], steps: int) -> float:
    from torchrl.data import OneHot
    from torchrl.modules import MLP, QValueActor
    from torchrl.objectives import DQNLoss, HardUpdate

    net = MLP(in_features=DQN_OBS, out_features=DQN_ACTIONS, num_cells=DQN_HIDDEN,
              activation_class=nn.ReLU)  # fmt: skip
    actor = QValueActor(net, in_keys=["observation"], spec=OneHot(DQN_ACTIONS))
    loss = DQNLoss(actor, loss_function="smooth_l1", delay_value=True, double_dqn=False)
    loss = loss.to(DEVICE)
    loss.make_value_estimator(gamma=0.99)
    updater = HardUpdate(loss, value_network_update_interval=DQN_TARGET_EVERY)
    optimizer = torch.optim.Adam(loss.parameters(), lr=2.3e-3)
    td = _td(data)
    td["action"] = torch.nn.functional.one_hot(data["action"], DQN_ACTIONS)
    return _torchrl_updates(loss, optimizer, updater, td, steps, DQN_BATCH, max_grad_norm=10.0)


DQN_PEERS = peers(dqn_tdrl, dqn_sb3, dqn_tianshou, dqn_torchrl)


def _steps_table(
    title: str,
    peers: dict[str, Callable[[dict[str, torch.Tensor], int], float]],
    data: dict[str, torch.Tensor],
    steps: int,
    *,
    warmup: int = 10,
    scale: float = 1.0,
    unit: str = "steps/s",
) -> None:
    """Each library runs ``steps`` steps in each of ``ROUNDS`` rounds, the libraries taking turns
    within a round, so that a change of background load on a shared machine hits all of them
    alike; the figure is each library's median rate over the rounds (``scale`` units a step:
    the PPO section's steps are epochs of ``scale`` samples)."""
    print(title if DEVICE.type == "cpu" else f"{title}, on {_device_name()}")
    if DEVICE.type != "cpu":
        peers = {name: bench for name, bench in peers.items() if not name.startswith("Tianshou")}
        print("(Tianshou's row is CPU-only in this script: left out)")
    for name, bench in list(peers.items()):
        try:
            bench(data, warmup)  # warm-up: imports, allocator, first-call costs
        except ModuleNotFoundError as err:  # a peer not installed on this machine
            print(f"{name}: not installed ({err.name}); no row")
            del peers[name]
    per_round: dict[str, list[float]] = {name: [] for name in peers}
    for _ in range(ROUNDS):
        for name, bench in peers.items():
            per_round[name].append(scale * steps / bench(data, steps))
    rates = {name: statistics.median(values) for name, values in per_round.items()}
    best_peer = max(rate for name, rate in rates.items() if not name.startswith("tdrl"))
    print(f"{'library':<14} {unit:>10} {'vs tdrl':>8}   per round")
    for name, rate in rates.items():
        shown = ", ".join(f"{r:,.1f}" for r in per_round[name])
        print(f"{name:<14} {rate:>10,.1f} {rate / rates['tdrl']:>8.2f}   [{shown}]")
    print(f"tdrl / fastest peer: {rates['tdrl'] / best_peer:.2f}x (target >= 1.3x)")
    if "tdrl plain" in rates:
        print(
            f"tdrl plain (TDRL_FAST=0) / fastest peer: {rates['tdrl plain'] / best_peer:.2f}x; "
            f"the fast paths buy {rates['tdrl'] / rates['tdrl plain'] - 1:+.1%}"
        )


def _device_name() -> str:
    return torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else str(DEVICE)


def steps_section(
    title: str, peers: dict[str, Callable[..., float]], data: Callable[[int], Any], full: int
) -> Callable[[bool], None]:
    """A section timing gradient steps of every library on the same ``data(10_000)``: ``full``
    steps a round (a tenth with --quick; the title's ``{steps}`` says how many)."""

    def section(quick: bool) -> None:
        steps = full // 10 if quick else full
        _steps_table(title.format(steps=steps), peers, data(10_000), steps)

    return section


section_sac = steps_section(
    f"SAC gradient steps: batch {SAC_BATCH}, 256x256 MLPs, obs {SAC_OBS}, act {SAC_ACT}, "
    "twin critics, auto alpha, {steps} steps, 1 thread",
    SAC_PEERS, sac_data, 300,
)  # fmt: skip
section_dqn = steps_section(
    f"DQN gradient steps: batch {DQN_BATCH}, 256x256 MLP, obs {DQN_OBS}, {DQN_ACTIONS} actions, "
    f"Huber, target copy every {DQN_TARGET_EVERY}, {{steps}} steps, 1 thread",
    DQN_PEERS, dqn_data, 2000,
)  # fmt: skip


# --- CQL and IQL (offline): gradient steps on HalfCheetah shapes ----------------------------------
# Each library's own CQL / IQL on the SAC section's shapes and data (batch 256, 256x256 MLPs, twin
# critics), at the same settings: CQL with 10 random and 10 policy actions per state, conservative
# weight 5, no Lagrange tuning, automatic entropy; IQL with expectile 0.7 and inverse temperature
# 3. SB3 has neither; Tianshou has CQL (its Cal-QL calibration off), not IQL.
OFFLINE_LR = 3e-4


def _offline_tdrl(algo: str) -> Callable[[dict[str, torch.Tensor], int], float]:
    def run(data: dict[str, torch.Tensor], steps: int) -> float:
        """The gradient step of recipes/offline.py --algo cql|iql (on the CPU)."""
        from tdrl.modules import (
            EnsembleCritic,
            EnsembleMLP,
            GaussianActor,
            TanhGaussianActor,
            ValueCritic,
            mlp,
        )
        from tdrl.objectives import CQLLoss, IQLLoss, SoftUpdate, total_loss
        from tdrl.trainers import optimizer_step

        critic = EnsembleCritic(EnsembleMLP(SAC_OBS + SAC_ACT, 1, SAC_HIDDEN, num_members=2))
        if algo == "cql":
            net = mlp(SAC_OBS, 2 * SAC_ACT, SAC_HIDDEN, activation=nn.ReLU)
            actor: Any = TanhGaussianActor(net, SAC_ACT)
            loss: Any = CQLLoss(actor, critic, weight=5.0, num_random=10, deterministic_backup=True)
            extra = [loss.log_alpha]
        else:
            actor = GaussianActor(mlp(SAC_OBS, SAC_ACT, SAC_HIDDEN, activation=nn.ReLU), SAC_ACT)
            value = ValueCritic(mlp(SAC_OBS, 1, SAC_HIDDEN, activation=nn.ReLU))
            loss = IQLLoss(actor, critic, value, expectile=0.7, beta=3.0)
            extra = list(value.parameters())
        updater = SoftUpdate(loss, tau=0.005)
        params = [*actor.parameters(), *critic.parameters(), *extra]
        optimizer = torch.optim.Adam(params, lr=OFFLINE_LR, fused=True)

        def step(sample: Any, k: int) -> None:
            optimizer_step(total_loss(loss(sample)), optimizer)
            updater.step()

        return _timed_steps(step, _replay(data, torch.device("cpu")), SAC_BATCH, steps)

    return run


def _offline_torchrl(algo: str) -> Callable[[dict[str, torch.Tensor], int], float]:
    def run(data: dict[str, torch.Tensor], steps: int) -> float:
        from tensordict.nn import NormalParamExtractor, TensorDictModule
        from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
        from torchrl.objectives import CQLLoss, IQLLoss, SoftUpdate

        net = torchrl_mlp
        actor = ProbabilisticActor(
            TensorDictModule(
                nn.Sequential(net(SAC_OBS, 2 * SAC_ACT), NormalParamExtractor()),
                in_keys=["observation"],
                out_keys=["loc", "scale"],
            ),  # fmt: skip
            in_keys=["loc", "scale"],
            distribution_class=TanhNormal,
            distribution_kwargs={"low": -1.0, "high": 1.0},
        )
        qvalue = ValueOperator(net(SAC_OBS + SAC_ACT, 1), in_keys=["observation", "action"])
        if algo == "cql":
            loss: Any = CQLLoss(actor, qvalue, num_random=10, min_q_weight=5.0,
                                with_lagrange=False, target_entropy=-float(SAC_ACT))  # fmt: skip
        else:
            value = ValueOperator(net(SAC_OBS, 1), in_keys=["observation"])
            loss = IQLLoss(actor, qvalue, value, expectile=0.7, temperature=3.0)
        loss.make_value_estimator(gamma=0.99)
        updater = SoftUpdate(loss, eps=0.995)
        optimizer = torch.optim.Adam(loss.parameters(), lr=OFFLINE_LR)
        return _torchrl_updates(loss, optimizer, updater, _td(data), steps, SAC_BATCH)

    return run


def cql_tianshou(data: dict[str, torch.Tensor], steps: int) -> float:
    from tianshou.algorithm import CQL

    # Tianshou's examples/offline/d4rl_cql.py networks (SAC's), at the settings above.
    algorithm = _tianshou_sac_parts(
        CQL, OFFLINE_LR, OFFLINE_LR, cql_weight=5.0, with_lagrange=False, calibrated=False,
        num_repeat_actions=10,
    )  # fmt: skip
    return _tianshou_updates(algorithm, data, steps, SAC_BATCH)


CQL_PEERS = peers(_offline_tdrl("cql"), None, cql_tianshou, _offline_torchrl("cql"))
IQL_PEERS = peers(_offline_tdrl("iql"), None, None, _offline_torchrl("iql"))
section_cql = steps_section(
    f"CQL gradient steps: batch {SAC_BATCH}, 256x256 MLPs, obs {SAC_OBS}, act {SAC_ACT}, twin "
    "critics, 10 random + 10 policy actions, weight 5, auto alpha, {steps} steps, 1 thread",
    CQL_PEERS, sac_data, 200,
)  # fmt: skip
section_iql = steps_section(
    f"IQL gradient steps: batch {SAC_BATCH}, 256x256 MLPs, obs {SAC_OBS}, act {SAC_ACT}, twin "
    "critics + V, expectile 0.7, beta 3, {steps} steps, 1 thread",
    IQL_PEERS, sac_data, 300,
)  # fmt: skip


# --- REDQ: gradient steps on HalfCheetah shapes -----------------------------------------------
# N = 10 critics, targets from a random M = 2 of them, batch 256, 256x256 MLPs, Adam 3e-4, auto
# alpha (Chen et al. 2021's settings), on the SAC section's data. Each library as its REDQ is run:
# tdrl (recipes/sac.py --algo redq) and Tianshou (examples/mujoco/mujoco_redq.py) step the actor
# and alpha on every 20th gradient step only (tdrl's policy_delay, Tianshou's actor_delay);
# TorchRL's REDQLoss computes the actor and alpha losses on every step (its
# sota-implementations/redq sums them into one backward), so its steps do more. SB3 has no REDQ.
REDQ_MEMBERS, REDQ_SUBSET, REDQ_ACTOR_EVERY, REDQ_LR = 10, 2, 20, 3e-4


def redq_tdrl(data: dict[str, torch.Tensor], steps: int) -> float:
    """recipes/sac.py --algo redq's gradient step (the actor every 20th)."""
    from tdrl.modules import EnsembleCritic, EnsembleMLP, TanhGaussianActor, mlp
    from tdrl.objectives import REDQLoss, SoftUpdate

    actor = TanhGaussianActor(mlp(SAC_OBS, 2 * SAC_ACT, SAC_HIDDEN, activation=nn.ReLU), SAC_ACT)
    critic = EnsembleCritic(EnsembleMLP(SAC_OBS + SAC_ACT, 1, SAC_HIDDEN, num_members=REDQ_MEMBERS))
    loss = REDQLoss(actor, critic, num_qvalue_nets=REDQ_MEMBERS, sub_sample_len=REDQ_SUBSET).to(
        DEVICE
    )
    optimizer = torch.optim.Adam(
        [*actor.parameters(), *critic.parameters(), loss.log_alpha], lr=REDQ_LR, fused=True
    )
    step = recipe_actor_critic_step(
        loss, optimizer, SoftUpdate(loss, tau=0.005), actor_every=REDQ_ACTOR_EVERY
    )
    return _timed_steps(step, _replay(data), SAC_BATCH, steps)


def redq_tianshou(data: dict[str, torch.Tensor], steps: int) -> float:
    import gymnasium as gym
    from tianshou.algorithm.modelfree.redq import REDQ, REDQPolicy
    from tianshou.algorithm.modelfree.sac import AutoAlpha
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.utils.net.common import EnsembleLinear, Net
    from tianshou.utils.net.continuous import ContinuousActorProbabilistic, ContinuousCritic

    def linear(n_in: int, n_out: int) -> nn.Module:
        return EnsembleLinear(REDQ_MEMBERS, n_in, n_out)

    actor = ContinuousActorProbabilistic(
        preprocess_net=Net(state_shape=SAC_OBS, hidden_sizes=SAC_HIDDEN), action_shape=SAC_ACT,
        unbounded=True, conditioned_sigma=True,
    )  # fmt: skip
    critic_net = Net(state_shape=SAC_OBS, action_shape=SAC_ACT, hidden_sizes=SAC_HIDDEN,
                     concat=True, linear_layer=linear)  # fmt: skip
    critic = ContinuousCritic(preprocess_net=critic_net, linear_layer=linear, flatten_input=False)
    space = gym.spaces.Box(-1.0, 1.0, (SAC_ACT,), np.float32)
    algorithm = REDQ(
        policy=REDQPolicy(actor=actor, action_space=space),
        policy_optim=AdamOptimizerFactory(lr=REDQ_LR),
        critic=critic,
        critic_optim=AdamOptimizerFactory(lr=REDQ_LR),
        ensemble_size=REDQ_MEMBERS,
        subset_size=REDQ_SUBSET,
        tau=0.005,
        gamma=0.99,
        alpha=AutoAlpha(-float(SAC_ACT), 0.0, AdamOptimizerFactory(lr=REDQ_LR)),
        actor_delay=REDQ_ACTOR_EVERY,
        target_mode="min",
    )
    return _tianshou_updates(algorithm, data, steps, SAC_BATCH)


def redq_torchrl(data: dict[str, torch.Tensor], steps: int) -> float:
    from torchrl.objectives import REDQLoss, SoftUpdate

    actor, qvalue = _torchrl_actor_and_critic()  # copied into N critics by the loss
    loss = REDQLoss(
        actor, qvalue, num_qvalue_nets=REDQ_MEMBERS, sub_sample_len=REDQ_SUBSET,
        loss_function="l2", target_entropy=-float(SAC_ACT),
    ).to(DEVICE)  # fmt: skip
    loss.make_value_estimator(gamma=0.99)
    optimizer = torch.optim.Adam(loss.parameters(), lr=REDQ_LR)
    updater = SoftUpdate(loss, eps=0.995)
    return _torchrl_updates(loss, optimizer, updater, _td(data), steps, SAC_BATCH)


REDQ_PEERS = peers(redq_tdrl, None, redq_tianshou, redq_torchrl)
section_redq = steps_section(
    f"REDQ gradient steps: batch {SAC_BATCH}, 256x256 MLPs, obs {SAC_OBS}, act {SAC_ACT}, "
    f"{REDQ_MEMBERS} critics, targets from {REDQ_SUBSET}, actor every {REDQ_ACTOR_EVERY}th step "
    "(TorchRL: every step), {steps} steps, 1 thread",
    REDQ_PEERS, sac_data, 100,
)  # fmt: skip


# --- TQC and CrossQ: gradient steps on HalfCheetah shapes -----------------------------------------
# The MuJoCo table's settings (sb3-contrib's, which its cells run): TQC with 2 critics of 25
# quantiles, the top 2 per critic dropped, lr 3e-4, 256x256 MLPs, Polyak targets; CrossQ with batch
# renorm before every linear layer of the actor and the 256x256 critics (the table's width), no
# targets, the actor every 3rd step, lr 1e-3, Adam betas (0.5, 0.999). The SAC section's data.
# tdrl runs recipes/sac.py's step (one fused Adam; TQC critics first, as the table runs it,
# CrossQ in one joint step), sb3-contrib ``TQC.train`` / ``CrossQ.train``,
# TorchRL its ``TQCLoss`` / ``CrossQLoss`` in its sota loop (one backward of the summed losses).
TQC_QUANTILES, TQC_DROP, TQC_LR = 25, 2, 3e-4
CROSSQ_DELAY, CROSSQ_LR = 3, 1e-3


def _sac_family_tdrl(algo: str) -> Callable[[dict[str, torch.Tensor], int], float]:
    def bench(data: dict[str, torch.Tensor], steps: int) -> float:
        from tdrl.modules import BatchRenorm, EnsembleCritic, EnsembleMLP, TanhGaussianActor, mlp
        from tdrl.objectives import CrossQLoss, SoftUpdate, TQCLoss
        from tdrl.trainers import adam

        renorm = {} if algo == "crossq" else None
        net = mlp(SAC_OBS, 2 * SAC_ACT, SAC_HIDDEN, activation=nn.ReLU)
        if renorm is not None:  # tanh_gaussian_actor(..., batch_renorm=...)'s layers
            layers: list[nn.Module] = []
            for m in net.children():
                layers += [BatchRenorm(m.in_features), m] if isinstance(m, nn.Linear) else [m]
            net = nn.Sequential(*layers)
        actor = TanhGaussianActor(net, SAC_ACT)
        outputs = TQC_QUANTILES if algo == "tqc" else 1
        critic = EnsembleCritic(EnsembleMLP(SAC_OBS + SAC_ACT, outputs, SAC_HIDDEN, num_members=2,
                                            batch_renorm=renorm))  # fmt: skip
        if algo == "tqc":
            loss, lr, betas = TQCLoss(actor, critic, top_quantiles_to_drop=TQC_DROP), TQC_LR, None
            target = SoftUpdate(loss, tau=0.005)
        else:
            loss, lr, betas, target = CrossQLoss(actor, critic), CROSSQ_LR, (0.5, 0.999), None
        loss.to(DEVICE)
        optimizer = adam((actor.parameters(), lr), (critic.parameters(), lr),
                         ([loss.log_alpha], lr), betas=betas or (0.9, 0.999))  # fmt: skip
        delay = CROSSQ_DELAY if algo == "crossq" else 1
        step = recipe_actor_critic_step(
            loss, optimizer, target, actor_every=delay, critics_first=algo == "tqc"
        )  # the update orders of the table's presets
        return _timed_steps(step, _replay(data), SAC_BATCH, steps)

    return bench


def _sac_family_sb3(algo: str) -> Callable[[dict[str, torch.Tensor], int], float]:
    def bench(data: dict[str, torch.Tensor], steps: int) -> float:
        from sb3_contrib import TQC, CrossQ

        if algo == "tqc":
            cls, lr, kwargs = TQC, TQC_LR, {
                "top_quantiles_to_drop_per_net": TQC_DROP,
                "policy_kwargs": {"net_arch": SAC_HIDDEN, "n_quantiles": TQC_QUANTILES},
            }  # fmt: skip
        else:
            cls, lr, kwargs = CrossQ, CROSSQ_LR, {
                "policy_delay": CROSSQ_DELAY,
                "policy_kwargs": {"net_arch": {"pi": SAC_HIDDEN, "qf": SAC_HIDDEN}},
            }  # fmt: skip
        return sb3_train(_sb3_model(cls, sac_shapes(), data, learning_rate=lr,
                                    batch_size=SAC_BATCH, **kwargs), steps)  # fmt: skip

    return bench


def _sac_family_torchrl(algo: str) -> Callable[[dict[str, torch.Tensor], int], float]:
    def bench(data: dict[str, torch.Tensor], steps: int) -> float:
        from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        from torchrl.modules import BatchRenorm1d, ValueOperator
        from torchrl.objectives import CrossQLoss, SoftUpdate, TQCLoss

        actor, _ = _torchrl_actor_and_critic()
        if algo == "tqc":
            qvalue = ValueOperator(torchrl_mlp(SAC_OBS + SAC_ACT, TQC_QUANTILES),
                                   in_keys=["action", "observation"])  # fmt: skip
            loss = TQCLoss(actor, qvalue, num_qvalue_nets=2,
                           top_quantiles_to_drop_per_net=TQC_DROP,
                           target_entropy=-float(SAC_ACT)).to(DEVICE)  # fmt: skip
            optimizer = torch.optim.Adam(loss.parameters(), lr=TQC_LR)
            return _torchrl_updates(
                loss, optimizer, SoftUpdate(loss, eps=0.995), _td(data), steps, SAC_BATCH
            )
        # batch renorm before every linear layer of the critic (sb3-contrib's layout); the
        # losses apart, the actor and alpha every policy_delay-th step
        widths = [SAC_OBS + SAC_ACT, *SAC_HIDDEN]
        layers: list[nn.Module] = []
        for n_in, n_out in zip(widths, [*SAC_HIDDEN, 1], strict=True):
            layers += [BatchRenorm1d(n_in, momentum=0.01, warmup_steps=100_000),
                       nn.Linear(n_in, n_out), nn.ReLU()]  # fmt: skip
        critic_net = _Concatenated(nn.Sequential(*layers[:-1]))
        qvalue = ValueOperator(critic_net, in_keys=["action", "observation"])
        loss = CrossQLoss(actor, qvalue, num_qvalue_nets=2, loss_function="l2",
                          target_entropy=-float(SAC_ACT)).to(DEVICE)  # fmt: skip
        optimizer = torch.optim.Adam(loss.parameters(), lr=CROSSQ_LR, betas=(0.5, 0.999))
        buffer = TensorDictReplayBuffer(
            storage=LazyTensorStorage(SAC_BUFFER, device=DEVICE), batch_size=SAC_BATCH
        )
        buffer.extend(_td(data).to(DEVICE))
        start = time.perf_counter()
        for k in range(1, steps + 1):
            sample = buffer.sample()
            total, _ = loss.qvalue_loss(sample)
            if k % CROSSQ_DELAY == 0:
                actor_loss, metadata = loss.actor_loss(sample)
                total = total + actor_loss + loss.alpha_loss(metadata["log_prob"])
            optimizer.zero_grad()
            total.backward()
            optimizer.step()
        return _elapsed(start)

    return bench


class _Concatenated(nn.Module):
    """``net`` on its inputs concatenated (what TorchRL's ``MLP`` does with several inputs)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat(inputs, dim=-1))


TQC_PEERS = peers(_sac_family_tdrl("tqc"), _sac_family_sb3("tqc"), None, _sac_family_torchrl("tqc"))
CROSSQ_PEERS = peers(
    _sac_family_tdrl("crossq"), _sac_family_sb3("crossq"), None, _sac_family_torchrl("crossq")
)
section_tqc = steps_section(
    f"TQC gradient steps: batch {SAC_BATCH}, 256x256 MLPs, obs {SAC_OBS}, act {SAC_ACT}, 2 "
    f"critics of {TQC_QUANTILES} quantiles, {TQC_DROP} dropped each, tdrl critics first, "
    "{steps} steps, 1 thread",
    TQC_PEERS, sac_data, 200,
)  # fmt: skip
section_crossq = steps_section(
    f"CrossQ gradient steps: batch {SAC_BATCH}, 256x256 batch-renormalized MLPs, obs {SAC_OBS}, "
    f"act {SAC_ACT}, twin critics on the joint batch, actor every {CROSSQ_DELAY}rd step, "
    "{steps} steps, 1 thread",
    CROSSQ_PEERS, sac_data, 300,
)  # fmt: skip


# --- TD3 and DDPG: gradient steps on HalfCheetah shapes -------------------------------------------
# The settings of the MuJoCo table's 100k TD3 and DDPG cells (rl-zoo3's, which the SB3 cells run):
# 400x300 ReLU MLPs for the actor and the critics, lr 1e-3 for both, batch 256, tau 0.005; the
# SAC section's data. TD3: twin critics, target policy noise 0.2 clipped at 0.5, the actor and
# the targets updated every 2nd critic step; DDPG: one critic, everything every step. Each
# library runs its own update: SB3 ``TD3.train`` / ``DDPG.train``, Tianshou ``TD3.update`` /
# ``DDPG.update`` (the networks of its examples/mujoco), TorchRL's ``TD3Loss`` / ``DDPGLoss`` in
# the loop of its sota-implementations (separate critic and actor steps), tdrl the recipes' step
# (one fused Adam, as the recipes). Counted in critic steps.
DET_HIDDEN, DET_LR, TD3_DELAY = [400, 300], 1e-3, 2


def _deterministic_tdrl(algo: str) -> Callable[[dict[str, torch.Tensor], int], float]:
    def bench(data: dict[str, torch.Tensor], steps: int) -> float:
        from tdrl.modules import (
            DeterministicActor,
            EnsembleCritic,
            EnsembleMLP,
            StateActionCritic,
            mlp,
        )
        from tdrl.objectives import DDPGLoss, SoftUpdate, TD3Loss
        from tdrl.trainers import adam

        net = mlp(SAC_OBS, SAC_ACT, DET_HIDDEN, activation=nn.ReLU)
        actor = DeterministicActor(net, SAC_ACT, action_low=-1.0, action_high=1.0)
        if algo == "td3":  # recipes/td3.py: the twin critics as one batched ensemble
            critic = EnsembleCritic(EnsembleMLP(SAC_OBS + SAC_ACT, 1, DET_HIDDEN, num_members=2))
            loss = TD3Loss(actor, critic, policy_noise=0.2, noise_clip=0.5).to(DEVICE)
        else:  # recipes/td3.py --algo ddpg
            critic = StateActionCritic(mlp(SAC_OBS + SAC_ACT, 1, DET_HIDDEN, activation=nn.ReLU))
            loss = DDPGLoss(actor, critic).to(DEVICE)
        optimizer = adam((actor.parameters(), DET_LR), (critic.parameters(), DET_LR))
        delay = TD3_DELAY if algo == "td3" else 1
        step = recipe_actor_critic_step(
            loss, optimizer, SoftUpdate(loss, tau=0.005), actor_every=delay,
            targets_with_actor=algo == "td3",
        )  # fmt: skip
        return _timed_steps(step, _replay(data), SAC_BATCH, steps)

    return bench


def _deterministic_sb3(algo: str) -> Callable[[dict[str, torch.Tensor], int], float]:
    def bench(data: dict[str, torch.Tensor], steps: int) -> float:
        from stable_baselines3 import DDPG, TD3

        cls, kwargs = (TD3, {"policy_delay": TD3_DELAY}) if algo == "td3" else (DDPG, {})
        model = _sb3_model(
            cls, sac_shapes(), data, learning_rate=DET_LR, batch_size=SAC_BATCH,
            policy_kwargs={"net_arch": DET_HIDDEN}, **kwargs,
        )  # fmt: skip
        return sb3_train(model, steps)

    return bench


def _deterministic_tianshou(algo: str) -> Callable[[dict[str, torch.Tensor], int], float]:
    def bench(data: dict[str, torch.Tensor], steps: int) -> float:
        import gymnasium as gym
        from tianshou.algorithm import DDPG, TD3
        from tianshou.algorithm.modelfree.ddpg import ContinuousDeterministicPolicy
        from tianshou.algorithm.optim import AdamOptimizerFactory
        from tianshou.utils.net.common import Net
        from tianshou.utils.net.continuous import ContinuousActorDeterministic, ContinuousCritic

        actor = ContinuousActorDeterministic(
            preprocess_net=Net(state_shape=SAC_OBS, hidden_sizes=DET_HIDDEN),
            action_shape=SAC_ACT, max_action=1.0,
        )  # fmt: skip

        def critic() -> ContinuousCritic:
            net = Net(
                state_shape=SAC_OBS, action_shape=SAC_ACT, hidden_sizes=DET_HIDDEN, concat=True
            )
            return ContinuousCritic(preprocess_net=net)

        space = gym.spaces.Box(-1.0, 1.0, (SAC_ACT,), np.float32)
        parts: dict[str, Any] = dict(
            policy=ContinuousDeterministicPolicy(actor=actor, action_space=space),
            policy_optim=AdamOptimizerFactory(lr=DET_LR), critic=critic(),
            critic_optim=AdamOptimizerFactory(lr=DET_LR), tau=0.005, gamma=0.99,
        )  # fmt: skip
        if algo == "td3":
            algorithm = TD3(
                **parts, critic2=critic(), critic2_optim=AdamOptimizerFactory(lr=DET_LR),
                policy_noise=0.2, update_actor_freq=TD3_DELAY, noise_clip=0.5,
            )  # fmt: skip
        else:
            algorithm = DDPG(**parts)
        return _tianshou_updates(algorithm, data, steps, SAC_BATCH)

    return bench


def _deterministic_torchrl(algo: str) -> Callable[[dict[str, torch.Tensor], int], float]:
    def bench(data: dict[str, torch.Tensor], steps: int) -> float:
        from tensordict.nn import TensorDictModule, TensorDictSequential
        from torchrl.data import Bounded, LazyTensorStorage, TensorDictReplayBuffer
        from torchrl.modules import TanhModule, ValueOperator
        from torchrl.objectives import DDPGLoss, SoftUpdate, TD3Loss

        net = partial(torchrl_mlp, hidden=DET_HIDDEN)
        # sota-implementations/td3 and ddpg: an MLP, then tanh into the action box
        spec = Bounded(-1.0, 1.0, (SAC_ACT,))
        actor = TensorDictSequential(
            TensorDictModule(net(SAC_OBS, SAC_ACT), in_keys=["observation"], out_keys=["param"]),
            TanhModule(in_keys=["param"], out_keys=["action"], spec=spec),
        )
        qvalue = ValueOperator(net(SAC_OBS + SAC_ACT, 1), in_keys=["observation", "action"])
        if algo == "td3":
            loss: Any = TD3Loss(
                actor, qvalue, action_spec=spec, num_qvalue_nets=2, policy_noise=0.2,
                noise_clip=0.5,
            ).to(DEVICE)  # fmt: skip
            critic_params = loss.qvalue_network_params
            critic_loss, actor_loss = loss.value_loss, loss.actor_loss
        else:
            loss = DDPGLoss(actor, qvalue, delay_actor=True, delay_value=True).to(DEVICE)
            critic_params = loss.value_network_params
            critic_loss, actor_loss = loss.loss_value, loss.loss_actor
        loss.make_value_estimator(gamma=0.99)
        critic_optim = torch.optim.Adam(critic_params.flatten_keys().values(), lr=DET_LR)
        actor_optim = torch.optim.Adam(loss.actor_network_params.flatten_keys().values(), lr=DET_LR)
        updater = SoftUpdate(loss, eps=0.995)
        buffer = TensorDictReplayBuffer(
            storage=LazyTensorStorage(SAC_BUFFER, device=DEVICE), batch_size=SAC_BATCH
        )
        buffer.extend(_td(data).to(DEVICE))
        delay = TD3_DELAY if algo == "td3" else 1
        start = time.perf_counter()
        for k in range(1, steps + 1):  # the sota-implementations' update(): critic, then actor
            sample = buffer.sample()
            critic_loss(sample)[0].backward()
            critic_optim.step()
            critic_optim.zero_grad(set_to_none=True)
            if k % delay == 0:
                actor_loss(sample)[0].backward()
                actor_optim.step()
                actor_optim.zero_grad(set_to_none=True)
                updater.step()
        return _elapsed(start)

    return bench


def _deterministic_peers(algo: str) -> dict[str, Callable[..., float]]:
    return peers(
        _deterministic_tdrl(algo), _deterministic_sb3(algo), _deterministic_tianshou(algo),
        _deterministic_torchrl(algo),
    )  # fmt: skip


TD3_PEERS = _deterministic_peers("td3")
# the sections whose tdrl rows step through compiled_step after an untimed warm-up (--compile)
CAPTURE_TABLES = [PPO_PEERS, SAC_PEERS, DQN_PEERS, TD3_PEERS]
section_td3 = steps_section(
    f"TD3 gradient steps: batch {SAC_BATCH}, 400x300 MLPs, obs {SAC_OBS}, act {SAC_ACT}, "
    f"twin critics, actor and targets every {TD3_DELAY}nd step, {{steps}} steps, 1 thread",
    TD3_PEERS, sac_data, 600,
)  # fmt: skip
section_ddpg = steps_section(
    f"DDPG gradient steps: batch {SAC_BATCH}, 400x300 MLPs, obs {SAC_OBS}, act {SAC_ACT}, "
    "one critic, actor and targets every step, {steps} steps, 1 thread",
    _deterministic_peers("ddpg"), sac_data, 600,
)  # fmt: skip


# --- QR-DQN and Rainbow on pixels: gradient steps on 84x84x4 Atari frames --------------------
# Every library trains the same network, DQN's Nature CNN (tdrl.modules.NatureCNN; SB3's CnnPolicy
# builds the same layers), on batches of 32 uint8 frame stacks sampled from its own replay buffer
# of 1,000 random transitions, 6 actions: QR-DQN with 200 quantiles (Dabney et al.), and Rainbow
# (C51 over 51 atoms in [-10, 10], dueling, noisy layers, prioritized replay; without n-step
# returns, which change only the sampled targets, and with the target network selecting the
# bootstrap action as Tianshou's RainbowDQN does: double Q would cost tdrl one more CNN forward).
# Tianshou runs the same tdrl network inside its own algorithms (its library has no Atari
# network: its examples define one); its noise resampling looks for its own NoisyLinear class,
# so it skips the tdrl layers' draws, which favours it slightly.
PIX_OBS, PIX_ACTIONS, PIX_BATCH, PIX_BUFFER = (4, 84, 84), 6, 32, 1_000
PIX_QUANTILES, PIX_ATOMS = 200, 51


def pixel_data(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    n = min(n, PIX_BUFFER)
    return {
        "observation": torch.randint(0, 256, (n, *PIX_OBS), generator=g, dtype=torch.uint8),
        "action": torch.randint(PIX_ACTIONS, (n,), generator=g),
        "next_observation": torch.randint(0, 256, (n, *PIX_OBS), generator=g, dtype=torch.uint8),
        "reward": torch.randn(n, generator=g).clamp(-1, 1),
        "terminated": torch.rand(n, generator=g) < 0.01,
    }


def _pixel_net(outputs: int, *, dueling: bool = False, noisy: bool = False) -> nn.Module:
    from tdrl.modules import NatureCNN, to_noisy

    net = NatureCNN(PIX_OBS[0], PIX_ACTIONS * outputs, dueling=dueling, atoms=outputs)
    return to_noisy(net) if noisy else net


def _pixel_tdrl(algo: str) -> Callable[[dict[str, torch.Tensor], int], float]:
    def run(data: dict[str, torch.Tensor], steps: int) -> float:
        """recipes/rainbow.py's gradient step with --algo qrdqn, or Rainbow."""
        from tdrl.data import PrioritizedReplayBuffer, ReplayBuffer
        from tdrl.modules import CategoricalQValueActor, QuantileQValueActor, reset_noise
        from tdrl.objectives import C51Loss, HardUpdate, QRDQNLoss, update_priority

        if algo == "qrdqn":
            actor: Any = QuantileQValueActor(
                _pixel_net(PIX_QUANTILES), PIX_ACTIONS, num_quantiles=PIX_QUANTILES
            )
            loss: Any = QRDQNLoss(actor)
            buffer: Any = ReplayBuffer(PIX_BUFFER, generator=0)
            after = None
        else:
            net = _pixel_net(PIX_ATOMS, dueling=True, noisy=True)
            actor = CategoricalQValueActor(net, PIX_ACTIONS, num_atoms=PIX_ATOMS)
            loss = C51Loss(actor)  # Tianshou's C51 targets select with the target network too
            buffer = PrioritizedReplayBuffer(PIX_BUFFER, alpha=0.5, beta=0.4, generator=0)

            def after(sample: Any, out: Any) -> None:
                update_priority(buffer, sample, out)
                reset_noise(loss)

        buffer.extend(_td(data))
        optimizer = torch.optim.Adam(actor.parameters(), lr=6.25e-5, eps=1.5e-4, fused=True)
        step = recipe_q_learning_step(
            loss, optimizer, HardUpdate(loss, value_network_update_interval=2000),
            max_grad_norm=10.0, after=after,
        )  # fmt: skip
        return _timed_steps(step, buffer, PIX_BATCH, steps)

    return run


def qrdqn_sb3(data: dict[str, torch.Tensor], steps: int) -> float:
    import gymnasium as gym
    from sb3_contrib import QRDQN

    class Frames(gym.Env):
        observation_space = gym.spaces.Box(0, 255, PIX_OBS, np.uint8)
        action_space = gym.spaces.Discrete(PIX_ACTIONS)

    model = _sb3_model(
        QRDQN, Frames, data, policy="CnnPolicy", buffer_size=PIX_BUFFER, batch_size=PIX_BATCH,
        learning_rate=6.25e-5, target_update_interval=2000, max_grad_norm=10.0,
        policy_kwargs={"n_quantiles": PIX_QUANTILES},
    )  # fmt: skip
    start = time.perf_counter()
    model.train(gradient_steps=steps, batch_size=PIX_BATCH)
    return _elapsed(start)


class _TianshouPixelModel(nn.Module):
    """A tdrl pixel network as Tianshou's model: ``(obs, state) -> ([B, A, K], state)``
    (probabilities for C51, quantiles for QR-DQN)."""

    def __init__(self, net: nn.Module, atoms: int, softmax: bool) -> None:
        super().__init__()
        self.net, self.atoms, self.softmax = net, atoms, softmax

    def forward(self, obs: Any, state: Any = None, info: Any = None) -> tuple[torch.Tensor, Any]:
        out = self.net(torch.as_tensor(obs)).view(-1, PIX_ACTIONS, self.atoms)
        return (out.softmax(-1) if self.softmax else out), state


def _pixel_tianshou(algo: str) -> Callable[[dict[str, torch.Tensor], int], float]:
    def run(data: dict[str, torch.Tensor], steps: int) -> float:
        import gymnasium as gym
        from tianshou.algorithm import QRDQN, RainbowDQN
        from tianshou.algorithm.modelfree.c51 import C51Policy
        from tianshou.algorithm.modelfree.qrdqn import QRDQNPolicy
        from tianshou.algorithm.optim import AdamOptimizerFactory
        from tianshou.data import PrioritizedReplayBuffer

        space = gym.spaces.Discrete(PIX_ACTIONS)
        optim = AdamOptimizerFactory(lr=6.25e-5, eps=1.5e-4)
        buffer = None
        if algo == "qrdqn":
            model = _TianshouPixelModel(_pixel_net(PIX_QUANTILES), PIX_QUANTILES, softmax=False)
            algorithm: Any = QRDQN(
                policy=QRDQNPolicy(model=model, action_space=space), optim=optim,
                num_quantiles=PIX_QUANTILES, target_update_freq=2000,
            )  # fmt: skip
        else:
            net = _pixel_net(PIX_ATOMS, dueling=True, noisy=True)
            model = _TianshouPixelModel(net, PIX_ATOMS, softmax=True)
            policy = C51Policy(model=model, action_space=space, num_atoms=PIX_ATOMS)
            algorithm = RainbowDQN(policy=policy, optim=optim, target_update_freq=2000)
            buffer = PrioritizedReplayBuffer(PIX_BUFFER, alpha=0.5, beta=0.4)
        return _tianshou_updates(algorithm, data, steps, PIX_BATCH, buffer)

    return run


QRDQN_PIXEL_PEERS = peers(_pixel_tdrl("qrdqn"), qrdqn_sb3, _pixel_tianshou("qrdqn"), None)
RAINBOW_PIXEL_PEERS = peers(_pixel_tdrl("rainbow"), None, _pixel_tianshou("rainbow"), None)
section_qrdqn_pixels = steps_section(
    f"QR-DQN gradient steps on pixels: batch {PIX_BATCH} of {PIX_OBS} uint8 frame stacks, Nature "
    f"CNN, {PIX_QUANTILES} quantiles, {PIX_ACTIONS} actions, {{steps}} steps, 1 thread",
    QRDQN_PIXEL_PEERS, pixel_data, 100,
)  # fmt: skip
section_rainbow_pixels = steps_section(
    f"Rainbow gradient steps on pixels: batch {PIX_BATCH} of {PIX_OBS} uint8 frame stacks, "
    f"dueling noisy Nature CNN, C51 {PIX_ATOMS} atoms, PER, {{steps}} steps, 1 thread",
    RAINBOW_PIXEL_PEERS, pixel_data, 100,
)  # fmt: skip


# --- QR-DQN on CartPole shapes ------------------------------------------------------------------
# The DQN section's shapes, data, batch, 256x256 MLP, learning rate, target copy every 10 steps
# and gradient clip at 10, with QR-DQN's head: rl-zoo3's CartPole entry (hyperparams/qrdqn.yml,
# the DQN entry plus 10 quantiles), quantile Huber loss (kappa 1), no double Q (sb3-contrib's
# QRDQN has none). sb3-contrib copies its target in ``_on_step``, so it runs as the DQN section's
# SB3 row does. Tianshou's QRDQN always picks the next action with the online network (one more
# forward pass a step, against it) and clips no gradients (in its favour).
QR_QUANTILES = 10


def qrdqn_tdrl(data: dict[str, torch.Tensor], steps: int) -> float:
    """The loop of recipes/rainbow.py --algo qrdqn --no-double-dqn."""
    from tdrl.modules import QuantileQValueActor, q_mlp
    from tdrl.objectives import HardUpdate, QRDQNLoss

    net = q_mlp(DQN_OBS, DQN_ACTIONS, DQN_HIDDEN, atoms=QR_QUANTILES)
    qnet = QuantileQValueActor(net, DQN_ACTIONS, num_quantiles=QR_QUANTILES).to(DEVICE)
    loss = QRDQNLoss(qnet, double_dqn=False).to(DEVICE)
    updater = HardUpdate(loss, value_network_update_interval=DQN_TARGET_EVERY)
    optimizer = torch.optim.Adam(qnet.parameters(), lr=2.3e-3, fused=True)
    step = recipe_q_learning_step(loss, optimizer, updater, max_grad_norm=10.0)
    return _timed_steps(step, _replay(data), DQN_BATCH, steps)


def qrdqn_vector_sb3(data: dict[str, torch.Tensor], steps: int) -> float:
    from sb3_contrib import QRDQN

    model = _sb3_model(
        QRDQN, dqn_shapes(), data, learning_rate=2.3e-3, batch_size=DQN_BATCH, max_grad_norm=10.0,
        target_update_interval=DQN_TARGET_EVERY,
        policy_kwargs={"net_arch": DQN_HIDDEN, "n_quantiles": QR_QUANTILES},
    )  # fmt: skip
    return _sb3_q_train(model, steps, model.quantile_net, model.quantile_net_target)


class _TianshouQuantiles(nn.Module):
    """Tianshou's ``Net`` (the DQN section's MLP) as a QR-DQN model: ``[B, A, N]`` quantiles."""

    def __init__(self) -> None:
        super().__init__()
        from tianshou.utils.net.common import Net

        self.net = Net(
            state_shape=DQN_OBS, action_shape=DQN_ACTIONS * QR_QUANTILES, hidden_sizes=DQN_HIDDEN
        )

    def forward(self, obs: Any, state: Any = None, info: Any = None) -> tuple[torch.Tensor, Any]:
        out, state = self.net(obs, state)
        return out.view(-1, DQN_ACTIONS, QR_QUANTILES), state


def qrdqn_vector_tianshou(data: dict[str, torch.Tensor], steps: int) -> float:
    import gymnasium as gym
    from tianshou.algorithm import QRDQN
    from tianshou.algorithm.modelfree.qrdqn import QRDQNPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory

    policy = QRDQNPolicy(model=_TianshouQuantiles(), action_space=gym.spaces.Discrete(DQN_ACTIONS))
    algorithm = QRDQN(
        policy=policy, optim=AdamOptimizerFactory(lr=2.3e-3), num_quantiles=QR_QUANTILES,
        target_update_freq=DQN_TARGET_EVERY,
    )  # fmt: skip
    return _tianshou_updates(algorithm, data, steps, DQN_BATCH)


section_qrdqn = steps_section(
    f"QR-DQN gradient steps: batch {DQN_BATCH}, 256x256 MLP, obs {DQN_OBS}, {DQN_ACTIONS} "
    f"actions, {QR_QUANTILES} quantiles, target copy every {DQN_TARGET_EVERY}, {{steps}} steps, "
    "1 thread",
    peers(qrdqn_tdrl, qrdqn_vector_sb3, qrdqn_vector_tianshou, None), dqn_data, 2000,
)  # fmt: skip


SECTIONS: dict[str, Callable[[bool], None]] = {
    "ppo": section_ppo,
    "ppo_lstm": section_ppo_lstm,
    "sac": section_sac,
    "dqn": section_dqn,
    "cql": section_cql,
    "iql": section_iql,
    "redq": section_redq,
    "tqc": section_tqc,
    "crossq": section_crossq,
    "td3": section_td3,
    "ddpg": section_ddpg,
    "qrdqn": section_qrdqn,
    "qrdqn_pixels": section_qrdqn_pixels,
    "rainbow_pixels": section_rainbow_pixels,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small batch, 2 epochs (smoke run)")
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=list(SECTIONS))
    parser.add_argument(
        "--keep-denormals",
        action="store_true",
        help="keep torch's default float mode (subnormals kept) for every library",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help=f"where networks, losses and buffers live; cuda runs {', '.join(CUDA_SECTIONS)}",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="add tdrl rows with torch.compile (and, on CUDA, CUDA graphs) on the update steps",
    )
    parser.add_argument(
        "--fused-peers",
        action="store_true",
        help="add a row per peer with torch's Adam defaulting to fused (tdrl's optimizer)",
    )
    args = parser.parse_args()
    if args.fused_peers:
        add_fused_rows()
    global DEVICE
    DEVICE = torch.device(args.device)
    if DEVICE.type != "cpu" and set(args.sections) - set(CUDA_SECTIONS):
        parser.error(f"--device {args.device} runs only --sections {' '.join(CUDA_SECTIONS)}")
    if args.compile:
        add_capture_rows()
    torch.set_num_threads(1)
    torch.set_flush_denormal(not args.keep_denormals)
    warnings.filterwarnings("ignore", category=UserWarning)  # Tianshou's action-bound notice
    for name in args.sections:
        SECTIONS[name](args.quick)


if __name__ == "__main__":
    main()
