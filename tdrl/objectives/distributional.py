"""Distributional Q-learning losses: C51 (Bellemare et al. 2017, arXiv 1707.06887), QR-DQN
(Dabney et al. 2017, arXiv 1710.10044), IQN (Dabney et al. 2018, arXiv 1806.06923) and FQF (Yang
et al. 2019, arXiv 1911.02140), on DQN's transitions, targets and options.

All four sit on one base of their own, :class:`_DistributionalLoss` (DQN's construction and
target network on :class:`~tdrl.objectives.offpolicy.OffPolicyLoss`); the quantile losses share
the bootstrapped target quantiles (:func:`quantile_target`) and QR-DQN's quantile Huber
regression (:meth:`_DistributionalLoss._quantile_regression`), not a class chain.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypedDict, Unpack

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from tdrl.keyed import check_counts
from tdrl.keys import CHOSEN_ACTION_VALUE, FRACTION_ENTROPY, LOSS, NEXT, VALUE_TARGET
from tdrl.objectives.offpolicy import OffPolicyLoss
from tdrl.ops.distributional import categorical_projection, quantile_huber_loss

__all__ = ["C51Loss", "FQFLoss", "IQNLoss", "QRDQNLoss", "quantile_target"]

# ``quantiles(network, td)`` -> ``[B, n, N]``: how a quantile loss reads a network's quantiles.
QuantileReader = Callable[[Any, TensorDictBase], torch.Tensor]


class DistributionalOptions(TypedDict, total=False):
    """:class:`DQNLoss`'s options that every distributional loss takes, with its defaults:
    ``delay_value`` (True), ``double_dqn`` (False), ``gamma`` (0.99)."""

    delay_value: bool
    double_dqn: bool
    gamma: float


def _checked_kappa(kappa: float) -> float:
    """The quantile Huber threshold, refused when negative or not finite (NaN would make every
    loss NaN; inf every loss 0)."""
    if not (math.isfinite(kappa) and kappa >= 0):
        raise ValueError(f"kappa must be >= 0 and finite, got {kappa}")
    return kappa


def quantile_target(
    next_quantiles: torch.Tensor,
    reward: torch.Tensor,
    terminated: torch.Tensor,
    discount: torch.Tensor | float,
) -> torch.Tensor:
    """``T theta_j = r + discount (1 - terminated) theta'_j(s', a*)`` (no gradient).

    A terminated step's ``theta'(s')`` is replaced by 0, not multiplied by 0 (no NaN leak).

    Shapes:
        ``next_quantiles`` ``[B, N']``; reward, terminated, discount ``[B]`` (or a float
        discount) -> ``[B, N']``.
    """
    keep = torch.where(terminated, 0.0, 1.0).to(next_quantiles.dtype) * discount
    bootstrap = torch.where(terminated.unsqueeze(-1), 0.0, next_quantiles)
    return reward.unsqueeze(-1) + keep.unsqueeze(-1) * bootstrap


class _DistributionalLoss(OffPolicyLoss):
    """DQN's construction, options, transitions and target network for the distributional
    losses (not a public loss); the distribution per action comes from
    ``_distribution(network, td)`` ``[B, n, K]``."""

    _outputs: tuple[NestedKey, ...] = (LOSS, CHOSEN_ACTION_VALUE, VALUE_TARGET)

    def __init__(
        self,
        value_network: TensorDictModuleBase,  # a distributional Q actor
        **options: Unpack[DistributionalOptions],
    ) -> None:
        unknown = sorted(set(options) - DistributionalOptions.__optional_keys__)
        if unknown:  # DQNLoss's loss_function is not theirs: refuse it rather than ignore it
            raise TypeError(f"{type(self).__name__} got unexpected options {unknown}")
        delay_value = options.get("delay_value", True)
        double_dqn = options.get("double_dqn", False)
        # DQNLoss's loss_function default, which these losses do not use
        super().__init__(gamma=options.get("gamma", 0.99), loss_function="l2")
        self._init_value(value_network, delay_value, double_dqn)

    def _distribution(self, network: Any, td: TensorDictBase) -> torch.Tensor:
        raise NotImplementedError

    def _next_action(self, next_td: TensorDictBase, next_target: torch.Tensor) -> torch.Tensor:
        """``a*`` ``[B]``: the greedy action of the online (double) or target network."""
        if self.double_dqn:
            return self.value_network.action_values(next_td).argmax(-1)
        return self._expected(next_target).argmax(-1)

    def _expected(self, distribution: torch.Tensor) -> torch.Tensor:
        """The expected return per action, ``[B, n, K]`` -> ``[B, n]``: the mean of equally
        weighted quantiles (QR-DQN, IQN); C51 weighs its atoms by their probabilities."""
        return distribution.mean(-1)

    def _pick(self, distribution: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``distribution[b, action[b]]``: ``[B, n, K]``, ``[B]`` -> ``[B, K]``; an action
        outside ``[0, n)`` raises a ``ValueError`` naming the action key."""
        index = action.view(-1, 1, 1).expand(-1, 1, distribution.shape[-1])
        try:
            return distribution.gather(1, index).squeeze(1)
        except RuntimeError as error:
            self._check_index(action, distribution.shape[1], error)
            raise

    def _quantile_regression(
        self,
        batch: TensorDictBase,
        target_quantiles: QuantileReader,
        taus: torch.Tensor,
        online_quantiles: QuantileReader,
        kappa: float,
    ) -> TensorDictBase:
        """QR-DQN's (and IQN's) loss: the quantile Huber loss of ``online_quantiles(net, td)``
        (at ``taus``) against ``r + discount (1 - terminated) target_quantiles(target_net,
        next_td)[a*]``."""
        reward, terminated, discount = self._transition(batch)
        with torch.no_grad():
            next_td = self._get(batch, NEXT)
            next_target = target_quantiles(self.target_value_network, next_td)  # [B, n, N']
            best = self._next_action(next_td, next_target)
            next_quantiles = self._pick(next_target, best)  # [B, N']
            target = quantile_target(next_quantiles, reward, terminated, discount)
        quantiles = online_quantiles(self.value_network, batch)
        index = self._action_index(batch, quantiles.shape[-2])
        chosen = self._pick(quantiles, index)  # [B, N]
        per_sample = quantile_huber_loss(chosen, target, taus, kappa=kappa)
        loss = self._mean(per_sample, self._weights(batch))
        out = {
            LOSS: loss,
            self.tensor_keys.priority: per_sample.detach(),
            CHOSEN_ACTION_VALUE: chosen.detach().mean(),
            VALUE_TARGET: target.mean(),
        }
        return self._output(out)


class C51Loss(_DistributionalLoss):
    """Categorical DQN: cross-entropy to the projected target distribution.

    ::

        m    = Phi(r + discount (1 - terminated) z, p'(s', a*))   (tdrl.ops.categorical_projection)
        loss = mean_B w (- sum_j m_j log p_j(s, a))

    ``a*`` maximizes the target network's expected return (or the online one's, ``double_dqn``:
    Rainbow's choice). The per-sample cross-entropy is ``"td_error"`` (Rainbow's priority).
    Reads and returns what :class:`DQNLoss` does (``value_target``: the mean expected target).

    Args:
        value_network: a :class:`~tdrl.modules.CategoricalQValueActor`.
        **options: ``delay_value``, ``double_dqn``, ``gamma``, as :class:`DQNLoss`.
    """

    def _distribution(self, network: Any, td: TensorDictBase) -> torch.Tensor:
        return network.log_probs(td)

    def _expected(self, distribution: torch.Tensor) -> torch.Tensor:
        return (distribution.exp() * self.value_network.atoms).sum(-1)

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        reward, terminated, discount = self._transition(batch)
        atoms = self.value_network.atoms
        with torch.no_grad():
            next_td = self._get(batch, NEXT)
            next_target = self._distribution(self.target_value_network, next_td)  # log p'
            best = self._next_action(next_td, next_target)
            next_probs = self._pick(next_target, best).exp()
            target = categorical_projection(
                next_probs, reward, terminated, atoms, discount=discount
            )
        log_probs = self._distribution(self.value_network, batch)
        index = self._action_index(batch, log_probs.shape[-2])
        chosen = self._pick(log_probs, index)  # [B, K]
        cross_entropy = -(target * chosen).sum(-1)
        loss = self._mean(cross_entropy, self._weights(batch))
        out = {
            LOSS: loss,
            self.tensor_keys.priority: cross_entropy.detach(),
            CHOSEN_ACTION_VALUE: (chosen.detach().exp() * atoms).sum(-1).mean(),
            VALUE_TARGET: (target * atoms).sum(-1).mean(),
        }
        return self._output(out)


class QRDQNLoss(_DistributionalLoss):
    """Quantile regression DQN: the quantile Huber loss to the target's quantiles.

    ::

        T theta_j = r + discount (1 - terminated) theta'_j(s', a*)
        loss      = mean_B w sum_i mean_j rho^kappa_{tau_i}(T theta_j - theta_i(s, a))

    (tdrl.ops.quantile_huber_loss). The per-sample loss is ``"td_error"`` (PER's priority).

    Args:
        value_network: a :class:`~tdrl.modules.QuantileQValueActor`.
        kappa: Huber threshold (1 in the paper; 0 is the plain quantile loss).
        **options: ``delay_value``, ``double_dqn``, ``gamma``, as :class:`DQNLoss`.
    """

    def __init__(
        self,
        value_network: TensorDictModuleBase,
        *,
        kappa: float = 1.0,
        **options: Unpack[DistributionalOptions],
    ) -> None:
        super().__init__(value_network, **options)
        self.kappa = _checked_kappa(kappa)

    def _distribution(self, network: Any, td: TensorDictBase) -> torch.Tensor:
        return network.quantiles(td)

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        taus = self.value_network.taus
        return self._quantile_regression(
            batch, self._distribution, taus, self._distribution, self.kappa
        )


class IQNLoss(_DistributionalLoss):
    """Implicit quantile networks: QR-DQN's loss at fractions drawn anew for every sample,
    ``num_taus`` for the online quantiles and ``num_target_taus`` for the target ones
    (``tau ~ U(0, 1)``; 8 and 8 in the paper). ``a*`` maximizes the mean of the target
    quantiles (online ones with ``double_dqn``), each at its own fractions.

    Args:
        value_network: an :class:`~tdrl.modules.IQNQValueActor`.
        num_taus, num_target_taus: fractions per sample; ``kappa`` and the rest as
            :class:`QRDQNLoss`.
    """

    def __init__(
        self,
        value_network: TensorDictModuleBase,
        *,
        num_taus: int = 8,
        num_target_taus: int = 8,
        kappa: float = 1.0,
        **options: Unpack[DistributionalOptions],
    ) -> None:
        super().__init__(value_network, **options)
        self.kappa = _checked_kappa(kappa)
        check_counts(type(self).__name__, num_taus=num_taus, num_target_taus=num_target_taus)
        self.num_taus, self.num_target_taus = num_taus, num_target_taus

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        # Draw order: target fractions, then online ones (tests replay it).
        B = batch.shape[0]
        like = self.value_network.frequencies
        target_taus = torch.rand(B, self.num_target_taus, dtype=like.dtype, device=like.device)
        taus = torch.rand(B, self.num_taus, dtype=like.dtype, device=like.device)
        return self._quantile_regression(
            batch,
            lambda net, td: net.quantiles(td, target_taus),
            taus,
            lambda net, td: net.quantiles(td, taus),
            self.kappa,
        )


class FQFLoss(_DistributionalLoss):
    """Fully parameterized quantile function: QR-DQN's loss at the fractions the network
    proposes, plus the fraction proposal's own loss (Yang et al. 2019, Algorithm 1).

    ::

        tau, tau_hat   = P(s);  tau', tau_hat' = P(s')        (online proposal, no gradient)
        a*             = argmax_a sum_i (tau'_{i+1} - tau'_i) Z'_{tau_hat'_i}(s', a)
        T Z_j          = r + discount (1 - terminated) Z'_{tau_hat'_j}(s', a*)
        loss_quantile  = mean_B w sum_i mean_j rho^kappa_{tau_hat_i}(T Z_j - Z_{tau_hat_i}(s, a))
        g_i            = 2 Z_{tau_i}(s, a) - Z_{tau_hat_i}(s, a) - Z_{tau_hat_{i-1}}(s, a)
        loss_fraction  = mean_B w sum_{i=1}^{N-1} g_i tau_i - entropy_coeff H(q)

    ``g_i`` is the derivative of the 1-Wasserstein error of the proposal with respect to
    ``tau_i`` (their Proposition 1), held fixed: ``loss_fraction``'s gradient reaches only the
    fraction proposal network, ``loss_quantile``'s only the rest. ``"loss"`` is their sum (one
    backward; give the fraction network its own learning rate in the optimizer, as the paper
    does). ``Z'`` comes from the target network (the online one picks ``a*`` with
    ``double_dqn``). The per-sample quantile loss is ``"td_error"`` (PER's priority).

    Args:
        value_network: an :class:`~tdrl.modules.FQFQValueActor`.
        entropy_coeff: weight of the proposal's entropy bonus (0 in the paper's Atari runs).
        **kwargs: :class:`QRDQNLoss`'s (``kappa``, ``delay_value``, ``double_dqn``, ``gamma``).

    Returns ``loss``, ``chosen_action_value``, ``value_target``, ``td_error`` ``[B]`` and the
    detached ``fraction_entropy``.
    """

    _outputs: tuple[NestedKey, ...] = (LOSS, CHOSEN_ACTION_VALUE, VALUE_TARGET, FRACTION_ENTROPY)

    def __init__(
        self, value_network: TensorDictModuleBase, *, entropy_coeff: float = 0.0, **kwargs: Any
    ) -> None:
        kappa = kwargs.pop("kappa", 1.0)  # QRDQNLoss's default
        super().__init__(value_network, **kwargs)
        self.kappa = _checked_kappa(kappa)
        if entropy_coeff < 0:
            raise ValueError(f"entropy_coeff must be >= 0, got {entropy_coeff}")
        self.entropy_coeff = entropy_coeff

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        net: Any = self.value_network  # an FQFQValueActor
        target_net: Any = self.target_value_network
        reward, terminated, discount = self._transition(batch)
        with torch.no_grad():
            next_td = self._get(batch, NEXT)
            next_psi = net.features(next_td)
            next_tau, next_tau_hat, _ = net.fractions(next_psi)
            next_target = target_net.quantiles(next_td, next_tau_hat)  # [B, n, N]
            chooser = net.quantiles_of(next_psi, next_tau_hat) if self.double_dqn else next_target
            best = net.expected(chooser, next_tau).argmax(-1)
            next_quantiles = self._pick(next_target, best)  # [B, N]
            target = quantile_target(next_quantiles, reward, terminated, discount)
        psi = net.features(batch)
        tau, tau_hat, entropy = net.fractions(psi)
        quantiles = net.quantiles_of(psi, tau_hat.detach())  # [B, n, N]
        index = self._action_index(batch, quantiles.shape[-2])
        chosen = self._pick(quantiles, index)  # [B, N]
        per_sample = quantile_huber_loss(chosen, target, tau_hat.detach(), kappa=self.kappa)
        weights = self._weights(batch)
        inner = tau[:, 1:-1]  # tau_1 .. tau_{N-1}: what the fraction term differentiates
        with torch.no_grad():  # the W1 derivative there, held fixed
            at_inner = self._pick(net.quantiles_of(psi, inner), index)  # [B, N-1]
            hat = chosen.detach()
            grad = 2 * at_inner - hat[:, :-1] - hat[:, 1:]
        fraction = (grad * inner).sum(-1) - self.entropy_coeff * entropy
        loss = self._mean(per_sample, weights) + self._mean(fraction, weights)
        out = {
            LOSS: loss,
            self.tensor_keys.priority: per_sample.detach(),
            CHOSEN_ACTION_VALUE: net.expected(chosen.detach().unsqueeze(1), tau.detach()).mean(),
            VALUE_TARGET: target.mean(),
            FRACTION_ENTROPY: entropy.detach().mean(),
        }
        return self._output(out)
