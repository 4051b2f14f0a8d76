"""Shared machinery of the value estimators: keys, value-network calls, signals, errors.

Estimators follow TorchRL 0.14's layout and constructor arguments, so a tdrl estimator can be
assigned as a TorchRL loss's value estimator (``loss.value_estimator = GAE(...)``) and called with
TorchRL's ``params=`` / ``target_params=`` keywords.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, NamedTuple

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import Tensor
from torchrl.modules import recurrent_mode, set_recurrent_mode

from tdrl import keys as K
from tdrl.keyed import next_key, renamed, require
from tdrl.ops import InputError
from tdrl.ops._common import TRUNCATION_POLICIES, check_discount, working_dtype


@dataclasses.dataclass(frozen=True)
class EstimatorKeys:
    """Keys an estimator reads and writes (TorchRL 0.14 names); change with ``set_keys``.

    ``reward``, ``done``, ``terminated`` and ``truncated`` are read under ``"next"``; ``value`` is
    read (or written by the value network) at the root and under ``"next"``.
    """

    advantage: NestedKey = K.ADVANTAGE
    value_target: NestedKey = K.VALUE_TARGET
    value: NestedKey = K.STATE_VALUE
    reward: NestedKey = K.REWARD
    done: NestedKey = K.DONE
    terminated: NestedKey = K.TERMINATED
    truncated: NestedKey = K.TRUNCATED
    steps_to_next_obs: NestedKey = K.STEPS_TO_NEXT_OBS
    sample_log_prob: NestedKey = K.ACTION_LOG_PROB
    target_log_prob: NestedKey = K.TARGET_LOG_PROB
    action: NestedKey = K.ACTION


class Signals(NamedTuple):
    """What an estimator reads from a batch: ``V(s_t)``, ``V(s_{t+1})`` (detached), the
    ``"next"`` signals (``done`` and ``truncated`` optional) and the discount of each step."""

    value: Tensor
    next_value: Tensor
    reward: Tensor
    terminated: Tensor
    done: Tensor | None
    truncated: Tensor | None
    gamma: float | Tensor


# Constructor arguments of TorchRL 0.14 that only tune how its value network is called (vmap,
# chunks, the single-call "shifted" layout). tdrl always makes one batched call over root and
# next inputs, so these are accepted and have no effect.
_HARMLESS = ("deactivate_vmap", "shifted", "shifted_budget", "vectorized", "device")
_UNSUPPORTED = ("value_chunk_size", "num_chunks", "num_chunk", "group_key", "auto_reset_env")


class ValueEstimator(TensorDictModuleBase):
    """Base of tdrl's estimators: reads a ``[*B, T]`` batch, writes advantage and value target."""

    def __init__(
        self,
        *,
        gamma: float | Tensor,
        value_network: Callable[..., Any] | None,
        differentiable: bool = False,
        skip_existing: bool | None = None,
        time_dim: int | None = None,
        truncation: str = "bootstrap",
        validate: bool = True,
        advantage_key: NestedKey | None = None,
        value_target_key: NestedKey | None = None,
        value_key: NestedKey | None = None,
        **torchrl_kwargs: Any,
    ) -> None:
        super().__init__()
        for name, key in (("advantage", advantage_key), ("value_target", value_target_key),
                          ("value", value_key)):  # fmt: skip
            if key is not None:
                raise RuntimeError(f"{name}_key is not a constructor argument: use set_keys().")
        for name, val in torchrl_kwargs.items():
            if name in _UNSUPPORTED:
                if val not in (None, False, 0):
                    raise NotImplementedError(
                        f"{type(self).__name__}: {name}={val!r} is not supported by tdrl"
                        + (" (use truncation='mask')" if name == "auto_reset_env" else "")
                    )
            elif name not in _HARMLESS and name != "value_chunk_dim":
                raise TypeError(f"{type(self).__name__} got an unexpected argument {name!r}")
        if truncation not in TRUNCATION_POLICIES:
            raise ValueError(f"truncation must be one of {TRUNCATION_POLICIES}, got {truncation!r}")
        self._check_discount("gamma", gamma)
        # float64, cast to the reward's dtype at use: float64 rollouts get gamma's full precision
        self.register_buffer("gamma", torch.as_tensor(gamma, dtype=torch.float64))
        # Not a submodule (as in TorchRL): the loss owns the critic's parameters.
        self.__dict__["value_network"] = value_network
        self.differentiable = differentiable
        self.skip_existing = skip_existing
        self.time_dim = time_dim
        self.truncation = truncation
        self.validate = validate
        self.tensor_keys = EstimatorKeys()

    def _check_discount(self, name: str, value: float | Tensor) -> None:
        """At the door: a gamma or lambda of 1.5 or NaN would poison every target."""
        try:
            check_discount(name, value)
        except InputError as err:
            raise ValueError(f"{type(self).__name__}: {err}") from None

    def _lmbda(self, lmbda: float | Tensor) -> float:
        """``lmbda`` checked and as a float: one lambda for every step (a number, or a tensor of
        one element)."""
        if isinstance(lmbda, Tensor) and lmbda.numel() != 1:
            raise ValueError(
                f"{type(self).__name__}: lmbda must be a number or a one-element tensor, got a "
                f"tensor of shape {tuple(lmbda.shape)}"
            )
        self._check_discount("lmbda", lmbda)
        return float(lmbda)

    # --- keys -----------------------------------------------------------------------------
    def set_keys(self, **kwargs: NestedKey) -> ValueEstimator:
        """Rename keys (fields of :class:`EstimatorKeys`); unknown names raise ``ValueError``."""
        self.tensor_keys = renamed(self.tensor_keys, type(self).__name__, **kwargs)
        return self

    @property
    def in_keys(self) -> list[NestedKey]:
        k = self.tensor_keys
        net_keys = list(getattr(self.value_network, "in_keys", []))
        flags = [next_key(k.reward), next_key(k.done), next_key(k.terminated)]
        values = [k.value, next_key(k.value)] if self.value_network is None else []
        return net_keys + [next_key(x) for x in net_keys] + flags + values

    @property
    def out_keys(self) -> list[NestedKey]:
        return [self.tensor_keys.advantage, self.tensor_keys.value_target]

    # --- reading the batch ----------------------------------------------------------------
    def _read(
        self, tensordict: TensorDictBase, params: TensorDictBase | None, target_params: Any
    ) -> Signals:
        """The values (:meth:`_values`), signals (:meth:`_signals`) and discounts (:meth:`_gamma`)
        of a batch."""
        value, next_value = self._values(tensordict, params, target_params)
        reward, terminated, done, truncated = self._signals(tensordict)
        gamma = self._gamma(tensordict, reward)
        return Signals(value, next_value, reward, terminated, done, truncated, gamma)

    def _time_dim(self, tensordict: TensorDictBase, time_dim: int | None) -> int:
        dim = time_dim if time_dim is not None else self.time_dim
        if dim is None:
            names = _names(tensordict)
            dim = names.index(K.TIME_DIM_NAME) if K.TIME_DIM_NAME in names else -1
        if not -tensordict.ndim <= dim < tensordict.ndim:
            raise ValueError(f"time_dim={dim} is out of range for batch {tensordict.batch_size}")
        return dim % tensordict.ndim

    def _get(self, tensordict: TensorDictBase, key: NestedKey, why: str = "") -> Tensor:
        return require(tensordict, key, type(self).__name__, why)

    def _values(
        self, tensordict: TensorDictBase, params: TensorDictBase | None, target_params: Any
    ) -> tuple[Tensor, Tensor]:
        """``V(s_t)`` and ``V(s_{t+1})`` (detached), from the batch or one network call.

        A recurrent network runs in step mode whatever TorchRL's global ``set_recurrent_mode``
        says: each step from its stored state (``s_t`` from the state stored at ``t``,
        ``s_{t+1}`` from ``("next", state)``), which is exact at every episode end; a sequence
        over the ``("next", ...)`` inputs would carry the ended episode's state into the next
        one. (A tdrl module whose mode was fixed with its own ``set_recurrent_mode(True)``
        keeps it: pass the step-mode module.)"""
        key, nkey = self.tensor_keys.value, next_key(self.tensor_keys.value)
        net = self.value_network
        if net is None or self.skip_existing:
            value, next_value = tensordict.get(key, None), tensordict.get(nkey, None)
            if value is not None and next_value is not None:
                return value, next_value
            if net is None:  # raise, naming the missing key and the batch's keys
                why = "value_network=None reads values from the batch"
                return self._get(tensordict, key, why), self._get(tensordict, nkey, why)
        # (the context costs far more than the check: entered only where TorchRL's is on)
        with set_recurrent_mode(False) if recurrent_mode() else nullcontext():
            value, next_value = self._network_values(tensordict, net, params, target_params)
        # Semi-gradient targets: the bootstrap value never carries a gradient (as in TorchRL).
        next_value = next_value.detach()
        tensordict.set(key, value)
        tensordict.set(nkey, next_value)
        return value, next_value

    def _network_values(
        self, tensordict: TensorDictBase, net: Any, params: Any, target_params: Any
    ) -> tuple[Tensor, Tensor]:
        key = self.tensor_keys.value
        in_keys = list(net.in_keys)
        if target_params is None or target_params is params:
            # One call over root and next inputs stacked on a new leading dim.
            stacked = TensorDict(
                {k: torch.stack([self._get(tensordict, k), self._next_input(tensordict, k)])
                 for k in in_keys},
                batch_size=[2, *tensordict.batch_size],
            )  # fmt: skip
            with params.to_module(net) if params is not None else nullcontext():
                both = net(stacked).get(key)
            value, next_value = both[0], both[1]
        else:
            root = tensordict.select(*in_keys)
            nxt = TensorDict({k: self._next_input(tensordict, k) for k in in_keys},
                             batch_size=tensordict.batch_size)  # fmt: skip
            with params.to_module(net) if params is not None else nullcontext():
                value = net(root).get(key)
            with target_params.to_module(net):
                next_value = net(nxt).get(key)
        return value, next_value

    def _next_input(self, tensordict: TensorDictBase, key: NestedKey) -> Tensor:
        """The value network's input ``key`` at ``s_{t+1}``: ``("next", key)``. A recurrent
        network's ``"is_init"`` there is False when the batch has none: ``s_{t+1}`` goes on the
        episode of ``s_t`` (at an episode end it is the real final observation), so the state
        after step ``t`` (``("next", state)``, stored by the collector) carries into it."""
        if key == K.IS_INIT and tensordict.get(next_key(key), None) is None:
            return torch.zeros_like(self._get(tensordict, key))
        return self._get(tensordict, next_key(key))

    def _signals(
        self, tensordict: TensorDictBase
    ) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """``reward, terminated, done, truncated`` (the last two optional) under ``"next"``."""
        k = self.tensor_keys
        # read from the "next" sub-batch: one key resolution of "next", not four
        nxt = tensordict.get(K.NEXT, None)
        reward = None if nxt is None else nxt.get(k.reward, None)
        terminated = None if nxt is None else nxt.get(k.terminated, None)
        if reward is None or terminated is None:  # raise, naming the key and the batch's keys
            self._get(tensordict, next_key(k.reward))
            self._get(tensordict, next_key(k.terminated), "estimators need the terminated flag")
        assert nxt is not None and reward is not None and terminated is not None
        return reward, terminated, nxt.get(k.done, None), nxt.get(k.truncated, None)

    def _gamma(self, tensordict: TensorDictBase, reward: Tensor) -> float | Tensor:
        """A scalar gamma as a number, a per-step gamma tensor (or one that needs a gradient) as
        given, or ``gamma ** steps_to_next_obs`` per step for n-step batches."""
        steps = tensordict.get(self.tensor_keys.steps_to_next_obs, None)
        # An error about gamma then names what it came from: the batch's steps or the argument.
        # (Plain attributes go in __dict__: nn.Module's __setattr__ costs more than the rest.)
        source = "gamma" if steps is None else self.tensor_keys.steps_to_next_obs
        self.__dict__["_gamma_source"] = source
        buffer = self.gamma  # a buffer, or a parameter a user put in its place
        work = working_dtype(reward.dtype)  # float32 for half (bf16 would round 0.999 to 1)
        if steps is None and buffer.numel() == 1 and not buffer.requires_grad:
            # A number, rounded to the working dtype: the ops take it as it is (a one-element
            # tensor would be range-checked and read back on every call). Read on every call:
            # writes through .data or numpy change it without a version bump.
            value = float(buffer)
            return float(np.float32(value)) if work == torch.float32 else value
        gamma = buffer.to(work)
        if steps is None:  # a gamma tensor per step, as given
            return gamma
        if steps.numel() != reward.numel():
            raise ValueError(
                f"{type(self).__name__}: key {self._gamma_source!r}: shape "
                f"{tuple(steps.shape)} does not fit reward's {tuple(reward.shape)}"
            )
        return gamma ** steps.reshape(reward.shape)

    def _key_of(self, argument: str) -> NestedKey:
        k = self.tensor_keys
        return {
            "reward": next_key(k.reward),
            "value": k.value,
            "next_value": next_key(k.value),
            "terminated": next_key(k.terminated),
            "done": next_key(k.done),
            "truncated": next_key(k.truncated),
            "log_rho": (k.target_log_prob, k.sample_log_prob),
            "gamma": getattr(self, "_gamma_source", "gamma"),
        }.get(argument, argument)

    def _call_op(self, op: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run an op; its ``InputError`` becomes a ``ValueError`` naming the batch key."""
        try:
            return op(*args, truncation=self.truncation, validate=self.validate, **kwargs)
        except InputError as err:
            raise ValueError(
                f"{type(self).__name__}: key {self._key_of(err.argument)!r}: {err.detail}"
            ) from err

    # --- entry points ---------------------------------------------------------------------
    def forward(
        self,
        tensordict: TensorDictBase,
        *,
        params: TensorDictBase | None = None,
        target_params: TensorDictBase | None = None,
        time_dim: int | None = None,
    ) -> TensorDictBase:
        """Write advantage and value target into ``tensordict`` and return it.

        ``params``/``target_params`` are TorchRL's functional-critic parameters (optional).

        Shapes:
            ``tensordict``: ``[*B, T]``; reward, flags, values ``[*B, T, 1]``.
        """
        if tensordict.batch_dims < 1:
            raise ValueError(f"expected a batch with a time dim, got {tensordict.batch_size}")
        if params is not None:
            params = params.detach()
        dim = self._time_dim(tensordict, time_dim)
        if self.differentiable or not torch.is_grad_enabled():  # the mode is already right
            advantage, value_target = self._estimate(tensordict, params, target_params, dim)
        else:
            with torch.no_grad():
                advantage, value_target = self._estimate(tensordict, params, target_params, dim)
        tensordict.set(self.tensor_keys.advantage, advantage)
        tensordict.set(self.tensor_keys.value_target, value_target)
        return tensordict

    def value_estimate(
        self,
        tensordict: TensorDictBase,
        target_params: TensorDictBase | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """The value target alone (TorchRL's ``value_estimate``); the batch is not modified."""
        out = self.forward(tensordict.copy(), target_params=target_params, **kwargs)
        return out.get(self.tensor_keys.value_target)

    def _estimate(
        self, tensordict: TensorDictBase, params: Any, target_params: Any, time_dim: int
    ) -> tuple[Tensor, Tensor]:
        raise NotImplementedError


def _names(tensordict: TensorDictBase) -> list[str | None]:
    """The batch dimension names (``None`` for unnamed dims; empty where names are unsupported)."""
    try:
        return list(tensordict.names)
    except (RuntimeError, AttributeError, NotImplementedError):
        return []
