"""TD3 (Fujimoto et al. 2018, arXiv 1802.09477)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Unpack

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from tdrl.keys import LOSS_ACTOR, LOSS_QVALUE
from tdrl.objectives.ddpg import CriticOptions, DeterministicActorCriticLoss


class TD3Loss(DeterministicActorCriticLoss):
    """TD3: twin critics, clipped double-Q target, target policy smoothing.

    ::

        a'          = clip(mu'(s') + clip(policy_noise * half * N(0, 1), +-noise_clip * half),
                           low, high)
        y           = r + discount (1 - terminated) min_e Q'_e(s', a')
        loss_qvalue = sum_e mean_B w (Q_e(s, a) - y)^2
        loss_actor  = -mean_B w Q_0(s, mu(s))

    ``half = (high - low) / 2``: ``policy_noise`` and ``noise_clip`` are in half-range units,
    Fujimoto et al.'s ``policy_noise * max_action`` (for ``[-1, 1]`` boxes, TorchRL's absolute
    units coincide). Delayed policy updates: ``loss_actor`` is returned on every call and the
    recipe steps the actor optimiser and the targets every ``policy_delay`` critic steps
    (``qvalue_loss``/``actor_loss`` can also be called alone, to skip the actor's forward).

    Args:
        actor_network: a deterministic keyed actor writing ``"action"`` (tdrl
            ``DeterministicActor`` or a TorchRL ``Actor``).
        qvalue_network: a tdrl ``EnsembleCritic`` or one keyed critic (copied).
        bounds: ``(low, high)`` of the action box; taken from the actor's ``action_low`` and
            ``action_high`` when it has them.
        policy_noise, noise_clip: TorchRL's names.
        **options: ``num_qvalue_nets``, ``loss_function``, ``delay_actor``, ``delay_qvalue``,
            ``gamma``: TorchRL's names (:class:`~tdrl.objectives.ddpg.CriticOptions`), defaults in
            :data:`~tdrl.objectives.ddpg.TWIN_CRITIC_DEFAULTS` (2, ``"l2"``, True, True, 0.99).

    Reads the actor's and critic's in_keys (root and ``"next"``), ``action``,
    ``("next", "reward"|"terminated")``, optional ``steps_to_next_obs``/``gamma``,
    ``priority_weight``. Returns ``loss_actor``, ``loss_qvalue``, ``td_error`` ``[B]``.

    Shapes:
        batch ``[B]``; action ``[B, A]``; reward and flags ``[B, 1]``.
    """

    _outputs = (LOSS_ACTOR, LOSS_QVALUE)

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: nn.Module | Sequence[nn.Module],
        *,
        bounds: tuple[float | torch.Tensor, float | torch.Tensor] | None = None,
        policy_noise: float = 0.2,
        noise_clip: float = 0.5,
        **options: Unpack[CriticOptions],
    ) -> None:
        super().__init__(actor_network, qvalue_network, **options)
        if bounds is None:
            low = getattr(actor_network, "action_low", None)
            high = getattr(actor_network, "action_high", None)
            if low is None or high is None:
                raise ValueError(
                    "TD3Loss: give bounds=(low, high); the actor has no action_low/action_high"
                )
        else:
            low, high = bounds
        self.register_buffer("min_action", torch.as_tensor(low, dtype=torch.float32).clone())
        self.register_buffer("max_action", torch.as_tensor(high, dtype=torch.float32).clone())
        if not (policy_noise >= 0 and noise_clip >= 0):  # False for NaN
            # a negative clip makes clamp(c, -c) return -c: a constant, biased target action
            raise ValueError(
                f"TD3Loss: policy_noise and noise_clip must be >= 0, got {policy_noise}, "
                f"{noise_clip}"
            )
        self.policy_noise = policy_noise
        self.noise_clip = noise_clip

    def _next_action(self, next_td: TensorDictBase) -> torch.Tensor:
        # Target policy smoothing (Fujimoto et al., sec. 5.3, eq. 14).
        action = self._act(self.target_actor_network, next_td)
        half = (self.max_action - self.min_action) / 2
        noise = (torch.randn_like(action) * self.policy_noise).clamp(
            -self.noise_clip, self.noise_clip
        )
        return torch.maximum(torch.minimum(action + noise * half, self.max_action), self.min_action)
