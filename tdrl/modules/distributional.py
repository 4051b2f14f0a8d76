"""Distributional Q actors (C51, QR-DQN, IQN, FQF) and noisy linear layers (Rainbow's exploration).

``CategoricalQValueActor`` and ``QuantileQValueActor`` write what ``QValueActor`` writes
(``"action_value"``: the expected return of each action, ``"action"``, ``"chosen_action_value"``),
so ``EpsilonGreedy``, the collector and evaluation take them unchanged; the losses read the whole
distribution through :meth:`log_probs` / :meth:`quantiles`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, TensorDictModuleBase
from tensordict.nn.probabilistic import interaction_type
from tensordict.utils import NestedKey
from torch import nn

from tdrl.keyed import check_counts, require
from tdrl.keys import ACTION, ACTION_VALUE, CHOSEN_ACTION_VALUE, OBSERVATION
from tdrl.modules.actors import _apply
from tdrl.modules.qvalue import Dueling
from tdrl.ops.distributional import check_support, support

__all__ = [
    "CategoricalQValueActor",
    "FQFQValueActor",
    "IQNQValueActor",
    "NoisyLinear",
    "QuantileQValueActor",
    "ResampleNoise",
    "reset_noise",
    "to_noisy",
]


def _noiseless() -> bool:
    """Noise is off under every interaction type but RANDOM (DETERMINISTIC, and TorchRL's MODE
    and MEAN, as the actors and exploration modules read them); on when none is set (the
    training step of a noisy net draws it)."""
    mode = interaction_type()
    return mode is not None and mode is not InteractionType.RANDOM


class NoisyLinear(nn.Module):
    """Linear layer with factorized Gaussian noise (Fortunato et al. 2017, arXiv 1706.10295):

        y = (mu_w + sigma_w * (f(e_out) f(e_in)^T)) x + mu_b + sigma_b * f(e_out),
        f(e) = sign(e) sqrt(|e|)

    The noise is drawn by :meth:`reset_noise` (:func:`reset_noise` for a whole network: once per
    environment step and per gradient step) and held until the next draw. Under
    ``InteractionType.DETERMINISTIC`` (greedy evaluation) the layer uses ``mu`` alone.

    Shapes:
        ``[*B, in_features] -> [*B, out_features]``.
    """

    eps_in: torch.Tensor
    eps_out: torch.Tensor
    noise_buffers = ("eps_in", "eps_out")
    """Buffers holding the current noise draw (the :mod:`tdrl.modules.noise` convention): target
    updates (``hard_update_`` / ``soft_update_``) leave them alone, so a target network keeps
    noise of its own."""

    def __init__(self, in_features: int, out_features: int, sigma_init: float = 0.5) -> None:
        super().__init__()
        if sigma_init < 0:
            raise ValueError(f"sigma_init must be >= 0, got {sigma_init}")
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)  # the paper's factorized initialization
        self.weight_mu = nn.Parameter(
            torch.empty(out_features, in_features).uniform_(-bound, bound)
        )
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(
            torch.full((out_features, in_features), sigma_init * bound)
        )
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma_init * bound))
        self.register_buffer("eps_in", torch.zeros(in_features))
        self.register_buffer("eps_out", torch.zeros(out_features))
        self.reset_noise()

    @staticmethod
    def _scaled(n: int, like: torch.Tensor) -> torch.Tensor:
        e = torch.randn(n, dtype=like.dtype, device=like.device)
        return e.sign() * e.abs().sqrt()

    @torch.no_grad()
    def reset_noise(self) -> None:
        """Draw new noise (held until the next call)."""
        self.eps_in.copy_(self._scaled(self.in_features, self.eps_in))
        self.eps_out.copy_(self._scaled(self.out_features, self.eps_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = nn.functional.linear(x, self.weight_mu, self.bias_mu)
        if _noiseless():
            return mean
        # (sigma_w * f(e_out) f(e_in)^T) x = f(e_out) * (sigma_w (f(e_in) * x)): the factored
        # noise never forms the [out, in] noisy weight (a third of a Rainbow step on a Nature
        # CNN's 3136 x 512 layers went into forming it, three times a step).
        noise = nn.functional.linear(x * self.eps_in, self.weight_sigma) + self.bias_sigma
        return mean + noise * self.eps_out


def to_noisy(module: nn.Module, sigma_init: float = 0.5, *, heads_only: bool = False) -> nn.Module:
    """``module`` with every ``nn.Linear`` replaced by a :class:`NoisyLinear` of the same shape
    (Rainbow's noisy value network: Hessel et al. make every fully connected layer noisy);
    returns the module.

    ``heads_only``: only the output layers, the last ``nn.Linear`` of each head of every
    :class:`~tdrl.modules.Dueling` network inside ``module`` (its ``value_head`` and
    ``advantage_head``; a CNN's dueling ``head`` too), else the last one of ``module``
    (Tianshou's Rainbow makes its dueling heads' output layers noisy).
    """
    if isinstance(module, nn.Linear):
        raise ValueError("to_noisy cannot replace the module it is given: pass its parent")
    if not heads_only:
        for name, child in module.named_children():
            if isinstance(child, nn.Linear):
                noisy = NoisyLinear(child.in_features, child.out_features, sigma_init)
                setattr(module, name, noisy)
            else:
                to_noisy(child, sigma_init)
        return module
    linears = [name for name, m in module.named_modules() if isinstance(m, nn.Linear)]
    duelings = [name for name, m in module.named_modules() if isinstance(m, Dueling)]
    heads = [
        f"{prefix}.{head}" if prefix else head
        for prefix in duelings
        for head in ("value_head", "advantage_head")
    ] or [""]
    for head in heads:
        inside = [n for n in linears if not head or n == head or n.startswith(head + ".")]
        if not inside:
            raise ValueError(f"to_noisy(heads_only=True): no nn.Linear in {head or 'the module'}")
        parent_name, _, attr = inside[-1].rpartition(".")
        parent = module.get_submodule(parent_name)
        layer = getattr(parent, attr)
        setattr(parent, attr, NoisyLinear(layer.in_features, layer.out_features, sigma_init))
    return module


class ResampleNoise(TensorDictModuleBase):
    """A policy's first module that draws new noise in ``net`` at every call (every env step
    of a collector), reading and writing nothing."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.in_keys: list[NestedKey] = []
        self.out_keys: list[NestedKey] = []

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        reset_noise(self.net)
        return tensordict


def reset_noise(module: nn.Module) -> int:
    """Draw new noise in every :class:`NoisyLinear` of ``module``; returns how many there are."""
    layers = [m for m in module.modules() if isinstance(m, NoisyLinear)]
    for layer in layers:
        layer.reset_noise()
    return len(layers)


class _GreedyQActor(TensorDictModuleBase):
    """Writes ``action_values`` (the expected returns), the greedy action and its value."""

    def action_values(self, tensordict: TensorDictBase) -> torch.Tensor:
        """Expected returns ``[*B, num_actions]``; nothing is written."""
        raise NotImplementedError

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        action_value = self.action_values(tensordict)
        chosen, action = action_value.max(dim=-1, keepdim=True)
        tensordict.set(ACTION_VALUE, action_value)
        tensordict.set(ACTION, action.squeeze(-1))
        tensordict.set(CHOSEN_ACTION_VALUE, chosen)
        return tensordict


class _DistributionalQValueActor(_GreedyQActor):
    """Greedy actor over a network of ``num_actions x size`` outputs per observation."""

    def __init__(self, net: nn.Module, num_actions: int, size: int, in_key: NestedKey) -> None:
        super().__init__()
        check_counts(type(self).__name__, num_actions=num_actions)
        self.net, self.num_actions, self.size = net, num_actions, size
        self.in_keys = [in_key]
        self.out_keys = [ACTION_VALUE, ACTION, CHOSEN_ACTION_VALUE]

    def _outputs(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The network's output as ``[*B, num_actions, size]``."""
        name = type(self).__name__
        observation = require(tensordict, self.in_keys[0], name)
        out = _apply(self.net, observation, self.in_keys[0], name)
        expected = self.num_actions * self.size
        if out.shape[-1] != expected:
            raise ValueError(
                f"{name}: the network gives {out.shape[-1]} outputs per observation, expected "
                f"num_actions x {self.size} = {expected}"
            )
        return out.unflatten(-1, (self.num_actions, self.size))


class CategoricalQValueActor(_DistributionalQValueActor):
    """C51's network: a distribution over ``num_atoms`` fixed returns for each action.

    Args:
        net: maps observations to ``[*B, num_actions * num_atoms]`` logits (e.g. ``q_mlp`` with
            ``num_actions * num_atoms`` outputs; dueling heads work per atom).
        num_actions: discrete actions.
        v_min, v_max, num_atoms: the support (Bellemare et al.: -10, 10, 51).

    Shapes:
        reads ``[*B, obs]``; :meth:`log_probs` ``[*B, n, K]``; writes ``action_value`` ``[*B, n]``
        (``sum_j p_j z_j``), ``action`` ``[*B]``, ``chosen_action_value`` ``[*B, 1]``.
    """

    atoms: torch.Tensor

    def __init__(
        self,
        net: nn.Module,
        num_actions: int,
        *,
        v_min: float = -10.0,
        v_max: float = 10.0,
        num_atoms: int = 51,
        in_key: NestedKey = OBSERVATION,
    ) -> None:
        check_support(v_min, v_max, num_atoms)
        super().__init__(net, num_actions, num_atoms, in_key)
        self.register_buffer("atoms", support(v_min, v_max, num_atoms))

    def log_probs(self, tensordict: TensorDictBase) -> torch.Tensor:
        """``log p_j(s, a)`` ``[*B, num_actions, num_atoms]``."""
        return torch.log_softmax(self._outputs(tensordict), dim=-1)

    def action_values(self, tensordict: TensorDictBase) -> torch.Tensor:
        return (self.log_probs(tensordict).exp() * self.atoms).sum(-1)


class QuantileQValueActor(_DistributionalQValueActor):
    """QR-DQN's network: ``num_quantiles`` return quantiles at the fractions
    ``tau_i = (2i + 1) / (2N)`` for each action (Dabney et al. 2017).

    Shapes:
        reads ``[*B, obs]``; :meth:`quantiles` ``[*B, n, N]``; writes ``action_value``
        ``[*B, n]`` (the quantiles' mean), ``action`` ``[*B]``, ``chosen_action_value``.
    """

    taus: torch.Tensor

    def __init__(
        self,
        net: nn.Module,
        num_actions: int,
        *,
        num_quantiles: int = 200,
        in_key: NestedKey = OBSERVATION,
    ) -> None:
        check_counts(type(self).__name__, num_quantiles=num_quantiles)
        super().__init__(net, num_actions, num_quantiles, in_key)
        taus = (torch.arange(num_quantiles, dtype=torch.float32) + 0.5) / num_quantiles
        self.register_buffer("taus", taus)

    def quantiles(self, tensordict: TensorDictBase) -> torch.Tensor:
        """``theta_i(s, a)`` ``[*B, num_actions, num_quantiles]``."""
        return self._outputs(tensordict)

    def action_values(self, tensordict: TensorDictBase) -> torch.Tensor:
        return self.quantiles(tensordict).mean(-1)


class IQNQValueActor(_GreedyQActor):
    """IQN's network (Dabney et al. 2018, arXiv 1806.06923): return quantiles at any fractions
    ``tau``, ``Z_tau(s, a) = head(psi(s) * phi(tau))`` with the cosine embedding
    ``phi(tau) = ReLU(Linear(cos(pi i tau), i = 0..num_cosines-1))``.

    The greedy action maximizes the mean of ``num_policy_taus`` quantiles: fractions drawn
    uniformly while collecting and training, evenly spaced (``(i + 1/2) / K``) under
    ``InteractionType.DETERMINISTIC`` so that evaluation is repeatable.

    Args:
        feature_net: ``psi``, observations (``[*B, obs]``, or frames through a CNN's
            features-only form) to features ``[*B, F]``.
        head: ``[*B, N, F]`` to ``[*B, N, num_actions]``.
        num_actions: discrete actions.
        features: ``F``. ``num_cosines``: size of the cosine basis (64 in the paper).

    Shapes:
        :meth:`quantiles` ``(td, taus [B, N]) -> [B, num_actions, N]``; writes what
        ``QValueActor`` writes.
    """

    def __init__(
        self,
        feature_net: nn.Module,
        head: nn.Module,
        num_actions: int,
        features: int,
        *,
        num_cosines: int = 64,
        num_policy_taus: int = 32,
        in_key: NestedKey = OBSERVATION,
    ) -> None:
        super().__init__()
        check_counts(type(self).__name__, num_cosines=num_cosines, num_policy_taus=num_policy_taus)
        self.feature_net, self.head = feature_net, head
        self.embedding = nn.Linear(num_cosines, features)
        self.num_actions, self.num_policy_taus = num_actions, num_policy_taus
        self.register_buffer("frequencies", torch.arange(num_cosines) * math.pi)
        self.in_keys = [in_key]
        self.out_keys = [ACTION_VALUE, ACTION, CHOSEN_ACTION_VALUE]

    frequencies: torch.Tensor

    def features(self, tensordict: TensorDictBase) -> torch.Tensor:
        """``psi(s)`` ``[B, F]``."""
        name, key = type(self).__name__, self.in_keys[0]
        return _apply(self.feature_net, require(tensordict, key, name), key, name)

    def quantiles(self, tensordict: TensorDictBase, taus: torch.Tensor) -> torch.Tensor:
        """``Z_tau(s, .)`` at ``taus`` ``[B, N]``: ``[B, num_actions, N]``."""
        return self.quantiles_of(self.features(tensordict), taus)

    def quantiles_of(self, psi: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
        """:meth:`quantiles` from features ``psi`` ``[B, F]`` already computed."""
        phi = torch.relu(self.embedding(torch.cos(taus.unsqueeze(-1) * self.frequencies)))
        out = self.head(psi.unsqueeze(-2) * phi)  # [B, N, A]
        if out.shape[-1] != self.num_actions:
            raise ValueError(
                f"IQNQValueActor: the head gives {out.shape[-1]} outputs, expected num_actions "
                f"= {self.num_actions}"
            )
        return out.transpose(-1, -2)

    def policy_taus(self, batch: int, like: torch.Tensor) -> torch.Tensor:
        """The fractions the greedy action averages over, ``[batch, num_policy_taus]``."""
        K = self.num_policy_taus
        if _noiseless():
            even = (torch.arange(K, dtype=like.dtype, device=like.device) + 0.5) / K
            return even.expand(batch, K)
        return torch.rand(batch, K, dtype=like.dtype, device=like.device)

    def action_values(self, tensordict: TensorDictBase) -> torch.Tensor:
        """Expected returns ``[*B, num_actions]`` (:meth:`expected_of` the features). The batch
        dims are those of the features ``[*B, F]``, so any observation layout the feature net
        reads works (flat vectors, or frames ``[*B, C, H, W]`` through a CNN)."""
        psi = self.features(tensordict)
        values = self.expected_of(psi.reshape(-1, psi.shape[-1]))
        return values.reshape(*psi.shape[:-1], self.num_actions)

    def expected_of(self, psi: torch.Tensor) -> torch.Tensor:
        """IQN: the mean of the quantiles at :meth:`policy_taus` ``[B, num_actions]``."""
        taus = self.policy_taus(psi.shape[0], psi)
        return self.quantiles_of(psi, taus).mean(-1)


class FQFQValueActor(IQNQValueActor):
    """FQF's network (Yang et al. 2019, arXiv 1911.02140): IQN's quantile function evaluated at
    fractions that a fraction proposal network chooses for each state.

    ``q = softmax(W psi(s))`` (``psi`` detached: the proposal does not shape the features),
    ``tau_0 = 0, tau_i = q_1 + ... + q_i`` (so ``tau_N = 1``), ``tau_hat_i = (tau_i +
    tau_{i+1}) / 2``, and ``Q(s, a) = sum_i (tau_{i+1} - tau_i) Z_{tau_hat_i}(s, a)`` (eq. 5):
    deterministic, so greedy evaluation needs no fixed fractions.

    Args:
        *args, **kwargs: :class:`IQNQValueActor`'s (``feature_net, head, num_actions, features``,
            ``num_cosines``, ``in_key``).
        num_fractions: ``N`` (32 in the paper).

    Shapes:
        :meth:`fractions` ``[B, F] -> (tau [B, N+1], tau_hat [B, N], entropy [B])``; writes what
        ``QValueActor`` writes.
    """

    def __init__(self, *args: Any, num_fractions: int = 32, **kwargs: Any) -> None:
        check_counts(type(self).__name__, num_fractions=num_fractions)
        super().__init__(*args, **kwargs)
        features = self.embedding.out_features
        self.fraction_net = nn.Linear(features, num_fractions)
        # The paper's initialization: Xavier uniform with gain 0.01, so the first proposals are
        # nearly even.
        nn.init.xavier_uniform_(self.fraction_net.weight, gain=0.01)
        nn.init.zeros_(self.fraction_net.bias)
        self.num_fractions = num_fractions

    def fractions(self, psi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(tau, tau_hat, entropy)`` of the proposal for features ``psi`` ``[B, F]``."""
        log_q = torch.log_softmax(self.fraction_net(psi.detach()), dim=-1)  # [B, N]
        q = log_q.exp()
        inner = torch.cumsum(q, dim=-1)[..., :-1]
        tau = torch.cat([torch.zeros_like(q[..., :1]), inner, torch.ones_like(q[..., :1])], dim=-1)
        tau_hat = (tau[..., :-1] + tau[..., 1:]) / 2
        return tau, tau_hat, -(q * log_q).sum(-1)

    def expected(self, quantiles: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        """``sum_i (tau_{i+1} - tau_i) Z_i``: ``[B, n, N]``, ``[B, N+1]`` -> ``[B, n]``."""
        return (quantiles * (tau[..., 1:] - tau[..., :-1]).unsqueeze(-2)).sum(-1)

    def expected_of(self, psi: torch.Tensor) -> torch.Tensor:
        """FQF: ``Q(s, .)`` at the fractions proposed for ``psi`` ``[B, num_actions]``."""
        tau, tau_hat, _ = self.fractions(psi)
        return self.expected(self.quantiles_of(psi, tau_hat), tau)
