"""One update step compiled with ``torch.compile`` and/or captured in a CUDA graph.

A recipe writes its update as a plain function (a sample in; loss, backward, optimizer step,
target update; the loss's outputs detached out) and wraps it::

    def update(sample):
        out = loss(sample)
        trainers.optimizer_step(total_loss(out), optimizer)
        target.step()
        return out.detach()

    update = trainers.compiled_step(update, optimizer, compile=True, cudagraphs=True)

The pattern is LeanRL's (CleanRL's scripts with ``torch.compile`` and tensordict's
``CudaGraphModule``): the compiled graph fuses the loss's small kernels, and the CUDA graph replays
the whole step, optimizer included, with one launch. Inside a compiled or captured step tdrl's
fast paths give way to their plain twins (the fast optimizer step declines capturable
optimizers) and the losses skip their per-call scan of the batch for
NaN and infinity (a host sync, which capture forbids): the replay buffer and the rollout
minibatcher check every value as it arrives, so bad data is still named before it is learned.

What a captured step may not hold: host syncs (``.item()``, ``bool(tensor)``), Python state that
changes between calls (a counter, a learning rate as a float: :func:`compiled_step` turns the
optimizers' learning rates into tensors that schedules fill in place), or inputs whose shape
changes. A step that breaks capture is named with torch's own message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["COMPILE_MODES", "compiled_step"]

# torch.compile's modes ("default" is its mode=None)
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compiled_step(
    step: Callable[[Any], Any],
    *optimizers: torch.optim.Optimizer,
    compile: bool = False,  # noqa: A002  # the recipes' --compile
    mode: str = "default",
    cudagraphs: bool = False,
    warmup: int = 2,
) -> Callable[[Any], Any]:
    """``step`` compiled (``compile``, with torch.compile's ``mode``) and/or captured in a CUDA
    graph (``cudagraphs``: the first ``warmup - 1`` calls run eagerly, the ``warmup``-th captures,
    later calls replay); ``step`` itself when both are off.

    ``step`` takes one TensorDict and returns a TensorDict of detached tensors (or None). With
    ``cudagraphs`` the ``optimizers`` are made capturable, their learning rates tensors on the
    parameters' device (schedulers fill them in place), at the first call, so that a checkpoint
    loaded before it (a resume) is captured as loaded; every call's input must have the first
    call's keys and shapes, and the returned TensorDict is a copy of the graph's output.
    """
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile mode must be one of {', '.join(COMPILE_MODES)}; got {mode!r}")
    if cudagraphs and compile and mode == "reduce-overhead":
        raise ValueError(
            "compile mode 'reduce-overhead' captures CUDA graphs of its own; with cudagraphs use "
            "mode 'default' or 'max-autotune-no-cudagraphs'"
        )
    device = _cuda_device(optimizers) if cudagraphs else None
    if compile:
        step = torch.compile(step, mode=None if mode == "default" else mode)
    if device is None:
        return step
    return _captured(step, warmup, device, optimizers)


def _cuda_device(optimizers: tuple[torch.optim.Optimizer, ...]) -> torch.device:
    """The one CUDA device of the optimizers' parameters; else a ValueError that says why they
    cannot be captured."""
    if not optimizers:
        raise ValueError(
            "cudagraphs: pass the step's optimizers (their steps are captured too, so they must "
            "be made capturable)"
        )
    devices = {p.device for o in optimizers for g in o.param_groups for p in g["params"]}
    if len(devices) != 1 or next(iter(devices)).type != "cuda":
        where = ", ".join(sorted(map(str, devices)))
        raise ValueError(
            f"cudagraphs: the optimizers' parameters are on {where}; a CUDA graph captures the "
            f"work of one CUDA device (--device cuda, or drop --cudagraphs)"
        )
    for optimizer in optimizers:
        if any("capturable" not in group for group in optimizer.param_groups):
            raise ValueError(
                f"cudagraphs: {type(optimizer).__name__} has no capturable mode; use Adam or "
                f"AdamW, or drop --cudagraphs"
            )
    return next(iter(devices))


def _make_capturable(optimizers: tuple[torch.optim.Optimizer, ...], device: torch.device) -> None:
    """Capturable groups with tensor learning rates on ``device``; state tensors there too.
    An lr tensor already there is kept: another captured step of the same optimizer (SAC's
    critic-only step) reads the same one."""
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["capturable"] = True
            lr = group["lr"]
            if not (isinstance(lr, torch.Tensor) and lr.device == device):
                group["lr"] = torch.tensor(float(lr), device=device)
        for param, state in optimizer.state.items():  # a loaded checkpoint's, on the CPU
            for name, value in state.items():
                if isinstance(value, torch.Tensor) and value.device != param.device:
                    state[name] = value.to(param.device)


def _captured(
    step: Callable[[Any], Any],
    warmup: int,
    device: torch.device,
    optimizers: tuple[torch.optim.Optimizer, ...],
) -> Callable[[Any], Any]:
    """``step`` in tensordict's ``CudaGraphModule`` on ``device``; the optimizers made
    capturable at the first call; a failed capture re-raised with what breaks capture."""
    from tensordict.nn import CudaGraphModule

    graph = CudaGraphModule(step, warmup=warmup, in_keys=[], out_keys=[], device=device)

    def captured(batch: Any) -> Any:
        if graph.counter == 0:
            _make_capturable(optimizers, device)
        capturing = graph.counter == warmup - 1
        try:
            with torch.cuda.device(device):
                return graph(batch)
        except RuntimeError as err:  # CUDA's errors (AcceleratorError is one)
            if not capturing:
                raise
            raise RuntimeError(
                f"cudagraphs: the update step could not be captured in a CUDA graph "
                f"({type(err).__name__}: {err}). A host sync (.item(), bool(tensor), a CPU "
                f"tensor read on the host), a Python value that changes between steps, or an "
                f"input whose shape changes breaks capture; run without --cudagraphs"
            ) from err

    return captured
