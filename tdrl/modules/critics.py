"""Value critic: ``V(s)`` written to ``"state_value"``."""

from __future__ import annotations

from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn

from tdrl.keys import OBSERVATION, STATE_VALUE
from tdrl.modules.actors import _apply, input_key, observation_input
from tdrl.modules.ensembles import check_value_dim


class ValueCritic(TensorDictModuleBase):
    """State-value network as a keyed module (TorchRL's ``ValueOperator`` keys).

    Args:
        net: maps observations to ``[*B, 1]`` (e.g. ``mlp(obs_dim, 1, output_gain=1.0)``).
        in_key: observation key.
        out_key: value key.

    Shapes:
        reads ``[*B, obs]``; writes ``state_value``: ``[*B, 1]``.
    """

    def __init__(
        self,
        net: nn.Module,
        *,
        in_key: NestedKey = OBSERVATION,
        out_key: NestedKey = STATE_VALUE,
    ) -> None:
        super().__init__()
        self.net = net
        self.in_keys = [in_key]
        self.out_keys = [out_key]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        observation = observation_input(self, tensordict, "ValueCritic")
        value = _apply(self.net, observation, input_key(self), "ValueCritic")
        tensordict.set(self.out_keys[0], check_value_dim(value, self.out_keys[0], "ValueCritic"))
        return tensordict
