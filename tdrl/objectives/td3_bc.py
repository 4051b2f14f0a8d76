"""TD3+BC (Fujimoto & Gu 2021, arXiv 2106.06860): offline TD3 with a behaviour-cloning term."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from tdrl.objectives.ddpg import first_critic_value
from tdrl.objectives.td3 import TD3Loss


class TD3BCLoss(TD3Loss):
    """TD3's critic loss, and an actor loss that stays near the data's actions:

    ::

        lambda     = alpha / mean_B |Q_0(s, mu(s))|          (no gradient)
        loss_actor = mean_B w (-lambda Q_0(s, mu(s)) + mean_A (mu(s) - a)^2)

    (the paper's eq. 3 with its normalization of Q; ``alpha`` = 2.5 there). Everything else,
    including the episode-end handling of the target and the delayed actor, is :class:`TD3Loss`'s.

    Args:
        alpha: weight of the Q term against the behaviour-cloning term.
        *args, **kwargs: :class:`TD3Loss`'s.
    """

    def __init__(self, *args: object, alpha: float = 2.5, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        self.alpha = alpha

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
