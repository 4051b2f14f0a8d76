"""Truncated Quantile Critics (Kuznetsov et al. 2020, arXiv 2005.04269)."""

from __future__ import annotations

from typing import Any, Unpack, cast

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from tdrl.modules.ensembles import EnsembleCritic
from tdrl.objectives.distributional import quantile_target
from tdrl.objectives.offpolicy import _critic_inputs, frozen
from tdrl.objectives.sac import EntropyOptions, SACLoss
from tdrl.ops.distributional import quantile_huber_loss


class TQCLoss(SACLoss):
    """SAC with ``N`` distributional critics of ``M`` quantiles each, whose pooled target drops
    the top atoms (overestimation controlled by truncation, not by a minimum over critics).

    With ``Z_n(s, a)`` in ``R^M`` the critics at fractions ``tau_m = (2m - 1) / (2M)``, ``Z'_n``
    their targets, ``d = top_quantiles_to_drop`` per critic and ``k = N (M - d)``::

        z_(1) <= ... <= z_(NM)  the pooled atoms of Z'_n(s', a'), a' ~ pi(.|s'), sorted
        y_i          = r + discount (1 - terminated) (z_(i) - alpha log pi(a'|s')),  i <= k
        loss_qvalue  = mean_B w 1/(N M) sum_n sum_m 1/k sum_i rho_tau_m(y_i - Z_n,m(s, a))
        loss_actor   = mean_B w (alpha log pi(a~|s) - 1/(N M) sum_n,m Z_n,m(s, a~))
        loss_alpha   = SAC's

    ``rho_tau(u) = |tau - 1{u < 0}| L_kappa(u) / kappa``, the quantile Huber loss
    (:func:`tdrl.ops.quantile_huber_loss`; ``kappa = 1`` as in the paper). The critic loss is a
    mean over critics, atoms and target atoms, as in the authors' code and sb3-contrib's.
    ``td_error`` (PER's priority) is the largest ``|mean_m Z_n,m(s, a) - mean_i y_i|`` over the
    critics. Truncated steps bootstrap from the real ``("next", "observation")``.

    Args:
        actor_network: a reparameterisable stochastic actor (``TanhGaussianActor``).
        qvalue_network: an :class:`~tdrl.modules.ensembles.EnsembleCritic` of ``N`` members
            with ``M`` outputs each (``tdrl.modules.q_ensemble(..., num_outputs=M)``).
        top_quantiles_to_drop: ``d``, atoms dropped per critic from the pooled target
            (sb3-contrib's ``top_quantiles_to_drop_per_net``), ``0 <= d < M``.
        kappa: the Huber threshold of the quantile loss.
        **options: :class:`~tdrl.objectives.SACLoss`'s entropy options and discount
            (:class:`~tdrl.objectives.sac.EntropyOptions`: ``alpha_init``, ``fixed_alpha``,
            ``target_entropy``, ``action_dim``, ``min_alpha``, ``max_alpha``, ``gamma``).

    Returns ``loss_actor``, ``loss_qvalue``, ``loss_alpha``, ``alpha``, ``entropy`` and
    ``td_error``, as SAC.

    Shapes:
        batch ``[B]``; the critics' values ``[N, B, M]``; the target ``[B, k]``.
    """

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: EnsembleCritic,
        *,
        top_quantiles_to_drop: int = 2,
        kappa: float = 1.0,
        **options: Unpack[EntropyOptions],
    ) -> None:
        unknown = sorted(set(options) - set(EntropyOptions.__annotations__))
        if unknown:  # SACLoss's loss_function and delay_qvalue have no meaning here
            raise TypeError(
                f"TQCLoss got unexpected options {unknown}; besides its own it takes SACLoss's "
                f"{sorted(EntropyOptions.__annotations__)}"
            )
        if not isinstance(qvalue_network, EnsembleCritic):
            raise TypeError(
                "TQCLoss: qvalue_network must be an EnsembleCritic of N critics with M quantile "
                f"outputs each (tdrl.modules.q_ensemble(..., num_outputs=M)), got "
                f"{type(qvalue_network).__name__}"
            )
        output = getattr(qvalue_network.net, "output", None)  # an EnsembleMLP's last layer
        num_quantiles = int(getattr(output, "out_features", 0))
        if num_quantiles < 2:
            raise ValueError(
                f"TQCLoss: the critics must output M >= 2 quantiles each, got {num_quantiles}"
            )
        drop = top_quantiles_to_drop
        if isinstance(drop, bool) or not isinstance(drop, int) or not 0 <= drop < num_quantiles:
            raise ValueError(
                f"TQCLoss: top_quantiles_to_drop must be a whole number in [0, {num_quantiles}) "
                f"(the critics have M={num_quantiles} quantiles), got {drop!r}"
            )
        if not (isinstance(kappa, (int, float)) and kappa >= 0 and kappa < float("inf")):
            raise ValueError(f"TQCLoss: kappa must be finite and >= 0, got {kappa!r}")
        super().__init__(
            actor_network, qvalue_network, num_qvalue_nets=qvalue_network.num_members, **options
        )
        self.num_quantiles = num_quantiles
        self.top_quantiles_to_drop = drop
        self.kappa = float(kappa)
        taus = (torch.arange(num_quantiles, dtype=torch.float32) + 0.5) / num_quantiles
        self.register_buffer("taus", taus, persistent=False)

    def _quantiles(
        self, critic: nn.Module, batch: TensorDictBase, action: torch.Tensor | None
    ) -> torch.Tensor:
        """``Z_n(s, a)`` of every critic, ``[N, B, M]`` (the ensemble or its target copy)."""
        inputs = _critic_inputs(critic, batch, action, self.tensor_keys.action)
        return cast(EnsembleCritic, critic).values(inputs)

    def _soft_target(self, parts: tuple[Any, ...]) -> torch.Tensor:
        """The truncated pooled target ``y`` ``[B, k]``, sorted."""
        reward, terminated, discount, next_td, next_action, entropy_term = parts
        atoms = self._quantiles(self.target_qvalue_network, next_td, next_action)  # [N, B, M]
        pooled = atoms.permute(1, 0, 2).reshape(atoms.shape[1], -1).sort(dim=-1).values
        kept = self.num_qvalue_nets * (self.num_quantiles - self.top_quantiles_to_drop)
        # a terminated step's next atoms are replaced by 0, not multiplied (no NaN leaks in)
        next_value = pooled[:, :kept] - entropy_term.unsqueeze(-1)
        return quantile_target(next_value, reward, terminated, discount)

    def qvalue_loss(
        self, batch: TensorDictBase, alpha: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss_qvalue, td_error [B])``."""
        target = self.value_target(batch, alpha)  # [B, k]
        self._get(batch, self.tensor_keys.action)
        z = self._quantiles(self.qvalue_network, batch, None)  # [N, B, M]
        n, b, m = z.shape
        pairs = quantile_huber_loss(
            z.reshape(n * b, m), target.repeat(n, 1), self.taus, kappa=self.kappa
        )  # [N B]: sum over the M atoms of the mean over the k targets
        per_sample = pairs.view(n, b).mean(0) / m
        td_error = (z.detach().mean(-1) - target.mean(-1)).abs().max(dim=0).values
        return self._mean(per_sample, self._weights(batch)), td_error

    def _actor_value(self, batch: TensorDictBase, action: torch.Tensor) -> torch.Tensor:
        """The mean over every critic's atoms ``[B]`` (the actor's objective in TQC)."""
        with frozen(self.qvalue_network):
            return self._quantiles(self.qvalue_network, batch, action).mean(dim=(0, 2))
