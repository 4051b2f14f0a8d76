"""REINFORCE with an optional learned baseline (Williams 1992)."""

from __future__ import annotations

from tensordict.nn import TensorDictModuleBase

from tdrl.keys import LOSS_ACTOR, LOSS_VALUE
from tdrl.objectives.a2c import A2CLoss


class ReinforceLoss(A2CLoss):
    """REINFORCE: ``loss_actor = -E[log pi(a|s) A]``.

    ``"advantage"`` is whatever the estimator run on the rollout wrote: the Monte-Carlo return
    (e.g. ``TD1Estimator`` without a critic) or the return minus a learned baseline ``V(s)``
    (with ``critic_network``, whose ``"loss_value"`` regresses ``V`` on ``"value_target"``).
    Reads ``"action"``, ``"advantage"`` (and ``"value_target"`` with a critic) plus the networks'
    in-keys. Returns ``"loss_actor"`` and ``"loss_value"`` (TorchRL's ``ReinforceLoss`` names) and
    a detached ``"entropy"``.

    Args: as :class:`~tdrl.objectives.A2CLoss` without ``entropy_coeff`` and ``critic_coeff``
    (``critic_network`` is the baseline; ``None`` for plain REINFORCE); ``normalize_advantage``
    defaults to False. Shapes: as ``A2CLoss``.
    """

    _objective_key, _critic_key = LOSS_ACTOR, LOSS_VALUE

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        critic_network: TensorDictModuleBase | None = None,
        *,
        loss_critic_type: str = "l2",
        normalize_advantage: bool = False,
    ) -> None:
        super().__init__(
            actor_network,
            critic_network,
            entropy_coeff=0.0,
            critic_coeff=None,  # the baseline's loss is not scaled (TorchRL's ReinforceLoss)
            loss_critic_type=loss_critic_type,
            normalize_advantage=normalize_advantage,
        )
