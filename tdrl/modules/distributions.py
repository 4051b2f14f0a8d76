"""Lean action distributions: a diagonal Gaussian, a tanh-squashed one, categoricals (one, or one
per MultiDiscrete component) and independent Bernoullis (MultiBinary).

``torch.distributions.Independent(Normal(...))`` costs about twice the arithmetic of its log-prob
in Python overhead; these classes compute the same numbers directly (the PPO update evaluates a
log-prob per minibatch, the collector samples once per env step). They subclass
``torch.distributions.Distribution``, so TorchRL losses accept them, and register their KL
divergences with ``torch.distributions.kl_divergence`` (used by NPG/TRPO).
"""

from __future__ import annotations

import math

import torch
from torch.distributions import Distribution, register_kl

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _check_event(dist: Distribution, value: torch.Tensor) -> None:
    """Raise unless ``value`` ends in the event shape (a narrower action would broadcast)."""
    if value.shape[-1:] != dist.event_shape:
        raise ValueError(
            f"{type(dist).__name__}.log_prob: the action has shape {tuple(value.shape)}, the "
            f"distribution's event shape is {tuple(dist.event_shape)}"
        )


_LOG_2 = math.log(2.0)


class IndependentNormal(Distribution):
    """Diagonal Gaussian over the last dimension (one event = one action vector).

    Args:
        loc: mean.
        scale: standard deviation, broadcastable to ``loc`` (e.g. a state-independent ``[A]``).
        log_scale: ``log(scale)`` if already known (saves a ``log`` and keeps its gradient exact).

    Shapes:
        ``loc``: ``[*B, A]``; samples ``[*S, *B, A]``; ``log_prob`` and ``entropy``: ``[*S, *B]``.
    """

    arg_constraints: dict = {}
    has_rsample = True

    def __init__(
        self, loc: torch.Tensor, scale: torch.Tensor, log_scale: torch.Tensor | None = None
    ) -> None:
        self.loc = loc
        self.scale = scale
        self.log_scale = scale.log() if log_scale is None else log_scale
        super().__init__(loc.shape[:-1], loc.shape[-1:], validate_args=False)

    @property
    def mean(self) -> torch.Tensor:
        return self.loc

    @property
    def mode(self) -> torch.Tensor:
        return self.loc

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.loc

    @property
    def stddev(self) -> torch.Tensor:
        return self.scale.expand_as(self.loc)

    @property
    def variance(self) -> torch.Tensor:
        return self.stddev.pow(2)

    def rsample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()) -> torch.Tensor:
        shape = torch.Size(sample_shape) + self.batch_shape + self.event_shape
        noise = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + noise * self.scale

    def sample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()) -> torch.Tensor:
        with torch.no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        _check_event(self, value)
        z = (value - self.loc) / self.scale
        return (-0.5 * z * z - self.log_scale).sum(-1) - _HALF_LOG_2PI * self.loc.shape[-1]

    def entropy(self) -> torch.Tensor:
        per_dim = (0.5 + _HALF_LOG_2PI + self.log_scale).expand_as(self.loc)
        return per_dim.sum(-1)


class TanhNormal(Distribution):
    """``low + (high - low) * (tanh(u) + 1) / 2`` with ``u`` a diagonal Gaussian.

    The log-density includes the change of variables (Haarnoja et al. 2018, arXiv 1801.01290,
    appendix C): ``log p(a) = log N(u) - sum log(1 - tanh(u)^2) - sum log((high - low) / 2)``,
    with ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))``, finite for any ``u``. Samples are
    kept at least ``finfo.resolution`` inside the bounds (TorchRL's ``safe_tanh``) so that every
    stored action can be inverted; ``log_prob(a)`` inverts with ``atanh`` of the clamped value.
    ``rsample_and_log_prob`` scores the exact pre-tanh sample (use it for SAC: no inversion).
    There is no closed-form entropy or mean; ``deterministic_sample`` is the squashed Gaussian
    mean, as in TorchRL's ``TanhNormal``.

    Args:
        loc: pre-tanh mean.
        scale: pre-tanh standard deviation, broadcastable to ``loc``.
        low: lower action bound (float or ``[A]``).
        high: upper action bound (float or ``[A]``).
        log_scale: ``log(scale)`` if already known.

    Shapes:
        ``loc``: ``[*B, A]``; samples ``[*S, *B, A]``; ``log_prob``: ``[*S, *B]``.
    """

    arg_constraints: dict = {}
    has_rsample = True

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor,
        low: torch.Tensor | float = -1.0,
        high: torch.Tensor | float = 1.0,
        log_scale: torch.Tensor | None = None,
    ) -> None:
        self.base = IndependentNormal(loc, scale, log_scale)
        self.loc = loc
        self.scale = scale
        self._bounds = (low, high)
        self._mid: torch.Tensor | float
        self._half: torch.Tensor | float
        self._log_half: torch.Tensor | float
        if isinstance(low, float | int) and isinstance(high, float | int):
            # Python-number bounds (the actors pass them for [-1, 1]): the affine map and its
            # Jacobian as numbers, no tensor ops per distribution (two per SAC update).
            self._mid, self._half = (high + low) / 2, (high - low) / 2
            if not self._half > 0:
                raise ValueError(f"TanhNormal needs high > low, got {low}, {high}")
            self._log_half = loc.shape[-1] * math.log(self._half)
        else:
            low_t, high_t = self.low, self.high
            self._mid = (high_t + low_t) / 2
            self._half = (high_t - low_t) / 2
            self._log_half = self._half.log().expand(loc.shape[-1:]).sum()
        self._unit = isinstance(self._half, float) and self._mid == 0.0 and self._half == 1.0
        self._limit = 1.0 - torch.finfo(loc.dtype).resolution
        super().__init__(loc.shape[:-1], loc.shape[-1:], validate_args=False)

    @property
    def low(self) -> torch.Tensor:
        """The lower action bound as a tensor."""
        return torch.as_tensor(self._bounds[0], dtype=self.loc.dtype, device=self.loc.device)

    @property
    def high(self) -> torch.Tensor:
        """The upper action bound as a tensor."""
        return torch.as_tensor(self._bounds[1], dtype=self.loc.dtype, device=self.loc.device)

    def _squash(self, u: torch.Tensor) -> torch.Tensor:
        y = u.tanh().clamp(-self._limit, self._limit)
        return y if self._unit else self._mid + self._half * y

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self._squash(self.loc)

    @property
    def mode(self) -> torch.Tensor:
        return self.deterministic_sample

    def rsample_and_log_prob(
        self, sample_shape: torch.Size | tuple[int, ...] = ()
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized sample and the log-density of its exact pre-tanh value.

        With ``u = loc + scale * eps``, ``log N(u) = -eps^2 / 2 - log(scale) - log(2 pi) / 2``
        exactly, so the standardised value is the noise itself (no ``(u - loc) / scale``), and
        the Gaussian and tanh terms are summed in one pass: about half the ops (and autograd
        nodes) of scoring ``u`` with ``base.log_prob``; the same function of loc and scale.
        """
        base = self.base
        shape = torch.Size(sample_shape) + base.batch_shape + base.event_shape
        noise = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        u = self.loc + noise * self.scale
        # log N(u) - log(1 - tanh(u)^2), with log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))
        per_dim = (u + torch.nn.functional.softplus(-2.0 * u)) * 2.0 - base.log_scale
        const = (_HALF_LOG_2PI + 2.0 * _LOG_2) * self.loc.shape[-1] + self._log_half
        log_prob = (per_dim - 0.5 * noise.square()).sum(-1) - const
        return self._squash(u), log_prob

    def sample_and_log_prob(
        self, sample_shape: torch.Size | tuple[int, ...] = ()
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A sample without pathwise gradient and its log-density (score gradient kept)."""
        with torch.no_grad():
            u = self.base.rsample(sample_shape)
        log_det = 2.0 * (_LOG_2 - u - torch.nn.functional.softplus(-2.0 * u))
        return self._squash(u), self.base.log_prob(u) - log_det.sum(-1) - self._log_half

    def rsample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()) -> torch.Tensor:
        return self._squash(self.base.rsample(sample_shape))

    def sample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()) -> torch.Tensor:
        with torch.no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        _check_event(self, value)
        y = ((value - self._mid) / self._half).clamp(-self._limit, self._limit)
        # log(1 - y^2) as log1p(-y) + log1p(y): exact near |y| = 1, where 1 - y*y cancels.
        log_det = torch.log1p(-y) + torch.log1p(y)
        return self.base.log_prob(torch.atanh(y)) - log_det.sum(-1) - self._log_half


class Categorical(torch.distributions.Categorical):
    """``torch.distributions.Categorical`` from logits with TorchRL's ``deterministic_sample``
    (the arg-max), and fewer kernels on the collector's path: the logits are normalized by one
    ``log_softmax``, one sample draws by the Gumbel-max trick (``argmax(logits + Gumbel noise)``
    is an exact categorical sample) and ``log_prob`` of a ``[*B]`` action is one ``gather``.
    Other sample shapes and values fall back to torch's code. On the collector's small logits
    this about halves the call.

    Shapes:
        ``logits``: ``[*B, n]``; samples and ``log_prob``: ``[*S, *B]``.
    """

    def __init__(self, logits: torch.Tensor, validate_args: bool | None = None) -> None:
        if logits.dim() < 1:
            raise ValueError(f"logits must have at least one dimension, got shape {logits.shape}")
        # Instance attribute over torch's lazy property, as torch's own __init__ does.
        self.logits = logits.log_softmax(-1)
        self._param = self.logits
        self._num_events = logits.shape[-1]
        torch.distributions.Distribution.__init__(
            self, logits.shape[:-1], validate_args=validate_args
        )

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.logits.argmax(-1)

    @property
    def mode(self) -> torch.Tensor:
        return self.logits.argmax(-1)

    def sample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()) -> torch.Tensor:
        if len(sample_shape):
            return super().sample(torch.Size(sample_shape))
        with torch.no_grad():
            gumbel = torch.empty_like(self.logits).exponential_().log_()
            return (self.logits - gumbel).argmax(-1)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if value.is_floating_point() or value.is_complex():  # .long() would truncate 1.7 to 1
            raise ValueError(
                f"Categorical.log_prob: the action must hold integer indices, got {value.dtype} "
                "(a one-hot action belongs to a one-hot distribution)"
            )
        batch = self.logits.shape[:-1]
        if value.shape != batch:
            if value.shape[value.dim() - len(batch) :] != batch:  # [B, 1] would broadcast
                raise ValueError(
                    f"Categorical.log_prob: the action has shape {tuple(value.shape)}, expected "
                    f"the batch shape {tuple(batch)} (indices, no trailing 1), optionally after "
                    "sample dimensions"
                )
            return super().log_prob(value)
        if self._validate_args:
            return super().log_prob(value)
        return self.logits.gather(-1, value.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        # p log p with p = 0 where a logit is -inf (a masked action): 0, not NaN.
        return -(self.logits.exp() * self.logits.clamp(min=torch.finfo(self.logits.dtype).min)).sum(
            -1
        )


class MultiCategorical(Distribution):
    """Independent categoricals, one per component of a MultiDiscrete action (factorized).

    ``logits`` holds the components' logits side by side (``nvec`` sizes); an action is one
    index per component, its log-prob and entropy the sums over components.

    Shapes:
        ``logits``: ``[*B, sum(nvec)]``; action ``[*B, k]`` int64; ``log_prob``: ``[*B]``.
    """

    arg_constraints: dict = {}

    def __init__(self, logits: torch.Tensor, nvec: list[int]) -> None:
        if logits.shape[-1] != sum(nvec):
            raise ValueError(
                f"logits have {logits.shape[-1]} entries, nvec {nvec} needs {sum(nvec)}"
            )
        self.nvec = list(nvec)
        self.parts = [Categorical(part) for part in logits.split(self.nvec, -1)]
        super().__init__(logits.shape[:-1], torch.Size([len(nvec)]), validate_args=False)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return torch.stack([part.deterministic_sample for part in self.parts], -1)

    @property
    def mode(self) -> torch.Tensor:
        return self.deterministic_sample

    def sample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()) -> torch.Tensor:
        return torch.stack([part.sample(sample_shape) for part in self.parts], -1)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        _check_event(self, value)  # one index per component, no more, no fewer
        return sum(  # type: ignore[return-value]
            part.log_prob(value[..., i]) for i, part in enumerate(self.parts)
        )

    def entropy(self) -> torch.Tensor:
        return sum(part.entropy() for part in self.parts)  # type: ignore[return-value]


class IndependentBernoulli(Distribution):
    """Independent 0/1 choices (a MultiBinary action) from logits.

    Shapes:
        ``logits``: ``[*B, n]``; action ``[*B, n]`` int64 of 0 and 1; ``log_prob``: ``[*B]``.
    """

    arg_constraints: dict = {}

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits
        super().__init__(logits.shape[:-1], logits.shape[-1:], validate_args=False)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return (self.logits > 0).long()

    @property
    def mode(self) -> torch.Tensor:
        return self.deterministic_sample

    def sample(self, sample_shape: torch.Size | list[int] | tuple[int, ...] = ()) -> torch.Tensor:
        shape = torch.Size(sample_shape) + self.logits.shape
        with torch.no_grad():
            u = torch.rand(shape, dtype=self.logits.dtype, device=self.logits.device)
            return (u < torch.sigmoid(self.logits)).long()

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        _check_event(self, value)  # a [*B, 1] action would broadcast over the n choices
        # log sigma(l) for a 1, log sigma(-l) for a 0
        signed = torch.where(value.bool(), self.logits, -self.logits)
        return torch.nn.functional.logsigmoid(signed).sum(-1)

    def entropy(self) -> torch.Tensor:
        p = torch.sigmoid(self.logits)
        log_p = torch.nn.functional.logsigmoid(self.logits)
        log_q = torch.nn.functional.logsigmoid(-self.logits)
        return -(p * log_p + (1 - p) * log_q).sum(-1)


@register_kl(MultiCategorical, MultiCategorical)
def _kl_multi_categorical(p: MultiCategorical, q: MultiCategorical) -> torch.Tensor:
    return sum(  # type: ignore[return-value]
        torch.distributions.kl_divergence(a, b) for a, b in zip(p.parts, q.parts, strict=True)
    )


@register_kl(IndependentBernoulli, IndependentBernoulli)
def _kl_bernoulli(p: IndependentBernoulli, q: IndependentBernoulli) -> torch.Tensor:
    pp = torch.sigmoid(p.logits)
    log = torch.nn.functional.logsigmoid
    return (
        pp * (log(p.logits) - log(q.logits)) + (1 - pp) * (log(-p.logits) - log(-q.logits))
    ).sum(-1)


@register_kl(IndependentNormal, IndependentNormal)
def _kl_normal_normal(p: IndependentNormal, q: IndependentNormal) -> torch.Tensor:
    var_ratio = (p.scale / q.scale).pow(2)
    mean_term = ((p.loc - q.loc) / q.scale).pow(2)
    per_dim = 0.5 * (var_ratio + mean_term - 1.0) - (p.log_scale - q.log_scale)
    return per_dim.sum(-1)


@register_kl(TanhNormal, TanhNormal)
def _kl_tanh_tanh(p: TanhNormal, q: TanhNormal) -> torch.Tensor:
    # KL is invariant under a shared bijection, so it is the KL of the pre-tanh Gaussians.
    if not (torch.equal(p.low, q.low) and torch.equal(p.high, q.high)):
        raise ValueError("KL between TanhNormal distributions with different bounds is undefined")
    return _kl_normal_normal(p.base, q.base)
