"""Soft actor-critic for discrete actions (Christodoulou 2019, arXiv 1910.07207)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from tdrl.keys import ACTION_VALUE, ALPHA, ENTROPY, LOSS_ACTOR, LOSS_ALPHA, LOSS_QVALUE, NEXT
from tdrl.objectives.offpolicy import OffPolicyLoss, bellman_target, checked_target_entropy


class DiscreteSACLoss(OffPolicyLoss):
    """Discrete SAC: expectations over the action set replace the sampled actions.

    With ``pi(s)`` the action probabilities, ``Q_e(s)`` the critics' action values ``[n]``::

        V'(s')      = pi(s')^T (min_e Q'_e(s') - alpha log pi(s'))          (paper eq. 10)
        y           = r + discount (1 - terminated) V'(s')
        loss_qvalue = sum_e mean_B w (Q_e(s, a) - y)^2
        loss_actor  = mean_B w pi(s)^T (alpha log pi(s) - min_e Q_e(s))     (eq. 12)
        loss_alpha  = mean_B w (-log_alpha (pi(s)^T log pi(s) + target_entropy))   (eq. 11)

    The critics' values are constants in ``loss_actor``, so it reaches the actor only.
    ``target_entropy="auto"`` is ``target_entropy_weight * log(n)`` (the paper's 0.98 of the
    maximum entropy).

    Args:
        actor_network: keyed actor whose ``get_dist(td)`` has ``logits`` (tdrl
            ``CategoricalActor``, TorchRL ``ProbabilisticActor`` with a categorical).
        qvalue_network: a tdrl ``EnsembleCritic(in_keys=("observation",),
            out_key="action_value")`` or one keyed module writing ``"action_value"`` ``[B, n]``.
        num_actions: ``n``; inferred from the logits when omitted.
        num_qvalue_nets, loss_function, alpha_init, fixed_alpha: TorchRL's names.
        target_entropy_weight, target_entropy, delay_qvalue, gamma: TorchRL's names.

    Reads ``action`` (index ``[B]``/``[B, 1]`` or one-hot ``[B, n]``), the networks' in_keys at
    the root and under ``"next"``, ``("next", "reward"|"terminated")``, optional
    ``steps_to_next_obs``/``gamma``, ``priority_weight``. Returns ``loss_actor``,
    ``loss_qvalue``, ``loss_alpha``, ``alpha``, ``entropy``, ``td_error`` ``[B]``.

    Shapes:
        batch ``[B]``; logits and action values ``[B, n]``.
    """

    _outputs = (LOSS_ACTOR, LOSS_QVALUE, LOSS_ALPHA, ALPHA, ENTROPY)

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: nn.Module | Sequence[nn.Module],
        *,
        num_actions: int | None = None,
        num_qvalue_nets: int = 2,
        loss_function: str = "l2",
        alpha_init: float = 1.0,
        fixed_alpha: bool = False,
        target_entropy_weight: float = 0.98,
        target_entropy: str | float = "auto",
        delay_qvalue: bool = True,
        gamma: float = 0.99,
    ) -> None:
        super().__init__(gamma=gamma, loss_function=loss_function)
        self.actor_network = actor_network
        self._init_critics(qvalue_network, num_qvalue_nets, delay_qvalue, out_key=ACTION_VALUE)
        self._init_alpha(alpha_init, fixed_alpha)
        self.num_actions = num_actions
        self.target_entropy_weight = target_entropy_weight
        self._target_entropy_spec = checked_target_entropy(target_entropy)

    @property
    def alpha(self) -> torch.Tensor:
        """``exp(log_alpha)`` without gradient."""
        return self.log_alpha.detach().exp()

    def target_entropy(self, num_actions: int) -> float:
        """The entropy target; ``"auto"`` is ``target_entropy_weight * log(n)``."""
        if self._target_entropy_spec == "auto":
            return self.target_entropy_weight * math.log(num_actions)
        return float(self._target_entropy_spec)

    def _policy(self, td: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """``(pi, log_pi)`` ``[B, n]``, ``log_pi`` set to 0 where ``pi`` is 0 (a masked action:
        its logit is the dtype's minimum, so ``alpha * log_pi`` would overflow to -inf for
        ``alpha > 1`` and ``pi * log_pi`` become 0 * inf = NaN; ``0 log 0 = 0``)."""
        dist = self.actor_network.get_dist(td.select(*self.actor_network.in_keys, strict=False))
        log_pi = torch.log_softmax(dist.logits, dim=-1)
        if self.num_actions is not None and log_pi.shape[-1] != self.num_actions:
            raise ValueError(
                f"DiscreteSACLoss: the actor has {log_pi.shape[-1]} logits, num_actions="
                f"{self.num_actions}"
            )
        pi = log_pi.exp()
        return pi, torch.where(pi > 0, log_pi, 0.0)

    def _q(self, critic: Any, td: TensorDictBase) -> torch.Tensor:
        return critic.values(td.select(*critic.in_keys, strict=False))  # [E, B, n]

    @torch.no_grad()
    def value_target(self, batch: TensorDictBase) -> torch.Tensor:
        """``y`` ``[B]``."""
        reward, terminated, discount = self._transition(batch)
        next_td = self._get(batch, NEXT)
        next_pi, next_log_pi = self._policy(next_td)
        next_q = self._q(self.target_qvalue_network, next_td).min(dim=0).values
        next_value = (next_pi * (next_q - self.alpha * next_log_pi)).sum(-1)
        return bellman_target(reward, next_value, terminated, discount)

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        weights = self._weights(batch)
        target = self.value_target(batch)
        q_all = self._q(self.qvalue_network, batch)  # [E, B, n]
        index = self._action_index(batch, q_all.shape[-1])
        q = self._gather_action(q_all, index)
        loss_qvalue = self._mean(self._distance(q, target.expand_as(q)).sum(0), weights)
        td_error = (q.detach() - target).abs().max(dim=0).values

        pi, log_pi = self._policy(batch)
        min_q = q_all.detach().min(dim=0).values
        loss_actor = self._mean((pi * (self.alpha * log_pi - min_q)).sum(-1), weights)
        neg_entropy = (pi * log_pi).sum(-1).detach()
        target_entropy = self.target_entropy(log_pi.shape[-1])
        loss_alpha = self._mean(-self.log_alpha * (neg_entropy + target_entropy), weights)
        out = {
            LOSS_ACTOR: loss_actor,
            LOSS_QVALUE: loss_qvalue,
            LOSS_ALPHA: loss_alpha,
            ALPHA: self.alpha,
            ENTROPY: -neg_entropy.mean(),
            self.tensor_keys.priority: td_error,
        }
        return self._output(out)
