"""TD3+BC (Fujimoto & Gu 2021, arXiv 2106.06860): offline TD3 with a behaviour-cloning term."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Unpack

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from tdrl.objectives.ddpg import DeterministicActorCriticLoss, first_critic_value
from tdrl.objectives.td3 import TD3Loss, TD3Options, split_td3_options


class TD3BCLoss(DeterministicActorCriticLoss):
    """TD3's critic loss, and an actor loss that stays near the data's actions:

    ::

        lambda     = alpha / mean_B |Q_0(s, mu(s))|          (no gradient)
        loss_actor = mean_B w (-lambda Q_0(s, mu(s)) + mean_A (mu(s) - a)^2)

    (the paper's eq. 3 with its normalization of Q; ``alpha`` = 2.5 there). Everything else,
    including the episode-end handling of the target and the delayed actor, is :class:`TD3Loss`'s.

    Args:
        actor_network: a deterministic keyed actor writing ``"action"``.
        qvalue_network: a tdrl ``EnsembleCritic`` or one keyed critic (copied).
        alpha: weight of the Q term against the behaviour-cloning term.
        **options: :class:`TD3Loss`'s (:class:`~tdrl.objectives.td3.TD3Options`): ``bounds``
            of the action box (default: the actor's), ``policy_noise`` and ``noise_clip`` of
            the target policy smoothing (half-ranges), and the critics' options.
    """

    _outputs = TD3Loss._outputs

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: nn.Module | Sequence[nn.Module],
        *,
        alpha: float = 2.5,
        **options: Unpack[TD3Options],
    ) -> None:
        critic, smoothing = split_td3_options(options)
        super().__init__(actor_network, qvalue_network, **critic)
        self._init_target_smoothing(actor_network, **smoothing)
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        self.alpha = alpha

    def _action_box(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.min_action, self.max_action

    def actor_loss(self, batch: TensorDictBase) -> torch.Tensor:
        action = self._act(self.actor_network, batch)
        data_action = self._get(batch, self.tensor_keys.action)
        if action.shape != data_action.shape:  # [B] against [B, 1] would broadcast to [B, B]
            raise ValueError(
                f"TD3BCLoss: the actor's {self.tensor_keys.action!r} has shape "
                f"{tuple(action.shape)}, the data's {tuple(data_action.shape)}"
            )
        q = first_critic_value(self.qvalue_network, batch, action, self.tensor_keys.action)
        lmbda = self.alpha / q.abs().mean().detach().clamp_min(1e-8)
        bc = (action - data_action).pow(2).mean(-1)
        return self._mean(-lmbda * q + bc, self._weights(batch))
