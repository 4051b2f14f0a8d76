"""Stochastic actors: Gaussian (state-independent log-std), tanh-Gaussian, categorical.

Each actor is a lean ``TensorDictModuleBase`` rather than a ``ProbabilisticTensorDictSequential``:
the generic machinery costs several times what a small (64x64) network itself costs per call,
and the collector calls the actor once per env step. The behaviour is the same as TorchRL's
``ProbabilisticActor``:

* ``forward`` writes the distribution parameters, ``"action"`` and ``"action_log_prob"``
  (shape ``[*B]``, as TorchRL 0.14), and follows tensordict's interaction type:
  ``set_interaction_type(InteractionType.RANDOM)`` (TorchRL's ``set_exploration_type``) samples,
  any other type returns the deterministic action (mean, squashed mean, or arg-max). With no type
  set, ``default_interaction_type`` applies (``DETERMINISTIC``, tensordict's default).
* ``get_dist(td)`` returns the distribution without writing into ``td``; losses use it, so a
  TorchRL ``ProbabilisticActor`` and a tdrl actor are interchangeable in tdrl and TorchRL losses.

Actions and bounds: networks work in ``[-1, 1]`` units. Given ``action_low``/``action_high``, the
continuous actors map that range affinely onto the env's bounds inside the distribution, so the
stored ``"action"`` is in env units and ``"action_log_prob"`` is its exact log-density (Jacobian
included). ``TanhGaussianActor`` actions are always within the bounds; ``GaussianActor`` samples
are not clipped (the log-prob is of the unclipped sample, as in SB3, Tianshou and CleanRL), so the
env side must clip to the action space before stepping.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, ProbabilisticTensorDictModule, TensorDictModuleBase
from tensordict.nn.probabilistic import interaction_type
from tensordict.utils import NestedKey
from torch import nn
from torch.distributions import Distribution

from tdrl.keyed import require, tracing
from tdrl.keys import ACTION, ACTION_LOG_PROB, LOC, LOGITS, OBSERVATION, SCALE
from tdrl.modules.distributions import (
    Categorical,
    IndependentBernoulli,
    IndependentNormal,
    MultiCategorical,
    TanhNormal,
)


def _apply(net: nn.Module, value: torch.Tensor, key: NestedKey, owner: str) -> torch.Tensor:
    """``net(value)``; a failure is a ``ValueError`` naming ``key``, its shape and dtype, and the
    width the network takes when that is what differs."""
    try:
        return net(value)
    except RuntimeError as error:
        width = _input_width(net)
        if width is not None and value.dim() > 0 and value.shape[-1] != width:
            raise ValueError(
                f"{owner}: {key!r} of shape {tuple(value.shape)} has {value.shape[-1]} "
                f"features, the network takes {width}"
            ) from error
        raise ValueError(
            f"{owner}: the network failed on {key!r} of shape {tuple(value.shape)} and dtype "
            f"{value.dtype}: {error}"
        ) from error


def encoder_of(module: nn.Module) -> Any:
    """The encoder :func:`tdrl.modules.with_encoder` put into ``module`` (a
    :class:`~tdrl.modules.DictEncoder`), or None."""
    return module._modules.get("encoder")


def input_key(module: TensorDictModuleBase) -> NestedKey:
    """The key a keyed network's ``net`` input goes by in errors: its first in_key, or its
    encoder's ``out_key`` (the features it reads the entries as)."""
    encoder = encoder_of(module)
    return module.in_keys[0] if encoder is None else encoder.out_key


def observation_input(
    module: TensorDictModuleBase, tensordict: TensorDictBase, owner: str
) -> torch.Tensor:
    """What a keyed network's ``net`` reads: its first in_key's entry, or, with an encoder
    attached (:func:`tdrl.modules.with_encoder`: a dict observation with image entries), the
    encoder's features of the entries it reads."""
    encoder = encoder_of(module)
    if encoder is None:
        return require(tensordict, module.in_keys[0], owner)
    return encoder.features(tensordict)


def _input_width(net: nn.Module) -> int | None:
    """The input width of ``net``'s first layer when that is a linear one, else None."""
    for module in net.modules():
        if hasattr(module, "in_channels"):  # a convolution reads channels, not features
            return None
        width = getattr(module, "in_features", None)
        if isinstance(width, int):
            return width
    return None


# An action bound: one number for every dim, one per dim, or None (the default, -1 or 1).
Bound = float | Sequence[float] | torch.Tensor | None


def _bounds(low: Bound, high: Bound) -> tuple[torch.Tensor, torch.Tensor]:
    low_t = torch.as_tensor(-1.0 if low is None else low, dtype=torch.get_default_dtype())
    high_t = torch.as_tensor(1.0 if high is None else high, dtype=torch.get_default_dtype())
    if not bool((high_t > low_t).all()) or not bool(torch.isfinite(high_t - low_t).all()):
        raise ValueError(f"action bounds must be finite with high > low, got {low_t}, {high_t}")
    return low_t, high_t


def _register_bounds(
    module: nn.Module, action_dim: int, low: Bound, high: Bound, *, persistent: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Check the action box and register it as ``action_low``/``action_high`` ``[A]`` buffers;
    returns the checked ``(low, high)`` as given (scalars stay scalars)."""
    low_t, high_t = _bounds(low, high)
    module.register_buffer("action_low", low_t.expand(action_dim).clone(), persistent=persistent)
    module.register_buffer("action_high", high_t.expand(action_dim).clone(), persistent=persistent)
    return low_t, high_t


def _check_width(owner: str, out: torch.Tensor, width: int, what: str) -> None:
    """Raise unless the network's last dim is ``width`` (a narrower parameter would broadcast)."""
    if out.shape[-1] != width:
        raise ValueError(
            f"{owner}: the network outputs {out.shape[-1]} values (shape {tuple(out.shape)}), "
            f"{what} is {width}"
        )


def _tanh_to_box(pre_tanh: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """``mid + half tanh(x)``: the real line onto the box ``[low, high]``."""
    mid = (high + low) / 2
    half = (high - low) / 2
    action = mid + half * torch.tanh(pre_tanh)
    if action.requires_grad:  # a loss's action: a rounding excess is harmless there, and a
        return action  # clamp node would add ~1% to a TD3 update step
    # mid + half * tanh rounds past a bound when tanh saturates (e.g. high = -0.016532650
    # gave -0.016532421): the actions sent to an env are clamped into the box.
    return action.clamp(low, high)


class _ProbabilisticActor(TensorDictModuleBase):
    """Shared forward: parameters -> distribution -> action and log-prob by interaction type."""

    def __init__(
        self,
        net: nn.Module | None,
        in_key: NestedKey,
        param_keys: list[NestedKey],
        default_interaction_type: InteractionType,
    ) -> None:
        super().__init__()
        if net is not None:  # the network of the distribution's parameters (GSDEActor: its own)
            self.net = net
        self.in_keys = [in_key]
        self.param_keys = param_keys
        self.out_keys = [*param_keys, ACTION, ACTION_LOG_PROB]
        self.default_interaction_type = default_interaction_type
        # What TorchRL's losses read off a ProbabilisticActor to find the sample and its log-prob.
        self.dist_sample_keys: list[NestedKey] = [ACTION]
        self.log_prob_keys: list[NestedKey] = [ACTION_LOG_PROB]
        # TorchRL's KLPENPPOLoss finds the distribution's parameter keys on a
        # ProbabilisticTensorDictModule inside the actor; this one only names them (it holds no
        # state and never runs: the behaviour policy comes from build_dist_from_params).
        self.dist_params = ProbabilisticTensorDictModule(
            in_keys=list(param_keys), out_keys=[ACTION], distribution_class=Distribution
        )

    def _params(self, observation: torch.Tensor) -> dict[NestedKey, torch.Tensor]:
        raise NotImplementedError

    def _dist(self, params: dict[NestedKey, torch.Tensor]) -> Distribution:
        raise NotImplementedError

    def _inputs(self, tensordict: TensorDictBase) -> dict[NestedKey, torch.Tensor]:
        """The parameters computed from ``tensordict`` (its observation by default)."""
        return self._params(observation_input(self, tensordict, type(self).__name__))

    def get_dist(self, tensordict: TensorDictBase) -> Distribution:
        """The action distribution for ``tensordict``; nothing is written into it."""
        return self._dist(self._inputs(tensordict))

    def build_dist_from_params(self, tensordict: TensorDictBase) -> Distribution:
        """The distribution of the parameters stored in ``tensordict`` (``param_keys``, as
        :meth:`forward` wrote them at collection), without running the network: the behaviour
        policy, as TorchRL's ``KLPENPPOLoss`` reads it off a ``ProbabilisticActor``."""
        owner = type(self).__name__
        return self._stored_dist({key: require(tensordict, key, owner) for key in self.param_keys})

    def _stored_dist(self, params: dict[NestedKey, torch.Tensor]) -> Distribution:
        """``_dist`` of stored parameters (override where ``_dist`` reads a live parameter)."""
        return self._dist(params)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        params = self._inputs(tensordict)
        dist = self._dist(params)
        mode = interaction_type() or self.default_interaction_type
        if mode is InteractionType.RANDOM:
            action = dist.rsample() if dist.has_rsample else dist.sample()
        else:
            action = dist.deterministic_sample  # type: ignore[attr-defined]
        for key, value in params.items():
            tensordict.set(key, value)
        tensordict.set(ACTION, action)
        tensordict.set(ACTION_LOG_PROB, dist.log_prob(action))
        return tensordict


class GaussianActor(_ProbabilisticActor):
    """Diagonal Gaussian policy with a state-independent log-std parameter.

    The MuJoCo default of Tianshou's benchmark, SB3 and CleanRL PPO: ``loc = net(obs)``,
    ``scale = exp(log_std)`` shared by all states.

    Args:
        net: maps observations to ``loc`` in ``[-1, 1]`` units (``mlp(..., output_gain=0.01)``).
        action_dim: action size ``A``.
        in_key: observation key.
        init_log_std: initial log standard deviation (in ``[-1, 1]`` units).
        action_low: env lower bound (float or ``[A]``); ``None`` means -1.
        action_high: env upper bound; ``None`` means 1.
        default_interaction_type: used when no interaction type is set.

    Shapes:
        reads ``[*B, obs]``; writes ``loc``, ``scale``, ``action``: ``[*B, A]``,
        ``action_log_prob``: ``[*B]``.
    """

    def __init__(
        self,
        net: nn.Module,
        action_dim: int,
        *,
        in_key: NestedKey = OBSERVATION,
        init_log_std: float = 0.0,
        action_low: Bound = None,
        action_high: Bound = None,
        default_interaction_type: InteractionType = InteractionType.DETERMINISTIC,
    ) -> None:
        super().__init__(net, in_key, [LOC, SCALE], default_interaction_type)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))
        low, high = _bounds(action_low, action_high)
        # Bounds are configuration, not state: non-persistent buffers (they follow .to(device)),
        # and the affine map is skipped for [-1, 1] (fewer ops in the PPO minibatch loop).
        self.rescale = not (bool((low == -1).all()) and bool((high == 1).all()))
        mid, half = ((high + low) / 2).expand(action_dim), ((high - low) / 2).expand(action_dim)
        self.register_buffer("action_mid", mid.clone(), persistent=False)
        self.register_buffer("action_half", half.clone(), persistent=False)

    def _params(self, observation: torch.Tensor) -> dict[NestedKey, torch.Tensor]:
        loc = _apply(self.net, observation, input_key(self), "GaussianActor")
        _check_width("GaussianActor", loc, self.log_std.shape[-1], "action_dim")
        if self.rescale:
            loc = self.action_mid + self.action_half * loc
            return {LOC: loc, SCALE: (self.action_half * self.log_std.exp()).expand_as(loc)}
        return {LOC: loc, SCALE: self.log_std.exp().expand_as(loc)}

    def _dist(self, params: dict[NestedKey, torch.Tensor]) -> Distribution:
        log_scale = self.log_std + self.action_half.log() if self.rescale else self.log_std
        return IndependentNormal(params[LOC], params[SCALE], log_scale)

    def _stored_dist(self, params: dict[NestedKey, torch.Tensor]) -> Distribution:
        return IndependentNormal(params[LOC], params[SCALE])  # not today's log_std


class TanhGaussianActor(_ProbabilisticActor):
    """Tanh-squashed Gaussian policy (SAC's actor; also usable by PPO).

    With ``state_dependent_scale`` (the SAC default) ``net`` outputs ``2 A`` values, ``loc`` and a
    raw log-std that is bounded softly into ``[log_std_min, log_std_max]`` with a tanh (as in
    CleanRL's SAC, after Yarats' pytorch_sac); otherwise ``net`` outputs ``loc`` and the log-std is
    a state-independent parameter. ``loc``/``scale`` are the pre-tanh parameters (TorchRL's
    ``TanhNormal`` convention), so ``TanhNormal(loc, scale, low, high)`` reproduces the log-prob.

    Args:
        net: maps observations to ``[*B, 2 A]`` (or ``[*B, A]`` without state-dependent scale).
        action_dim: action size ``A``.
        in_key: observation key.
        state_dependent_scale: whether ``net`` also outputs the log-std.
        init_log_std: initial log-std of the state-independent parameter.
        log_std_min: lower bound of the state-dependent log-std.
        log_std_max: upper bound of the state-dependent log-std.
        action_low, action_high, default_interaction_type: as :class:`GaussianActor`.

    Shapes:
        as :class:`GaussianActor` (``loc``/``scale`` before the tanh).
    """

    def __init__(
        self,
        net: nn.Module,
        action_dim: int,
        *,
        in_key: NestedKey = OBSERVATION,
        state_dependent_scale: bool = True,
        init_log_std: float = 0.0,
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
        action_low: Bound = None,
        action_high: Bound = None,
        default_interaction_type: InteractionType = InteractionType.DETERMINISTIC,
    ) -> None:
        super().__init__(net, in_key, [LOC, SCALE], default_interaction_type)
        self.action_dim = action_dim
        self.state_dependent_scale = state_dependent_scale
        self.log_std_min = log_std_min
        self.log_std_max = log_std_max
        self.log_std = (
            None
            if state_dependent_scale
            else nn.Parameter(torch.full((action_dim,), float(init_log_std)))
        )
        low, high = _register_bounds(self, action_dim, action_low, action_high, persistent=False)
        # [-1, 1] bounds go to TanhNormal as numbers: no affine map per distribution.
        self.unit_bounds = bool((low == -1).all()) and bool((high == 1).all())

    def _log_std(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.log_std is not None:
            _check_width("TanhGaussianActor", out, self.action_dim, "action_dim")
            return out, self.log_std.expand_as(out)
        if out.shape[-1] != 2 * self.action_dim:
            raise ValueError(
                f"TanhGaussianActor: the network must output 2 * action_dim = "
                f"{2 * self.action_dim} values (loc and log-std), got {out.shape[-1]}"
            )
        loc, raw = out.chunk(2, dim=-1)
        # log_std_min + span (tanh(raw) + 1) / 2, as one multiply-add after the tanh.
        half_span = 0.5 * (self.log_std_max - self.log_std_min)
        return loc, torch.add(raw.tanh(), 1.0).mul_(half_span).add_(self.log_std_min)

    def _params(self, observation: torch.Tensor) -> dict[NestedKey, torch.Tensor]:
        loc, log_std = self._loc_log_std(observation)
        return {LOC: loc, SCALE: log_std.exp()}

    def _loc_log_std(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = _apply(self.net, observation, input_key(self), "TanhGaussianActor")
        return self._log_std(out)

    def get_dist(self, tensordict: TensorDictBase) -> Distribution:
        """The action distribution for ``tensordict``; nothing is written into it."""
        observation = observation_input(self, tensordict, type(self).__name__)
        loc, log_std = self._loc_log_std(observation)
        # log_std passed along: the distribution needs no log of the scale.
        return self._tanh_normal(loc, log_std.exp(), log_std)

    def _dist(self, params: dict[NestedKey, torch.Tensor]) -> Distribution:
        return self._tanh_normal(params[LOC], params[SCALE], None)

    def _tanh_normal(
        self, loc: torch.Tensor, scale: torch.Tensor, log_scale: torch.Tensor | None
    ) -> TanhNormal:
        if self.unit_bounds:
            return TanhNormal(loc, scale, -1.0, 1.0, log_scale)
        return TanhNormal(loc, scale, self.action_low, self.action_high, log_scale)


class CategoricalActor(_ProbabilisticActor):
    """Categorical policy over ``n`` discrete actions from logits.

    With ``mask_key`` (e.g. ``"action_mask"``, TorchRL's name, which tdrl's envs provide) the
    actor also reads a ``[*B, n]`` bool mask: invalid actions get the lowest finite logit, so
    they are never sampled nor chosen, have probability 0 in ``log_prob`` and add 0 to the
    entropy (and the KL stays finite). A row without any valid action is an error.

    Args:
        net: maps observations to ``[*B, n]`` logits.
        in_key: observation key.
        mask_key: the action-mask key to read, or None.
        default_interaction_type: used when no interaction type is set.

    Shapes:
        reads ``[*B, obs]`` (and ``[*B, n]`` bool); writes ``logits``: ``[*B, n]``, ``action``
        (int64 index) and ``action_log_prob``: ``[*B]``.
    """

    def __init__(
        self,
        net: nn.Module,
        *,
        in_key: NestedKey = OBSERVATION,
        mask_key: NestedKey | None = None,
        default_interaction_type: InteractionType = InteractionType.DETERMINISTIC,
    ) -> None:
        super().__init__(net, in_key, [LOGITS], default_interaction_type)
        self.mask_key = mask_key
        if mask_key is not None:
            self.in_keys = [in_key, mask_key]

    def _inputs(self, tensordict: TensorDictBase) -> dict[NestedKey, torch.Tensor]:
        params = super()._inputs(tensordict)
        if self.mask_key is not None:
            mask = require(tensordict, self.mask_key, "CategoricalActor")
            params[LOGITS] = masked_logits(params[LOGITS], mask, self.mask_key)
        return params

    def _params(self, observation: torch.Tensor) -> dict[NestedKey, torch.Tensor]:
        return {LOGITS: _apply(self.net, observation, input_key(self), "CategoricalActor")}

    def _dist(self, params: dict[NestedKey, torch.Tensor]) -> Distribution:
        return Categorical(logits=params[LOGITS], validate_args=False)


class MultiCategoricalActor(CategoricalActor):
    """Factorized categorical policy for MultiDiscrete actions: one categorical per component,
    from one network's ``[*B, sum(nvec)]`` logits (``mask_key``: the components' masks side by
    side, TorchRL's layout).

    Shapes:
        writes ``logits`` ``[*B, sum(nvec)]``, ``action`` ``[*B, k]`` int64, ``action_log_prob``
        ``[*B]`` (the sum over components).
    """

    def __init__(self, net: nn.Module, nvec: list[int], **kwargs: Any) -> None:
        super().__init__(net, **kwargs)
        self.nvec = [int(n) for n in nvec]

    def _inputs(self, tensordict: TensorDictBase) -> dict[NestedKey, torch.Tensor]:
        params = _ProbabilisticActor._inputs(self, tensordict)
        if self.mask_key is not None:
            mask = require(tensordict, self.mask_key, "MultiCategoricalActor")
            logits = params[LOGITS]
            if mask.shape != logits.shape:
                raise ValueError(
                    f"{self.mask_key!r} has shape {tuple(mask.shape)}, the logits "
                    f"{tuple(logits.shape)}"
                )
            parts = zip(logits.split(self.nvec, -1), mask.split(self.nvec, -1), strict=True)
            params[LOGITS] = torch.cat([masked_logits(x, m, self.mask_key) for x, m in parts], -1)
        return params

    def _dist(self, params: dict[NestedKey, torch.Tensor]) -> Distribution:
        return MultiCategorical(params[LOGITS], self.nvec)


class BernoulliActor(_ProbabilisticActor):
    """Independent 0/1 choices for MultiBinary actions from ``[*B, n]`` logits.

    Shapes:
        writes ``logits`` ``[*B, n]``, ``action`` ``[*B, n]`` int64, ``action_log_prob`` ``[*B]``.
    """

    def __init__(
        self,
        net: nn.Module,
        *,
        in_key: NestedKey = OBSERVATION,
        default_interaction_type: InteractionType = InteractionType.DETERMINISTIC,
    ) -> None:
        super().__init__(net, in_key, [LOGITS], default_interaction_type)

    def _params(self, observation: torch.Tensor) -> dict[NestedKey, torch.Tensor]:
        return {LOGITS: _apply(self.net, observation, self.in_keys[0], "BernoulliActor")}

    def _dist(self, params: dict[NestedKey, torch.Tensor]) -> Distribution:
        return IndependentBernoulli(params[LOGITS])


def masked_logits(logits: torch.Tensor, mask: torch.Tensor, key: NestedKey) -> torch.Tensor:
    """``logits`` with the lowest finite value where ``mask`` is False (the action is invalid);
    errors name ``key`` for a mask of the wrong shape or dtype or a row with no valid action."""
    if mask.dtype != torch.bool:
        raise TypeError(f"{key!r} must be a bool mask, got {mask.dtype}")
    if mask.shape != logits.shape:
        raise ValueError(f"{key!r} has shape {tuple(mask.shape)}, the logits {tuple(logits.shape)}")
    # (a value check: torch.export traces without values, and the exported policy cannot raise;
    # a compiled or captured step cannot sync with the host)
    if not (torch.compiler.is_exporting() or tracing()) and not bool(mask.any(-1).all()):
        raise ValueError(f"{key!r} has a row with no valid action")
    return logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
