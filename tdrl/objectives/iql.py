"""IQL (Kostrikov et al. 2021, arXiv 2110.06169): implicit Q-learning, never querying actions
outside the data."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.keys import LOSS_ACTOR, LOSS_QVALUE, LOSS_VALUE, NEXT, STATE_VALUE
from tdrl.objectives.offpolicy import OffPolicyLoss, bellman_target, critic_values, module_box
from tdrl.ops.distributional import expectile_loss


class IQLLoss(OffPolicyLoss):
    """IQL's three losses on data transitions ``(s, a, r, s')``:

    ::

        loss_value  = mean_B w L2_tau(min_e Q'_e(s, a) - V(s))          (expectile tau)
        y           = r + discount (1 - terminated) V(s')                 (no gradient)
        loss_qvalue = sum_e mean_B w (Q_e(s, a) - y)^2
        loss_actor  = -mean_B w min(exp(beta (min_e Q'_e(s, a) - V(s))), 100) log pi(a | s)

    (eqs. 5-7; the advantage weights are clipped at 100 as in the authors' code). A truncated
    step bootstraps from ``V`` of its real final observation; a terminated one does not. ``Q'``
    is the Polyak-averaged target of the critics (:class:`~tdrl.objectives.SoftUpdate`).

    Args:
        actor_network: a probabilistic actor with ``get_dist`` (tdrl or TorchRL).
        qvalue_network: an ``EnsembleCritic`` or one keyed critic (copied ``num_qvalue_nets``
            times).
        value_network: a state-value critic writing ``"state_value"`` (``ValueCritic``).
        expectile: ``tau`` (0.7 for MuJoCo in the paper). ``beta``: inverse temperature (3.0).
        gamma: discount.

    Shapes:
        batch ``[B]``; action ``[B, A]``; reward and flags ``[B, 1]``.
    """

    _outputs = (LOSS_ACTOR, LOSS_QVALUE, LOSS_VALUE)
    _continuous_action = True

    def __init__(
        self,
        actor_network: Any,
        qvalue_network: Any,
        value_network: Any,
        *,
        num_qvalue_nets: int = 2,
        expectile: float = 0.7,
        beta: float = 3.0,
        max_weight: float = 100.0,
        gamma: float = 0.99,
    ) -> None:
        super().__init__(gamma=gamma, loss_function="l2")
        if not 0.0 < expectile < 1.0:
            raise ValueError(f"expectile must lie in (0, 1), got {expectile}")
        if not beta >= 0:
            raise ValueError(f"beta must be >= 0, got {beta}")
        if not max_weight > 0:  # <= 0 would push the actor away from the data's actions
            raise ValueError(f"max_weight must be > 0, got {max_weight}")
        self.actor_network = actor_network
        self.value_network = value_network
        self._init_critics(qvalue_network, num_qvalue_nets, delay_qvalue=True)
        self.expectile, self.beta, self.max_weight = expectile, beta, max_weight

    def _action_box(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        return module_box(self.actor_network)  # a bounded actor's (TanhGaussianActor)

    def _value(self, td: TensorDictBase) -> torch.Tensor:
        """``V(s)`` ``[B]``."""
        inputs = td.select(*self.value_network.in_keys, strict=False)
        return self.value_network(inputs).get(STATE_VALUE).squeeze(-1)

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        reward, terminated, discount = self._transition(batch)
        weights = self._weights(batch)
        action_key = self.tensor_keys.action
        self._get(batch, action_key)
        with torch.no_grad():
            target_q = critic_values(self.target_qvalue_network, batch, None, action_key)
            target_q = target_q.min(dim=0).values  # [B]
            next_value = self._value(self._get(batch, NEXT))
            y = bellman_target(reward, next_value, terminated, discount)
        value = self._value(batch)
        loss_value = self._mean(expectile_loss(target_q - value, self.expectile), weights)
        loss_qvalue, td_error = self._critic_regression(batch, y)
        advantage = target_q - value.detach()
        awr = torch.exp(self.beta * advantage).clamp(max=self.max_weight)
        # select: an actor that writes its outputs (TorchRL's) leaves the caller's batch alone
        states = batch.select(*self.actor_network.in_keys)
        log_prob = self.actor_network.get_dist(states).log_prob(self._get(batch, action_key))
        loss_actor = self._mean(-awr * log_prob.reshape(awr.shape), weights)
        out = {
            LOSS_ACTOR: loss_actor,
            LOSS_QVALUE: loss_qvalue,
            LOSS_VALUE: loss_value,
            self.tensor_keys.priority: td_error,
        }
        return self._output(out)
