"""Deterministic actor for DDPG and TD3: ``a = mid + half * tanh(net(s))``."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn

from tdrl.keys import ACTION, OBSERVATION
from tdrl.modules.actors import (
    Bound,
    _apply,
    _check_width,
    _register_bounds,
    _tanh_to_box,
    input_key,
    observation_input,
)


class DeterministicActor(TensorDictModuleBase):
    """A deterministic policy squashed by ``tanh`` onto the env's action box.

    The tanh bound is the one of Fujimoto et al. 2018 (arXiv 1802.09477, ``max_action *
    tanh``), generalised to asymmetric bounds. Exploration noise is a separate module
    (:mod:`tdrl.modules.exploration`), so this actor is also the evaluation policy.

    Args:
        net: maps observations to ``[*B, A]`` pre-tanh outputs.
        action_dim: action size ``A``.
        in_key: observation key.
        action_low: env lower bound (float or ``[A]``); ``None`` means -1.
        action_high: env upper bound; ``None`` means 1.

    Shapes:
        reads ``[*B, obs]``; writes ``action`` ``[*B, A]``.
    """

    def __init__(
        self,
        net: nn.Module,
        action_dim: int,
        *,
        in_key: NestedKey = OBSERVATION,
        action_low: Bound = None,
        action_high: Bound = None,
    ) -> None:
        super().__init__()
        self.net = net
        self.action_dim = action_dim
        self.in_keys = [in_key]
        self.out_keys = [ACTION]
        _register_bounds(self, action_dim, action_low, action_high)

    def action(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The action for ``tensordict`` in env units; nothing is written."""
        observation = observation_input(self, tensordict, "DeterministicActor")
        out = _apply(self.net, observation, input_key(self), "DeterministicActor")
        _check_width("DeterministicActor", out, self.action_dim, "action_dim")
        return _tanh_to_box(out, self.action_low, self.action_high)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict.set(ACTION, self.action(tensordict))
        return tensordict
