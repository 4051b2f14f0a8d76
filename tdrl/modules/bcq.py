"""BCQ's networks (Fujimoto, Meger & Precup 2019, arXiv 1812.02900): the conditional VAE of the
data's actions and the perturbation model. The loss and the acting module that combine them with
the critics are in :mod:`tdrl.objectives.bcq`."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn
from torchrl.data import Composite, TensorSpec

from tdrl.keyed import require
from tdrl.keys import ACTION, OBSERVATION
from tdrl.modules.actors import Bound, _apply, _register_bounds, _tanh_to_box
from tdrl.modules.mlp import mlp
from tdrl.modules.networks import action_bounds, flat_dims, torch_default_init_


class _BoundedActions(TensorDictModuleBase):
    """``in_keys`` ``(observation, action)``, writes ``"action"``; the box as buffers."""

    def __init__(
        self,
        action_dim: int,
        in_keys: Sequence[NestedKey],
        action_low: Bound,
        action_high: Bound,
    ) -> None:
        super().__init__()
        self.action_dim = action_dim
        self.in_keys = list(in_keys)
        self.out_keys = [ACTION]
        _register_bounds(self, action_dim, action_low, action_high)

    def _run(self, net: nn.Module, parts: list[torch.Tensor], width: int) -> torch.Tensor:
        """``net`` on the concatenated ``parts``, checked to give ``width`` outputs."""
        owner = type(self).__name__
        out = _apply(net, torch.cat(parts, dim=-1), self.in_keys[0], owner)
        if out.shape[-1] != width:
            raise ValueError(f"{owner}: a network must output {width} values, got {out.shape}")
        return out

    def _squash(self, pre_tanh: torch.Tensor) -> torch.Tensor:
        return _tanh_to_box(pre_tanh, self.action_low, self.action_high)


class BCQVAE(_BoundedActions):
    """The conditional VAE ``G_omega(s)`` of the data's actions (Fujimoto et al. 2019, sec. 4.1):

    ::

        (mean, log_std) = encoder([s, a]),  log_std clamped to [-4, 15]   (authors' code)
        z               = mean + std eps,  eps ~ N(0, 1)                   (training)
        z               ~ clip(N(0, 1), -max_latent, max_latent)            (sampling, 0.5)
        a~              = mid + half tanh(decoder([s, z]))                  (in the action box)

    Clipping the latent at sampling keeps the generated actions in the likely part of the data's
    distribution (sec. 4.1 and the supplementary material). ``forward`` writes one sampled
    action: the VAE alone is a behaviour-cloning policy.

    Args:
        encoder: ``[*B, obs + A] -> [*B, 2 L]`` (mean, then log-std).
        decoder: ``[*B, obs + L] -> [*B, A]`` pre-tanh.
        latent_dim: ``L`` (``2 A`` in the paper). ``action_dim``: ``A``.
        in_keys: observation and action keys. ``action_low``/``action_high``: the box.

    Shapes:
        observation ``[*B, obs]``; action ``[*B, A]``; mean and std ``[*B, L]``.
    """

    def __init__(
        self,
        encoder: nn.Module,
        decoder: nn.Module,
        latent_dim: int,
        action_dim: int,
        *,
        max_latent: float = 0.5,
        in_keys: Sequence[NestedKey] = (OBSERVATION, ACTION),
        action_low: Bound = None,
        action_high: Bound = None,
    ) -> None:
        super().__init__(action_dim, in_keys, action_low, action_high)
        if latent_dim < 1 or not max_latent > 0:
            raise ValueError(
                f"need latent_dim >= 1 and max_latent > 0, got {latent_dim}, {max_latent}"
            )
        self.encoder, self.decoder = encoder, decoder
        self.latent_dim, self.max_latent = latent_dim, max_latent

    def encode(
        self, observation: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, std)`` of ``q(z | s, a)``."""
        out = self._run(self.encoder, [observation, action], 2 * self.latent_dim)
        mean, log_std = out.chunk(2, dim=-1)
        return mean, log_std.clamp(-4.0, 15.0).exp()

    def decode(self, observation: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        """``a~`` for latent ``z``; without one, ``z`` is drawn and clipped to ``max_latent``."""
        if z is None:
            shape = (*observation.shape[:-1], self.latent_dim)
            z = torch.randn(shape, device=observation.device, dtype=observation.dtype)
            z = z.clamp(-self.max_latent, self.max_latent)
        return self._squash(self._run(self.decoder, [observation, z], self.action_dim))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        observation = require(tensordict, self.in_keys[0], "BCQVAE")
        tensordict.set(ACTION, self.decode(observation))
        return tensordict


class BCQPerturbation(_BoundedActions):
    """The perturbation model ``xi_phi(s, a, Phi)`` (Fujimoto et al. 2019, sec. 4.1):

    ::

        a' = clip(a + Phi half tanh(net([s, a])), low, high)

    ``half = (high - low) / 2``, so the adjustment lies in ``[-Phi, Phi]`` times the half range
    (the paper's ``[-Phi, Phi]`` for actions in ``[-1, 1]``; the authors' ``phi * max_action``).

    Args:
        net: ``[*B, obs + A] -> [*B, A]`` pre-tanh.
        action_dim: ``A``. ``phi``: ``Phi`` (0.05 in the paper).
        in_keys: observation and action keys. ``action_low``/``action_high``: the box.

    Shapes:
        reads ``[*B, obs]`` and ``[*B, A]``; writes ``action`` ``[*B, A]``.
    """

    def __init__(
        self,
        net: nn.Module,
        action_dim: int,
        *,
        phi: float = 0.05,
        in_keys: Sequence[NestedKey] = (OBSERVATION, ACTION),
        action_low: Bound = None,
        action_high: Bound = None,
    ) -> None:
        super().__init__(action_dim, in_keys, action_low, action_high)
        if not phi > 0:
            raise ValueError(f"phi must be > 0, got {phi}")
        self.net, self.phi = net, phi

    def action(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The perturbed action; nothing is written."""
        parts = [require(tensordict, key, "BCQPerturbation") for key in self.in_keys]
        adjustment = torch.tanh(self._run(self.net, parts, self.action_dim))
        half = (self.action_high - self.action_low) / 2
        action = parts[1] + self.phi * half * adjustment
        return torch.maximum(torch.minimum(action, self.action_high), self.action_low)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict.set(ACTION, self.action(tensordict))
        return tensordict


def bcq_vae(
    observation_spec: Composite,
    action_spec: TensorSpec,
    hidden_sizes: Sequence[int] = (750, 750),
    latent_dim: int | None = None,
) -> BCQVAE:
    """BCQ's VAE for an env's specs: ReLU MLPs with PyTorch's default init, latent ``2 A``
    (the authors' sizes: 750x750, latent twice the action size)."""
    obs_dim, action_dim = flat_dims(observation_spec, action_spec)
    latent = 2 * action_dim if latent_dim is None else latent_dim
    low, high = action_bounds(action_spec)

    def net(in_features: int, out_features: int) -> nn.Module:
        layers = mlp(in_features, out_features, hidden_sizes, activation=nn.ReLU)
        return torch_default_init_(layers)

    encoder, decoder = net(obs_dim + action_dim, 2 * latent), net(obs_dim + latent, action_dim)
    return BCQVAE(encoder, decoder, latent, action_dim, action_low=low, action_high=high)


def bcq_perturbation(
    observation_spec: Composite,
    action_spec: TensorSpec,
    hidden_sizes: Sequence[int] = (400, 300),
    phi: float = 0.05,
) -> BCQPerturbation:
    """BCQ's perturbation model for an env's specs: a ReLU MLP with PyTorch's default init
    (the authors' 400x300)."""
    obs_dim, action_dim = flat_dims(observation_spec, action_spec)
    low, high = action_bounds(action_spec)
    net = torch_default_init_(
        mlp(obs_dim + action_dim, action_dim, hidden_sizes, activation=nn.ReLU)
    )
    return BCQPerturbation(net, action_dim, phi=phi, action_low=low, action_high=high)
