"""Behaviour cloning: regress the data's actions (deterministic) or maximize their likelihood."""

from __future__ import annotations

from typing import Any, Literal

from tensordict import TensorDict, TensorDictBase
from tensordict.nn import InteractionType, TensorDictModuleBase, set_interaction_type
from tensordict.utils import unravel_key

from tdrl.keyed import check_finite, require
from tdrl.keys import ACTION, ACTION_ERROR, LOSS_ACTOR, PRIORITY_WEIGHT
from tdrl.objectives.common import SKIP_CHECK, as_batch_shape


class BCLoss(TensorDictModuleBase):
    """Behaviour cloning on a batch of ``(observation, action)`` data.

    ::

        deterministic:  loss_actor = mean_B w mean_A (mu(s) - a)^2
        log_prob:       loss_actor = -mean_B w log pi(a | s)

    ``mu(s)`` is the actor's action in deterministic mode (a ``DeterministicActor``'s output,
    a Gaussian's mean); ``log_prob`` needs an actor with ``get_dist`` (tdrl's and TorchRL's
    probabilistic actors). ``w`` is ``"priority_weight"`` when present.

    Returns ``loss_actor`` and, as a diagnostic, ``"action_error"`` (the mean squared error). A
    NaN or an infinity in what it reads is refused, naming the entry (``loss.validate_inputs =
    False`` skips that check).

    Shapes:
        batch ``[B]``; action ``[B, A]``.
    """

    def __init__(
        self, actor_network: Any, *, kind: Literal["deterministic", "log_prob"] = "deterministic"
    ) -> None:
        super().__init__()
        if kind not in ("deterministic", "log_prob"):
            raise ValueError(f"kind must be 'deterministic' or 'log_prob', got {kind!r}")
        if kind == "log_prob" and not callable(getattr(actor_network, "get_dist", None)):
            raise TypeError("BCLoss(kind='log_prob') needs an actor with get_dist")
        self.actor_network, self.kind = actor_network, kind
        self.in_keys = [*actor_network.in_keys, ACTION]
        self.out_keys = [LOSS_ACTOR, ACTION_ERROR]
        self._read_keys = frozenset(map(unravel_key, [*self.in_keys, PRIORITY_WEIGHT]))

    validate_inputs: bool = True

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        data_action = require(batch, ACTION, "BCLoss")
        if self.validate_inputs:
            check_finite(batch, self._read_keys, "BCLoss", SKIP_CHECK)
        inputs = batch.select(*self.actor_network.in_keys, strict=False)
        with set_interaction_type(InteractionType.DETERMINISTIC):
            action = self.actor_network(inputs.clone(False)).get(ACTION)
        if action.shape != data_action.shape:
            raise ValueError(
                f"BCLoss: the actor's {ACTION!r} has shape {tuple(action.shape)}, the data's "
                f"{tuple(data_action.shape)}"
            )
        error = (action - data_action).pow(2).mean(-1)
        if self.kind == "deterministic":
            per_sample = error
        else:
            per_sample = -self.actor_network.get_dist(inputs).log_prob(data_action)
            per_sample = per_sample.reshape(batch.batch_size)
        weights = batch.get(PRIORITY_WEIGHT, None)
        if weights is not None:
            weights = as_batch_shape(weights, batch.batch_size, PRIORITY_WEIGHT, "BCLoss")
            per_sample = per_sample * weights
        return TensorDict(
            {LOSS_ACTOR: per_sample.mean(), ACTION_ERROR: error.detach().mean()}, batch_size=[]
        )
