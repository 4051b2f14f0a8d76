"""DQN (Mnih et al. 2015) with double Q (van Hasselt et al. 2015, arXiv 1509.06461), n-step
returns through the replay buffer and prioritized replay (Schaul et al. 2015, 1511.05952)."""

from __future__ import annotations

from typing import Any, Final, TypedDict, Unpack

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from tdrl.keys import ACTION_VALUE, CHOSEN_ACTION_VALUE, LOSS, NEXT, VALUE_TARGET
from tdrl.objectives.offpolicy import OffPolicyLoss, bellman_target, over_defaults


class QOptions(TypedDict, total=False):
    """The Q-learning options of :class:`DQNLoss`, which QMIX takes too; their defaults are
    :data:`Q_DEFAULTS`."""

    loss_function: str
    delay_value: bool
    double_dqn: bool
    gamma: float


Q_DEFAULTS: Final[QOptions] = {
    "loss_function": "l2",
    "delay_value": True,
    "double_dqn": False,
    "gamma": 0.99,
}


class DQNLoss(OffPolicyLoss):
    """Q-learning loss on a discrete Q network with a target network.

    ::

        a*   = argmax_a Q(s', a)   (double_dqn)   or   argmax_a Q'(s', a)
        y    = r + discount (1 - terminated) Q'(s', a*)
        loss = mean_B w l(Q(s, a) - y)

    ``discount`` is ``gamma``, or ``gamma ** steps_to_next_obs`` for n-step samples (whose
    ``("next", "reward")`` the buffer has already summed); ``w`` is PER's ``"priority_weight"``.
    A truncated step bootstraps from the real ``("next", "observation")``. The absolute TD
    errors are returned as ``"td_error"`` ``[B]``: pass them to
    :func:`~tdrl.objectives.target.update_priority`.

    Args:
        value_network: a keyed module writing ``"action_value"`` ``[B, n]`` (tdrl
            ``QValueActor`` or TorchRL's ``QValueActor``).
        **options: :class:`QOptions`, TorchRL's names, defaults in :data:`Q_DEFAULTS`:
            ``loss_function`` (``"l2"``, TorchRL's default; ``"smooth_l1"``: Huber, Nature DQN,
            SB3; or ``"l1"``), ``delay_value`` (True: keep a target network, updated by
            ``HardUpdate``/``SoftUpdate``), ``double_dqn`` (False; True selects ``a*`` with the
            online network and needs ``delay_value``), ``gamma`` (0.99).

    Reads the network's in_keys at the root and under ``"next"``, ``"action"`` (int64 index
    ``[B]``/``[B, 1]``, or one-hot ``[B, n]``), ``("next", "reward"|"terminated")``, optional
    ``steps_to_next_obs``/``gamma`` and ``priority_weight``. Returns ``loss`` (TorchRL's name),
    ``td_error`` ``[B]``, ``chosen_action_value`` and ``value_target`` (batch means).

    Shapes:
        batch ``[B]``; reward and flags ``[B, 1]``.
    """

    _outputs: tuple[NestedKey, ...] = (LOSS, CHOSEN_ACTION_VALUE, VALUE_TARGET)

    def __init__(
        self,
        value_network: TensorDictModuleBase,
        **options: Unpack[QOptions],
    ) -> None:
        opts = over_defaults(type(self).__name__, options, Q_DEFAULTS)
        super().__init__(gamma=opts["gamma"], loss_function=opts["loss_function"])
        self._init_value(value_network, opts["delay_value"], opts["double_dqn"])

    def _action_values(self, network: Any, td: TensorDictBase) -> torch.Tensor:
        direct = getattr(network, "action_values", None)
        if callable(direct) and self.tensor_keys.action_value == ACTION_VALUE:
            # tdrl's QValueActor: Q(s, .) without writing the greedy action and its value into
            # a copy of the batch, which the loss never reads (~10% of a DQN step at batch 64;
            # benchmarks/updates.py).
            return direct(td)
        inputs = td.select(*network.in_keys, strict=False)
        return self._get(network(inputs), self.tensor_keys.action_value)

    @torch.no_grad()
    def value_target(self, batch: TensorDictBase) -> torch.Tensor:
        """``y`` ``[B]`` (no gradient)."""
        reward, terminated, discount = self._transition(batch)
        next_td = self._get(batch, NEXT)
        next_target_q = self._action_values(self.target_value_network, next_td)
        if self.double_dqn:
            best = self._action_values(self.value_network, next_td).argmax(-1, keepdim=True)
            next_value = next_target_q.gather(-1, best).squeeze(-1)
        else:
            next_value = next_target_q.max(dim=-1).values
        return bellman_target(reward, next_value, terminated, discount)

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        target = self.value_target(batch)
        action_value = self._action_values(self.value_network, batch)
        index = self._action_index(batch, action_value.shape[-1])
        chosen = self._gather_action(action_value, index)
        loss = self._mean(self._distance(chosen, target), self._weights(batch))
        out = {
            LOSS: loss,
            self.tensor_keys.priority: (chosen.detach() - target).abs(),
            CHOSEN_ACTION_VALUE: chosen.detach().mean(),
            VALUE_TARGET: target.mean(),
        }
        return self._output(out)
