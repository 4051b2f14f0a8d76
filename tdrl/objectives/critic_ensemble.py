"""How a loss turns the critic(s) it is given into one ensemble evaluated in one call.

A tdrl ``EnsembleCritic`` is used as it is. A single keyed critic from elsewhere (a TorchRL
``ValueOperator``, a tdrl ``StateActionCritic``) with ``num_qvalue_nets = E`` becomes a
:class:`ModuleEnsemble`: ``E`` independently initialised copies whose parameters are stacked
(``torch.func.stack_module_state``) and run with ``torch.vmap``, as TorchRL's losses do. Both
expose ``num_members`` and ``values(td) -> [E, *B, out]``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn
from torch.func import functional_call, stack_module_state

from tdrl.keyed import require
from tdrl.keys import STATE_ACTION_VALUE


def _reset_parameters(module: nn.Module) -> None:
    for sub in module.modules():
        reset = getattr(sub, "reset_parameters", None)
        if callable(reset) and sub is not module:
            reset()


class ModuleEnsemble(TensorDictModuleBase):
    """``E`` independently initialised copies of any keyed module, run with ``torch.vmap``.

    This is how a tdrl loss accepts a single critic from elsewhere (a TorchRL ``ValueOperator``,
    a :class:`~tdrl.modules.qvalue.StateActionCritic`) together with ``num_qvalue_nets``, as
    TorchRL's losses do. Member 0 keeps the module's parameters; the others are re-initialised
    with ``reset_parameters`` (when the layers have it). A list of modules of one architecture is
    stacked as given.

    Args:
        module: a keyed module, or a list of ``E`` keyed modules of identical structure.
        num_members: ensemble size ``E`` (ignored for a list).
        out_key: the entry of the module's output that holds the value.

    Shapes:
        ``values``: ``[E, *B, out]``; ``forward`` writes ``[*B, E, out]``.
    """

    def __init__(
        self,
        module: TensorDictModuleBase | Sequence[TensorDictModuleBase],
        num_members: int = 2,
        *,
        out_key: NestedKey = STATE_ACTION_VALUE,
    ) -> None:
        super().__init__()
        if isinstance(module, Sequence):
            members = list(module)
        else:
            members = [module] + [copy.deepcopy(module) for _ in range(num_members - 1)]
            for member in members[1:]:
                _reset_parameters(member)
        if not members:
            raise ValueError("ModuleEnsemble: got an empty list of modules")
        self.num_members = len(members)
        params, buffers = stack_module_state(members)  # type: ignore[arg-type]
        self._names = list(params)
        self.params = nn.ParameterList(nn.Parameter(params[n].detach()) for n in self._names)
        self._buffer_names = list(buffers)
        for i, name in enumerate(self._buffer_names):
            self.register_buffer(f"buffer_{i}", buffers[name])
        # The structure only: functional_call swaps the stacked tensors in; kept out of
        # ``parameters()`` so optimisers and target copies see each tensor once.
        self.__dict__["_base"] = copy.deepcopy(members[0]).to("meta")
        self.in_keys = list(members[0].in_keys)
        self.out_keys = [out_key]

    def values(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The ``E`` members' outputs, ensemble dim first; nothing is written."""
        inputs = tensordict.select(*self.in_keys, strict=False)
        for key in self.in_keys:
            require(inputs, key, "ModuleEnsemble")
        out_key = self.out_keys[0]
        base = self._base

        def member(params: dict, buffers: dict, td: TensorDictBase) -> torch.Tensor:
            return functional_call(base, (params, buffers), (td.copy(),)).get(out_key)

        params = dict(zip(self._names, self.params, strict=True))
        buffers = {n: getattr(self, f"buffer_{i}") for i, n in enumerate(self._buffer_names)}
        return torch.vmap(member, in_dims=(0, 0, None), randomness="different")(
            params, buffers, inputs
        )

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict.set(self.out_keys[0], self.values(tensordict).movedim(0, -2))
        return tensordict


class SingleCritic(TensorDictModuleBase):
    """A single keyed critic seen as an ensemble of one (DDPG's critic): no ``vmap``.

    Shapes:
        ``values``: ``[1, *B, out]``.
    """

    def __init__(self, module: TensorDictModuleBase, *, out_key: NestedKey = STATE_ACTION_VALUE):
        super().__init__()
        self.module = module
        self.num_members = 1
        self.in_keys = list(module.in_keys)
        self.out_keys = [out_key]

    def values(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The critic's output with a leading ensemble dim of 1; nothing is written."""
        inputs = tensordict.select(*self.in_keys, strict=False)
        return require(self.module(inputs), self.out_keys[0], "SingleCritic").unsqueeze(0)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict.set(self.out_keys[0], self.values(tensordict).movedim(0, -2))
        return tensordict


def as_ensemble(
    module: nn.Module | Sequence[nn.Module],
    num_members: int,
    *,
    out_key: NestedKey = STATE_ACTION_VALUE,
) -> nn.Module:
    """An ensemble of ``num_members`` critics from whatever a user passes to a loss.

    A tdrl ``EnsembleCritic`` (anything with ``num_members`` and ``values``) is returned
    unchanged and must have ``num_members`` members; a single keyed module or a list becomes a
    :class:`ModuleEnsemble` (a :class:`SingleCritic` when ``num_members == 1``).
    """
    if hasattr(module, "num_members") and hasattr(module, "values"):
        if module.num_members != num_members:
            raise ValueError(
                f"the critic ensemble has {module.num_members} members but num_qvalue_nets="
                f"{num_members}"
            )
        return module  # type: ignore[return-value]
    if isinstance(module, Sequence):
        if len(module) != num_members:
            raise ValueError(f"got {len(module)} critics but num_qvalue_nets={num_members}")
        if num_members == 1:
            module = module[0]
    if num_members == 1:
        return SingleCritic(module, out_key=out_key)  # type: ignore[arg-type]
    return ModuleEnsemble(module, num_members, out_key=out_key)  # type: ignore[arg-type]
