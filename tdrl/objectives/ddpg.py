"""DDPG (Lillicrap et al. 2015, arXiv 1509.02971), and what TD3 and BCQ share with it.

DDPG, TD3 and BCQ each sit directly on :class:`~tdrl.objectives.offpolicy.OffPolicyLoss`: what
they share is functions (:func:`deterministic_action`, :func:`first_critic_value`) and
``OffPolicyLoss``'s ``_init_actor``/``_init_critics``/``_critic_regression``, not a base class.
"""

from __future__ import annotations

from typing import Any, Final, TypedDict

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn

from tdrl.keyed import require
from tdrl.keys import LOSS_ACTOR, LOSS_VALUE, NEXT
from tdrl.objectives.offpolicy import (
    OffPolicyLoss,
    actor_critic_value,
    bellman_target,
    critic_values,
    frozen,
)


class CriticOptions(TypedDict, total=False):
    """The critic options TD3 and BCQ take, with TorchRL's names; their defaults are
    :data:`TWIN_CRITIC_DEFAULTS`."""

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


def twin_critic_options(owner: str, options: CriticOptions) -> CriticOptions:
    """``options`` over :data:`TWIN_CRITIC_DEFAULTS`; a name that is not a
    :class:`CriticOptions` field raises the ``TypeError`` an unknown keyword argument does."""
    unknown = sorted(set(options) - CriticOptions.__optional_keys__)
    if unknown:
        raise TypeError(f"{owner}.__init__() got an unexpected keyword argument {unknown[0]!r}")
    return TWIN_CRITIC_DEFAULTS | options


def deterministic_action(
    actor: Any, td: TensorDictBase, key: NestedKey, owner: str
) -> torch.Tensor:
    """``mu(s)``: the ``key`` entry a deterministic actor writes for ``td`` (it reads a shallow
    selection of its in_keys, so ``td`` is not modified)."""
    return require(actor(td.select(*actor.in_keys, strict=False)), key, owner)


def first_critic_value(
    critic: nn.Module, batch: TensorDictBase, action: torch.Tensor, key: NestedKey
) -> torch.Tensor:
    """``Q_0(s, action)`` ``[B]``, the first critic's, with gradients to ``action`` only (the
    deterministic actor losses': DDPG, TD3, TD3+BC, BCQ)."""
    with frozen(critic):
        return actor_critic_value(critic, batch, action, key, "first")


class DDPGLoss(OffPolicyLoss):
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

    _outputs = (LOSS_ACTOR, LOSS_VALUE)

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
        super().__init__(gamma=gamma, loss_function=loss_function)
        self._init_actor(actor_network, delay_actor)
        self._init_critics(value_network, 1, delay_value)

    @torch.no_grad()
    def value_target(self, batch: TensorDictBase) -> torch.Tensor:
        """``y = r + discount (1 - terminated) Q'(s', mu'(s'))`` ``[B]``."""
        reward, terminated, discount = self._transition(batch)
        next_td = self._get(batch, NEXT)
        key, owner = self.tensor_keys.action, type(self).__name__
        next_action = deterministic_action(self.target_actor_network, next_td, key, owner)
        next_q = critic_values(self.target_qvalue_network, next_td, next_action, key)
        return bellman_target(reward, next_q.min(dim=0).values, terminated, discount)

    def qvalue_loss(self, batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean_B w (Q(s, a) - y)^2, td_error [B])``."""
        return self._critic_regression(batch, self.value_target(batch))

    def actor_loss(self, batch: TensorDictBase) -> torch.Tensor:
        """``-mean_B w Q(s, mu(s))``, gradients to the actor only."""
        key = self.tensor_keys.action
        action = deterministic_action(self.actor_network, batch, key, type(self).__name__)
        q = first_critic_value(self.qvalue_network, batch, action, key)
        return self._mean(-q, self._weights(batch))

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        loss_value, td_error = self.qvalue_loss(batch)
        out = {
            LOSS_ACTOR: self.actor_loss(batch),
            LOSS_VALUE: loss_value,
            self.tensor_keys.priority: td_error,
        }
        return self._output(out)
