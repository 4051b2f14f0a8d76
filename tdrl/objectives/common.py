"""What the on-policy losses share: configurable keys, input checks, critic loss, entropy."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey, unravel_key
from torch.distributions import Distribution

from tdrl.keyed import check_finite, renamed, require
from tdrl.keys import (
    ACTION,
    ACTION_LOG_PROB,
    ADVANTAGE,
    LOSS_ENTROPY,
    LOSS_PREFIX,
    MASK,
    STATE_VALUE,
    VALUE_TARGET,
)
from tdrl.modules.cnn import one_pass_per_input
from tdrl.ops import distance, standardize

# How every loss's value-check error ends: the losses check what they read for NaN and infinite
# values (one sum over the entries, one host sync per call); a loss's validate_inputs turns it off.
SKIP_CHECK = "; loss.validate_inputs = False skips this check"


@dataclasses.dataclass(frozen=True)
class OnPolicyKeys:
    """Keys read by the on-policy losses (TorchRL's ``tensor_keys`` field names).

    ``sample_log_prob`` is TorchRL's name for the field that holds the behaviour policy's
    log-prob key (``"action_log_prob"`` in TorchRL 0.14 and tdrl).
    """

    advantage: NestedKey = ADVANTAGE
    value_target: NestedKey = VALUE_TARGET
    value: NestedKey = STATE_VALUE
    sample_log_prob: NestedKey = ACTION_LOG_PROB
    action: NestedKey = ACTION
    # which samples count (bool, the log-prob's shape): a multi-agent batch's ("agents", "mask");
    # None: all of them
    mask: NestedKey | None = None


def advantage_of(
    td: TensorDictBase, key: NestedKey, batch_shape: torch.Size, owner: str
) -> torch.Tensor:
    """The advantage as ``[*B]``; explains what to do when an estimator has not been run."""
    advantage = td.get(key, None)
    if advantage is None:
        raise KeyError(
            f"{owner}: the batch has no {key!r} entry. Losses do not compute advantages: run a "
            f"value estimator (e.g. tdrl.estimators.GAE) on the whole rollout first, then split "
            f"it into minibatches."
        )
    if not advantage.is_floating_point():  # standardizing or weighting needs floats
        raise TypeError(f"{owner}: {key!r} must be a floating-point tensor, got {advantage.dtype}")
    return as_batch_shape(advantage, batch_shape, key, owner)


def as_batch_shape(
    value: torch.Tensor, batch_shape: torch.Size, key: NestedKey, owner: str
) -> torch.Tensor:
    """``value`` as ``[*B]``, accepting TorchRL's trailing singleton ``[*B, 1]``; otherwise an
    error naming ``key`` and both shapes (the one place the losses check a per-sample shape)."""
    if value.shape == batch_shape:
        return value
    if value.shape == (*batch_shape, 1):
        return value.squeeze(-1)
    raise ValueError(
        f"{owner}: {key!r} has shape {tuple(value.shape)}, expected {(*batch_shape, 1)} or "
        f"{tuple(batch_shape)} (the batch's per-sample shape)"
    )


def total_loss(out: TensorDictBase) -> torch.Tensor:
    """The sum of a loss output's ``"loss_*"`` entries (what to call ``backward`` on)."""
    terms = [
        value for key, value in out.items() if isinstance(key, str) and key.startswith(LOSS_PREFIX)
    ]
    if not terms:
        raise KeyError(f"the loss output has no {LOSS_PREFIX}* entry: {list(out.keys())}")
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The mean of ``x`` over the samples ``mask`` keeps (``mask`` ``[*B]`` against ``x``
    ``[*B, *F]``); the plain mean without a mask, 0 when the mask keeps nothing."""
    if mask is None:
        return x.mean()
    if x.shape[: mask.ndim] != mask.shape:
        raise ValueError(
            f"a mask of shape {tuple(mask.shape)} does not fit values of shape {tuple(x.shape)} "
            "(the mask's shape must lead theirs)"
        )
    keep = mask.reshape(*mask.shape, *(1,) * (x.ndim - mask.ndim)).expand_as(x)
    # where, not a product: a NaN or inf in a left-out sample must not reach the mean
    return torch.where(keep, x, 0.0).sum() / keep.sum().clamp_min(1).to(x.dtype)


def agent_mask(
    batch: TensorDictBase, group: str, shape: tuple[int, ...], owner: str
) -> torch.Tensor | None:
    """``(group, "mask")`` (an agent takes part in the step), checked to be a bool ``shape``
    tensor (``[B, n_agents]``); None where the batch has none (every agent takes part)."""
    present = batch.get((group, MASK), None)
    if present is not None and (present.shape != shape or present.dtype != torch.bool):
        raise ValueError(
            f"{owner}: {(group, MASK)!r} must be a bool {list(shape)} mask, got "
            f"{present.dtype} {list(present.shape)}"
        )
    return present


def entropy_of(dist: Distribution) -> torch.Tensor:
    """Analytic entropy, or a one-sample estimate ``-log p(a)`` where none exists (tanh)."""
    try:
        return dist.entropy()
    except NotImplementedError:
        if hasattr(dist, "rsample_and_log_prob"):
            return -dist.rsample_and_log_prob()[1]
        sample = dist.rsample() if dist.has_rsample else dist.sample()
        return -dist.log_prob(sample)


class OnPolicyLoss(TensorDictModuleBase):
    """Key handling and critic loss shared by the on-policy losses (not a public loss).

    The policy's first read of a batch (:meth:`_dist`) refuses one with a NaN or an infinity in
    an entry of :attr:`in_keys`, naming it (one sum over the entries, one host sync);
    ``loss.validate_inputs = False`` skips that check.
    """

    out_keys: list[NestedKey] = []
    validate_inputs: bool = True
    # Whether the loss reads the behaviour log-prob (PPO's ratio); A2C is on-policy by
    # construction and NPG/TRPO recompute the current policy's log-probs themselves.
    reads_sample_log_prob = True
    # Whether the loss averages over the samples set_keys(mask=...) keeps (see _mask).
    supports_mask = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # an actor and a critic that share a CNN run it once per call, as SB3's shared features
        # extractor does (a PPO loss step on 256 Breakout frames: 352 -> 178 ms, one thread)
        with one_pass_per_input():
            return super().__call__(*args, **kwargs)

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        critic_network: TensorDictModuleBase | None,
        *,
        critic_coeff: float | None,
        loss_critic_type: str,
        clip_value: float | None = None,
        entropy_coeff: float = 0.0,
        normalize_advantage: bool = False,
    ) -> None:
        super().__init__()
        if clip_value is not None and not clip_value > 0:
            raise ValueError(f"clip_value must be positive or None, got {clip_value!r}")
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                f"{type(self).__name__}: the actor must provide get_dist(td) (tdrl actors and "
                f"TorchRL's ProbabilisticActor do), got {type(actor_network).__name__}"
            )
        distance(torch.zeros(()), torch.zeros(()), loss_critic_type)  # validates the name
        self.actor_network = actor_network
        self.critic_network = critic_network
        self.critic_coeff = critic_coeff
        self.loss_critic_type = loss_critic_type
        self.clip_value = clip_value
        self.entropy_coeff = entropy_coeff
        self.normalize_advantage = normalize_advantage
        self.tensor_keys = OnPolicyKeys()
        self._value_estimator: TensorDictModuleBase | None = None
        self._set_in_keys()

    def _set_in_keys(self) -> None:
        keys = self.tensor_keys
        in_keys: list[NestedKey] = [*self.actor_network.in_keys, keys.action, keys.advantage]
        if self.reads_sample_log_prob:
            in_keys.append(keys.sample_log_prob)
        if self.critic_network is not None:
            in_keys += [*self.critic_network.in_keys, keys.value_target]
            if self.clip_value:
                in_keys.append(keys.value)
        if keys.mask is not None:
            in_keys.append(keys.mask)
        self.in_keys = list(dict.fromkeys(in_keys))
        self._read_keys = frozenset(map(unravel_key, self.in_keys))

    def set_keys(self, **kwargs: NestedKey) -> OnPolicyLoss:
        """Rename the keys read from the batch, e.g. ``set_keys(advantage="adv")``;
        ``set_keys(mask=("agents", "mask"))`` averages over the samples the mask keeps (PPO)."""
        if "mask" in kwargs and not self.supports_mask:
            raise ValueError(
                f"{type(self).__name__}.set_keys: mask={kwargs['mask']!r}: this loss averages over "
                "every sample; ClipPPOLoss takes a mask"
            )
        self.tensor_keys = renamed(self.tensor_keys, type(self).__name__, **kwargs)
        self._set_in_keys()
        return self

    def make_value_estimator(self, kind: Any = None, **hyperparams: Any) -> TensorDictModuleBase:
        """Attach a value estimator for the caller to run on whole rollouts.

        ``kind`` is an estimator instance (any TensorDict module writing ``"advantage"`` and
        ``"value_target"``: tdrl's ``GAE``, TorchRL's ``GAE``). The loss never runs it: call
        ``loss.value_estimator(rollout)`` before splitting the rollout into minibatches. String
        kinds need ``tdrl.estimators``, which this layer may not import: build the estimator
        there (``tdrl.estimators.GAE(gamma=..., lmbda=..., value_network=critic)``).
        """
        if kind is None or isinstance(kind, str):
            raise TypeError(
                f"{type(self).__name__}.make_value_estimator takes an estimator instance, e.g. "
                f"tdrl.estimators.GAE(gamma=0.99, lmbda=0.95, value_network=critic), got {kind!r}"
            )
        if hyperparams:
            raise TypeError("pass hyperparameters to the estimator's constructor")
        self._value_estimator = kind
        return kind

    @property
    def value_estimator(self) -> TensorDictModuleBase:
        if self._value_estimator is None:
            raise AttributeError(
                f"{type(self).__name__} has no value estimator: call make_value_estimator(...)"
            )
        return self._value_estimator

    def _dist(self, batch: TensorDictBase, check: bool = True) -> Distribution:
        """The policy's distribution on ``batch``, which is checked first (:meth:`_check_batch`)
        unless ``check`` is False (a batch the call has checked already)."""
        # ``select`` gives a new TensorDict over the same tensors: a module that writes its
        # outputs (TorchRL's ProbabilisticActor) cannot touch the caller's batch. A missing
        # in-key raises tensordict's KeyError, which names the key.
        if check:
            self._check_batch(batch)
        return self.actor_network.get_dist(batch.select(*self.actor_network.in_keys))

    def _check_batch(self, batch: TensorDictBase) -> None:
        """No NaN or infinity in what the loss reads (with :attr:`validate_inputs`)."""
        if self.validate_inputs:
            check_finite(batch, self._read_keys, type(self).__name__, SKIP_CHECK)

    def _advantage(
        self, batch: TensorDictBase, shape: torch.Size, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The batch's advantage in the log-prob's ``shape``, standardized if configured (by the
        statistics of the samples ``mask`` keeps)."""
        advantage = advantage_of(batch, self.tensor_keys.advantage, shape, type(self).__name__)
        if not self.normalize_advantage:
            return advantage
        if mask is None:
            return standardize(advantage)
        kept = advantage[mask]
        if kept.numel() < 2:
            return advantage
        std, mean = torch.std_mean(kept)
        return (advantage - mean) / (std + 1e-8)

    def _mask(self, batch: TensorDictBase, shape: torch.Size) -> torch.Tensor | None:
        """The samples that count, bool in the log-prob's ``shape`` (None: all)."""
        key = self.tensor_keys.mask
        if key is None:
            return None
        owner = type(self).__name__
        mask = as_batch_shape(require(batch, key, owner), shape, key, owner)
        if mask.dtype != torch.bool:
            raise TypeError(f"{owner}: {key!r} must be a bool tensor, got {mask.dtype}")
        return mask

    def _entropy(
        self, dist: Distribution, out: dict[str, torch.Tensor], mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The mean entropy (over the samples ``mask`` keeps), detached; with ``entropy_coeff``
        > 0 also the bonus term ``"loss_entropy" = -entropy_coeff * H`` in ``out`` (else no graph
        is built)."""
        if self.entropy_coeff:
            entropy = masked_mean(entropy_of(dist), mask)
            out[LOSS_ENTROPY] = -self.entropy_coeff * entropy
            return entropy.detach()
        with torch.no_grad():  # a diagnostic only
            return masked_mean(entropy_of(dist), mask)

    def _critic_loss(
        self, batch: TensorDictBase, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``critic_coeff * mean distance(V, value_target)`` (over the samples ``mask`` keeps),
        with PPO value clipping if set."""
        assert self.critic_network is not None
        owner = type(self).__name__
        keys = self.tensor_keys
        target = require(batch, keys.value_target, owner)
        out = self.critic_network(batch.select(*self.critic_network.in_keys))
        value = require(out, keys.value, owner, "the critic must write it (or set_keys(value=...))")
        if value.shape != target.shape:
            raise ValueError(
                f"{owner}: the critic's {keys.value!r} has shape {tuple(value.shape)} but "
                f"{keys.value_target!r} has shape {tuple(target.shape)}"
            )
        loss = distance(value, target, self.loss_critic_type)
        clip_fraction = None
        if self.clip_value:
            # PPO value clipping (Schulman et al. baselines; "37 details" #9): the new value may
            # move at most clip_value away from the value stored at collection time.
            clip = float(self.clip_value)
            old_value = require(batch, keys.value, owner)
            if old_value.shape != value.shape:
                raise ValueError(
                    f"{owner}: the batch's {keys.value!r} has shape {tuple(old_value.shape)}, "
                    f"expected {tuple(value.shape)}"
                )
            clipped = old_value + (value - old_value).clamp(-clip, clip)
            loss = torch.maximum(loss, distance(clipped, target, self.loss_critic_type))
            clipped_out = ((value - old_value).abs() > clip).float()
            clip_fraction = masked_mean(clipped_out, mask).detach()
        coeff = 1.0 if self.critic_coeff is None else self.critic_coeff
        return coeff * masked_mean(loss, mask), clip_fraction

    @staticmethod
    def _output(entries: dict[str, torch.Tensor]) -> TensorDict:
        return TensorDict(entries, batch_size=torch.Size([]))
