"""REINFORCE with an optional learned baseline (Williams 1992)."""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdrl.keys import ENTROPY, LOSS_ACTOR, LOSS_VALUE
from tdrl.objectives.common import OnPolicyLoss, advantage_of, entropy_of, require
from tdrl.ops import standardize


class ReinforceLoss(OnPolicyLoss):
    """REINFORCE: ``loss_actor = -E[log pi(a|s) A]``.

    ``"advantage"`` is whatever the estimator run on the rollout wrote: the Monte-Carlo return
    (e.g. ``TD1Estimator`` without a critic) or the return minus a learned baseline ``V(s)``
    (with ``critic_network``, whose ``"loss_value"`` regresses ``V`` on ``"value_target"``).
    Reads ``"action"``, ``"advantage"`` (and ``"value_target"`` with a critic) plus the networks'
    in-keys. Returns ``"loss_actor"`` and ``"loss_value"`` (TorchRL's ``ReinforceLoss`` names) and
    a detached ``"entropy"``.

    Args:
        actor_network: provides ``get_dist(td)``.
        critic_network: baseline writing ``"state_value"``; ``None`` for plain REINFORCE.
        loss_critic_type: ``"l2"``, ``"l1"`` or ``"smooth_l1"``.
        normalize_advantage: normalize advantages over the batch (a common variance reduction).

    Shapes:
        batch ``[*B]``; every output is a scalar.
    """

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        critic_network: TensorDictModuleBase | None = None,
        *,
        loss_critic_type: str = "l2",
        normalize_advantage: bool = False,
    ) -> None:
        super().__init__(
            actor_network, critic_network, critic_coeff=None, loss_critic_type=loss_critic_type
        )
        self.normalize_advantage = normalize_advantage

    def _set_in_keys(self) -> None:
        super()._set_in_keys()
        self.in_keys = [key for key in self.in_keys if key != self.tensor_keys.sample_log_prob]

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        owner = type(self).__name__
        keys = self.tensor_keys
        action = require(tensordict, keys.action, owner)
        dist = self._dist(tensordict)
        log_prob = dist.log_prob(action)
        advantage = advantage_of(tensordict, keys.advantage, log_prob.shape, owner)
        if self.normalize_advantage:
            advantage = standardize(advantage)
        out = {LOSS_ACTOR: -(log_prob * advantage.detach()).mean()}
        if self.critic_network is not None:
            out[LOSS_VALUE] = self._critic_loss(tensordict)[0]
        with torch.no_grad():
            out[ENTROPY] = entropy_of(dist).mean()
        return self._output(out)
