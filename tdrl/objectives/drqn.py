"""Recurrent DQN on replay slices (DRQN, Hausknecht & Stone 2015, arXiv 1507.06527) with R2D2's
stored recurrent state and burn-in (Kapturowski et al. 2019)."""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torchrl.modules import set_recurrent_mode

from tdrl.keyed import next_key, require
from tdrl.keys import (
    ACTION_VALUE,
    CHOSEN_ACTION_VALUE,
    IS_INIT,
    LOSS,
    TRUNCATED,
    VALUE_TARGET,
)
from tdrl.objectives.offpolicy import OffPolicyLoss


class DRQNLoss(OffPolicyLoss):
    """Q-learning on ``[B, L]`` replay slices with a recurrent Q network and a target network.

    Each slice (``ReplayBuffer.sample_slices``: steps of one episode, the last one marked
    truncated when the episode goes on) is run through the network in sequence mode from the
    recurrent state the collector stored at its first step, extended by the last step's
    ``("next", ...)`` observation, so ``Q(s_{t+1})`` is the network's output one step later in
    the same sequence (the real final observation at an episode end)::

        a*_t = argmax_a Q(s_{t+1}, a) (double_dqn) or argmax_a Q'(s_{t+1}, a)
        y_t  = r_t + gamma (1 - terminated_t) Q'(s_{t+1}, a*_t)
        loss = mean over t >= burn_in of l(Q(s_t, a_t) - y_t)

    The first ``burn_in`` steps only warm the online network's state up from the stored one,
    without gradient (R2D2): the trained steps start from that state, detached, so no gradient
    reaches the burn-in inputs. The target network runs the whole slice (no gradient anyway).

    Args:
        value_network: a keyed recurrent Q network writing ``"action_value"`` (e.g.
            ``TensorDictSequential(LSTMModule(...), QValueActor(..., in_key="embed"))``).
        burn_in: steps at the start of each slice left out of the loss.
        loss_function: ``"smooth_l1"`` (default), ``"l2"`` or ``"l1"``.
        double_dqn: select ``a*`` with the online network.
        gamma: discount.

    Reads the network's in-keys (their ``("next", ...)`` twins for the extra step; the stored
    recurrent state at ``t = 0``), ``"is_init"``, ``"action"`` (index ``[B, L]``) and
    ``("next", "reward"|"terminated")`` (bool flags; ``("next", "truncated"|"done")`` too when
    present: no step but the last may end an episode, else a ValueError), and PER's
    ``"priority_weight"`` ``[B, L]`` when present (each step's loss weighed). ``"action"``
    may be an index or one-hot ``[B, L, n]``. Returns ``loss``, batch means of
    ``chosen_action_value`` and ``value_target``, and ``td_error`` ``[B]`` (each slice's mean
    absolute TD error over the trained steps).

    Shapes:
        batch ``[B, L]``; reward and flags ``[B, L, 1]``.
    """

    _outputs = (LOSS, CHOSEN_ACTION_VALUE, VALUE_TARGET)

    def __init__(
        self,
        value_network: TensorDictModuleBase,
        *,
        burn_in: int = 0,
        loss_function: str = "smooth_l1",
        double_dqn: bool = True,
        gamma: float = 0.99,
    ) -> None:
        super().__init__(gamma=gamma, loss_function=loss_function)
        if burn_in < 0:
            raise ValueError(f"burn_in must be >= 0, got {burn_in}")
        self._init_value(value_network, delay_value=True, double_dqn=double_dqn)
        self.burn_in = burn_in

    def _extended(self, batch: TensorDictBase) -> TensorDict:
        """The slice plus one step: each input's ``("next", ...)`` value at the last step."""
        owner = type(self).__name__
        size, steps = batch.batch_size
        # Recurrent states (the network writes their ("next", ...) itself): only t = 0 is read.
        states = {
            k for k in self.value_network.in_keys if next_key(k) in self.value_network.out_keys
        }
        out = {}
        for key in self.value_network.in_keys:
            value = require(batch, key, owner)
            if key == IS_INIT:  # the extra step continues the episode
                extra = torch.zeros_like(value[:, -1:])
            elif key in states:
                extra = value[:, -1:]
            else:
                extra = require(batch, next_key(key), owner, "needed for the slice's last step")
                extra = extra[:, -1:]
            out[key] = torch.cat([value, extra], dim=1)
        return TensorDict(out, batch_size=[size, steps + 1])

    def _state_keys(self) -> list:
        """The recurrent-state in-keys (the network writes their ``("next", ...)`` twins)."""
        net = self.value_network
        return [k for k in net.in_keys if next_key(k) in net.out_keys]

    def _sequence_q(self, network: TensorDictModuleBase, seq: TensorDict) -> torch.Tensor:
        with set_recurrent_mode(True):
            return require(network(seq.copy()), ACTION_VALUE, type(self).__name__)

    def _burned_in(self, seq: TensorDict) -> TensorDict:
        """``seq[:, burn_in:]`` starting from the state the online network reaches over the first
        ``burn_in`` steps (computed without gradient)."""
        keys = self._state_keys()
        state = {key: seq.get(key)[:, 0] for key in keys}
        with torch.no_grad(), set_recurrent_mode(False):  # step mode writes the next state
            for t in range(self.burn_in):
                step = seq[:, t].select(*self.value_network.in_keys).update(state)
                out = self.value_network(step)
                state = {key: out.get(next_key(key)) for key in keys}
        rest = seq[:, self.burn_in :].clone()
        for key in keys:
            # only t = 0 of a sequence is read; an is_init there still resets the state
            rest.get(key)[:, 0] = state[key]
        return rest

    def _slice_transitions(self, batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """``(reward, terminated)`` ``[B, L]``, checked; a slice must not end an episode before
        its last step (``Q(s_{t+1})`` is read one step later in the same sequence)."""
        keys = self.tensor_keys
        reward, terminated = self._reward_terminated(batch)
        ended = terminated
        for name in (TRUNCATED, keys.done):
            if batch.get(next_key(name), None) is not None:
                ended = ended | self._flag(batch, next_key(name))
        if bool(ended[:, :-1].any()):
            b, t = (int(i) for i in ended[:, :-1].nonzero()[0])
            raise ValueError(
                f"{type(self).__name__}: slice {b} ends its episode at step {t} of "
                f"{batch.batch_size[1]} ({next_key(keys.done)!r}); a slice must hold one "
                "episode's steps, only its last one done (ReplayBuffer.sample_slices), since "
                "Q(s_{t+1}) is read one step later in the same sequence"
            )
        return reward, terminated

    def _slice_weights(self, batch: TensorDictBase) -> torch.Tensor | None:
        """PER's ``priority_weight`` per step ``[B, L]`` (``[B, L]`` or ``[B, L, 1]``)."""
        key = self.tensor_keys.priority_weight
        weights = batch.get(key, None)
        if weights is None:
            return None
        size, steps = batch.batch_size
        if weights.shape not in ((size, steps), (size, steps, 1)):
            raise ValueError(
                f"{type(self).__name__}: {key!r} must be per step {(size, steps)} (or with a "
                f"trailing 1), got {tuple(weights.shape)}"
            )
        return weights.reshape(size, steps)

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        owner = type(self).__name__
        if batch.batch_dims != 2 or batch.batch_size[1] <= self.burn_in:
            raise ValueError(
                f"{owner}: needs [B, L] slices longer than burn_in={self.burn_in}, got batch "
                f"size {tuple(batch.batch_size)}"
            )
        reward, terminated = self._slice_transitions(batch)
        seq = self._extended(batch)
        trained_seq = self._burned_in(seq) if self.burn_in else seq
        q = self._sequence_q(self.value_network, trained_seq)  # [B, L + 1 - burn_in, n]
        with torch.no_grad():
            # Q'(s_{t+1}) for the trained steps t = burn_in .. L - 1
            next_target = self._sequence_q(self.target_value_network, seq)[:, 1 + self.burn_in :]
            if self.double_dqn:
                best = q[:, 1:].argmax(-1, keepdim=True)
            else:
                best = next_target.argmax(-1, keepdim=True)
            next_value = next_target.gather(-1, best).squeeze(-1)
            b = self.burn_in
            keep = (~terminated[:, b:]).to(next_value.dtype)
            target = reward[:, b:] + self.gamma * keep * next_value
        action = self._action_index(batch, q.shape[-1])[:, b:]  # index or one-hot
        try:
            chosen = q[:, :-1].gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
        except RuntimeError as error:
            self._check_index(action, q.shape[-1], error)
            raise
        td_error = (chosen.detach() - target).abs()
        weights = self._slice_weights(batch)
        per_step = self._distance(chosen, target)  # [B, L - burn_in]
        out = {
            LOSS: self._mean(per_step, None if weights is None else weights[:, b:]),
            self.tensor_keys.priority: td_error.mean(1),  # per slice [B]
            CHOSEN_ACTION_VALUE: chosen.detach().mean(),
            VALUE_TARGET: target.mean(),
        }
        return self._output(out)
