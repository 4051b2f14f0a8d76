"""Critic ensembles, all in one place: the batched ensembles tdrl builds and the wrapper that
turns any single keyed critic into an ensemble.

Twin critics (TD3, SAC), the N critics of REDQ and the two discrete critics of discrete SAC are
all ``E`` copies of one architecture fed the same input. ``EnsembleLinear`` stores the ``E``
weight matrices as one ``[E, in, out]`` tensor and runs them with a single ``torch.baddbmm``, so
an ensemble costs one kernel per layer instead of ``E`` (the trick of Chen et al.'s REDQ code and
of CleanRL/JAX ``vmap`` critics). A loss given a single critic from elsewhere (a TorchRL
``ValueOperator``, a tdrl ``StateActionCritic``) together with ``num_qvalue_nets = E`` makes it a
:class:`ModuleEnsemble`: ``E`` independently initialised copies whose parameters are stacked
(``torch.func.stack_module_state``) and run with ``torch.vmap``, as TorchRL's losses do
(:func:`as_ensemble`).

Every ensemble exposes ``num_members`` and ``values(td) -> [E, *B, out]``, the interface tdrl
losses use; ``forward`` writes the values with the ensemble dim after the batch dims,
``[*B, E, out]``, because a TensorDict entry must start with the batch shape. This module sits
below ``tdrl.modules`` and ``tdrl.objectives`` (both re-export its names).
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, cast

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn
from torch.func import functional_call, stack_module_state
from torch.nn import functional as F

from tdrl.keyed import check_counts, require, tracing
from tdrl.keys import ACTION, OBSERVATION, STATE_ACTION_VALUE
from tdrl.modules.actors import encoder_of
from tdrl.modules.renorm import BatchRenorm

Init = Literal["default", "orthogonal"]
Reduce = Literal["min", "first"]
Members = int | torch.Tensor | None  # all members, the first n, or an index tensor of members


def member_rows(*tensors: torch.Tensor, members: Members) -> list[torch.Tensor]:
    """The rows of per-member ``tensors`` (``[E, ...]``) that ``members`` names: all of them
    (None), the first ``n`` (an int), or those of an index tensor, in its order."""
    if isinstance(members, torch.Tensor):
        return [t.index_select(0, members) for t in tensors]
    if members is not None:
        return [t[:members] for t in tensors]
    return list(tensors)


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
        check_counts(type(self).__name__, num_members=num_members)
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

    def forward(
        self, x: torch.Tensor, shared: bool = True, members: Members = None
    ) -> torch.Tensor:
        """Apply the ``E`` layers, or only the ``members`` given (a count: the first ones; an
        index tensor: those, in its order); ``shared`` says ``x`` has no leading ensemble dim."""
        weight, bias = member_rows(self.weight, self.bias, members=members)
        e = weight.shape[0]
        if x.shape[-1] != self.in_features:  # the one-output product below would broadcast it
            raise ValueError(
                f"{type(self).__name__}: input has {x.shape[-1]} features (shape "
                f"{tuple(x.shape)}), the layer takes {self.in_features}"
            )
        # The common inputs ([B, in] shared, [E, B, in] per member) go in as they are: every
        # reshape or view is one more autograd node, and the update step is overhead-bound.
        if shared:
            batch = x.shape[:-1]
            if x.dim() == 2:
                flat = x.expand(e, -1, -1)
            else:
                flat = x.reshape(1, -1, self.in_features).expand(e, -1, -1)
        else:
            batch = x.shape[1:-1]
            flat = x if x.dim() == 3 else x.reshape(e, -1, self.in_features)
        if self.out_features == 1:
            # A value head: as a batched matrix-vector product (MKL gemm with one output column)
            # it runs ~5x slower than a multiply-and-sum, forward and backward: ~7% of a SAC
            # gradient step (benchmarks/updates.py).
            out = (flat * weight.transpose(1, 2)).sum(-1, keepdim=True) + bias
        else:
            out = torch.baddbmm(bias, flat, weight)
        return out if len(batch) == 1 else out.view(e, *batch, self.out_features)

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
        dropout: the rate of a dropout after every hidden linear layer (DroQ: Hiraoka et al.
            2022, arXiv 2110.02034; linear, dropout, LayerNorm, activation), in ``[0, 1)``;
            active while the module is in training mode.
        layer_norm: a LayerNorm (affine, per member) after every hidden linear layer (and its
            dropout).
        batch_renorm: keyword arguments of a :class:`~tdrl.modules.renorm.BatchRenorm` before
            every linear layer, the input's included (CrossQ: Bhatt et al. 2024; sb3-contrib's
            critic), or None.

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
        dropout: float = 0.0,
        layer_norm: bool = False,
        batch_renorm: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"EnsembleMLP: dropout must be in [0, 1), got {dropout}")
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
        self.dropout = dropout
        self.norms = nn.ModuleList(
            MemberLayerNorm(width, num_members) for width in widths[1:] if layer_norm
        )
        self.renorms = nn.ModuleList()
        if batch_renorm is not None:  # one before each linear layer, the output's included
            self.renorms.extend(
                BatchRenorm(width, (num_members,), **batch_renorm) for width in widths
            )
        # the plain ReLU MLP, which _FrozenMin's hand-written backward reproduces
        self.plain = not (dropout or layer_norm or batch_renorm is not None)

    def forward(self, x: torch.Tensor, members: Members = None) -> torch.Tensor:
        """``[E, *B, out]``: every member's output, or the ``members`` given only (a count:
        the first ones; an index tensor: those, in its order, ``[len(members), *B, out]``)."""
        # ReLU in place on the fresh layer output (baddbmm's backward does not read its output):
        # one [E, B, H] buffer less per layer, ~5% of a SAC gradient step at batch 256.
        relu_in_place = type(self.activation) is nn.ReLU
        if not self.plain:
            return self._forward_normalized(x, members, relu_in_place)
        shared = True
        for layer in self.hidden:
            x = layer(x, shared, members)
            x = torch.relu_(x) if relu_in_place else self.activation(x)
            shared = False
        return self.output(x, shared, members)

    def _forward_normalized(
        self, x: torch.Tensor, members: Members, relu_in_place: bool
    ) -> torch.Tensor:
        """:meth:`forward` with batch renorm, dropout or LayerNorm in the layers."""
        if members is not None and self.renorms:
            raise ValueError("EnsembleMLP: a member subset cannot run through batch renorm")
        lead = x.shape[:-1]
        shared = True
        for i, layer in enumerate(self.hidden):
            if self.renorms:
                x, shared = self._renorm(i, x, shared, lead), False
            x = layer(x, shared, members)
            if self.dropout and self.training:
                x = dropout(x, self.dropout)
            if self.norms:
                x = self.norms[i](x, members)
            x = torch.relu_(x) if relu_in_place else self.activation(x)
            shared = False
        if self.renorms:
            x, shared = self._renorm(len(self.hidden), x, shared, lead), False
        return self.output(x, shared, members)

    def _renorm(self, i: int, x: torch.Tensor, shared: bool, lead: Any) -> torch.Tensor:
        """The ``i``-th batch renorm on ``[E, B, F]`` (the batch dims of a shared ``[*B, F]``
        input flattened into one)."""
        if shared:
            x = x.reshape(1, -1, x.shape[-1])
        elif x.dim() != 3:
            x = x.reshape(x.shape[0], -1, x.shape[-1])
        out = self.renorms[i](x)
        return out if len(lead) == 1 else out.view(self.num_members, *lead, out.shape[-1])

    def reduced(self, x: torch.Tensor, how: Reduce) -> torch.Tensor:
        """``[*B, out]``: the minimum over the members (``"min"``) or the first member's output
        (``"first"``), as ``self(x).min(0).values`` and ``self(x)[0]`` are.

        For an actor loss, which differentiates the critic's value with respect to its input
        only (the parameters frozen, ``tdrl.objectives.offpolicy.frozen``), each computes less:
        ``"first"`` runs member 0 alone, and ``"min"`` backpropagates each row through the
        member that gave its minimum only (:class:`_FrozenMin`; the others' gradient is zero),
        half the input-gradient products of a twin critic. Equal to the plain expressions (the
        values bitwise; the input's gradient to float32 rounding, as the products run on row
        subsets): tests/modules/test_ensemble.py::test_reduced_equals_plain.
        """
        if how != "min":
            return self(x, members=1)[0] if how == "first" else reduce_members(x, how)
        frozen_input_grad = (
            torch.is_grad_enabled()
            and x.requires_grad
            and x.dim() == 2
            and self.output.out_features == 1
            and type(self.activation) is nn.ReLU
            and self.plain
            and not any(p.requires_grad for p in self.parameters())
            and not tracing()  # its backward finds each member's rows on the host
        )
        if frozen_input_grad:
            return cast(torch.Tensor, _FrozenMin.apply(x, self))
        return reduce_members(self(x), how)


def dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Dropout in training mode: each element zeroed with probability ``p`` independently, the
    rest scaled by ``1 / (1 - p)``, as ``F.dropout``. For a small ``p`` on the CPU the dropped
    positions are drawn as a Bernoulli process, cumulative geometric gaps: the same law from
    ~``p`` of the random draws ``F.dropout`` makes (one per element; at DroQ's 0.01 those were
    a quarter of a DroQ update step on one CPU core, and the step runs 1.3x as fast without)."""
    if x.device.type != "cpu" or p > 0.1 or p <= 0.0 or tracing():  # the gaps: host syncs
        return F.dropout(x, p, True)
    n = x.numel()
    chunk = int(n * p + 6 * math.sqrt(n * p) + 16)
    ends = torch.empty(chunk, dtype=torch.float64).geometric_(p).cumsum_(0)
    while float(ends[-1]) <= n:  # the gaps ran out before the end: more of them
        more = torch.empty(chunk, dtype=torch.float64).geometric_(p).cumsum_(0)
        ends = torch.cat([ends, more + ends[-1]])
    mask = torch.full((n,), 1.0 / (1.0 - p), dtype=x.dtype)
    mask[ends[ends <= n].long() - 1] = 0.0
    return x * mask.view(x.shape)


class MemberLayerNorm(nn.Module):
    """LayerNorm over the last dim with an affine transform per ensemble member."""

    def __init__(self, width: int, num_members: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_members, 1, width))
        self.bias = nn.Parameter(torch.zeros(num_members, 1, width))

    def forward(self, x: torch.Tensor, members: Members = None) -> torch.Tensor:
        weight, bias = member_rows(self.weight, self.bias, members=members)
        out = F.layer_norm(x.reshape(x.shape[0], -1, x.shape[-1]), x.shape[-1:], eps=self.eps)
        return (out * weight + bias).view(x.shape)


class _FrozenMin(torch.autograd.Function):
    """``min_e Q_e(x)`` of a frozen ReLU :class:`EnsembleMLP` with one output, ``x [B, in]``:
    the forward is :meth:`EnsembleMLP.forward`'s (no graph kept), the backward goes to ``x`` only,
    through each row's minimising member (``torch.min``'s rule; its first index on ties)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, mlp: EnsembleMLP) -> torch.Tensor:
        hidden = []
        h, shared = x, True
        for layer in mlp.hidden:
            h = torch.relu_(layer(h, shared))
            hidden.append(h)
            shared = False
        q = mlp.output(h, shared)
        q_min, index = q.min(dim=0)
        ctx.mlp = mlp
        ctx.save_for_backward(index.squeeze(-1), *hidden)
        return q_min

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        index, *hidden = ctx.saved_tensors
        mlp = ctx.mlp
        layers = list(mlp.hidden)
        grad_x = grad.new_empty(index.shape[0], (layers[0] if layers else mlp.output).in_features)
        for member in range(mlp.num_members):
            rows = (index == member).nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            g = grad.index_select(0, rows) * mlp.output.weight[member, :, 0]
            for layer, h in zip(reversed(layers), reversed(hidden), strict=True):
                g = (g * (h[member].index_select(0, rows) > 0)) @ layer.weight[member].T
            grad_x.index_copy_(0, rows, g)
        return grad_x, None


class ConcatCritic(TensorDictModuleBase):
    """A keyed critic whose network reads its ``in_keys`` concatenated on the last dim: the base
    of :class:`EnsembleCritic` and ``tdrl.modules.StateActionCritic``.

    Args:
        net: the network.
        in_keys: keys concatenated into the network input (TorchRL's ``ValueOperator`` keys).
        out_key: key written by ``forward``.
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
        self.in_keys = list(in_keys)
        self.out_keys = [out_key]

    def _net_output(
        self, tensordict: TensorDictBase, net: Callable[[torch.Tensor], torch.Tensor] | None = None
    ) -> torch.Tensor:
        """The network (or ``net``) on the concatenated inputs; an error names their shapes."""
        owner = type(self).__name__
        encoder = encoder_of(self)  # image entries (tdrl.modules.with_encoder)
        if encoder is None:
            inputs = [require(tensordict, key, owner) for key in self.in_keys]
        else:  # its features, then the keys after its entries (the action)
            rest = self.in_keys[len(encoder.in_keys) :]
            inputs = [encoder.features(tensordict), *(require(tensordict, k, owner) for k in rest)]
        try:
            x = inputs[0] if len(inputs) == 1 else torch.cat(inputs, dim=-1)
            return (self.net if net is None else net)(x)
        except (RuntimeError, ValueError) as error:  # EnsembleLinear names widths: ValueError
            names = self.in_keys if encoder is None else [encoder.out_key, *rest]
            shapes = {key: tuple(v.shape) for key, v in zip(names, inputs, strict=True)}
            raise ValueError(f"{owner}: the network failed on {shapes}: {error}") from error


def check_value_dim(value: torch.Tensor, key: NestedKey, owner: str) -> torch.Tensor:
    """``value`` when its last dim is 1 (a value head), else an error naming ``key``."""
    if value.shape[-1] != 1:
        raise ValueError(
            f"{owner}: the network must output a trailing dim of 1 for {key!r}, got shape "
            f"{tuple(value.shape)}"
        )
    return value


class EnsembleCritic(ConcatCritic):
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

    @property
    def num_members(self) -> int:
        """Ensemble size ``E`` (the network's)."""
        return int(cast(Any, self.net).num_members)

    def values(
        self, tensordict: TensorDictBase, members: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The ``E`` members' outputs, ensemble dim first; nothing is written. ``members``: an
        index tensor of the members to run (``[M, *B, out]``, in its order); an
        :class:`EnsembleMLP` runs only those, any other network all of them."""
        if members is None:
            return self._net_output(tensordict)
        if isinstance(self.net, EnsembleMLP):
            return self._net_output(tensordict, functools.partial(self.net, members=members))
        return self._net_output(tensordict).index_select(0, members)

    def reduced_values(self, tensordict: TensorDictBase, how: Reduce) -> torch.Tensor:
        """``[*B, out]``: the members' minimum (``"min"``) or the first member's output
        (``"first"``); through the network's ``reduced`` where it has one
        (:meth:`EnsembleMLP.reduced`: less work for an actor loss), else from :meth:`values`."""
        reduced = getattr(self.net, "reduced", None)
        if reduced is None:
            return reduce_members(self.values(tensordict), how)
        return self._net_output(tensordict, functools.partial(reduced, how=how))

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict.set(self.out_keys[0], self.values(tensordict).movedim(0, -2))
        return tensordict


def reduce_members(values: torch.Tensor, how: Reduce) -> torch.Tensor:
    """``values [E, *B, out]`` -> ``[*B, out]``: the minimum over members, or member 0."""
    if how == "min":
        return values.min(dim=0).values
    if how == "first":
        return values[0]
    raise ValueError(f"how must be 'min' or 'first', got {how!r}")


def _reset_parameters(module: nn.Module) -> None:
    for sub in module.modules():
        reset = getattr(sub, "reset_parameters", None)
        if callable(reset) and sub is not module:
            reset()


class ModuleEnsemble(TensorDictModuleBase):
    """``E`` independently initialised copies of any keyed module, run with ``torch.vmap``.

    This is how a tdrl loss accepts a single critic from elsewhere (a TorchRL ``ValueOperator``,
    a :class:`~tdrl.modules.qvalue.StateActionCritic`) together with ``num_qvalue_nets``, as
    TorchRL's losses do. Member 0 keeps the module's parameters; the others are re-initialised
    with ``reset_parameters`` (when the layers have it). A list of modules of one architecture is
    stacked as given.

    Args:
        module: a keyed module, or a list of ``E`` keyed modules of identical structure.
        num_members: ensemble size ``E`` (ignored for a list).
        out_key: the entry of the module's output that holds the value.

    Shapes:
        ``values``: ``[E, *B, out]``; ``forward`` writes ``[*B, E, out]``.
    """

    def __init__(
        self,
        module: TensorDictModuleBase | Sequence[TensorDictModuleBase],
        num_members: int = 2,
        *,
        out_key: NestedKey = STATE_ACTION_VALUE,
    ) -> None:
        super().__init__()
        if isinstance(module, Sequence):
            members = list(module)
        else:
            check_counts("ModuleEnsemble", num_members=num_members)
            members = [module] + [copy.deepcopy(module) for _ in range(num_members - 1)]
            for member in members[1:]:
                _reset_parameters(member)
        if not members:
            raise ValueError("ModuleEnsemble: got an empty list of modules")
        self.num_members = len(members)
        params, buffers = stack_module_state(members)  # type: ignore[arg-type]
        self._names = list(params)
        self.params = nn.ParameterList(nn.Parameter(params[n].detach()) for n in self._names)
        self._buffer_names = list(buffers)
        for i, name in enumerate(self._buffer_names):
            self.register_buffer(f"buffer_{i}", buffers[name])
        # The structure only: functional_call swaps the stacked tensors in; kept out of
        # ``parameters()`` so optimisers and target copies see each tensor once.
        self.__dict__["_base"] = copy.deepcopy(members[0]).to("meta")
        self.in_keys = list(members[0].in_keys)
        self.out_keys = [out_key]

    def values(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The ``E`` members' outputs, ensemble dim first; nothing is written."""
        inputs = tensordict.select(*self.in_keys, strict=False)
        for key in self.in_keys:
            require(inputs, key, "ModuleEnsemble")
        out_key = self.out_keys[0]
        base = self._base

        def member(params: dict, buffers: dict, td: TensorDictBase) -> torch.Tensor:
            return functional_call(base, (params, buffers), (td.copy(),)).get(out_key)

        params = dict(zip(self._names, self.params, strict=True))
        buffers = {n: getattr(self, f"buffer_{i}") for i, n in enumerate(self._buffer_names)}
        return torch.vmap(member, in_dims=(0, 0, None), randomness="different")(
            params, buffers, inputs
        )

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict.set(self.out_keys[0], self.values(tensordict).movedim(0, -2))
        return tensordict


class SingleCritic(TensorDictModuleBase):
    """A single keyed critic seen as an ensemble of one (DDPG's critic): no ``vmap``.

    Shapes:
        ``values``: ``[1, *B, out]``.
    """

    def __init__(self, module: TensorDictModuleBase, *, out_key: NestedKey = STATE_ACTION_VALUE):
        super().__init__()
        self.module = module
        self.num_members = 1
        self.in_keys = list(module.in_keys)
        self.out_keys = [out_key]

    def values(self, tensordict: TensorDictBase) -> torch.Tensor:
        """The critic's output with a leading ensemble dim of 1; nothing is written."""
        inputs = tensordict.select(*self.in_keys, strict=False)
        return require(self.module(inputs), self.out_keys[0], "SingleCritic").unsqueeze(0)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        tensordict.set(self.out_keys[0], self.values(tensordict).movedim(0, -2))
        return tensordict


def as_ensemble(
    module: nn.Module | Sequence[nn.Module],
    num_members: int,
    *,
    out_key: NestedKey = STATE_ACTION_VALUE,
) -> nn.Module:
    """An ensemble of ``num_members`` critics from whatever a user passes to a loss.

    A tdrl ``EnsembleCritic`` (anything with ``num_members`` and ``values``) is returned
    unchanged and must have ``num_members`` members; a single keyed module or a list becomes a
    :class:`ModuleEnsemble` (a :class:`SingleCritic` when ``num_members == 1``).
    """
    if hasattr(module, "num_members") and hasattr(module, "values"):
        if module.num_members != num_members:
            raise ValueError(
                f"the critic ensemble has {module.num_members} members but num_qvalue_nets="
                f"{num_members}"
            )
        return module  # type: ignore[return-value]
    if isinstance(module, Sequence):
        if len(module) != num_members:
            raise ValueError(f"got {len(module)} critics but num_qvalue_nets={num_members}")
        if num_members == 1:
            module = module[0]
    if num_members == 1:
        return SingleCritic(module, out_key=out_key)  # type: ignore[arg-type]
    return ModuleEnsemble(module, num_members, out_key=out_key)  # type: ignore[arg-type]
