"""TD3 (Fujimoto et al. 2018, arXiv 1802.09477)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Unpack

import torch
from tensordict.nn import TensorDictModuleBase
from torch import nn

from tdrl.keys import LOSS_ACTOR, LOSS_QVALUE
from tdrl.objectives.ddpg import CriticOptions, DeterministicActorCriticLoss

# Fujimoto et al.'s target policy smoothing, in half-ranges of the action box
POLICY_NOISE, NOISE_CLIP = 0.2, 0.5


class TD3Options(CriticOptions, total=False):
    """TD3's options: its target policy smoothing (defaults: the actor's bounds, noise 0.2,
    clip 0.5) and the twin critics' :class:`~tdrl.objectives.ddpg.CriticOptions`."""

    bounds: tuple[float | torch.Tensor, float | torch.Tensor] | None
    policy_noise: float
    noise_clip: float


def split_td3_options(options: TD3Options) -> tuple[CriticOptions, dict[str, Any]]:
    """``options`` as the critics' and the smoothing's (the latter over TD3's defaults)."""
    smoothing: dict[str, Any] = {
        "bounds": None, "policy_noise": POLICY_NOISE, "noise_clip": NOISE_CLIP,
    }  # fmt: skip
    critic: CriticOptions = {}
    for name, value in options.items():
        if name in smoothing:
            smoothing[name] = value
        else:
            critic[name] = value  # type: ignore[literal-required]
    return critic, smoothing


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
        policy_noise: float = POLICY_NOISE,
        noise_clip: float = NOISE_CLIP,
        **options: Unpack[CriticOptions],
    ) -> None:
        super().__init__(actor_network, qvalue_network, **options)
        self._init_target_smoothing(actor_network, bounds, policy_noise, noise_clip)
