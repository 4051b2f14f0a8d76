"""DDPG (Lillicrap et al. 2015, arXiv 1509.02971), and what TD3 shares with it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, TypedDict

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from tdrl.keys import LOSS_ACTOR, LOSS_VALUE, NEXT
from tdrl.objectives.offpolicy import (
    OffPolicyLoss,
    actor_critic_value,
    bellman_target,
    critic_values,
    frozen,
)
from tdrl.objectives.target import make_target


class CriticOptions(TypedDict, total=False):
    """The options TD3 and BCQ pass on to their shared base, with TorchRL's names; their
    defaults are :data:`TWIN_CRITIC_DEFAULTS`."""

    num_qvalue_nets: int
    loss_function: str
    delay_actor: bool
    delay_qvalue: bool
    gamma: float


TWIN_CRITIC_DEFAULTS: Final[CriticOptions] = {
    "num_qvalue_nets": 2,
    "loss_function": "l2",
    "delay_actor": True,
    "delay_qvalue": True,
    "gamma": 0.99,
}


class _DeterministicActorCritic(OffPolicyLoss):
    """Shared by DDPG, TD3 and BCQ: actor/critic/targets, ``actor_loss`` on the first critic."""

    _outputs = (LOSS_ACTOR, LOSS_VALUE)

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: nn.Module | Sequence[nn.Module],
        *,
        num_qvalue_nets: int,
        loss_function: str,
        delay_actor: bool,
        delay_qvalue: bool,
        gamma: float,
    ) -> None:
        super().__init__(gamma=gamma, loss_function=loss_function)
        self.actor_network = actor_network
        self.delay_actor = delay_actor
        self.target_actor_network = make_target(actor_network) if delay_actor else actor_network
        self._init_critics(qvalue_network, num_qvalue_nets, delay_qvalue)

    def _act(self, actor: Any, td: TensorDictBase) -> torch.Tensor:
        inputs = td.select(*actor.in_keys, strict=False)
        return self._get(actor(inputs), self.tensor_keys.action)

    def _next_action(self, next_td: TensorDictBase) -> torch.Tensor:
        return self._act(self.target_actor_network, next_td)

    @torch.no_grad()
    def value_target(self, batch: TensorDictBase) -> torch.Tensor:
        """``y = r + discount (1 - terminated) min_e Q'_e(s', a')`` ``[B]``."""
        reward, terminated, discount = self._transition(batch)
        next_td = self._get(batch, NEXT)
        next_action = self._next_action(next_td)
        next_q = critic_values(
            self.target_qvalue_network, next_td, next_action, self.tensor_keys.action
        )
        return bellman_target(reward, next_q.min(dim=0).values, terminated, discount)

    def qvalue_loss(self, batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """``(sum_e mean_B w (Q_e(s, a) - y)^2, td_error [B])``."""
        target = self.value_target(batch)
        self._get(batch, self.tensor_keys.action)
        q = critic_values(self.qvalue_network, batch, None, self.tensor_keys.action)
        per_sample = self._distance(q, target.expand_as(q)).sum(0)
        td_error = (q.detach() - target).abs().max(dim=0).values
        return self._mean(per_sample, self._weights(batch)), td_error

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        loss_critic, td_error = self.qvalue_loss(batch)
        out = {
            LOSS_ACTOR: self.actor_loss(batch),
            self._outputs[1]: loss_critic,  # DDPG's "loss_value", TD3's "loss_qvalue" (TorchRL)
            self.tensor_keys.priority: td_error,
        }
        return self._output(out)

    def actor_loss(self, batch: TensorDictBase) -> torch.Tensor:
        """``-mean_B w Q_0(s, mu(s))``: the first critic, gradients to the actor only."""
        action = self._act(self.actor_network, batch)
        with frozen(self.qvalue_network):
            q = actor_critic_value(
                self.qvalue_network, batch, action, self.tensor_keys.action, "first"
            )
        return self._mean(-q, self._weights(batch))


class DDPGLoss(_DeterministicActorCritic):
    """DDPG: one critic, target actor and target critic.

    ::

        y          = r + discount (1 - terminated) Q'(s', mu'(s'))
        loss_value = mean_B w (Q(s, a) - y)^2
        loss_actor = -mean_B w Q(s, mu(s))

    Exploration noise is a separate module (``OrnsteinUhlenbeckNoise``,
    ``AdditiveGaussianNoise``). ``delay_actor=True`` by default (the paper's target actor;
    TorchRL defaults to False).

    Args:
        actor_network: a deterministic keyed actor writing ``"action"``.
        value_network: one keyed critic writing ``"state_action_value"`` (TorchRL's name for
            DDPG's critic argument), or a one-member tdrl ensemble.
        loss_function, delay_actor, delay_value, gamma: TorchRL's names.

    Returns ``loss_actor``, ``loss_value`` (TorchRL's DDPG output names), ``td_error`` ``[B]``.

    Shapes:
        batch ``[B]``; action ``[B, A]``; reward and flags ``[B, 1]``.
    """

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        value_network: nn.Module,
        *,
        loss_function: str = "l2",
        delay_actor: bool = True,
        delay_value: bool = True,
        gamma: float = 0.99,
    ) -> None:
        super().__init__(
            actor_network,
            value_network,
            num_qvalue_nets=1,
            loss_function=loss_function,
            delay_actor=delay_actor,
            delay_qvalue=delay_value,
            gamma=gamma,
        )
