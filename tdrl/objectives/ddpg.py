"""DDPG (Lillicrap et al. 2015, arXiv 1509.02971), and what TD3 and BCQ share with it.

DDPG, TD3 and BCQ sit on :class:`DeterministicActorCriticLoss`: an actor trained through the
first critic, a critic ensemble regressed on ``value_target``, and one ``forward``; each loss
supplies its target action (or its whole target) and its options.
"""

from __future__ import annotations

from typing import Any, Final, TypedDict, Unpack

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
    over_defaults,
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


class DeterministicActorCriticLoss(OffPolicyLoss):
    """What DDPG, TD3 and BCQ share (not a public loss):

    ::

        y            = r + discount (1 - terminated) min_e Q'_e(s', a'),  a' = _next_action(s')
        critic loss  = sum_e mean_B w (Q_e(s, a) - y)^2
        loss_actor   = -mean_B w Q_0(s, _act(actor, s))     (gradients to the actor only)

    ``forward`` returns ``loss_actor``, the critic loss under the loss's second output name,
    ``td_error`` ``[B]`` and what :meth:`_more_losses` adds. ``options`` are
    :class:`CriticOptions` over :data:`TWIN_CRITIC_DEFAULTS`.
    """

    _continuous_action = True

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: Any,
        **options: Unpack[CriticOptions],
    ) -> None:
        options = over_defaults(type(self).__name__, options, TWIN_CRITIC_DEFAULTS)
        super().__init__(gamma=options["gamma"], loss_function=options["loss_function"])
        self._init_actor(actor_network, options["delay_actor"])
        self._init_critics(qvalue_network, options["num_qvalue_nets"], options["delay_qvalue"])

    _smoothing = False  # TD3's target policy smoothing (_init_target_smoothing)

    def _init_target_smoothing(
        self,
        actor_network: TensorDictModuleBase,
        bounds: tuple[float | torch.Tensor, float | torch.Tensor] | None,
        policy_noise: float,
        noise_clip: float,
    ) -> None:
        """TD3's target policy smoothing (Fujimoto et al. 2018, sec. 5.3, eq. 14): noise of
        ``policy_noise`` half-ranges, clipped to ``noise_clip``, on the target action, within
        ``bounds`` (default: the actor's ``action_low``/``action_high``)."""
        name = type(self).__name__
        if bounds is None:
            low = getattr(actor_network, "action_low", None)
            high = getattr(actor_network, "action_high", None)
            if low is None or high is None:
                raise ValueError(
                    f"{name}: give bounds=(low, high); the actor has no action_low/action_high"
                )
        else:
            low, high = bounds
        self.register_buffer("min_action", torch.as_tensor(low, dtype=torch.float32).clone())
        self.register_buffer("max_action", torch.as_tensor(high, dtype=torch.float32).clone())
        if not (policy_noise >= 0 and noise_clip >= 0):  # False for NaN
            # a negative clip makes clamp(c, -c) return -c: a constant, biased target action
            raise ValueError(
                f"{name}: policy_noise and noise_clip must be >= 0, got {policy_noise}, "
                f"{noise_clip}"
            )
        self.policy_noise = policy_noise
        self.noise_clip = noise_clip
        self._smoothing = True

    def _act(self, actor: Any, td: TensorDictBase) -> torch.Tensor:
        """The action ``actor`` takes in ``td``: ``mu(s)``."""
        return deterministic_action(actor, td, self.tensor_keys.action, type(self).__name__)

    def _next_action(self, next_td: TensorDictBase) -> torch.Tensor:
        """``a'``: the target actor's action in ``s'`` (smoothed, with TD3's smoothing)."""
        action = self._act(self.target_actor_network, next_td)
        if not self._smoothing:
            return action
        half = (self.max_action - self.min_action) / 2
        noise = (torch.randn_like(action) * self.policy_noise).clamp(
            -self.noise_clip, self.noise_clip
        )
        return torch.maximum(torch.minimum(action + noise * half, self.max_action), self.min_action)

    @torch.no_grad()
    def value_target(self, batch: TensorDictBase) -> torch.Tensor:
        """``y = r + discount (1 - terminated) min_e Q'_e(s', a')`` ``[B]`` (no gradient)."""
        reward, terminated, discount = self._transition(batch)
        next_td = self._get(batch, NEXT)
        next_action = self._next_action(next_td)
        next_q = critic_values(
            self.target_qvalue_network, next_td, next_action, self.tensor_keys.action
        )
        return bellman_target(reward, next_q.min(dim=0).values, terminated, discount)

    def qvalue_loss(self, batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """``(sum_e mean_B w (Q_e(s, a) - y)^2, td_error [B])``."""
        return self._critic_regression(batch, self.value_target(batch))

    def actor_loss(self, batch: TensorDictBase) -> torch.Tensor:
        """``-mean_B w Q_0(s, _act(actor, s))``: the first critic, gradients to the actor only."""
        action = self._act(self.actor_network, batch)
        q = first_critic_value(self.qvalue_network, batch, action, self.tensor_keys.action)
        return self._mean(-q, self._weights(batch))

    def _more_losses(self, batch: TensorDictBase) -> dict[NestedKey, torch.Tensor]:
        """Losses ``forward`` returns after the actor's and the critic's (BCQ's VAE loss)."""
        return {}

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        loss_critic, td_error = self.qvalue_loss(batch)
        actor_name, critic_name = self._outputs[:2]
        out = {
            actor_name: self.actor_loss(batch),
            critic_name: loss_critic,
            self.tensor_keys.priority: td_error,
            **self._more_losses(batch),
        }
        return self._output(out)


class DDPGLoss(DeterministicActorCriticLoss):
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
        super().__init__(
            actor_network, value_network, num_qvalue_nets=1, loss_function=loss_function,
            delay_actor=delay_actor, delay_qvalue=delay_value, gamma=gamma,
        )  # fmt: skip
