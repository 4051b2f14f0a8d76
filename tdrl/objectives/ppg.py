"""Phasic policy gradient (Cobbe et al. 2020, arXiv 2009.04416): the auxiliary phase's loss.

PPG alternates a policy phase (PPO with separate policy and value networks: :class:`ClipPPOLoss`
as it is) and, every ``N_pi`` rollouts, an auxiliary phase over the states of those rollouts
with :class:`PPGAuxLoss`: the policy network's own value head learns the value targets, a
behavioural-cloning term holds the policy to where the phase began, and the value network trains
further.
"""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import unravel_key
from torch.distributions import kl_divergence

from tdrl.keyed import check_finite, require
from tdrl.keys import (
    ACTION,
    ACTION_LOG_PROB,
    AUX_VALUE,
    KL,
    LOSS_AUX_VALUE,
    LOSS_CLONE,
    LOSS_CRITIC,
    STATE_VALUE,
    VALUE_TARGET,
)
from tdrl.objectives.common import SKIP_CHECK, as_batch_shape


class PPGAuxLoss(TensorDictModuleBase):
    """PPG's auxiliary phase: the value distilled into the policy network under a cloning
    constraint, and more training of the value network.

    With ``pi_old`` the policy when the auxiliary phase begins (:meth:`snapshot` stores its
    distribution's parameters in the phase's data) and ``V_targ`` the value targets the policy
    phase computed (``"value_target"``, stored with the states)::

        loss_aux_value = 0.5 E[(V_aux(s) - V_targ)^2]           the policy network's value head
        loss_clone     = beta_clone E[KL(pi_old(.|s) || pi(.|s))]
        loss_critic    = 0.5 E[(V(s) - V_targ)^2]               the value network

    The first two are the paper's ``L_joint`` (eq. 2), the third its ``L_value`` (eq. 3); one
    backward of their sum trains both networks, as CleanRL's ``ppg_procgen.py`` does. The
    detached mean KL is returned under ``"kl"``.

    Args:
        actor_network: the policy; ``get_dist(td)`` and ``build_dist_from_params(td)`` (tdrl
            actors, TorchRL's ``ProbabilisticActor``).
        aux_value_network: the policy network's value head, writing ``"aux_value"``
            (:func:`tdrl.modules.aux_value_head`).
        critic_network: the value network, writing ``"state_value"``.
        beta_clone: the cloning weight (the paper: 1).

    Shapes:
        a minibatch ``[B]``; every output is a scalar.
    """

    validate_inputs: bool = True

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        aux_value_network: TensorDictModuleBase,
        critic_network: TensorDictModuleBase,
        *,
        beta_clone: float = 1.0,
    ) -> None:
        super().__init__()
        for name in ("get_dist", "build_dist_from_params"):
            if not hasattr(actor_network, name):
                raise TypeError(
                    f"PPGAuxLoss: the actor must provide {name}(td) (tdrl actors and TorchRL's "
                    f"ProbabilisticActor do), got {type(actor_network).__name__}"
                )
        if not (math.isfinite(beta_clone) and beta_clone >= 0):
            raise ValueError(f"PPGAuxLoss: beta_clone must be finite and >= 0, got {beta_clone}")
        self.actor_network = actor_network
        self.aux_value_network = aux_value_network
        self.critic_network = critic_network
        self.beta_clone = beta_clone
        keys = [*actor_network.in_keys, *aux_value_network.in_keys, *critic_network.in_keys]
        self.in_keys = list(dict.fromkeys([*keys, VALUE_TARGET]))
        # what snapshot() stores: the actor's outputs but the action and its log-prob
        self.old_policy_keys = [
            key for key in actor_network.out_keys if key not in (ACTION, ACTION_LOG_PROB)
        ]
        self.out_keys = [LOSS_AUX_VALUE, LOSS_CLONE, LOSS_CRITIC, KL]

    @torch.no_grad()
    def snapshot(self, data: TensorDictBase) -> TensorDictBase:
        """Write ``pi_old``, the current policy's distribution parameters, into the auxiliary
        phase's ``data`` (once, before its epochs); returns ``data``."""
        actor = self.actor_network
        written = actor(data.select(*actor.in_keys).copy())
        for key in self.old_policy_keys:
            data.set(key, written.get(key))
        return data

    def _value(self, network: TensorDictModuleBase, td: TensorDictBase, key: str) -> torch.Tensor:
        out = network(td.select(*network.in_keys).copy())
        return require(out, key, "PPGAuxLoss")

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        owner = "PPGAuxLoss"
        missing = [key for key in self.old_policy_keys if key not in tensordict.keys(True)]
        if missing:
            raise KeyError(
                f"{owner}: the batch has no {missing} entries (pi_old): run "
                "loss.snapshot(data) on the auxiliary phase's data before its epochs"
            )
        if self.validate_inputs:
            read = frozenset(map(unravel_key, [*self.in_keys, *self.old_policy_keys]))
            check_finite(tensordict, read, owner, SKIP_CHECK)
        old = self.actor_network.build_dist_from_params(tensordict)
        new = self.actor_network.get_dist(tensordict)
        kl = kl_divergence(old, new).mean()
        target = require(tensordict, VALUE_TARGET, owner)
        batch = tensordict.batch_size
        aux = self._value(self.aux_value_network, tensordict, AUX_VALUE)
        value = self._value(self.critic_network, tensordict, STATE_VALUE)
        target = as_batch_shape(target, batch, VALUE_TARGET, owner)
        aux = as_batch_shape(aux, batch, AUX_VALUE, owner)
        value = as_batch_shape(value, batch, STATE_VALUE, owner)
        return TensorDict(
            {
                LOSS_AUX_VALUE: 0.5 * (aux - target).pow(2).mean(),
                LOSS_CLONE: self.beta_clone * kl,
                LOSS_CRITIC: 0.5 * (value - target).pow(2).mean(),
                KL: kl.detach(),
            },
            batch_size=[],
        )
