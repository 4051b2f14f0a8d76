"""CrossQ (Bhatt et al. 2024, ICLR, arXiv 1902.05605): SAC without target networks, its critic
batch-renormalized over the joint (s, a) / (s', a') batch."""

from __future__ import annotations

from typing import Any, cast

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdrl.modules.ensembles import EnsembleCritic
from tdrl.modules.renorm import batch_statistics, renorm_layers
from tdrl.objectives.offpolicy import _critic_inputs, _one_value_per_member, bellman_target
from tdrl.objectives.sac import SACLoss


class CrossQLoss(SACLoss):
    """SAC whose critic sees the current and the next state-action pairs in one forward.

    With ``Q_e`` critics built of :class:`~tdrl.modules.renorm.BatchRenorm` layers, run on the
    ``2B`` rows ``[(s, a); (s', a')]`` as one batch (their batch statistics are those of the
    mixture, which is what makes a critic without a target network stable)::

        a'            ~ pi(.|s'), the actor on its running statistics
        Q_e(s, a), Q_e(s', a')  = Q_e([(s, a); (s', a')]), one forward on batch statistics
        y             = r + discount (1 - terminated) (min_e Q_e(s', a') - alpha log pi(a'|s'))
                        (no gradient through y)
        loss_qvalue   = sum_e mean_B w (Q_e(s, a) - y)^2
        loss_actor    = mean_B w (alpha log pi(a~|s) - min_e Q_e(s, a~)),
                        a~ ~ pi(.|s) on the actor's batch statistics, Q_e on its running ones
        loss_alpha    = SAC's

    as sb3-contrib's ``CrossQ.train``, but for two things: :meth:`forward` sums the losses for
    one backward, so the actor's loss reads the critic before this step's critic update
    (sb3-contrib steps the critic first: call :meth:`qvalue_loss`, step, then
    :meth:`actor_loss` and :meth:`alpha_loss`, as ``recipes/sac.py --update-order
    critics_first``), and the critic loss is SAC's ``sum_e mean_B`` (sb3-contrib's is half
    of it, which Adam's scale-free steps barely notice). There is no target network and so
    nothing for :class:`~tdrl.objectives.SoftUpdate` to move; the paper's delayed actor (every
    third step) is the loop's: call :meth:`qvalue_loss` alone on the other steps. The batch
    renorm layers learn from a batch only inside these forwards
    (:func:`~tdrl.modules.renorm.batch_statistics`); acting and evaluation read the running
    statistics.

    Args:
        actor_network: a reparameterisable stochastic actor (``tanh_gaussian_actor(...,
            batch_renorm=...)`` as the paper; a plain one works too).
        qvalue_network: an :class:`~tdrl.modules.ensembles.EnsembleCritic` with batch renorm
            layers (``tdrl.modules.q_ensemble(..., batch_renorm={...})``).
        delay_qvalue: must be False (CrossQ's point is to have no target network).
        **kwargs: :class:`~tdrl.objectives.SACLoss`'s (``num_qvalue_nets`` is the ensemble's).

    Returns SAC's entries. Shapes: batch ``[B]``; the joint critic batch ``[E, 2B]``.
    """

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: EnsembleCritic,
        *,
        delay_qvalue: bool = False,
        **kwargs: Any,
    ) -> None:
        if delay_qvalue:
            raise ValueError(
                "CrossQLoss: delay_qvalue=True asks for a target network, and CrossQ has none: "
                "the critic's batch renorm over the joint (s, a)/(s', a') batch replaces it"
            )
        if not isinstance(qvalue_network, EnsembleCritic) or not renorm_layers(qvalue_network):
            raise ValueError(
                "CrossQLoss: qvalue_network must be an EnsembleCritic with BatchRenorm layers "
                "(tdrl.modules.q_ensemble(..., batch_renorm={})), got "
                f"{type(qvalue_network).__name__} without them"
            )
        members = qvalue_network.num_members
        if kwargs.setdefault("num_qvalue_nets", members) != members:
            raise ValueError(
                f"CrossQLoss: num_qvalue_nets={kwargs['num_qvalue_nets']} differs from the "
                f"critic ensemble's {members} members"
            )
        super().__init__(actor_network, qvalue_network, delay_qvalue=False, **kwargs)

    def qvalue_loss(
        self, batch: TensorDictBase, alpha: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss_qvalue, td_error [B])`` from one joint forward of the critics."""
        with torch.no_grad():
            reward, terminated, discount, next_td, next_action, entropy_term = self._next_step(
                batch, alpha
            )
        key = self.tensor_keys.action
        self._get(batch, key)  # named if missing
        now = _critic_inputs(self.qvalue_network, batch, None, key)
        later = _critic_inputs(self.qvalue_network, next_td, next_action, key)
        joint = torch.cat([now, later.select(*now.keys(True, True))], dim=0)
        with batch_statistics(self.qvalue_network):
            q_joint = _one_value_per_member(cast(Any, self.qvalue_network).values(joint))
        q, q_next = q_joint.split(batch.shape[0], dim=1)
        with torch.no_grad():
            next_value = q_next.min(dim=0).values - entropy_term
            target = bellman_target(reward, next_value, terminated, discount)
        return self._regression(q, target, batch)

    def actor_loss(
        self, batch: TensorDictBase, alpha: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """SAC's, the actor on its batch statistics and the critic on its running ones."""
        with batch_statistics(self.actor_network):
            return super().actor_loss(batch, alpha)
