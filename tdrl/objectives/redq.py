"""Randomized ensembled double Q-learning (Chen et al. 2021, arXiv 2101.05982)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from tdrl.objectives.offpolicy import critic_values
from tdrl.objectives.sac import SACLoss


class REDQLoss(SACLoss):
    """REDQ: SAC with ``N`` critics, a random subset of ``M`` in each target, mean-Q actor.

    ::

        M_idx       = a random subset of size sub_sample_len of {0..N-1}, fresh per call
        y           = r + discount (1 - terminated) (min_{i in M_idx} Q'_i(s', a')
                                                     - alpha log pi(a'|s'))   (Alg. 1, line 8)
        loss_qvalue = sum_{i<N} mean_B w (Q_i(s, a) - y)^2                   (line 10)
        loss_actor  = mean_B w (alpha log pi(a~|s) - mean_{i<N} Q_i(s, a~))  (line 13)

    The update-to-data ratio (G = 20 in the paper) is the recipe's: it calls the loss G times
    per env step and the actor every time (or every ``G`` th time). The critics run in one
    batched call (a tdrl ``EnsembleCritic``): all ``N`` in the loss, only the drawn ``M`` in
    the target. Same arguments, keys and outputs as :class:`~tdrl.objectives.sac.SACLoss`,
    with ``num_qvalue_nets=N`` (10) and ``sub_sample_len=M`` (2), TorchRL's names.

    Shapes:
        batch ``[B]``; reward and flags ``[B, 1]``.
    """

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: nn.Module | Sequence[nn.Module],
        *,
        num_qvalue_nets: int = 10,
        sub_sample_len: int = 2,
        **kwargs: object,
    ) -> None:
        if not 1 <= sub_sample_len <= num_qvalue_nets:
            raise ValueError(
                f"sub_sample_len must lie in [1, num_qvalue_nets={num_qvalue_nets}], got "
                f"{sub_sample_len}"
            )
        super().__init__(
            actor_network,
            qvalue_network,
            num_qvalue_nets=num_qvalue_nets,
            **kwargs,  # type: ignore[arg-type]
        )
        self.sub_sample_len = sub_sample_len

    def _target_q(self, next_td: TensorDictBase, next_action: torch.Tensor) -> torch.Tensor:
        # Only the drawn subset's target critics run (M of N: 2 of 10 forwards by default).
        subset = torch.randperm(self.num_qvalue_nets, device=next_action.device)
        next_q = critic_values(
            self.target_qvalue_network, next_td, next_action, self.tensor_keys.action,
            members=subset[: self.sub_sample_len],
        )  # fmt: skip
        return next_q.min(dim=0).values

    def _actor_value(self, batch: TensorDictBase, action: torch.Tensor) -> torch.Tensor:
        q = critic_values(self.qvalue_network, batch, action, self.tensor_keys.action)
        return q.mean(dim=0)
