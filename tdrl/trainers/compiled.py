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
fast paths give way to their plain twins and the losses skip their per-call scan of the batch for
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
    graph (``cudagraphs``; after ``warmup`` eager calls); ``step`` itself when both are off.

    ``step`` takes one TensorDict and returns a TensorDict of detached tensors (or None). With
    ``cudagraphs`` the ``optimizers`` become capturable and their learning rates tensors on the
    parameters' device (schedulers fill them in place), every call's input must have the first
    call's keys and shapes, and the returned TensorDict is a copy of the graph's output.
    """
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile mode must be one of {', '.join(COMPILE_MODES)}; got {mode!r}")
    if cudagraphs:
        _capturable(optimizers)
    if compile:
        step = torch.compile(step, mode=None if mode == "default" else mode)
    if not cudagraphs:
        return step
    return _captured(step, warmup)


def _capturable(optimizers: tuple[torch.optim.Optimizer, ...]) -> None:
    """Check that the optimizers' parameters live on CUDA; make them capturable with tensor
    learning rates."""
    if not optimizers:
        raise ValueError(
            "cudagraphs: pass the step's optimizers (their steps are captured too, so they must "
            "be made capturable)"
        )
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            devices = {p.device for p in group["params"]}
            if any(d.type != "cuda" for d in devices):
                where = ", ".join(sorted(map(str, devices)))
                raise ValueError(
                    f"cudagraphs: {type(optimizer).__name__}'s parameters are on {where}; a CUDA "
                    f"graph captures CUDA work only (--device cuda, or drop --cudagraphs)"
                )
            if "capturable" not in group:
                raise ValueError(
                    f"cudagraphs: {type(optimizer).__name__} has no capturable mode; use Adam "
                    f"or AdamW, or drop --cudagraphs"
                )
            group["capturable"] = True
            lr = group["lr"]
            device = next(iter(devices))
            if not isinstance(lr, torch.Tensor):
                group["lr"] = torch.tensor(float(lr), device=device)
                if "initial_lr" in group:  # a scheduler's base, kept a float
                    group["initial_lr"] = float(group["initial_lr"])
        for state in optimizer.state.values():  # steps taken before capture
            for name, value in state.items():
                if isinstance(value, torch.Tensor) and value.device.type == "cpu":
                    state[name] = value.to(next(iter(optimizer.param_groups[0]["params"])).device)


def _captured(step: Callable[[Any], Any], warmup: int) -> Callable[[Any], Any]:
    """``step`` in tensordict's ``CudaGraphModule``; a failed capture re-raised with what breaks
    capture."""
    from tensordict.nn import CudaGraphModule

    graph = CudaGraphModule(step, warmup=warmup, in_keys=[], out_keys=[])

    def captured(batch: Any) -> Any:
        capturing = graph.counter == warmup - 1
        try:
            return graph(batch)
        except Exception as err:
            if not capturing:
                raise
            raise RuntimeError(
                f"cudagraphs: the update step could not be captured in a CUDA graph "
                f"({type(err).__name__}: {err}). A host sync (.item(), bool(tensor), a CPU "
                f"tensor read on the host), a Python value that changes between steps, or an "
                f"input whose shape changes breaks capture; run without --cudagraphs"
            ) from err

    return captured
