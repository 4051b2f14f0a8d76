"""Advantage actor-critic loss (Mnih et al. 2016, arXiv 1602.01783)."""

from __future__ import annotations

from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdrl.keys import ENTROPY, LOSS_CRITIC, LOSS_OBJECTIVE
from tdrl.objectives.common import OnPolicyLoss, require


class A2CLoss(OnPolicyLoss):
    """A2C: ``L = -E[log pi(a|s) A] + critic_coeff E[(V(s) - G)^2] - entropy_coeff E[H]``.

    Reads ``"action"``, ``"advantage"`` and, with a critic, ``"value_target"``, plus the networks'
    in-keys. Returns ``"loss_objective"``, ``"loss_critic"`` (with a critic) and
    ``"loss_entropy"`` (when ``entropy_coeff`` > 0), and a detached ``"entropy"``. Advantages come
    from an estimator run on the whole rollout beforehand. Defaults are SB3's A2C (no entropy
    bonus, critic_coeff 0.5 on the squared error, no advantage normalization); names are TorchRL's.

    Args:
        actor_network: provides ``get_dist(td)``.
        critic_network: writes ``"state_value"``; ``None`` for an actor-only loss.
        entropy_coeff: weight of the entropy bonus.
        critic_coeff: weight of the critic loss.
        loss_critic_type: ``"l2"``, ``"l1"`` or ``"smooth_l1"``.
        normalize_advantage: normalize advantages over the batch.

    Shapes:
        batch ``[*B]``; every output is a scalar.
    """

    # Output names (TorchRL's A2CLoss); ReinforceLoss, the same loss without an entropy term,
    # uses TorchRL's ReinforceLoss names.
    _objective_key, _critic_key = LOSS_OBJECTIVE, LOSS_CRITIC

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        critic_network: TensorDictModuleBase | None = None,
        *,
        entropy_coeff: float = 0.0,
        critic_coeff: float | None = 0.5,
        loss_critic_type: str = "l2",
        normalize_advantage: bool = False,
    ) -> None:
        super().__init__(
            actor_network, critic_network, critic_coeff=critic_coeff,
            loss_critic_type=loss_critic_type, entropy_coeff=entropy_coeff,
            normalize_advantage=normalize_advantage,
        )  # fmt: skip

    reads_sample_log_prob = False  # on-policy by construction

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        action = require(tensordict, self.tensor_keys.action, type(self).__name__)
        dist = self._dist(tensordict)
        log_prob = dist.log_prob(action)
        advantage = self._advantage(tensordict, log_prob.shape)
        out = {self._objective_key: -(log_prob * advantage.detach()).mean()}
        entropy = self._entropy(dist, out)
        if self.critic_network is not None:
            out[self._critic_key] = self._critic_loss(tensordict)[0]
        out[ENTROPY] = entropy
        return self._output(out)
