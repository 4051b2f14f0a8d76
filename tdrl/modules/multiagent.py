"""Modules for a group of agents (TorchRL's multi-agent layout, ``tdrl.envs.multiagent``)."""

from __future__ import annotations

from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from tdrl.keyed import require
from tdrl.keys import AGENTS


def _in_group(group: str, key: NestedKey) -> tuple[str, ...]:
    return (group, *((key,) if isinstance(key, str) else key))


class OnGroup(TensorDictModuleBase):
    """Runs a single-agent keyed module on a group's entries: ``module(td[group])``, whose batch
    is ``[*B, n_agents]``, so a ``QValueActor`` gives every agent its greedy action and an
    ``EpsilonGreedy`` explores per agent. The wrapped module's keys are read and written under
    ``group``; its attributes (``eps``, ``step``) stay on ``.module``.

    Args:
        module: a TensorDict module of one agent's entries.
        group: the group key.

    Shapes:
        reads and writes ``[*B, n_agents, ...]`` under ``group``.
    """

    def __init__(self, module: TensorDictModuleBase, group: str = AGENTS) -> None:
        super().__init__()
        self.module, self.group = module, group
        self.in_keys = [_in_group(group, key) for key in module.in_keys]
        self.out_keys = [_in_group(group, key) for key in module.out_keys]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.module(require(tensordict, self.group, "OnGroup"))
        return tensordict
