"""Soft actor-critic (Haarnoja et al. 2018, arXiv 1801.01290 and 1812.05905)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from tdrl.keys import ALPHA, ENTROPY, LOSS_ACTOR, LOSS_ALPHA, LOSS_QVALUE, NEXT
from tdrl.objectives.offpolicy import (
    OffPolicyLoss,
    actor_critic_value,
    bellman_target,
    checked_target_entropy,
    critic_values,
    frozen,
    rsample_and_log_prob,
    target_entropy_of,
)


class EntropyOptions(TypedDict, total=False):
    """The entropy coefficient's options of :class:`SACLoss` (and the discount), which
    :class:`~tdrl.objectives.TQCLoss` takes too; their defaults are SACLoss's."""

    alpha_init: float
    min_alpha: float | None
    max_alpha: float | None
    fixed_alpha: bool
    target_entropy: str | float
    action_dim: int | None
    gamma: float


class SACLoss(OffPolicyLoss):
    """SAC with a clipped double-Q ensemble and automatic entropy tuning (SAC v2).

    With ``Q_e`` the critics, ``Q'_e`` their targets and ``alpha = exp(log_alpha)``::

        y           = r + discount (1 - terminated) (min_e Q'_e(s', a') - alpha log pi(a'|s')),
                      a' ~ pi(.|s')
        loss_qvalue = sum_e mean_B w (Q_e(s, a) - y)^2
        loss_actor  = mean_B w (alpha log pi(a~|s) - min_e Q_e(s, a~)),  a~ ~ pi(.|s) (rsample)
        loss_alpha  = mean_B w (-log_alpha (log pi(a~|s) + target_entropy))

    ``w`` is PER's ``"priority_weight"`` (1 without). ``loss_actor`` reaches only the actor,
    ``loss_qvalue`` only the critics, ``loss_alpha`` only ``log_alpha``, so their sum can be
    backpropagated once with one optimiser per group. Truncated steps bootstrap from the real
    ``("next", "observation")``; n-step samples use ``discount = gamma ** steps_to_next_obs``.

    Args:
        actor_network: a stochastic actor with ``get_dist(td)`` (tdrl ``TanhGaussianActor`` or
            TorchRL ``ProbabilisticActor``), reparameterisable.
        qvalue_network: a tdrl critic ensemble (``EnsembleCritic``), or one keyed critic (or a
            list) writing ``"state_action_value"``, copied ``num_qvalue_nets`` times.
        num_qvalue_nets, loss_function, alpha_init, min_alpha, max_alpha: TorchRL's names.
        fixed_alpha, target_entropy, delay_qvalue, gamma: TorchRL's names.
            ``target_entropy="auto"`` is ``-action_dim``, taken from ``action_dim``, the actor's
            ``action_dim``, or the first batch's actions.
        action_dim: action size for ``target_entropy="auto"``.

    Reads ``action``, the actor's and critic's in_keys at the root and under ``"next"``,
    ``("next", "reward"|"terminated")``, optionally ``steps_to_next_obs``/``gamma`` and
    ``priority_weight``. Returns ``loss_actor``, ``loss_qvalue``, ``loss_alpha``, ``alpha``,
    ``entropy`` (scalars) and ``td_error`` (``[B]``, max over critics, for PER).

    Shapes:
        batch ``[B]``; reward and flags ``[B, 1]``.
    """

    _outputs = (LOSS_ACTOR, LOSS_QVALUE, LOSS_ALPHA, ALPHA, ENTROPY)
    _continuous_action = True

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: nn.Module | Sequence[nn.Module],
        *,
        num_qvalue_nets: int = 2,
        loss_function: str = "l2",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        fixed_alpha: bool = False,
        target_entropy: str | float = "auto",
        action_dim: int | None = None,
        delay_qvalue: bool = True,
        gamma: float = 0.99,
    ) -> None:
        super().__init__(gamma=gamma, loss_function=loss_function)
        self.actor_network = actor_network
        self._init_critics(qvalue_network, num_qvalue_nets, delay_qvalue)
        self._init_alpha(alpha_init, fixed_alpha)
        self.min_log_alpha = None if min_alpha is None else float(torch.tensor(min_alpha).log())
        self.max_log_alpha = None if max_alpha is None else float(torch.tensor(max_alpha).log())
        self._target_entropy_spec = checked_target_entropy(target_entropy)
        self._action_dim = action_dim or getattr(actor_network, "action_dim", None)
        self._target_entropy: float | None = None

    @property
    def alpha(self) -> torch.Tensor:
        """The entropy coefficient ``exp(log_alpha)`` (no gradient), clamped if bounds are set."""
        if self.min_log_alpha is not None or self.max_log_alpha is not None:
            with torch.no_grad():
                self.log_alpha.clamp_(self.min_log_alpha, self.max_log_alpha)
        return self.log_alpha.detach().exp()

    def target_entropy(self, action: torch.Tensor | None = None) -> float:
        """The entropy target; ``"auto"`` resolves to ``-action_dim`` on first use."""
        if self._target_entropy is None:
            dim = self._action_dim
            if dim is None and action is not None:
                dim = action.shape[-1]
            self._target_entropy = target_entropy_of(self._target_entropy_spec, dim)
        return self._target_entropy

    # --- ensemble reductions (REDQ overrides these) --------------------------------------
    def _target_q(self, next_td: TensorDictBase, next_action: torch.Tensor) -> torch.Tensor:
        """Clipped double Q (Fujimoto et al. 2018): the minimum over the target critics ``[B]``."""
        next_q = critic_values(
            self.target_qvalue_network, next_td, next_action, self.tensor_keys.action
        )
        return next_q.min(dim=0).values

    def _actor_value(self, batch: TensorDictBase, action: torch.Tensor) -> torch.Tensor:
        """The actor's objective value ``[B]``: the minimum over the critics (SAC's paper)."""
        return actor_critic_value(
            self.qvalue_network, batch, action, self.tensor_keys.action, "min"
        )

    # --- losses -------------------------------------------------------------------------
    def _sample(self, td: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        dist = self.actor_network.get_dist(td.select(*self.actor_network.in_keys, strict=False))
        return rsample_and_log_prob(dist)

    def _next_step(
        self, batch: TensorDictBase, alpha: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, Any, TensorDictBase, torch.Tensor, torch.Tensor]:
        """What a soft target reads: ``(reward, terminated, discount, next_td, a', alpha log
        pi(a'|s'))``, ``a' ~ pi(.|s')`` (``alpha``: :attr:`alpha` unless already read)."""
        alpha = self.alpha if alpha is None else alpha
        reward, terminated, discount = self._transition(batch)
        next_td = self._get(batch, NEXT)
        next_action, next_log_prob = self._sample(next_td)
        return reward, terminated, discount, next_td, next_action, alpha * next_log_prob

    @torch.no_grad()
    def value_target(
        self, batch: TensorDictBase, alpha: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The soft Bellman target ``y`` (``[B]``; TQC's: ``[B, k]``) (``alpha``: :attr:`alpha`,
        if already read)."""
        return self._soft_target(self._next_step(batch, alpha))

    def _soft_target(self, parts: tuple[Any, ...]) -> torch.Tensor:
        """``y`` from :meth:`_next_step`'s parts: the clipped double-Q soft target."""
        reward, terminated, discount, next_td, next_action, entropy_term = parts
        next_value = self._target_q(next_td, next_action) - entropy_term
        return bellman_target(reward, next_value, terminated, discount)

    def qvalue_loss(
        self, batch: TensorDictBase, alpha: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss_qvalue, td_error [B])``."""
        return self._critic_regression(batch, self.value_target(batch, alpha))

    def actor_loss(
        self, batch: TensorDictBase, alpha: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss_actor, log_prob [B] detached)``."""
        alpha = self.alpha if alpha is None else alpha
        action, log_prob = self._sample(batch)
        with frozen(self.qvalue_network):
            q = self._actor_value(batch, action)
        self.target_entropy(action)
        per_sample = alpha * log_prob - q
        return self._mean(per_sample, self._weights(batch)), log_prob.detach()

    def alpha_loss(self, log_prob: torch.Tensor, batch: TensorDictBase) -> torch.Tensor:
        """``-log_alpha (log pi + target_entropy)``, mean over the batch (SB3, TorchRL)."""
        per_sample = -self.log_alpha * (log_prob + self.target_entropy())
        return self._mean(per_sample, self._weights(batch))

    def _critic_terms(self, batch: TensorDictBase, alpha: torch.Tensor) -> dict[str, torch.Tensor]:
        """The critic's entries of :meth:`forward`'s output: ``loss_qvalue`` and the priority
        (a subclass whose critic loss adds a term with a loss of its own overrides this)."""
        loss_qvalue, td_error = self.qvalue_loss(batch, alpha)
        return {LOSS_QVALUE: loss_qvalue, self.tensor_keys.priority: td_error}

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        alpha = self.alpha  # read (and clamped) once per batch
        critic = self._critic_terms(batch, alpha)
        loss_actor, log_prob = self.actor_loss(batch, alpha)
        out = {
            LOSS_ACTOR: loss_actor,
            **critic,
            LOSS_ALPHA: self.alpha_loss(log_prob, batch),
            ALPHA: alpha,
            ENTROPY: -log_prob.mean(),
        }
        return self._output(out)
