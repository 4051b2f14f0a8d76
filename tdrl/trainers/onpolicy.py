"""On-policy training steps and a one-call loop.

Every on-policy step starts the same way: the value estimator (``GAE``, ``TD1Estimator``, ...)
runs once on the whole ``[num_envs, T]`` rollout, before any minibatching, so advantages see
whole trajectories and the episode ends in them (a loss never runs an estimator). Then either
minibatch gradient steps on the summed ``loss_*`` entries (:func:`on_policy_update`: REINFORCE,
A2C, PPO) or a natural-gradient actor step plus critic regression
(:func:`natural_gradient_update`: NPG, TRPO). :func:`train_on_policy` is the loop over a
collector around either; :func:`run_on_policy` runs it inside a recipe's :class:`Run`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.modules import set_recurrent_mode

from tdrl.collectors import AnyCollector, recurrent_state_specs
from tdrl.envs import VecEnv
from tdrl.modules import RewardScaling, RunningObservationNorm, actor_critic
from tdrl.objectives import total_loss
from tdrl.trainers.config import OnPolicyConfig
from tdrl.trainers.optim import optimizer_step
from tdrl.trainers.run import episode_metrics, make_collector, setup, start_run

# The metric that on_policy_update and natural_gradient_update count their gradient steps in.
UPDATES = "updates"


def _scalars(td: TensorDictBase) -> dict[str, float]:
    return {str(key): float(value) for key, value in td.items()}


def on_policy_networks(
    env: VecEnv, cfg: OnPolicyConfig
) -> tuple[TensorDictModuleBase, TensorDictModuleBase, RunningObservationNorm | None]:
    """``tdrl.modules.actor_critic`` for ``env`` with the config's networks options (and its
    recurrent actor and gSDE, for an :class:`AdvantageConfig` with ``recurrent`` or
    ``sde_sample_freq``)."""
    recurrent: Any = getattr(cfg, "recurrent", "none")
    return actor_critic(
        env.observation_spec, env.action_spec, hidden_sizes=cfg.hidden_sizes,
        init_log_std=cfg.init_log_std, normalize_observations=cfg.normalize_observations,
        activation=nn.ReLU if cfg.activation == "relu" else nn.Tanh,
        recurrent=None if recurrent == "none" else recurrent,
        recurrent_size=getattr(cfg, "recurrent_size", 64),
        recurrent_critic=getattr(cfg, "recurrent_critic", False),
        sde_sample_freq=getattr(cfg, "sde_sample_freq", 0),
        ortho_init=cfg.ortho_init, rescale_actions=cfg.rescale_actions,
    )  # fmt: skip


@dataclass
class OnPolicySetup:
    """What an on-policy recipe starts from (:func:`on_policy_setup`): its envs and networks."""

    env: VecEnv
    eval_env: VecEnv
    actor: TensorDictModuleBase
    critic: TensorDictModuleBase
    obs_norm: RunningObservationNorm | None

    @property
    def acting(self) -> TensorDictModuleBase:
        """What the collector acts with: the actor, and the critic after it when the critic is
        recurrent (so that its state is stored in the rollout for the estimator and the loss)."""
        if not recurrent_state_specs(self.critic):
            return self.actor
        return TensorDictSequential(self.actor, self.critic)


def on_policy_setup(cfg: OnPolicyConfig) -> OnPolicySetup:
    """Seeds, threads, the training envs and a separate evaluation env (:func:`setup`), then the
    actor and critic (:func:`on_policy_networks`, observation normalization inside both)."""
    env, eval_env = setup(cfg)
    return OnPolicySetup(env, eval_env, *on_policy_networks(env, cfg))


def lr_schedule(
    optimizer: torch.optim.Optimizer, cfg: OnPolicyConfig
) -> torch.optim.lr_scheduler.LambdaLR:
    """:func:`linear_decay` over the config's number of batches (constant without lr_decay)."""
    n_batches = math.ceil(cfg.total_frames / cfg.frames_per_batch)
    return linear_decay(optimizer, n_batches, decay=cfg.lr_decay)


def linear_decay(
    optimizer: torch.optim.Optimizer, steps: int, *, decay: bool = True
) -> torch.optim.lr_scheduler.LambdaLR:
    """A scheduler that scales the learning rates linearly from 1 to 0 over ``steps`` calls of
    ``scheduler.step()`` (one per batch: Tianshou's and SB3's on-policy default); constant
    when ``decay`` is False."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: max(1.0 - i / steps, 0.0) if decay else 1.0
    )


def on_policy_update(
    batch: TensorDictBase,
    loss: TensorDictModuleBase,
    estimator: TensorDictModuleBase,
    optimizer: torch.optim.Optimizer,
    *,
    epochs: int = 1,
    minibatch_size: int | None = None,
    max_grad_norm: float | None = None,
    generator: torch.Generator | None = None,
    seq_len: int | None = None,
    recompute_advantage: bool = False,
) -> dict[str, float]:
    """Estimate advantages on the whole rollout, then ``epochs`` passes of minibatch steps.

    Args:
        batch: a collector rollout ``[num_envs, T]``; advantages are written into it.
        loss: returns ``loss_*`` entries to sum (``ClipPPOLoss``, ``A2CLoss``, ``ReinforceLoss``).
        estimator: writes ``"advantage"`` and ``"value_target"`` (run without gradients).
        optimizer: over the parameters the loss trains.
        epochs: passes over the rollout (PPO: 10; A2C, REINFORCE: 1).
        minibatch_size: samples per gradient step; ``None``: the whole rollout (one step).
        max_grad_norm: global gradient-norm clip; ``None`` disables.
        generator: random generator of the shuffles (default: torch's global one).
        seq_len: recurrent policies: minibatches of whole ``seq_len``-step chunks of env rows
            (see :func:`ppo_update`); ``None``: of single steps.
        recompute_advantage: estimate again before every epoch, with the critic as the last
            epoch left it (Tianshou's ``recompute_advantage``); off: once, before the first.

    Returns:
        The loss outputs averaged over all gradient steps, as floats, and ``"updates"``: the
        number of gradient steps taken.

    Shapes:
        batch ``[num_envs, T]``.
    """
    size = batch.numel() if minibatch_size is None else minibatch_size
    passes = [1] * epochs if recompute_advantage and epochs > 1 else [epochs]
    outs = []
    for n in passes:  # every pass has the same number of steps: the mean of means is the mean
        with torch.no_grad():
            estimator(batch)
        outs.append(ppo_update(
            loss, optimizer, batch, epochs=n, minibatch_size=size, max_grad_norm=max_grad_norm,
            generator=generator, seq_len=seq_len,
        ))  # fmt: skip
    out = outs[0] if len(outs) == 1 else torch.stack(outs).mean()
    metrics = _scalars(out)
    if seq_len is None:
        per_epoch = math.ceil(batch.numel() / size)
    else:  # ppo_update's minibatches: whole chunks, at least one
        per_epoch = math.ceil(batch.numel() // seq_len / max(size // seq_len, 1))
    metrics[UPDATES] = float(epochs * per_epoch)
    return metrics


def ppo_update(
    loss: TensorDictModuleBase,
    optimizer: torch.optim.Optimizer,
    batch: TensorDictBase,
    *,
    epochs: int,
    minibatch_size: int,
    max_grad_norm: float | None = None,
    generator: torch.Generator | None = None,
    seq_len: int | None = None,
) -> TensorDict:
    """Several epochs of shuffled minibatch steps on one rollout; returns mean diagnostics.

    The rollout (advantages already computed) is flattened and cut down to the loss's in-keys
    once; every epoch draws one permutation and gathers all entries once, and minibatches are
    contiguous slices (views) of that shuffled copy, so the per-step TensorDict cost is one
    slice. The last minibatch may be smaller. Each step sums the ``loss_*`` entries and takes
    :func:`tdrl.trainers.optimizer_step` (clipping the global gradient norm when
    ``max_grad_norm`` is set), the same step as the off-policy recipes.

    Args:
        loss: e.g. ``ClipPPOLoss``; returns ``loss_*`` entries.
        optimizer: over the parameters the loss trains.
        batch: rollout ``[*B]`` with advantages.
        epochs: passes over the rollout.
        minibatch_size: samples per gradient step.
        max_grad_norm: global gradient-norm clip; ``None`` disables.
        generator: random generator of the shuffles.
        seq_len: for recurrent policies: each env row of the ``[num_envs, T]`` rollout is cut
            into ``T / seq_len`` chunks (an error if it does not divide T); minibatches hold
            ``minibatch_size // seq_len`` whole chunks (at least one) and the loss runs in
            sequence mode (``torchrl.modules.set_recurrent_mode``), each chunk starting from the
            recurrent state the collector stored at its first step.

    Shapes:
        batch ``[*B]`` (flattened to ``[N]``), or ``[num_envs, T]`` -> ``[C, seq_len]`` chunks
        with ``seq_len``; returns scalars averaged over all steps.
    """
    if minibatch_size < 1 or epochs < 0:
        raise ValueError(
            f"need minibatch_size >= 1 and epochs >= 0, got {minibatch_size}, {epochs}"
        )
    flat = batch.select(*loss.in_keys, strict=False)
    flat = flat.reshape(-1) if seq_len is None else _chunks(flat, seq_len)
    missing = [key for key in loss.in_keys if key not in flat.keys(True)]
    if missing:
        raise KeyError(f"ppo_update: the batch has no {missing} entries needed by the loss")
    _check_finite(flat, loss, "ppo_update")
    if seq_len is not None:
        minibatch_size = max(minibatch_size // seq_len, 1)  # whole chunks
    params = [p for group in optimizer.param_groups for p in group["params"]]
    size = flat.shape[0]
    history: dict[str, list[torch.Tensor]] = {}
    with set_recurrent_mode(seq_len is not None):
        for _ in range(epochs):
            shuffled = flat[torch.randperm(size, generator=generator)]
            for start in range(0, size, minibatch_size):
                out = loss(shuffled[start : start + minibatch_size])
                optimizer_step(
                    total_loss(out), optimizer, max_grad_norm=max_grad_norm, parameters=params
                )
                for key, value in out.items():
                    history.setdefault(key, []).append(value.detach())
    means = {key: torch.stack(values).mean() for key, values in history.items()}
    return TensorDict(means, batch_size=[])


def _check_finite(batch: TensorDictBase, loss: Any, owner: str) -> None:
    """Raise, naming the key, where the loss's advantage, value target or behaviour log-prob
    holds a NaN or an inf: one such entry would turn a standardized minibatch, and then every
    weight the optimizer steps, into NaN. Once per rollout (three reductions)."""
    names = getattr(loss, "tensor_keys", None)
    for field in ("advantage", "value_target", "sample_log_prob"):
        key = getattr(names, field, None)
        value = None if key is None else batch.get(key, None)
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            if not bool(value.isfinite().all()):
                bad = int((~value.isfinite()).sum())
                raise ValueError(
                    f"{owner}: {key!r} contains NaN or inf ({bad} of {value.numel()} entries); "
                    "check the rewards, the values and the policy's log-probs of this rollout"
                )


def _chunks(batch: TensorDictBase, seq_len: int) -> TensorDictBase:
    """``[num_envs, T]`` -> ``[num_envs * T / seq_len, seq_len]`` (each env row cut in order)."""
    if batch.batch_dims != 2:
        raise ValueError(
            f"seq_len needs a [num_envs, T] rollout, got batch size {tuple(batch.batch_size)}"
        )
    envs, steps = batch.batch_size
    if seq_len < 1 or steps % seq_len:
        raise ValueError(
            f"seq_len={seq_len} does not divide the rollout's {steps} steps per env (batch "
            f"{tuple(batch.batch_size)}): pick a divisor of frames_per_batch / num_envs"
        )
    return batch.reshape(envs * steps // seq_len, seq_len)


def natural_gradient_update(
    batch: TensorDictBase,
    loss: TensorDictModuleBase,
    estimator: TensorDictModuleBase,
    critic_optimizer: torch.optim.Optimizer,
    *,
    critic_steps: int = 20,
    critic_minibatch_size: int | None = None,
) -> dict[str, float]:
    """NPG/TRPO: estimate on the whole rollout, one ``loss.actor_step``, then critic steps.

    The critic regresses on the value targets computed before the actor moved, with
    ``critic_steps`` passes of ``critic_minibatch_size`` (``None``: full batch) steps on
    ``"loss_critic"`` (Tianshou's ``optim_critic_iters``, 20 full-batch steps by default).

    Returns:
        The actor step's diagnostics (``kl``, ``step_size``, ...) and the mean ``loss_critic``.

    Shapes:
        batch ``[num_envs, T]``.
    """
    with torch.no_grad():
        estimator(batch)
    flat = batch.reshape(-1)
    _check_finite(flat, loss, "natural_gradient_update")  # before the actor moves
    metrics = _scalars(loss.actor_step(flat))  # type: ignore[operator]
    size = flat.numel() if critic_minibatch_size is None else critic_minibatch_size
    metrics.update(
        _scalars(ppo_update(loss, critic_optimizer, flat, epochs=critic_steps, minibatch_size=size))
    )
    metrics[UPDATES] = float(1 + critic_steps * math.ceil(flat.numel() / size))  # actor + critic
    return metrics


def train_on_policy(
    collector: AnyCollector,
    update: Callable[[TensorDictBase], dict[str, float]],
    *,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    obs_norm: RunningObservationNorm | None = None,
    callback: Callable[[TensorDictBase, dict[str, float]], bool | None] | None = None,
) -> list[dict[str, float]]:
    """The on-policy loop: ``metrics = update(batch)`` on every batch of ``collector``.

    ``update`` is e.g. ``partial(on_policy_update, loss=..., estimator=..., optimizer=...)``
    or :func:`natural_gradient_update`'s. After each batch's update: the learning rate goes into
    the metrics (``"lr"``) and ``scheduler.step()`` runs; ``obs_norm`` folds the batch's raw
    observations into its statistics (after the update, which saw the collection's statistics);
    then ``callback(batch, metrics)`` (logging, evaluation, checkpoints) may return True to stop.

    Returns:
        One dict per batch: the update's metrics, ``"frames"`` and, when episodes ended,
        ``"episode_return"``, ``"episode_length"`` and ``"episodes"``.

    Shapes:
        batches ``[num_envs, T]``.
    """
    history: list[dict[str, float]] = []
    for batch in collector:
        metrics = update(batch)
        if scheduler is not None:
            metrics["lr"] = float(scheduler.get_last_lr()[0])
            scheduler.step()
        if obs_norm is not None:
            obs_norm.update(batch.get(obs_norm.in_keys[0]))
        collector.update_policy_weights_()  # Ray workers act with the new weights next
        history.append(
            {**metrics, "frames": float(collector.frames), **episode_metrics(collector.episodes)}
        )
        if callback is not None and callback(batch, metrics):
            break
    return history


def _with_reward_scaling(
    cfg: OnPolicyConfig, update: Callable[[TensorDictBase], dict[str, float]]
) -> tuple[Callable[[TensorDictBase], dict[str, float]], RewardScaling]:
    """``update`` with the batch's rewards scaled first, and the scaler (its statistics)."""
    scaler = RewardScaling(cfg.gamma).to(cfg.torch_device)

    def scaled(batch: TensorDictBase) -> dict[str, float]:
        scaler(batch)  # before the estimator: the critic learns scaled returns
        return update(batch)

    return scaled, scaler


def run_on_policy(
    cfg: OnPolicyConfig,
    algo: str,
    parts: OnPolicySetup,
    optimizer: torch.optim.Optimizer,
    update: Callable[[TensorDictBase], dict[str, float]],
    *,
    extra_state: Mapping[str, Any] | None = None,
    collector: AnyCollector | None = None,
    reward_scaling: bool = True,
) -> dict[str, float]:
    """A recipe's on-policy run, from start to report: ``collector`` (default: a
    :class:`Collector` of ``cfg.frames_per_batch`` steps over ``parts.env`` acting with
    ``parts.actor``; IMPALA passes a :class:`RayCollector`), the optimizer's
    :func:`lr_schedule`, and :func:`train_on_policy` inside a :class:`Run` (``--resume``
    continues one) that counts the gradient steps (the metrics' ``"updates"``), logs, evaluates
    and checkpoints (actor, critic, optimizer, schedule and ``extra_state``) after every batch
    (:meth:`Run.end_batch`), and at the end reports (final evaluation, ``curve.png``, CSV,
    TensorBoard) and closes the envs; returns :meth:`Run.finish`'s metrics.

    ``cfg.scale_rewards`` puts a :class:`RewardScaling` before ``update`` (its statistics go in
    the checkpoints); a recipe where that does not apply passes ``reward_scaling=False`` and the
    flag is then an error (GAIL: its rewards come from the discriminator; IMPALA: its batches
    come from the actors in arrival order, so no per-env return can be carried across them)."""
    if cfg.scale_rewards:
        if not reward_scaling:
            for env in (parts.env, parts.eval_env):
                env.close()
            raise ValueError(f"--scale-rewards does not apply to {algo}")
        update, scaler = _with_reward_scaling(cfg, update)
        extra_state = {**(extra_state or {}), "reward_scaler": scaler}
    actor = parts.actor
    if collector is None:
        collector = make_collector(cfg, parts.env, parts.acting, cfg.frames_per_batch)
    scheduler = lr_schedule(optimizer, cfg)
    state = {"actor": actor, "critic": parts.critic, "optimizer": optimizer, "scheduler": scheduler}
    state.update(extra_state or {})
    with start_run(cfg, algo, state, collector, eval_env=parts.eval_env, policy=actor) as run:

        def end_batch(batch: TensorDictBase, metrics: dict[str, float]) -> bool:
            run.updates += int(metrics.pop(UPDATES, 0))
            return run.end_batch(collector, metrics)

        train_on_policy(
            collector, update, scheduler=scheduler, obs_norm=parts.obs_norm, callback=end_batch
        )
        return run.finish()
