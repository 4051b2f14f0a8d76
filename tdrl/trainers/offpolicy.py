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
from collections.abc import Iterable

import torch
import torch.optim.optimizer as _optim_hooks
from tensordict import TensorDictBase

from tdrl import keys
from tdrl.data import PrioritizedReplayBuffer, ReplayBuffer

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


def torch_default_init_(module: torch.nn.Module) -> torch.nn.Module:
    """Re-initialise every ``nn.Linear`` of ``module`` with PyTorch's default (Kaiming-uniform)
    init; returns ``module``.

    ``tdrl.modules.mlp`` initialises orthogonally (the on-policy convention of Andrychowicz et
    al. 2020, arXiv 2006.05990). The off-policy baselines (SB3, Tianshou, CleanRL) keep PyTorch's
    default, and their tuned settings assume it: DQN on CartPole-v1 with rl-baselines3-zoo's
    settings reached 500 at 50k steps with the default init and stayed near 100 with the
    orthogonal one (seed 0, measured here).
    """
    for layer in module.modules():
        if isinstance(layer, torch.nn.Linear):
            layer.reset_parameters()
    return module


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
) -> ReplayBuffer:
    """A uniform or prioritized (Schaul et al. 2015, arXiv 1511.05952) replay buffer.

    With ``n_steps > 1`` samples are n-step transitions whose ``"steps_to_next_obs"`` the losses
    turn into the bootstrap discount ``gamma ** k``.
    """
    if prioritized:
        return PrioritizedReplayBuffer(
            capacity, alpha=alpha, beta=beta, n_steps=n_steps, gamma=gamma, generator=seed
        )
    return ReplayBuffer(capacity, n_steps=n_steps, gamma=gamma, generator=seed)


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


def optimizer_step(
    loss: torch.Tensor,
    *optimizers: torch.optim.Optimizer,
    max_grad_norm: float | None = None,
    parameters: Iterable[torch.Tensor] | None = None,
) -> torch.Tensor | None:
    """``zero_grad -> backward -> (clip) -> step`` on every optimiser; returns the grad norm.

    The losses route their terms to disjoint parameter groups (SAC's ``loss_actor`` reaches the
    actor only, and so on), so one backward of the sum updates every network at once.
    ``parameters`` (default: those of the optimisers) are clipped when ``max_grad_norm`` is set.
    """
    for optimizer in optimizers:
        if type(optimizer).zero_grad is torch.optim.Optimizer.zero_grad:
            # What zero_grad(set_to_none=True) does, without its profiler scope and per-call
            # setup (~20 us of a ~1.5 ms DQN step).
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None
        else:
            optimizer.zero_grad(set_to_none=True)
    loss.backward()
    norm = None
    if max_grad_norm is not None:
        if parameters is None:
            parameters = [p for o in optimizers for g in o.param_groups for p in g["params"]]
        norm = clip_grad_norm_(parameters, max_grad_norm)
    for optimizer in optimizers:
        if not _fused_adam_step(optimizer):
            optimizer.step()
    return norm


@torch.no_grad()
def _fused_adam_step(optimizer: torch.optim.Optimizer) -> bool:
    """``optimizer.step()`` of a plain fused ``torch.optim.Adam``, minus torch's Python layers.

    The same two kernels ``Adam.step`` ends in (``_foreach_add_`` on the step counts, then
    ``_fused_adam_``), with the same arguments and state, so the parameters and the optimiser
    state are bitwise those of ``optimizer.step()``; what is skipped is its per-call machinery
    (profiler scope, hook dispatch, ``_init_group`` and device grouping): about 0.1 ms a call,
    a twentieth of a DQN gradient step at batch 64 on one CPU thread. Returns False, having
    changed nothing, for anything but the plain case: another optimiser, step hooks, an LR
    scheduler's patched ``step``, AMP's ``grad_scale``, amsgrad, capturable, differentiable,
    decoupled weight decay, tensor hyperparameters, state not yet created (the first step),
    sparse or complex tensors, or a group spanning devices or dtypes. Then ``step()`` runs.
    """
    if (
        type(optimizer) is not torch.optim.Adam
        or "step" in optimizer.__dict__  # patched by an LR scheduler
        or optimizer._optimizer_step_pre_hooks
        or optimizer._optimizer_step_post_hooks
        or _optim_hooks._global_optimizer_pre_hooks
        or _optim_hooks._global_optimizer_post_hooks
        or getattr(optimizer, "grad_scale", None) is not None
        or getattr(optimizer, "found_inf", None) is not None
    ):
        return False
    calls = []
    for group in optimizer.param_groups:
        if (
            not group["fused"]
            or group["amsgrad"]
            or group["capturable"]
            or group["differentiable"]
            or group.get("decoupled_weight_decay", False)
            or not all(type(v) is float for v in (group["lr"], *group["betas"]))
        ):
            return False
        params: list[torch.Tensor] = []
        grads: list[torch.Tensor] = []
        exp_avgs: list[torch.Tensor] = []
        exp_avg_sqs: list[torch.Tensor] = []
        steps: list[torch.Tensor] = []
        for p in group["params"]:
            grad = p.grad
            if grad is None:
                continue
            state = optimizer.state.get(p)
            if (
                not state
                or grad.is_sparse
                or p.is_complex()
                or (params and (p.device != params[0].device or p.dtype != params[0].dtype))
            ):
                return False
            params.append(p)
            grads.append(grad)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            steps.append(state["step"])
        if params:
            calls.append((group, params, grads, exp_avgs, exp_avg_sqs, steps))
    for group, params, grads, exp_avgs, exp_avg_sqs, steps in calls:
        beta1, beta2 = group["betas"]
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(
            params, grads, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False, lr=group["lr"],
            beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"], eps=group["eps"],
            maximize=group["maximize"], grad_scale=None, found_inf=None,
        )  # fmt: skip
    return True


@torch.no_grad()
def clip_grad_norm_(parameters: Iterable[torch.Tensor], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` (2-norm) with the same numbers, in four torch calls.

    When every gradient shares one device and dtype (the usual case) this runs torch's own
    foreach computation directly -- per-tensor norms, their norm, ``min(max_norm / (norm +
    1e-6), 1)``, an in-place scale -- without its grouping and dispatch layers (60 instead of
    100 us for DQN's 256x256 Q network on one CPU thread); anything else goes to torch's.
    """
    params = list(parameters)
    grads = [g for g in (p.grad for p in params) if g is not None]
    if not grads:
        return torch.tensor(0.0)
    first = grads[0]
    if first.is_sparse or any(
        g.device != first.device or g.dtype != first.dtype or g.is_sparse for g in grads
    ):
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    torch._foreach_mul_(grads, torch.clamp(float(max_norm) / (total + 1e-6), max=1.0))
    return total


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
