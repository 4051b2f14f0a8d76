"""Fast twins of the gradient step's parts (``tdrl.trainers.optim``): Adam's update, gradient
clipping and zeroing without torch's per-call Python layers.

On one CPU thread torch's optimizer machinery around Adam's kernels (profiler scope, hook
dispatch, ``_init_group``, device grouping), its clip_grad_norm_ and its zero_grad together add
over a tenth to a small network's gradient step (``benchmarks/fast_paths.py`` measures each
against its plain twin).
"""

from __future__ import annotations

import torch
import torch.optim.optimizer as _optimizer_module

__all__ = ["adam_step", "clip_grad_norm_", "zero_grad"]


def zero_grad(optimizer: torch.optim.Optimizer) -> bool:
    """Twin of ``optimizer.zero_grad(set_to_none=True)`` (tests/trainers/test_optim.py): the
    same, minus its profiler scope; False (nothing done) for an optimizer that overrides it."""
    if type(optimizer).zero_grad is not torch.optim.Optimizer.zero_grad:
        return False
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = None
    return True


@torch.no_grad()
def clip_grad_norm_(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor | None:
    """Twin of ``torch.nn.utils.clip_grad_norm_`` (2-norm), bitwise (tests/trainers/test_optim.py):
    torch's own foreach computation without its grouping and dispatch layers. None (nothing done)
    unless every gradient is dense and shares one device and dtype."""
    first = grads[0]
    if any(g.device != first.device or g.dtype != first.dtype or g.is_sparse for g in grads):
        return None
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
    torch._foreach_mul_(grads, torch.clamp(float(max_norm) / (total + 1e-6), max=1.0))
    return total


def _scheduled(optimizer: torch.optim.Optimizer) -> bool | None:
    """Whether ``step`` is an LR scheduler's wrapper of the class's step (True), the class's
    own step (False), or something else (None)."""
    step = optimizer.__dict__.get("step")
    if step is None:
        return False
    if getattr(step, "_wrapped_by_lr_sched", False) and (
        getattr(step, "__wrapped__", None) is type(optimizer).step
    ):
        return True
    return None


@torch.no_grad()
def adam_step(optimizer: torch.optim.Optimizer) -> bool:
    """Twin of ``optimizer.step()`` for a plain fused ``torch.optim.Adam``, bitwise
    (tests/trainers/test_optim.py): the same two kernels ``Adam.step`` ends in (``_foreach_add_``
    on the step counts, then ``_fused_adam_``) with the same arguments and state.

    An LR scheduler's wrapper of ``step`` is honoured (its ``_opt_called`` flag is set, the
    learning rate read from the param group). Returns False, having changed nothing, for anything
    else: another optimizer, step hooks, AMP's ``grad_scale``, amsgrad, capturable,
    differentiable, decoupled weight decay, tensor hyperparameters, state not yet created (the
    first step), sparse or complex tensors, or a group spanning devices or dtypes.
    """
    scheduled = _scheduled(optimizer)
    if (
        type(optimizer) is not torch.optim.Adam
        or scheduled is None
        or optimizer._optimizer_step_pre_hooks
        or optimizer._optimizer_step_post_hooks
        or _optimizer_module._global_optimizer_pre_hooks
        or _optimizer_module._global_optimizer_post_hooks
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
    if scheduled:
        optimizer._opt_called = True  # type: ignore[attr-defined]  # what the wrapper records
    for group, params, grads, exp_avgs, exp_avg_sqs, steps in calls:
        beta1, beta2 = group["betas"]
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(
            params, grads, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False, lr=group["lr"],
            beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"], eps=group["eps"],
            maximize=group["maximize"], grad_scale=None, found_inf=None,
        )  # fmt: skip
    return True
