"""Exploration: epsilon-greedy with a linear schedule, Gaussian and Ornstein-Uhlenbeck noise.

Each module goes after the actor (``TensorDictSequential(actor, noise)`` or called in turn) and
rewrites ``"action"``. Noise is applied only under tensordict's ``InteractionType.RANDOM``
(TorchRL's ``set_exploration_type(ExplorationType.RANDOM)``); under any other type (e.g.
``DETERMINISTIC`` for evaluation) the action passes through. With no type set,
``default_interaction_type`` applies: ``RANDOM`` here, since the module exists to explore (as
TorchRL's ``EGreedyModule`` and ``AdditiveGaussianModule``).

Schedules are buffers, so they are saved and restored with ``state_dict``; ``step(n)`` advances
them by ``n`` env frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypedDict, Unpack, overload

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType, TensorDictModuleBase
from tensordict.nn.probabilistic import interaction_type
from tensordict.utils import NestedKey

from tdrl.keyed import check_counts, require
from tdrl.keys import ACTION, IS_INIT
from tdrl.modules.actors import Bound, _register_bounds, masked_logits


@overload
def linear_schedule(start: float, end: float, duration: int, t: int | float) -> float: ...
@overload
def linear_schedule(
    start: float, end: torch.Tensor, duration: int, t: int | float
) -> torch.Tensor: ...
def linear_schedule(
    start: float, end: float | torch.Tensor, duration: int, t: int | float
) -> float | torch.Tensor:
    """``start`` moved linearly to ``end`` over ``duration`` steps, then held at ``end``.

    The DQN schedule of Mnih et al. 2015 (epsilon 1 -> 0.1 over the first 1M frames); ``end``
    may be a tensor (one schedule per entry, e.g. per env).
    """
    if duration <= 0:
        return end
    frac = min(max(float(t) / duration, 0.0), 1.0)
    return start + frac * (end - start)


class _Exploration(TensorDictModuleBase):
    def __init__(self, action_key: NestedKey, default_interaction_type: InteractionType) -> None:
        super().__init__()
        self.in_keys = [action_key]
        self.out_keys = [action_key]
        self.default_interaction_type = default_interaction_type
        self.register_buffer("frames", torch.zeros((), dtype=torch.int64))

    def step(self, frames: int = 1) -> None:
        """Advance the schedule by ``frames`` env steps."""
        self.frames += frames

    def _exploring(self) -> bool:
        return (interaction_type() or self.default_interaction_type) is InteractionType.RANDOM


def apex_epsilons(num_envs: int, base: float = 0.4, alpha: float = 7.0) -> torch.Tensor:
    """Ape-X's per-actor epsilons (Horgan et al. 2018, arXiv 1803.00933; R2D2's actors):
    ``eps_i = base ** (1 + alpha i / (N - 1))`` for ``i = 0 .. N-1`` (``[base]`` for one env),
    from ``base`` down to ``base ** (1 + alpha)``: a few envs explore, most act near greedily.
    Ape-X holds them fixed (an :class:`EpsilonGreedy` with ``annealing_num_steps=0``); as its
    ``eps_end`` with a longer schedule, each env anneals to its own.

    Returns:
        float32 ``[N]``, an ``eps_end`` of :class:`EpsilonGreedy` (one epsilon per env).
    """
    check_counts("apex_epsilons", num_envs=num_envs)
    if not 0.0 <= base <= 1.0 or alpha < 0.0:
        raise ValueError(
            f"apex_epsilons: base must lie in [0, 1] and alpha be >= 0, got {base}, {alpha}"
        )
    i = torch.arange(num_envs, dtype=torch.float64)
    return (base ** (1.0 + alpha * i / max(num_envs - 1, 1))).to(torch.float32)


def _epsilon_form(eps_end: object) -> str:
    """How an ``eps_end`` (a float, None for a checkpoint saved with one, or ``[N]``) reads in an
    error: equal strings for the same form."""
    if isinstance(eps_end, torch.Tensor):
        return f"{eps_end.numel()} per-env epsilons (a {list(eps_end.shape)} eps_end)"
    return "one epsilon (a float eps_end)"


class EpsilonGreedy(_Exploration):
    """With probability epsilon, replace the (index) action by a uniform random one.

    Epsilon follows :func:`linear_schedule` from ``eps_init`` to ``eps_end`` over
    ``annealing_num_steps`` frames (TorchRL's ``EGreedyModule`` argument names). ``eps_end`` may
    be one epsilon per env, a ``[N]`` tensor (e.g. :func:`apex_epsilons`): env ``i`` (index ``i``
    of the batch's first dimension, which must then be ``N``) anneals to its own ``eps_end[i]``.

    Args:
        num_actions: number of discrete actions ``n``.
        eps_init: initial epsilon.
        eps_end: final epsilon, a float or a ``[N]`` tensor (one per env).
        annealing_num_steps: frames over which epsilon decays.
        action_key: the action entry (int64 index) to rewrite.
        mask_key: an action-mask key (``"action_mask"``): random actions are drawn among the
            valid ones.
        default_interaction_type: used when no interaction type is set.

    Shapes:
        ``action``: ``[*B]`` int64; mask ``[*B, n]`` bool.
    """

    def __init__(
        self,
        num_actions: int,
        *,
        eps_init: float = 1.0,
        eps_end: float | torch.Tensor = 0.05,
        annealing_num_steps: int = 10_000,
        action_key: NestedKey = ACTION,
        mask_key: NestedKey | None = None,
        default_interaction_type: InteractionType = InteractionType.RANDOM,
    ) -> None:
        super().__init__(action_key, default_interaction_type)
        self.mask_key = mask_key
        if mask_key is not None:
            self.in_keys = [*self.in_keys, mask_key]
        ends = torch.as_tensor(eps_end, dtype=torch.float32)
        if ends.dim() > 1 or ends.numel() == 0:
            raise ValueError(
                f"EpsilonGreedy: eps_end must be a float or a [num_envs] tensor, got shape "
                f"{tuple(ends.shape)}"
            )
        if not 0.0 <= eps_init <= 1.0 or not bool(((ends >= 0) & (ends <= 1)).all()):
            raise ValueError(f"epsilons must lie in [0, 1], got {eps_init}, {eps_end}")
        check_counts("EpsilonGreedy", num_actions=num_actions)
        self.num_actions = num_actions
        self.eps_init = eps_init
        self.eps_end: float | torch.Tensor
        if ends.dim() == 0:
            self.eps_end = float(eps_end)
        else:  # a buffer: it moves with .to() and is saved with the schedule
            self.register_buffer("eps_end", ends.clone())
        self.annealing_num_steps = annealing_num_steps

    def _load_from_state_dict(
        self,
        state_dict: Mapping[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        # A checkpoint's epsilons in another form than this module's (one per env against one
        # float, or another number of envs): named here, not as torch's missing, unexpected or
        # size-mismatched "eps_end" key. Checked after torch's load, whose pre-hooks may
        # rewrite the entries (a mismatched size leaves the module's own epsilons in place).
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        saved = state_dict.get(prefix + "eps_end")
        if saved is None and prefix + "frames" not in state_dict:
            return  # the checkpoint does not hold this module (a partial one, strict=False)
        # (torch passes strict=True here whatever the caller asked: a checkpoint that holds
        # this module's schedule position but no eps_end was saved with one float)
        theirs, ours = _epsilon_form(saved), _epsilon_form(self.eps_end)
        if theirs != ours:
            raise ValueError(
                f"EpsilonGreedy: the checkpoint holds {theirs}, this module {ours}: build it "
                "with the eps_end the checkpoint was saved with"
            )

    @property
    def eps(self) -> float:
        """The current epsilon; with one per env, their mean (the figure to log)."""
        eps = self._eps()
        return float(eps.mean()) if isinstance(eps, torch.Tensor) else eps

    def _eps(self) -> float | torch.Tensor:
        """The current epsilon: a float, or ``[N]`` with one per env."""
        return linear_schedule(
            self.eps_init, self.eps_end, self.annealing_num_steps, int(self.frames)
        )

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not self._exploring():
            return tensordict
        key = self.in_keys[0]
        action = require(tensordict, key, "EpsilonGreedy")
        if action.dtype.is_floating_point:
            raise TypeError(
                f"EpsilonGreedy: {key!r} must be an integer action index, got {action.dtype}"
            )
        batch = tuple(tensordict.batch_size)
        if action.shape not in (batch, (*batch, 1)):  # a one-hot [*B, n] would be corrupted
            raise ValueError(
                f"EpsilonGreedy: {key!r} must be an action index of the batch's shape {batch} "
                f"(or {(*batch, 1)}), got {tuple(action.shape)}; a one-hot action (TorchRL's "
                "QValueActor on a OneHot spec) is not taken: give it a Categorical spec"
            )
        eps = self._eps()
        if isinstance(eps, torch.Tensor):  # one per env: along the batch's first dimension
            if not batch or batch[0] != eps.numel():
                raise ValueError(
                    f"EpsilonGreedy: {eps.numel()} per-env epsilons (eps_end) need a batch "
                    f"whose first dimension is the {eps.numel()} envs, got batch {batch}"
                )
            eps = eps.to(action.device).view(-1, *(1,) * (action.dim() - 1))
        explore = torch.rand(action.shape, device=action.device) < eps
        if self.mask_key is None:
            random = torch.randint_like(action, self.num_actions)
        else:  # the arg-max of iid uniforms over the valid actions is uniform among them
            mask = require(tensordict, self.mask_key, "EpsilonGreedy")
            if mask.shape != (*action.shape, self.num_actions):
                raise ValueError(
                    f"EpsilonGreedy: {self.mask_key!r} has shape {tuple(mask.shape)}, expected "
                    f"{(*action.shape, self.num_actions)} ({key!r} {tuple(action.shape)} plus "
                    f"num_actions={self.num_actions}; the action is an index, not one-hot)"
                )
            noise = masked_logits(torch.rand(mask.shape, device=mask.device), mask, self.mask_key)
            random = noise.argmax(-1).to(action.dtype)
        tensordict.set(key, torch.where(explore, random, action))
        return tensordict


class NoiseOptions(TypedDict, total=False):
    """What the action-noise modules pass on to their shared base; their defaults are
    :data:`NOISE_DEFAULTS` (bounds ``[-1, 1]``, ``"action"``, ``InteractionType.RANDOM``)."""

    action_low: Bound
    action_high: Bound
    action_key: NestedKey
    default_interaction_type: InteractionType


NOISE_DEFAULTS: Final[NoiseOptions] = {
    "action_low": None,
    "action_high": None,
    "action_key": ACTION,
    "default_interaction_type": InteractionType.RANDOM,
}


class _ActionNoise(_Exploration):
    def __init__(
        self,
        action_dim: int,
        *,
        action_low: Bound,
        action_high: Bound,
        action_key: NestedKey,
        default_interaction_type: InteractionType,
    ) -> None:
        super().__init__(action_key, default_interaction_type)
        self.action_dim = action_dim
        _register_bounds(self, action_dim, action_low, action_high)

    def _action(self, tensordict: TensorDictBase) -> torch.Tensor:
        key = self.in_keys[0]
        action = require(tensordict, key, type(self).__name__)
        if action.shape[-1:] != (self.action_dim,):
            raise ValueError(
                f"{type(self).__name__}: {key!r} has shape {tuple(action.shape)}, expected a "
                f"last dim of action_dim={self.action_dim}"
            )
        return action

    def _write(
        self, tensordict: TensorDictBase, action: torch.Tensor, noisy: torch.Tensor
    ) -> TensorDictBase:
        # the bounds and the state are float32: the noisy action keeps the action's own dtype
        noisy = noisy.clamp(self.action_low, self.action_high).to(action.dtype)
        tensordict.set(self.in_keys[0], noisy)
        return tensordict


class AdditiveGaussianNoise(_ActionNoise):
    """``a + sigma * (high - low) / 2 * N(0, 1)``, clipped to the bounds (TD3's exploration).

    ``sigma`` is in units of the half-range, so ``sigma=0.1`` is Fujimoto et al.'s
    ``N(0, 0.1 max_action)`` and Tianshou's ``GaussianNoise(sigma=0.1 * max_action)``. It is
    annealed linearly from ``sigma_init`` to ``sigma_end`` over ``annealing_num_steps`` frames
    (constant by default).

    Args:
        action_dim: action size ``A``.
        sigma_init: initial noise scale (half-range units).
        sigma_end: final noise scale; ``None`` keeps ``sigma_init``.
        annealing_num_steps: frames over which sigma decays.
        **options: ``action_low`` and ``action_high`` (the env's bounds; ``None``: -1 and 1),
            ``action_key`` (the action entry to rewrite) and ``default_interaction_type`` (used
            when no interaction type is set): :class:`NoiseOptions`.

    Shapes:
        ``action``: ``[*B, A]``.
    """

    def __init__(
        self,
        action_dim: int,
        *,
        sigma_init: float = 0.1,
        sigma_end: float | None = None,
        annealing_num_steps: int = 1,
        **options: Unpack[NoiseOptions],
    ) -> None:
        super().__init__(action_dim, **(NOISE_DEFAULTS | options))
        self.sigma_init = sigma_init
        self.sigma_end = sigma_init if sigma_end is None else sigma_end
        self.annealing_num_steps = annealing_num_steps

    @property
    def sigma(self) -> float:
        """The current noise scale."""
        return linear_schedule(
            self.sigma_init, self.sigma_end, self.annealing_num_steps, int(self.frames)
        )

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Stateless noise: nothing to reset (kept for a uniform interface)."""

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not self._exploring():
            return tensordict
        action = self._action(tensordict)
        half = (self.action_high - self.action_low) / 2
        noise = torch.randn(action.shape, device=action.device, dtype=half.dtype)
        return self._write(tensordict, action, action + self.sigma * half * noise)


class OrnsteinUhlenbeckNoise(_ActionNoise):
    """Temporally correlated noise of DDPG (Lillicrap et al. 2015, arXiv 1509.02971).

    ``x <- x + theta (mu - x) dt + sigma sqrt(dt) N(0, 1)`` per env (the Euler-Maruyama step of
    SB3's and TorchRL's ``OrnsteinUhlenbeckProcess``, same defaults), added to the action in
    half-range units and clipped to the bounds. The state has one row per env; it is reset to
    ``x0`` for the envs whose ``"is_init"`` entry is set (the first step of an episode) when the
    input has that entry (``tdrl.collectors.Collector`` writes it), or explicitly with
    :meth:`reset`. The state is part of ``state_dict`` (exact resume).

    Args:
        action_dim: action size ``A``.
        theta: mean-reversion rate.
        mu: long-run mean.
        sigma: noise scale.
        dt: time step.
        x0: reset value of the state.
        **options: as :class:`AdditiveGaussianNoise`'s (:class:`NoiseOptions`).

    Shapes:
        ``action``: ``[*B, A]``; ``is_init``: ``[*B, 1]``; the state: ``[*B, A]``.
    """

    state: torch.Tensor

    noise_buffers = ("state",)
    """The per-env process state belongs to the copy that acts (the :mod:`tdrl.modules.noise`
    convention): weight updates sent to workers and target copies leave it alone."""

    def __init__(
        self,
        action_dim: int,
        *,
        theta: float = 0.15,
        mu: float = 0.0,
        sigma: float = 0.2,
        dt: float = 1e-2,
        x0: float = 0.0,
        **options: Unpack[NoiseOptions],
    ) -> None:
        super().__init__(action_dim, **(NOISE_DEFAULTS | options))
        if not dt > 0 or not sigma >= 0:  # sqrt(dt) scales the noise; NaN fails both
            raise ValueError(
                f"OrnsteinUhlenbeckNoise: dt must be > 0 and sigma >= 0, got dt={dt}, sigma={sigma}"
            )
        self.theta, self.mu, self.sigma, self.dt, self.x0 = theta, mu, sigma, dt, x0
        # Per-env state, saved with ``state_dict`` so a resumed run continues the same noise;
        # its shape follows the number of envs (empty until the first call).
        self.register_buffer("state", torch.empty(0))

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args, **kwargs) -> None:
        saved = state_dict.get(prefix + "state")
        if saved is not None:  # take the saved shape (the number of envs of the saving run)
            self.state = torch.empty_like(saved, device=self.state.device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Reset the envs where ``mask`` (``[*B]`` or ``[*B, 1]``) is set; all if ``None``."""
        if mask is None or self.state.numel() == 0:
            self.state = torch.empty(0, device=self.state.device)
            return
        envs = self.state.shape[:-1]
        if mask.dtype is not torch.bool or mask.shape not in (envs, (*envs, 1)):
            raise ValueError(
                f"OrnsteinUhlenbeckNoise: the reset mask ({IS_INIT!r} when read from the input) "
                f"must be bool of shape {tuple(envs)} or {(*envs, 1)}, one per env of the "
                f"state; got {mask.dtype} {tuple(mask.shape)}"
            )
        self.state[mask.reshape(envs)] = self.x0

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not self._exploring():
            return tensordict
        action = self._action(tensordict)
        if self.state.shape != action.shape:
            self.state = torch.full_like(action, self.x0)
        is_init = tensordict.get(IS_INIT, None)
        if is_init is not None:
            self.reset(is_init)
        noise = torch.randn_like(action)
        drift = self.theta * (self.mu - self.state) * self.dt
        self.state = self.state + drift + self.sigma * self.dt**0.5 * noise
        half = (self.action_high - self.action_low) / 2
        return self._write(tensordict, action, action + half * self.state)
