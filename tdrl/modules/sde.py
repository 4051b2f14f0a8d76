"""Generalized state-dependent exploration (gSDE; Raffin, Kober & Stulp 2021, arXiv 2005.05719):
a Gaussian policy whose exploration noise is a linear function of the policy's own features,
with the function's weights held for several steps (smooth, repeatable exploration)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType
from tensordict.nn.probabilistic import interaction_type
from tensordict.utils import NestedKey
from torch import nn
from torch.distributions import Distribution

from tdrl.keyed import check_counts
from tdrl.keys import ACTION, ACTION_LOG_PROB, LOC, OBSERVATION, SCALE
from tdrl.modules.actors import Bound, _apply, _bounds, _ProbabilisticActor
from tdrl.modules.distributions import IndependentNormal

__all__ = ["GSDEActor"]

_EPS = 1e-6  # added to the variance (SB3's StateDependentNoiseDistribution.epsilon)


class GSDEActor(_ProbabilisticActor):
    """Gaussian policy with state-dependent exploration (gSDE).

    ::

        z      = body(s)                    features [*B, F]; phi = z detached
        loc    = W z + b                    the mean
        scale  = sqrt(phi^2 sigma^2 + eps)  [*B, A]; sigma = exp(log_std) [F, A]
        action = loc + phi E                while collecting: E ~ N(0, sigma^2) [F, A] per env,
                                            drawn anew every ``sample_freq`` calls

    ``get_dist`` (what the losses read) is ``N(loc, scale)``, the law of ``loc + phi E`` over ``E``
    (``Var[phi E]_k = sum_j phi_j^2 sigma_jk^2``: E's entries are independent); ``action_log_prob``
    is the action's log-density under it. Deterministic mode (evaluation) acts with ``loc``. ``phi``
    is detached, as SB3's ``learn_features=False``. The held noise and the call count are buffers:
    checkpoints keep them, so a resumed run explores as an uninterrupted one would. Actions are
    rescaled to the env's bounds like :class:`~tdrl.modules.GaussianActor`'s.

    Args:
        body: observations ``[*B, obs]`` to features ``[*B, F]`` (e.g. an MLP ending in an
            activation).
        latent_dim: ``F``. ``action_dim``: ``A``.
        init_log_std: initial ``log sigma`` for every (feature, action) pair (SB3: 0; the zoo
            often -2).
        sample_freq: calls (env steps while collecting) between noise draws (SB3's
            ``sde_sample_freq``; SB3 also draws at each rollout's start, this actor only
            every ``sample_freq`` calls, across batch cuts; ``reset_noise`` draws at any
            time). A sampling call on another number of envs draws new noise for it.
        in_key, action_low, action_high, default_interaction_type: as ``GaussianActor``.

    Shapes:
        reads ``[*B, obs]``; writes ``loc``, ``scale``, ``action`` ``[*B, A]``,
        ``action_log_prob`` ``[*B]``; the held noise is ``[B, F, A]`` for calls whose
        features are ``[B, F]`` (an image observation too; one unbatched env counts as
        ``B = 1``); ``[B, T]`` sequences draw noise afresh.
    """

    noise: torch.Tensor
    calls: torch.Tensor

    noise_buffers = ("noise", "calls")
    """The exploration matrix and its resampling count belong to the copy that acts (the
    :mod:`tdrl.modules.noise` convention): weight updates sent to workers leave them alone."""

    def __init__(
        self,
        body: nn.Module,
        latent_dim: int,
        action_dim: int,
        *,
        init_log_std: float = 0.0,
        sample_freq: int = 4,
        in_key: NestedKey = OBSERVATION,
        action_low: Bound = None,
        action_high: Bound = None,
        default_interaction_type: InteractionType = InteractionType.DETERMINISTIC,
    ) -> None:
        super().__init__(None, in_key, [LOC, SCALE], default_interaction_type)
        check_counts(
            type(self).__name__, latent_dim=latent_dim, action_dim=action_dim,
            sample_freq=sample_freq,
        )  # fmt: skip
        self.body = body
        self.head = nn.Linear(latent_dim, action_dim)
        nn.init.orthogonal_(self.head.weight, gain=0.01)  # the policy head of SB3 and tdrl
        nn.init.zeros_(self.head.bias)
        self.log_std = nn.Parameter(torch.full((latent_dim, action_dim), float(init_log_std)))
        self.latent_dim, self.action_dim, self.sample_freq = latent_dim, action_dim, sample_freq
        low, high = _bounds(action_low, action_high)
        mid, half = ((high + low) / 2).expand(action_dim), ((high - low) / 2).expand(action_dim)
        self.register_buffer("action_mid", mid.clone(), persistent=False)
        self.register_buffer("action_half", half.clone(), persistent=False)
        self.register_buffer("noise", torch.zeros(0, latent_dim, action_dim))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def _features(self, observation: torch.Tensor) -> torch.Tensor:
        latent = _apply(self.body, observation, self.in_keys[0], "GSDEActor")
        if latent.shape[-1] != self.latent_dim:
            raise ValueError(
                f"GSDEActor: the body gives {latent.shape[-1]} features, latent_dim is "
                f"{self.latent_dim}"
            )
        return latent

    def _params_of(self, latent: torch.Tensor) -> dict[NestedKey, torch.Tensor]:
        phi = latent.detach()
        variance = phi.pow(2) @ torch.exp(2 * self.log_std)  # [*B, A]
        scale = torch.sqrt(variance + _EPS)
        loc = self.action_mid + self.action_half * self.head(latent)
        return {LOC: loc, SCALE: self.action_half * scale}

    def _params(self, observation: torch.Tensor) -> dict[NestedKey, torch.Tensor]:
        return self._params_of(self._features(observation))

    def _dist(self, params: dict[NestedKey, torch.Tensor]) -> Distribution:
        return IndependentNormal(params[LOC], params[SCALE])

    @torch.no_grad()
    def reset_noise(self, batch: int | None = None) -> None:
        """Draw new exploration weights ``E ~ N(0, sigma^2)`` for ``batch`` envs (default: as
        many as now held)."""
        n = self.noise.shape[0] if batch is None else batch
        std = torch.exp(self.log_std)
        self.noise = torch.randn(n, *std.shape, dtype=std.dtype, device=std.device) * std

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        observation = tensordict.get(self.in_keys[0], None)
        mode = interaction_type() or self.default_interaction_type
        if mode is not InteractionType.RANDOM or observation is None:
            return super().forward(tensordict)  # evaluation
        latent = self._features(observation)  # [B, F] steps, whatever the observation's rank
        if latent.dim() > 2:  # [B, T] sequences are no env steps: noise drawn afresh
            return super().forward(tensordict)
        single = latent.dim() == 1  # one unbatched env (a plain TorchRL env): a batch of 1
        if single:
            latent = latent.unsqueeze(0)
        params = self._params_of(latent)
        batch = latent.shape[0]
        if self.noise.shape[0] != batch or int(self.calls) % self.sample_freq == 0:
            self.reset_noise(batch)
        self.calls += 1
        # loc + phi E, per env: [B, 1, F] @ [B, F, A]
        noise = (latent.detach().unsqueeze(-2) @ self.noise).squeeze(-2)
        action = params[LOC] + self.action_half * noise
        if single:
            params = {key: value.squeeze(0) for key, value in params.items()}
            action = action.squeeze(0)
        for key, value in params.items():
            tensordict.set(key, value)
        tensordict.set(ACTION, action)
        tensordict.set(ACTION_LOG_PROB, self._dist(params).log_prob(action))
        return tensordict

    def _load_from_state_dict(
        self,
        state_dict: Mapping[str, Any],
        prefix: str,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        # The held noise has one matrix per env: take the checkpoint's shape before loading.
        held = state_dict.get(prefix + "noise")
        if isinstance(held, torch.Tensor) and held.shape != self.noise.shape:
            self.noise = torch.zeros_like(held, device=self.noise.device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
