"""A trained policy as a plain function of tensors, for a process without tdrl.

:func:`export_policy` writes three files into a folder:

- ``policy.pt2``: a ``torch.export`` program (``torch.export.load(path).module()`` needs only
  torch);
- ``policy.onnx``: the same function in ONNX (onnxruntime needs neither torch nor tdrl);
- ``policy.json``: the names, shapes and dtypes of its inputs and outputs, and the action box.

The function maps the raw observation, as the env gives it, to the action the env executes:
the policy's observation normalization, its deterministic action (the Gaussian's mean, the tanh
of the mean, the greedy Q action) and the clip to a bounded action box (what tdrl's ``VecEnv``
does to Box actions) are inside. A recurrent policy also takes ``is_init`` (True at an episode's
first step, where the state is zeroed) and its state, and returns the next state: the caller
carries it from step to step, as tdrl's collector does.

Inputs, in order: one per observation leaf ``[B, *shape]`` (named by its key, nested keys joined
with ``"."``); for recurrent policies ``is_init`` ``[B, 1]`` bool, then each state
``[B, *state_shape]``. Outputs: ``action`` ``[B, *action_shape]``, then ``next.<state>`` per
state. ``B`` is free (exported as a dynamic dimension).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict
from tensordict.nn import InteractionType, TensorDictModuleBase, set_interaction_type
from tensordict.utils import NestedKey
from torch import nn

from tdrl import keys
from tdrl.collectors import recurrent_state_specs
from tdrl.envs import VecEnv
from tdrl.keyed import next_key

__all__ = ["ExportedFiles", "PolicyFunction", "check_export", "export_policy"]

PROGRAM, ONNX, META = "policy.pt2", "policy.onnx", "policy.json"


def _name(key: NestedKey) -> str:
    return ".".join(key) if isinstance(key, tuple) else key


class PolicyFunction(nn.Module):
    """``policy`` (a TensorDict module writing ``"action"``) as a function of tensors, acting
    deterministically; see the module docstring for its inputs and outputs.

    Args:
        policy: the evaluation policy, as a recipe evaluates it.
        env: the env it acts in (its observation leaves, action space and bounds).
    """

    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, policy: TensorDictModuleBase, env: VecEnv) -> None:
        super().__init__()
        self.policy = policy
        self.obs_keys: list[NestedKey] = [leaf.key for leaf in env.obs_leaves]
        self.obs_shapes = [tuple(leaf.shape) for leaf in env.obs_leaves]
        self.obs_dtypes = [leaf.dtype for leaf in env.obs_leaves]
        specs = recurrent_state_specs(policy)
        self.state_keys: list[NestedKey] = list(specs)
        self.state_shapes = [tuple(shape) for shape, _ in specs.values()]
        self.state_dtypes = [dtype for _, dtype in specs.values()]
        spec = env.action_spec
        self.action_shape = tuple(spec.shape[1:])
        self.action_dtype = spec.dtype
        # a Box with finite bounds: VecEnv clips its actions (out_of_bounds="clip")
        low = high = torch.zeros(0)
        if spec.dtype.is_floating_point and hasattr(spec.space, "low"):
            low, high = spec.space.low[0], spec.space.high[0]  # [*action_shape]
        self.bounded = bool(low.numel()) and bool((low.isfinite() & high.isfinite()).all())
        self.register_buffer("low", low.clone(), persistent=False)
        self.register_buffer("high", high.clone(), persistent=False)

    @property
    def input_names(self) -> list[str]:
        names = [_name(k) for k in self.obs_keys]
        if self.state_keys:
            names += [keys.IS_INIT, *(_name(k) for k in self.state_keys)]
        return names

    @property
    def output_names(self) -> list[str]:
        return [keys.ACTION, *(_name(next_key(k)) for k in self.state_keys)]

    def example_inputs(self, batch: int = 2) -> tuple[torch.Tensor, ...]:
        """Zeros of every input's shape and dtype, ``batch`` rows (not 1: export would fix a
        batch of one as a constant)."""
        obs = [
            torch.zeros(batch, *shape, dtype=dtype)
            for shape, dtype in zip(self.obs_shapes, self.obs_dtypes, strict=True)
        ]
        if not self.state_keys:
            return tuple(obs)
        states = [
            torch.zeros(batch, *shape, dtype=dtype)
            for shape, dtype in zip(self.state_shapes, self.state_dtypes, strict=True)
        ]
        return (*obs, torch.ones(batch, 1, dtype=torch.bool), *states)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        expected = len(self.input_names)
        if len(inputs) != expected:
            raise TypeError(
                f"the policy takes {expected} inputs {self.input_names}, got {len(inputs)}"
            )
        n = len(self.obs_keys)
        batch = inputs[0].shape[0]
        td = TensorDict(dict(zip(self.obs_keys, inputs[:n], strict=True)), batch_size=[batch])
        for key in (keys.DONE, keys.TERMINATED, keys.TRUNCATED):
            td.set(key, torch.zeros(batch, 1, dtype=torch.bool))
        if self.state_keys:
            is_init = inputs[n]
            td.set(keys.IS_INIT, is_init)
            for key, state in zip(self.state_keys, inputs[n + 1 :], strict=True):
                start = is_init.reshape(batch, *[1] * (state.dim() - 1))
                td.set(key, torch.where(start, torch.zeros_like(state), state))
        else:
            td.set(keys.IS_INIT, torch.zeros(batch, 1, dtype=torch.bool))
        with set_interaction_type(InteractionType.DETERMINISTIC):
            self.policy(td)
        action = td.get(keys.ACTION)
        if self.bounded:
            action = torch.maximum(torch.minimum(action, self.high), self.low)
        return (action, *(td.get(next_key(k)) for k in self.state_keys))

    def meta(self) -> dict[str, Any]:
        """What ``policy.json`` holds: inputs and outputs with their shapes (``"B"`` the batch)
        and dtypes, and the action box when there is one."""

        def entry(name: str, shape: tuple[int, ...], dtype: torch.dtype) -> dict[str, Any]:
            return {"name": name, "shape": ["B", *shape], "dtype": str(dtype).split(".")[-1]}

        inputs = [
            entry(_name(k), s, d)
            for k, s, d in zip(self.obs_keys, self.obs_shapes, self.obs_dtypes, strict=True)
        ]
        outputs = [entry(keys.ACTION, self.action_shape, self.action_dtype)]
        if self.state_keys:
            inputs.append(entry(keys.IS_INIT, (1,), torch.bool))
            for k, s, d in zip(self.state_keys, self.state_shapes, self.state_dtypes, strict=True):
                inputs.append(entry(_name(k), s, d))
                outputs.append(entry(_name(next_key(k)), s, d))
        meta: dict[str, Any] = {"inputs": inputs, "outputs": outputs}
        if self.bounded:
            meta["action_low"] = self.low.tolist()
            meta["action_high"] = self.high.tolist()
        return meta


@dataclass(frozen=True)
class ExportedFiles:
    """The files :func:`export_policy` wrote (``onnx`` None when it was not asked for)."""

    program: Path
    onnx: Path | None
    meta: Path


def export_policy(
    policy: TensorDictModuleBase,
    env: VecEnv,
    folder: str | os.PathLike,
    *,
    onnx: bool = True,
    extra: dict[str, Any] | None = None,
) -> ExportedFiles:
    """Write ``policy`` (acting in ``env``) as ``policy.pt2``, ``policy.onnx`` and
    ``policy.json`` into ``folder`` (made if missing; earlier files are replaced). ``extra``
    goes into ``policy.json`` too (e.g. the env id and the checkpoint it came from).

    The policy is traced once on zeros: a policy whose Python code branches on the values of its
    inputs cannot be exported, and torch.export's error says where.
    """
    function = PolicyFunction(policy, env).eval()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    example = function.example_inputs()
    batch = torch.export.Dim("batch")
    dynamic = ({0: batch},) * len(example)
    with torch.no_grad():
        program = torch.export.export(function, example, dynamic_shapes=(dynamic,), strict=False)
    torch.export.save(program, folder / PROGRAM)
    onnx_path = None
    if onnx:
        onnx_path = folder / ONNX
        torch.onnx.export(
            program, example, str(onnx_path), input_names=function.input_names,
            output_names=function.output_names, dynamo=True, verbose=False,
            external_data=False,
        )  # fmt: skip
    meta = {**function.meta(), **(extra or {})}
    (folder / META).write_text(json.dumps(meta, indent=2) + "\n")
    files = ExportedFiles(folder / PROGRAM, onnx_path, folder / META)
    check_export(function, files)
    return files


def check_export(function: PolicyFunction, files: ExportedFiles, batch: int = 8) -> None:
    """The saved program (and the ONNX model) give the policy's actions on random inputs:
    normal floats, 0/1 frames, masks that allow every action, a zero state at an episode start.
    Raises a ``RuntimeError`` naming the file and the largest difference."""
    gen = torch.Generator().manual_seed(0)
    inputs = []
    for name, x in zip(function.input_names, function.example_inputs(batch), strict=True):
        if x.dtype.is_floating_point and name not in map(_name, function.state_keys):
            x = torch.randn(x.shape, generator=gen, dtype=x.dtype)
        elif not x.dtype.is_floating_point and x.dtype != torch.bool and "mask" not in name:
            x = torch.randint(0, 2, x.shape, generator=gen, dtype=x.dtype)
        elif "mask" in name:
            x = torch.ones_like(x)
        inputs.append(x)
    with torch.no_grad():
        want = function(*inputs)[0]
        got = {files.program: torch.export.load(files.program).module()(*inputs)[0]}
    if files.onnx is not None:
        import onnxruntime

        session = onnxruntime.InferenceSession(str(files.onnx))
        feed = {n: x.numpy() for n, x in zip(function.input_names, inputs, strict=True)}
        got[files.onnx] = torch.from_numpy(session.run(None, feed)[0])
    for path, action in got.items():
        if action.shape != want.shape or action.dtype != want.dtype:
            raise RuntimeError(
                f"{str(path)!r} gives actions {tuple(action.shape)} {action.dtype}, the policy "
                f"{tuple(want.shape)} {want.dtype}"
            )
        gap = float((action.double() - want.double()).abs().max()) if want.numel() else 0.0
        if not gap <= 1e-4:
            raise RuntimeError(f"{str(path)!r} differs from the policy by {gap} on the same inputs")
