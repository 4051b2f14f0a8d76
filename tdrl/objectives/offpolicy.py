"""What the off-policy losses share: keys, input checks, the Bellman target, PER weighting.

Every off-policy loss reads one transition batch ``[B]`` in TorchRL's layout (docs/design.md,
"Data"): the root holds ``s_t`` and ``a_t``; ``("next", ...)`` holds ``r_t``, the flags and the real
``s_{t+1}``. An n-step sample from a replay buffer has the same layout plus
``"steps_to_next_obs"`` = k (and ``"gamma"`` = gamma^k); its ``("next", "reward")`` is already the
discounted k-step reward sum, so the bootstrap discount becomes ``gamma ** k``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey, unravel_key
from torch.distributions import Distribution

from tdrl.keyed import MissingKeyError, check_finite, next_key, renamed, require, tracing
from tdrl.keys import (
    ACTION,
    ACTION_VALUE,
    DONE,
    GAMMA,
    PRIORITY_WEIGHT,
    REWARD,
    STATE_ACTION_VALUE,
    STEPS_TO_NEXT_OBS,
    TD_ERROR,
    TERMINATED,
)
from tdrl.modules.ensembles import EnsembleCritic, Reduce, as_ensemble, reduce_members
from tdrl.objectives.common import SKIP_CHECK, as_batch_shape
from tdrl.objectives.target import make_target
from tdrl.ops import DISTANCES, distance, td0_return


@dataclasses.dataclass(frozen=True)
class OffPolicyKeys:
    """Keys the off-policy losses read (TorchRL's ``tensor_keys`` field names).

    ``reward``, ``done`` and ``terminated`` are read under ``"next"``, as in TorchRL.
    ``gamma`` is the per-sample discount written by an n-step buffer, used only when
    ``steps_to_next_obs`` is absent.
    """

    action: NestedKey = ACTION
    state_action_value: NestedKey = STATE_ACTION_VALUE
    action_value: NestedKey = ACTION_VALUE
    reward: NestedKey = REWARD
    done: NestedKey = DONE
    terminated: NestedKey = TERMINATED
    priority: NestedKey = TD_ERROR
    priority_weight: NestedKey = PRIORITY_WEIGHT
    steps_to_next_obs: NestedKey = STEPS_TO_NEXT_OBS
    gamma: NestedKey = GAMMA


_SCALAR = torch.Size([])


class OffPolicyLoss(TensorDictModuleBase):
    """Base of the off-policy losses: ``set_keys``, batch readers, targets, reduction.

    Every loss reads its batch through :meth:`_transition` (or :meth:`_reward_terminated`)
    first, which refuses a batch with a NaN or an infinity in an entry the loss reads (the
    networks' inputs at the root and under ``"next"``, the action, the reward, PER's weights),
    naming the entry; an offline loss that knows the action box also refuses data actions
    outside it. That costs one sum over the entries and one host sync per call: set
    ``loss.validate_inputs = False`` to skip it (shape and dtype checks stay).
    """

    validate_inputs: bool = True
    # "action" is a continuous [B, A] vector (TorchRL's layout), not a discrete index.
    _continuous_action: bool = False
    _read_keys: tuple[OffPolicyKeys, frozenset[NestedKey]] | None = None

    def __init__(self, *, gamma: float, loss_function: str) -> None:
        super().__init__()
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must lie in [0, 1], got {gamma}")
        if loss_function not in DISTANCES:
            raise ValueError(f"loss_function must be one of {DISTANCES}, got {loss_function!r}")
        self.gamma = gamma
        self.loss_function = loss_function
        self.tensor_keys = OffPolicyKeys()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except MissingKeyError as err:  # free when nothing is raised
            batch = args[0] if args else kwargs.get("tensordict")
            located = self._missing_in_key(batch, err.key)
            if located is None:
                raise
            raise located from err

    def _missing_in_key(self, batch: Any, key: NestedKey | None) -> MissingKeyError | None:
        """A network found ``key`` missing in the part of the batch it was given (the actor
        reads the next state's ``"observation"`` from ``batch["next"]``): the error again, naming
        the entry of the whole batch (``("next", "observation")``), when one of :attr:`in_keys`
        is missing and ends in ``key``."""
        if key is None or not isinstance(batch, TensorDictBase):
            return None
        tail = unravel_key(key)
        tail = tail if isinstance(tail, tuple) else (tail,)
        present = set(batch.keys(True))  # a network may read a whole sub-TensorDict
        for wanted in map(unravel_key, self.in_keys):
            path = wanted if isinstance(wanted, tuple) else (wanted,)
            if wanted not in present and path[-len(tail) :] == tail:
                have = sorted(map(str, batch.keys(True, True)))
                return MissingKeyError(
                    f"{type(self).__name__}: missing key {wanted!r} in the batch (it has {have}); "
                    f"the loss reads {list(self.in_keys)}",
                    wanted,
                )
        return None

    @property
    def in_keys(self) -> list[NestedKey]:  # type: ignore[override]
        """What the loss reads: the networks' inputs at the root and under ``"next"`` (but the
        action: the next state's action is the loss's own, never read from the batch)."""
        keys = self.tensor_keys
        found: list[NestedKey] = [keys.action, next_key(keys.reward), next_key(keys.terminated)]
        action = unravel_key(keys.action)
        for net in self.children():
            for key in getattr(net, "in_keys", []):
                pair = (key,) if unravel_key(key) == action else (key, next_key(key))
                for k in pair:
                    if k not in found:
                        found.append(k)
        return found

    # What forward returns besides the per-sample priority entry (each loss sets its own).
    _outputs: tuple[NestedKey, ...] = ()

    @property
    def out_keys(self) -> list[NestedKey]:  # type: ignore[override]
        """The entries ``forward`` returns (``loss_*`` terms, diagnostics, the priority key),
        for tools that read them before calling, as TorchRL's trainers do."""
        return [*self._outputs, self.tensor_keys.priority]

    def set_keys(self, **keys: NestedKey) -> OffPolicyLoss:
        """Rename the keys the loss reads (TorchRL's ``set_keys``); returns ``self``."""
        self.tensor_keys = renamed(self.tensor_keys, type(self).__name__, **keys)
        return self

    def target_pairs(self) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        """``(online, target)`` pairs, for :class:`~tdrl.objectives.target.SoftUpdate`: the
        critics' (and the actor's, for DDPG/TD3; the Q network's, for the DQN family) when their
        targets are delayed."""
        pairs: list[tuple[torch.nn.Module, torch.nn.Module]] = []
        if getattr(self, "delay_actor", False):
            pairs.append((self.actor_network, self.target_actor_network))
        if getattr(self, "delay_qvalue", False):
            pairs.append((self.qvalue_network, self.target_qvalue_network))
        if getattr(self, "delay_value", False):
            pairs.append((self.value_network, self.target_value_network))
        return pairs

    def _init_actor(self, actor_network: TensorDictModuleBase, delay_actor: bool) -> None:
        """The actor and its frozen target copy (the actor itself without ``delay_actor``)."""
        self.actor_network = actor_network
        self.delay_actor = delay_actor
        self.target_actor_network = make_target(actor_network) if delay_actor else actor_network

    def _init_critics(
        self,
        qvalue_network: Any,
        num_qvalue_nets: int,
        delay_qvalue: bool,
        out_key: NestedKey | None = None,
    ) -> None:
        """The critics as one ensemble (``as_ensemble``) and their frozen target copy."""
        kwargs = {} if out_key is None else {"out_key": out_key}
        self.qvalue_network = as_ensemble(qvalue_network, num_qvalue_nets, **kwargs)
        self.num_qvalue_nets = num_qvalue_nets
        self.delay_qvalue = delay_qvalue
        self.target_qvalue_network = (
            make_target(self.qvalue_network) if delay_qvalue else self.qvalue_network
        )

    def _init_value(self, value_network: Any, delay_value: bool, double_dqn: bool) -> None:
        """A Q network (the DQN family's) and its frozen target copy (the network itself
        without ``delay_value``); ``double_dqn`` needs the copy."""
        if double_dqn and not delay_value:
            raise ValueError("double_dqn=True needs delay_value=True (a separate target network)")
        self.value_network = value_network
        self.delay_value = delay_value
        self.double_dqn = double_dqn
        self.target_value_network = make_target(value_network) if delay_value else value_network

    def _init_alpha(self, alpha_init: float, fixed_alpha: bool) -> None:
        """``log_alpha``: a parameter to tune, or a buffer when ``fixed_alpha``."""
        self.fixed_alpha = fixed_alpha
        log_alpha = log_alpha_parameter(alpha_init, fixed_alpha)
        if fixed_alpha:
            self.register_buffer("log_alpha", log_alpha)
        else:
            self.log_alpha = log_alpha

    # --- reading the batch ----------------------------------------------------------------
    def _get(self, batch: TensorDictBase, key: NestedKey) -> torch.Tensor:
        return require(batch, key, type(self).__name__)

    def _per_sample(self, batch: TensorDictBase, key: NestedKey) -> torch.Tensor:
        """``batch[key]`` in the batch's shape (``[B]``; ``[B, L]`` for slices), accepting the
        trailing singleton of TorchRL's layout."""
        return as_batch_shape(self._get(batch, key), batch.batch_size, key, type(self).__name__)

    def _transition(self, batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """``(reward, terminated, discount)`` per sample, ``[B]`` each (discount may be a float)."""
        if len(batch.batch_size) != 1:
            raise ValueError(
                f"{type(self).__name__}: expected a flat batch of transitions [B], got batch "
                f"size {tuple(batch.batch_size)} (reshape(-1) a [num_envs, T] rollout first)"
            )
        return (*self._reward_terminated(batch), self._discount(batch))

    def _reward_terminated(self, batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """``(reward, terminated)`` in the batch's shape (``[B]``, or ``[B, L]`` for slices),
        checked: a floating-point reward and a bool flag; the batch checked first
        (:meth:`_check_batch`)."""
        self._check_batch(batch)
        key = next_key(self.tensor_keys.reward)
        reward = self._per_sample(batch, key)
        if not reward.is_floating_point():  # an integer reward would truncate gamma ** k
            raise TypeError(
                f"{type(self).__name__}: {key!r} must be a floating-point tensor, got "
                f"{reward.dtype}"
            )
        return reward, self._flag(batch, next_key(self.tensor_keys.terminated))

    def _check_batch(self, batch: TensorDictBase) -> None:
        """A continuous action's layout, and with :attr:`validate_inputs` the values: no NaN or
        infinity in what the loss reads, data actions inside :meth:`_action_box`."""
        owner, key = type(self).__name__, self.tensor_keys.action
        if self._continuous_action:
            action = batch.get(key, None)
            if action is not None and action.dim() != batch.batch_dims + 1:
                raise ValueError(
                    f"{owner}: {key!r} has shape {tuple(action.shape)}; a continuous action is "
                    f"[*B, action_dim] with B = {tuple(batch.batch_size)} (TorchRL's layout: a "
                    f"one-dimensional action is [*B, 1], e.g. action.unsqueeze(-1))"
                )
        if not self.validate_inputs:
            return
        if self._read_keys is None or self._read_keys[0] is not self.tensor_keys:
            keys = [*self.in_keys, self.tensor_keys.priority_weight, self.tensor_keys.gamma]
            self._read_keys = (self.tensor_keys, frozenset(map(unravel_key, keys)))
        check_finite(batch, self._read_keys[1], owner, SKIP_CHECK)
        box = self._action_box()
        if box is not None and batch.get(key, None) is not None:
            check_in_box(self._get(batch, key), *box, key, owner)

    def _action_box(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(low, high)`` that the batch's actions must lie in, where the loss knows the box
        (the offline losses: data actions come from elsewhere); None: not checked."""
        return None

    def _flag(self, batch: TensorDictBase, key: NestedKey) -> torch.Tensor:
        """A bool flag in the batch's shape (``~`` of an integer flag is not ``1 - flag``)."""
        flag = self._per_sample(batch, key)
        if flag.dtype != torch.bool:
            raise TypeError(f"{type(self).__name__}: {key!r} must be bool, got {flag.dtype}")
        return flag

    def _discount(self, batch: TensorDictBase) -> torch.Tensor | float:
        keys = self.tensor_keys
        for key in (keys.steps_to_next_obs, next_key(keys.steps_to_next_obs)):
            if batch.get(key, None) is not None:
                steps = self._per_sample(batch, key)
                return torch.pow(self.gamma, steps.to(torch.get_default_dtype()))
        if batch.get(keys.gamma, None) is not None:
            return self._per_sample(batch, keys.gamma)
        return self.gamma

    def _action_index(self, batch: TensorDictBase, num_actions: int) -> torch.Tensor:
        """The discrete action as an index in the batch's shape (``[B]``; ``[B, L]`` for slices),
        from an index or a one-hot entry.

        The range of an index is not checked here: :meth:`_gather_action` checks it through
        ``gather``'s own bounds check, which costs nothing when the indices are valid (a
        ``min``/``max`` check costs two reductions and two host syncs per batch).
        """
        key = self.tensor_keys.action
        action = self._get(batch, key)
        shape = batch.batch_size
        one_hot = num_actions > 1 and action.shape == (*shape, num_actions)
        if one_hot or action.dtype.is_floating_point or action.dtype == torch.bool:
            if not one_hot:
                raise ValueError(
                    f"{type(self).__name__}: {key!r} must be an integer action index "
                    f"{tuple(shape)} (or {(*shape, 1)}) or one-hot {(*shape, num_actions)}, got "
                    f"{tuple(action.shape)} {action.dtype}"
                )
            if action.dtype == torch.bool:  # argmax takes no bool
                action = action.to(torch.uint8)
            return action.argmax(-1)
        return self._per_sample(batch, key)

    def _gather_action(self, values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """``values[..., index]``: ``[*E, B, n]`` and an index ``[B]`` -> ``[*E, B]``.

        An index outside ``[0, n)`` raises a ``ValueError`` that names the action key.
        """
        expanded = index.view(*([1] * (values.dim() - 2)), -1, 1).expand(*values.shape[:-1], 1)
        try:
            return values.gather(-1, expanded).squeeze(-1)
        except RuntimeError as error:
            self._check_index(index, values.shape[-1], error)
            raise

    def _check_index(self, index: torch.Tensor, n: int, error: Exception) -> None:
        """After ``gather`` failed with ``error``: a ``ValueError`` naming the action key, the
        first index outside ``[0, n)`` and ``n``, if there is one (else nothing)."""
        bad = (index < 0) | (index >= n)
        if bool(bad.any()):
            where = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(
                f"{type(self).__name__}: {self.tensor_keys.action!r} holds indices outside "
                f"[0, {n}) (the network has {n} actions): {int(index[where])} at index {where} "
                f"(min {int(index.min())}, max {int(index.max())})"
            ) from error

    def _weights(self, batch: TensorDictBase) -> torch.Tensor | None:
        weights = batch.get(self.tensor_keys.priority_weight, None)
        if weights is None:
            return None
        key = self.tensor_keys.priority_weight
        return as_batch_shape(weights, batch.batch_size, key, type(self).__name__)

    @staticmethod
    def _output(out: dict[NestedKey, torch.Tensor]) -> TensorDict:
        """The loss's output TensorDict (batch size ``[]``) from a dict of tensors."""
        return TensorDict(out, batch_size=_SCALAR)

    # --- computing -----------------------------------------------------------------------
    def _distance(self, prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return distance(prediction, target, self.loss_function)

    def _critic_regression(
        self, batch: TensorDictBase, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(sum_e mean_B w l(Q_e(s, a), y), td_error [B])`` for the critic ensemble
        ``qvalue_network`` and the target ``y`` ``[B]``; ``td_error`` is the largest
        ``|Q_e(s, a) - y|`` over the members (PER's priority)."""
        self._get(batch, self.tensor_keys.action)  # named if missing (the critic reads it)
        q = critic_values(self.qvalue_network, batch, None, self.tensor_keys.action)
        return self._regression(q, target, batch)

    def _regression(
        self, q: torch.Tensor, target: torch.Tensor, batch: TensorDictBase
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_critic_regression` for the members' values ``q`` ``[E, B]`` already computed."""
        per_sample = self._distance(q, target.expand_as(q)).sum(0)
        td_error = (q.detach() - target).abs().max(dim=0).values
        return self._mean(per_sample, self._weights(batch)), td_error

    @staticmethod
    def _mean(per_sample: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
        """Mean over the batch, importance-weighted by PER's ``priority_weight`` if given."""
        if weights is None:
            return per_sample.mean()
        return (per_sample * weights).mean()


def over_defaults(owner: str, options: Mapping[str, Any], defaults: Mapping[str, Any]) -> Any:
    """``options`` (a loss's ``**options`` of a TypedDict) over their ``defaults``; a name that
    ``defaults`` does not have raises the ``TypeError`` an unknown keyword argument does."""
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise TypeError(f"{owner}.__init__() got an unexpected keyword argument {unknown[0]!r}")
    return {**defaults, **options}


def bellman_target(
    reward: torch.Tensor,
    next_value: torch.Tensor,
    terminated: torch.Tensor,
    discount: torch.Tensor | float,
) -> torch.Tensor:
    """One-step target ``y = r + discount * (1 - terminated) * V(s')`` (no gradient).

    :func:`tdrl.ops.td0_return` with the ``"bootstrap"`` truncation policy: a truncated step is
    bootstrapped like an ordinary one, ``V(s')`` coming from the real final observation
    (partial-episode bootstrapping, Pardo et al. 2018, arXiv 1712.00378), and a terminated
    step's ``V(s')`` is replaced by 0 (not multiplied by 0, so a non-finite ``V(s')`` cannot leak
    in). ``discount`` is ``gamma`` or, for n-step samples, the per-sample ``gamma ** k``. The
    flat batch is one time row (``time_dim=-1``): TD(0) is elementwise, so no step reads its
    neighbour. The op's input checks are skipped (``validate=False``, its elementwise fast path):
    ``_transition`` already checked shapes and dtypes, and the checks would cost more than the
    target itself on this hot path.

    Shapes:
        all ``[B]`` -> ``[B]``.
    """
    return td0_return(reward, next_value, terminated, gamma=discount, time_dim=-1, validate=False)


def module_box(module: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """A module's ``(action_low, action_high)`` (tdrl's bounded actors and BCQ's networks have
    them), or None."""
    low, high = getattr(module, "action_low", None), getattr(module, "action_high", None)
    return None if low is None or high is None else (low, high)


def check_in_box(
    action: torch.Tensor, low: torch.Tensor, high: torch.Tensor, key: NestedKey, owner: str
) -> None:
    """Raise ``ValueError`` naming ``key``, the first value outside ``[low, high]`` (bounds
    float or ``[A]``), its index and its dimension's bounds."""
    if tracing():  # no host sync in a compiled or captured step (tdrl.keyed.check_finite)
        return
    outside = (action < low) | (action > high)
    if bool(outside.any()):
        where = tuple(int(i) for i in outside.nonzero()[0])
        low_at = float(low.expand_as(action)[where])
        high_at = float(high.expand_as(action)[where])
        raise ValueError(
            f"{owner}: {key!r} holds {action[where].item()} at index {where}, outside the action "
            f"box [{low_at}, {high_at}] ({int(outside.sum())} values outside); clip the data's "
            f"actions to the box (the env ran them clipped){SKIP_CHECK}"
        )


def rsample_and_log_prob(dist: Distribution) -> tuple[torch.Tensor, torch.Tensor]:
    """A reparameterised action and its log-density ``[B]``, from one draw.

    Uses the distribution's own ``rsample_and_log_prob`` when it has one (tdrl's and TorchRL's
    ``TanhNormal``: no ``atanh`` round trip); a per-dimension log-prob is summed.
    """
    both = getattr(dist, "rsample_and_log_prob", None)
    if callable(both):
        action, log_prob = both()
    else:
        action = dist.rsample()
        log_prob = dist.log_prob(action)
    if log_prob.shape == action.shape:
        log_prob = log_prob.sum(-1)
    return action, log_prob


def _critic_inputs(
    critic: Any, batch: TensorDictBase, action: torch.Tensor | None, action_key: NestedKey
) -> TensorDictBase:
    """A shallow selection of the critic's in_keys (the batch is not modified), ``a`` replaced."""
    inputs = batch.select(*critic.in_keys, strict=False)
    if action is not None:
        inputs.set(action_key, action)
    return inputs


def _one_value_per_member(values: torch.Tensor) -> torch.Tensor:
    """``[..., 1]`` -> ``[...]``, or an error naming the critic's output shape."""
    if values.shape[-1] != 1:
        raise ValueError(
            f"the critic must output one value per member, got shape {tuple(values.shape)}"
        )
    return values.squeeze(-1)


def critic_values(
    critic: Any,
    batch: TensorDictBase,
    action: torch.Tensor | None,
    action_key: NestedKey,
    members: torch.Tensor | None = None,
) -> torch.Tensor:
    """``Q_e(s, a)`` of every ensemble member as ``[E, B]``, with ``a`` replaced if given; of
    the ``members`` only (an index tensor, ``[M, B]``) if given, which a tdrl
    :class:`~tdrl.modules.ensembles.EnsembleCritic` computes for those members alone.

    The batch is not modified: the critic reads a shallow selection of it.
    """
    inputs = _critic_inputs(critic, batch, action, action_key)
    if members is None:
        return _one_value_per_member(critic.values(inputs))
    if isinstance(critic, EnsembleCritic):
        return _one_value_per_member(critic.values(inputs, members))
    return _one_value_per_member(critic.values(inputs)).index_select(0, members)


def actor_critic_value(
    critic: Any,
    batch: TensorDictBase,
    action: torch.Tensor,
    action_key: NestedKey,
    how: Reduce,
) -> torch.Tensor:
    """``Q(s, a)`` for an actor loss, ``[B]``: the minimum over the members (``"min"``) or the
    first member's (``"first"``), with ``a`` replaced by ``action``.

    An ensemble with ``reduced_values`` (:class:`~tdrl.modules.ensembles.EnsembleCritic`)
    computes only what the actor's gradient needs under :func:`frozen`; any other gives
    ``critic_values(...)`` reduced (the same values and gradients).
    """
    reduced = getattr(critic, "reduced_values", None)
    if reduced is None:
        return reduce_members(critic_values(critic, batch, action, action_key), how)
    return _one_value_per_member(reduced(_critic_inputs(critic, batch, action, action_key), how))


def checked_target_entropy(target_entropy: str | float) -> str | float:
    """``target_entropy`` as the losses keep it: ``"auto"`` or a finite float (a string that
    reads as one passes, as a command line gives it); anything else is a ValueError."""
    if isinstance(target_entropy, str) and target_entropy == "auto":
        return "auto"
    try:
        value = float(target_entropy)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(
            f"target_entropy must be 'auto' or a finite number, got {target_entropy!r}"
        )
    return value


def target_entropy_of(target_entropy: str | float, action_dim: int | None) -> float:
    """``-action_dim`` for ``"auto"`` (Haarnoja et al. 2018, arXiv 1812.05905, sec. 5)."""
    if target_entropy != "auto":
        return float(target_entropy)
    if action_dim is None:
        raise ValueError("target_entropy='auto' needs action_dim (or give target_entropy)")
    return -float(action_dim)


def log_alpha_parameter(alpha_init: float, fixed_alpha: bool) -> torch.Tensor:
    """``log(alpha_init)`` as a trainable parameter, or a constant when ``fixed_alpha``."""
    if not (math.isfinite(alpha_init) and alpha_init > 0):
        raise ValueError(f"alpha_init must be finite and > 0, got {alpha_init}")
    value = torch.tensor(math.log(alpha_init))
    return value if fixed_alpha else torch.nn.Parameter(value)


@contextlib.contextmanager
def frozen(module: torch.nn.Module) -> Iterator[None]:
    """Evaluate ``module`` without recording its parameters in the graph.

    The actor losses differentiate ``Q(s, pi(s))`` with respect to the actor only: gradients
    flow through the action into the actor, and none reach the critic (TorchRL detaches the
    critic's parameters for the same reason). Cheaper than a functional call with detached
    copies: it flips ``requires_grad`` on the few parameter tensors and back.
    """
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)
