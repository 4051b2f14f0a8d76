"""Parts of an off-policy loop, as functions: the recipes keep the loop itself visible.

One iteration of every off-policy recipe (``recipes/dqn.py``, ``sac.py``, ``td3.py``, ...)::

    for batch in collector:                           # collect (random until learning starts)
        buffer.extend(transitions(batch))             # extend the replay buffer
        for _ in range(updates_due(collector.frames, run.updates, ...)):
            out = loss(buffer.sample(batch_size))     # k gradient steps
            optimizer_step(total, optimizer)
            target_updater.step()                     # soft or hard target update
        run.end_batch(collector, out)                 # log / evaluate / checkpoint (Run)

``Run`` checkpoints the replay buffer beside the rest, so a resumed run samples from the same
data; when the collector cannot resume its episodes exactly (async envs),
:func:`truncate_streams` marks the newest stored step of every stream as truncated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch
from tensordict import TensorDictBase

from tdrl import keys
from tdrl.collectors import AnyCollector
from tdrl.data import PrioritizedReplayBuffer, ReplayBuffer
from tdrl.data.storage import NestedKey
from tdrl.envs import VecEnv
from tdrl.objectives import HardUpdate, SoftUpdate, total_loss
from tdrl.objectives.target import HasTargets
from tdrl.trainers.config import ActorCriticConfig, EntropyConfig, OffPolicyConfig, RunConfig
from tdrl.trainers.optim import adam, optimizer_step

if TYPE_CHECKING:  # run.py imports this module
    from tdrl.trainers.run import Run

# What a policy writes besides the action: left out of the replay buffer, whose keys are fixed by
# the first (random-action) batch, which has none of them.
POLICY_OUTPUTS = (
    keys.LOC,
    keys.SCALE,
    keys.LOGITS,
    keys.ACTION_LOG_PROB,
    keys.ACTION_VALUE,
    keys.CHOSEN_ACTION_VALUE,
)


def transitions(batch: TensorDictBase) -> TensorDictBase:
    """``batch`` without the policy's outputs: what the replay buffer stores."""
    return batch.exclude(*POLICY_OUTPUTS)


def crossed(frames: int, previous: int, every: int) -> bool:
    """Whether a multiple of ``every`` lies in ``(previous, frames]`` (``every <= 0``: never)."""
    return every > 0 and frames // every > previous // every


def make_replay_buffer(
    capacity: int,
    *,
    prioritized: bool = False,
    alpha: float = 0.6,
    beta: float = 0.4,
    n_steps: int = 1,
    gamma: float = 0.99,
    seed: int | None = None,
    device: torch.device | str = "cpu",
    frame_keys: Sequence[NestedKey] | None = None,
    frame_stack: int = 1,
) -> ReplayBuffer:
    """A uniform or prioritized (Schaul et al. 2015, arXiv 1511.05952) replay buffer.

    With ``n_steps > 1`` samples are n-step transitions whose ``"steps_to_next_obs"`` the losses
    turn into the bootstrap discount ``gamma ** k``. ``frame_keys``/``frame_stack``: pixel
    entries stored one frame a step and restacked at sampling (:class:`ReplayBuffer`).
    """
    kwargs: dict[str, Any] = dict(
        n_steps=n_steps, gamma=gamma, generator=seed, device=device, frame_keys=frame_keys,
        frame_stack=frame_stack,
    )  # fmt: skip
    if prioritized:
        return PrioritizedReplayBuffer(capacity, alpha=alpha, beta=beta, **kwargs)
    return ReplayBuffer(capacity, **kwargs)


def to_device(cfg: RunConfig, *modules: torch.nn.Module | None) -> torch.device:
    """Move ``modules`` (networks, losses with their targets, estimators; None is skipped) to
    ``cfg.device``; returns the device. Call it before making the optimizers."""
    device = cfg.torch_device
    for module in modules:
        if module is not None:
            module.to(device)
    return device


def store(buffer: ReplayBuffer, batch: TensorDictBase, run: Run, cfg: OffPolicyConfig) -> int:
    """Put ``batch``'s transitions into ``buffer``; returns the gradient steps due now (at
    ``cfg.utd_ratio`` since ``cfg.init_random_frames``, counted against ``run.updates``, which
    every recipe advances by one per gradient step of its critic).

    When a worker collector restarted a dead worker while collecting ``batch``, that worker's
    streams were cut (its envs start new episodes): the newest stored step of every stream is
    marked truncated first (:func:`truncate_streams`), as on a resume that is not exact."""
    if run.collector is None:
        raise RuntimeError("store() needs a started Run (call run.start(collector) first)")
    restarts = getattr(run.collector, "restarts", 0)
    if restarts != run.restarts_seen:
        truncate_streams(buffer)
        run.restarts_seen = restarts
    buffer.extend(transitions(batch))
    return updates_due(
        run.collector.frames,
        run.updates,
        learning_starts=cfg.init_random_frames,
        utd_ratio=cfg.utd_ratio,
    )


def updates_due(frames: int, updates: int, *, learning_starts: int, utd_ratio: float) -> int:
    """Gradient steps to take now so that ``utd_ratio`` steps were taken per env step since
    ``learning_starts``: ``floor(utd_ratio * (frames - learning_starts + 1)) - updates``.

    Stateless (it reads the two counters), so a resumed run keeps the ratio. ``utd_ratio`` may
    be below 1 (Tianshou's ``update_per_step=0.1``: one step per 10 env steps).
    """
    if utd_ratio <= 0:
        raise ValueError(f"utd_ratio must be > 0, got {utd_ratio}")
    if frames < learning_starts:
        return 0
    # The small epsilon keeps e.g. 0.1 * 30 = 2.9999999999999996 from losing a step.
    return max(math.floor(utd_ratio * (frames - learning_starts + 1) + 1e-9) - updates, 0)


def truncate_streams(buffer: ReplayBuffer) -> None:
    """Mark the newest stored step of every stream ``("next", "truncated")`` and done.

    Needed when a resumed collector starts new episodes (async envs), so the next step written to
    a stream does not follow the newest stored one. The stored transition itself stays valid (its
    real next observation was stored) and bootstraps like any truncation; the flag stops n-step
    sums and slices from reaching across the seam (DESIGN.md, "Episode ends").
    """
    if len(buffer) == 0:
        return
    storage = buffer.storage  # [length, streams] views of the stored tensors
    newest = (buffer.state_dict()["cursor"] - 1) % storage.batch_size[0]
    for key in (keys.NEXT_TRUNCATED, keys.NEXT_DONE):
        flag = storage.get(key, None)
        if flag is not None:
            flag[newest] = True


def actor_critic_optimizer(
    cfg: ActorCriticConfig,
    loss: HasTargets,
    actor: torch.nn.Module,
    critic: torch.nn.Module,
    *,
    log_alpha: torch.Tensor | None = None,
) -> tuple[torch.optim.Adam, SoftUpdate]:
    """One fused Adam with a group per part (the actor at ``cfg.actor_lr``, the critic at
    ``cfg.critic_lr``, ``log_alpha`` when given at ``cfg.alpha_lr``: the same updates as one Adam
    each) and the Polyak target update of ``loss`` at ``cfg.tau``. Move the modules to their
    device first (:func:`to_device`)."""
    groups: list[tuple[Iterable[torch.Tensor], float]] = [
        (actor.parameters(), cfg.actor_lr),
        (critic.parameters(), cfg.critic_lr),
    ]
    if log_alpha is not None:
        if not isinstance(cfg, EntropyConfig):
            raise TypeError(
                f"log_alpha needs an EntropyConfig (alpha_lr), got {type(cfg).__name__}"
            )
        groups.append(([log_alpha], cfg.alpha_lr))
    return adam(*groups), SoftUpdate(loss, tau=cfg.tau)


class ActorCriticLoss(Protocol):
    """A loss with a critic-only part: SAC, REDQ, DDPG, TD3, discrete SAC."""

    def __call__(self, batch: TensorDictBase) -> TensorDictBase: ...

    def qvalue_loss(self, batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]: ...


Step = Callable[[TensorDictBase, int], "TensorDictBase | Mapping[str, object] | None"]


def actor_critic_step(
    loss: ActorCriticLoss,
    optimizer: torch.optim.Optimizer,
    target_updater: SoftUpdate | HardUpdate,
    *,
    actor_every: int = 1,
    targets_with_actor: bool = False,
) -> Step:
    """The gradient step of the actor-critic family, for :func:`train_off_policy`: the whole
    loss (its ``loss_*`` terms summed) on every ``actor_every``-th step, ``loss.qvalue_loss``
    alone on the others (TD3's delayed actor, REDQ's critic steps per actor step); then the
    target update, after every step or, with ``targets_with_actor`` (TD3), only after whole-loss
    steps. The step returns the whole loss's output, or None on critic-only steps."""

    def step(sample: TensorDictBase, k: int) -> TensorDictBase | None:
        if k % actor_every == 0:
            out = loss(sample)
            optimizer_step(total_loss(out), optimizer)
            target_updater.step()
            return out
        # critic-only step: the actor's forward is skipped
        optimizer_step(loss.qvalue_loss(sample)[0], optimizer)
        if not targets_with_actor:
            target_updater.step()
        return None

    return step


def q_learning_step(
    loss: Callable[[TensorDictBase], TensorDictBase],
    optimizer: torch.optim.Optimizer,
    target_updater: HardUpdate,
    *,
    exploration: Any = None,
    max_grad_norm: float | None = None,
    after_step: Callable[[TensorDictBase, TensorDictBase], None] | None = None,
) -> Step:
    """The gradient step of the Q-learning family (DQN and its distributional variants, DRQN),
    for :func:`train_off_policy`: ``loss(sample)``, one optimizer step on its ``"loss"``
    (clipped at ``max_grad_norm``), ``after_step(sample, out)`` (e.g. PER's priority update),
    then the target update, counted from the run's gradient steps (so a resumed run copies its
    targets when an uninterrupted one would). Returns ``loss``, ``q`` (the chosen action's
    value) and the ``exploration`` module's current ``epsilon``."""

    def step(sample: TensorDictBase, k: int) -> dict[str, object]:
        out = loss(sample)
        optimizer_step(out[keys.LOSS], optimizer, max_grad_norm=max_grad_norm)
        if after_step is not None:
            after_step(sample, out)
        target_updater.counter = k - 1
        target_updater.step()
        metrics: dict[str, object] = {keys.LOSS: out[keys.LOSS], "q": out[keys.CHOSEN_ACTION_VALUE]}
        if exploration is not None:
            metrics["epsilon"] = exploration.eps
        return metrics

    return step


def train_off_policy(
    cfg: OffPolicyConfig,
    algo: str,
    state: Mapping[str, Any],
    collector: AnyCollector,
    buffer: ReplayBuffer,
    step: Step,
    *,
    eval_env: VecEnv,
    policy: Callable[[TensorDictBase], TensorDictBase],
    sample: Callable[[], TensorDictBase] | None = None,
    on_batch: Callable[[int], None] | None = None,
    transform: Callable[[TensorDictBase], TensorDictBase] | None = None,
) -> dict[str, float]:
    """The off-policy loop of a recipe, from start to report::

        with start_run(cfg, algo, state, collector, ...) as run:  # --resume picks up here
            for batch in collector:        # one step per env (random until learning starts)
                batch = transform(batch)               # if given, e.g. RewardClipping
                due = store(buffer, batch, run, cfg)   # gradient steps due at cfg.utd_ratio
                on_batch(collector.frames)             # schedules: epsilon, PER's beta
                for _ in range(due):
                    run.updates += 1
                    out = step(sample(), run.updates) or out  # None: keep the last metrics
                if run.end_batch(collector, out):   # log, evaluate, checkpoint; True: stop
                    break
            return run.finish()            # final evaluation, curve.png, logs; closes the envs

    ``step(sample, k)`` takes the ``k``-th gradient step (k counts from 1 over the whole run,
    resumes included) and returns metrics to log (a loss output) or None (the previous
    metrics stay). ``sample`` defaults to ``buffer.sample(cfg.batch_size)``.
    """
    from tdrl.trainers.run import start_run  # run.py imports this module

    if sample is None:
        sample = lambda: buffer.sample(cfg.batch_size)  # noqa: E731
    with start_run(
        cfg, algo, state, collector, eval_env=eval_env, policy=policy, buffer=buffer
    ) as run:
        for batch in collector:
            out = None
            if transform is not None:  # after the collector logged the env's own returns
                batch = transform(batch)
            due = store(buffer, batch, run, cfg)
            if on_batch is not None:
                on_batch(collector.frames)
            for _ in range(due):
                run.updates += 1
                metrics = step(sample(), run.updates)
                out = out if metrics is None else metrics
            collector.update_policy_weights_()  # Ray workers act with the new weights next
            if run.end_batch(collector, out):
                break
        return run.finish()


def run_actor_critic(
    cfg: ActorCriticConfig,
    algo: str,
    loss: ActorCriticLoss,
    env: VecEnv,
    eval_env: VecEnv,
    *,
    actor: torch.nn.Module,
    critic: torch.nn.Module,
    policy: torch.nn.Module | None = None,
    log_alpha: torch.Tensor | None = None,
    n_steps: int = 1,
    actor_every: int = 1,
    targets_with_actor: bool = False,
    extra_state: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """The rest of an actor-critic recipe (SAC, discrete SAC, REDQ, TD3, DDPG) once its envs,
    networks and loss exist: the modules to ``cfg.device`` (:func:`to_device`), one Adam with a
    group per part and the target update (:func:`actor_critic_optimizer`), a replay buffer of
    ``n_steps`` transitions, a collector acting with ``policy`` (the actor, or the actor plus
    exploration noise), the gradient step (:func:`actor_critic_step`) and
    :func:`train_off_policy`, which evaluates the ``actor`` and checkpoints the loss (networks,
    targets, ``log_alpha``), the optimizer and ``extra_state``."""
    policy = actor if policy is None else policy
    module: Any = loss  # also an nn.Module with targets (HasTargets), which its Protocol omits
    to_device(cfg, module, policy)
    optimizer, target_updater = actor_critic_optimizer(
        cfg, module, actor, critic, log_alpha=log_alpha
    )
    buffer = make_replay_buffer(
        cfg.buffer_size, n_steps=n_steps, gamma=cfg.gamma, seed=cfg.seed, device=cfg.torch_device
    )
    from tdrl.trainers.run import make_collector  # run.py imports this module

    workers = 1 if cfg.collector == "local" else cfg.num_workers
    frames = cfg.num_envs * cfg.steps_per_batch * workers
    collector = make_collector(cfg, env, policy, frames, init_random_frames=cfg.init_random_frames)
    step = actor_critic_step(
        loss, optimizer, target_updater, actor_every=actor_every,
        targets_with_actor=targets_with_actor,
    )  # fmt: skip
    state = {"loss": loss, "optimizer": optimizer, **(extra_state or {})}
    return train_off_policy(
        cfg, algo, state, collector, buffer, step, eval_env=eval_env, policy=actor
    )
