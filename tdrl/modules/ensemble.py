"""Critic ensembles evaluated in one batched call.

Twin critics (TD3, SAC), the N critics of REDQ and the two discrete critics of discrete SAC are
all ``E`` copies of one architecture fed the same input. ``EnsembleLinear`` stores the ``E``
weight matrices as one ``[E, in, out]`` tensor and runs them with a single ``torch.baddbmm``, so
an ensemble costs one kernel per layer instead of ``E`` (the trick of Chen et al.'s REDQ code and
of CleanRL/JAX ``vmap`` critics). (A loss given a single critic from elsewhere replicates it with
``tdrl.objectives.critic_ensemble.ModuleEnsemble``, ``torch.vmap`` over stacked parameters.)

``EnsembleCritic`` exposes ``num_members`` and ``values(td) -> [E, *B, out]``, the interface
tdrl losses use; its ``forward`` writes the values with the ensemble dim after the batch dims,
``[*B, E, out]``, because a TensorDict entry must start with the batch shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, cast

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn

from tdrl.keyed import require
from tdrl.keys import ACTION, OBSERVATION, STATE_ACTION_VALUE

Init = Literal["default", "orthogonal"]


class EnsembleLinear(nn.Module):
    """``E`` independent linear layers applied in one ``baddbmm``.

    Args:
        in_features: input width.
        out_features: output width.
        num_members: ensemble size ``E``.
        init: ``"default"`` (``nn.Linear``'s uniform(+-1/sqrt(in)) per member) or
            ``"orthogonal"`` (orthogonal weights with ``gain`` per member, zero bias).
        gain: orthogonal gain.

    Shapes:
        ``[*B, in]`` (shared by all members) or ``[E, *B, in]`` -> ``[E, *B, out]``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        num_members: int,
        *,
        init: Init = "default",
        gain: float = 1.0,
    ) -> None:
        super().__init__()
        if num_members < 1:
            raise ValueError(f"num_members must be >= 1, got {num_members}")
        self.in_features = in_features
        self.out_features = out_features
        self.num_members = num_members
        self.init = init
        self.gain = gain
        self.weight = nn.Parameter(torch.empty(num_members, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(num_members, 1, out_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-initialise every member independently."""
        with torch.no_grad():
            if self.init == "orthogonal":
                for member in self.weight:
                    # nn.Linear's weight is [out, in]; orthogonalise that view of the member.
                    nn.init.orthogonal_(member.T, gain=self.gain)
                self.bias.zero_()
            elif self.init == "default":
                bound = 1.0 / math.sqrt(self.in_features)
                self.weight.uniform_(-bound, bound)
                self.bias.uniform_(-bound, bound)
            else:
                raise ValueError(f"init must be 'default' or 'orthogonal', got {self.init!r}")

    def forward(self, x: torch.Tensor, shared: bool = True) -> torch.Tensor:
        """Apply the ``E`` layers; ``shared`` says ``x`` has no leading ensemble dim."""
        # The common inputs ([B, in] shared, [E, B, in] per member) go in as they are: every
        # reshape or view is one more autograd node, and the update step is overhead-bound.
        if shared:
            batch = x.shape[:-1]
            if x.dim() == 2:
                flat = x.expand(self.num_members, -1, -1)
            else:
                flat = x.reshape(1, -1, self.in_features).expand(self.num_members, -1, -1)
        else:
            batch = x.shape[1:-1]
            flat = x if x.dim() == 3 else x.reshape(self.num_members, -1, self.in_features)
        if self.out_features == 1:
            # A value head: as a batched matrix-vector product (MKL gemm with one output column)
            # it runs ~5x slower than a multiply-and-sum, forward and backward (167 vs 30 us
            # forward, 529 vs 130 us with backward; E=2, B=256, 256 inputs, one thread). That
            # is ~7% of a SAC gradient step (benchmarks/updates.py).
            out = (flat * self.weight.transpose(1, 2)).sum(-1, keepdim=True) + self.bias
        else:
            out = torch.baddbmm(self.bias, flat, self.weight)
        return out if len(batch) == 1 else out.view(self.num_members, *batch, self.out_features)

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, num_members={self.num_members}"


class EnsembleMLP(nn.Module):
    """``E`` MLPs of one architecture run as batched matrix products.

    Args:
        in_features: input width.
        out_features: output width.
        hidden_sizes: hidden widths.
        num_members: ensemble size ``E``.
        activation: activation class after every hidden layer.
        init: ``"default"`` or ``"orthogonal"`` (see :class:`EnsembleLinear`).
        hidden_gain: orthogonal gain of the hidden layers.
        output_gain: orthogonal gain of the last layer.

    Shapes:
        ``[*B, in]`` -> ``[E, *B, out]``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        hidden_sizes: Sequence[int] = (256, 256),
        *,
        num_members: int = 2,
        activation: type[nn.Module] = nn.ReLU,
        init: Init = "default",
        hidden_gain: float = math.sqrt(2.0),
        output_gain: float = 1.0,
    ) -> None:
        super().__init__()
        self.num_members = num_members
        widths = [in_features, *hidden_sizes]
        self.hidden = nn.ModuleList(
            EnsembleLinear(a, b, num_members, init=init, gain=hidden_gain)
            for a, b in zip(widths[:-1], widths[1:], strict=True)
        )
        self.activation = activation()
        self.output = EnsembleLinear(
            widths[-1], out_features, num_members, init=init, gain=output_gain
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # ReLU in place on the fresh layer output (baddbmm's backward does not read its output):
        # one [E, B, H] buffer less per layer, ~5% of a SAC gradient step at batch 256.
        relu_in_place = type(self.activation) is nn.ReLU
        shared = True
        for layer in self.hidden:
            x = layer(x, shared)
            x = torch.relu_(x) if relu_in_place else self.activation(x)
            shared = False
        return self.output(x, shared)


class EnsembleCritic(TensorDictModuleBase):
    """Keyed critic ensemble: ``Q_e([in_keys...])`` for ``e < E`` in one call.

    With ``in_keys=("observation", "action")`` it is a state-action critic ensemble (TD3, SAC,
    REDQ); with ``in_keys=("observation",)`` and ``out_key="action_value"`` a discrete Q ensemble
    (discrete SAC). The inputs are concatenated on the last dim.

    Args:
        net: an ensemble network with ``num_members``, e.g. :class:`EnsembleMLP`.
        in_keys: keys concatenated into the network input.
        out_key: key written by ``forward``.

    Shapes:
        ``values``: ``[E, *B, out]``; ``forward`` writes ``[*B, E, out]``.
    """

    def __init__(
        self,
        net: nn.Module,
        *,
        in_keys: Sequence[NestedKey] = (OBSERVATION, ACTION),
        out_key: NestedKey = STATE_ACTION_VALUE,
    ) -> None:
        super().__init__()
        self.net = net
        self.num_members = int(cast(Any, net).num_members)
        self.in_keys = list(in_keys)
        self.out_keys = [out_key]

    def values(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The ``E`` members' outputs, ensemble dim first; nothing is written."""
        inputs = [require(tensordict, key, "EnsembleCritic") for key in self.in_keys]
        x = inputs[0] if len(inputs) == 1 else torch.cat(inputs, dim=-1)
        try:
            return self.net(x)
        except RuntimeError as error:
            shapes = {key: tuple(v.shape) for key, v in zip(self.in_keys, inputs, strict=True)}
            raise ValueError(f"EnsembleCritic: the network failed on {shapes}: {error}") from error

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict.set(self.out_keys[0], self.values(tensordict).movedim(0, -2))
        return tensordict
