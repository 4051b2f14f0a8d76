"""Recurrent DQN on replay slices (DRQN, Hausknecht & Stone 2015, arXiv 1507.06527) with R2D2's
stored recurrent state and burn-in (Kapturowski et al. 2019)."""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torchrl.modules import set_recurrent_mode

from tdrl.keyed import check_counts, next_key, require
from tdrl.keys import (
    ACTION_VALUE,
    CHOSEN_ACTION_VALUE,
    IS_INIT,
    LOSS,
    MASK,
    TRUNCATED,
    VALUE_TARGET,
)
from tdrl.objectives.offpolicy import OffPolicyLoss
from tdrl.ops import value_rescale, value_unscale


class DRQNLoss(OffPolicyLoss):
    """Q-learning on ``[B, L]`` replay slices with a recurrent Q network and a target network.

    Each slice (``ReplayBuffer.sample_slices``) is run through the network in sequence mode from
    the recurrent state the collector stored at its first step. Its own episode's steps come
    first: all ``L`` of them, or, for a padded slice (``pad=True``), those ``"mask"`` ``[B, L]``
    keeps; the last kept step ``e`` ends the episode or is marked truncated where the slice
    cuts it. The sequence goes on after ``e`` with that step's ``("next", ...)`` inputs, so the
    network's output one step later is ``Q(s_{e+1})`` of the real next observation. With
    ``h_t = min(n, e - t + 1)`` steps to the bootstrap::

        G_t  = sum_{k < h_t} gamma^k r_{t+k}
        a*   = argmax_a Q(s_{t+h_t}, a) (double_dqn) or argmax_a Q'(s_{t+h_t}, a)
        y_t  = G_t + gamma^{h_t} (1 - terminated_{t+h_t-1}) Q'(s_{t+h_t}, a*)
        loss = mean over kept t >= burn_in of w l(Q(s_t, a_t) - y_t)

    With ``value_rescaling`` the network learns ``h(Q)`` (R2D2): ``y_t = h(G_t + gamma^{h_t}
    (1 - terminated) h^-1(Q'(...)))`` with :func:`tdrl.ops.value_rescale` as ``h``.

    The first ``burn_in`` steps only warm the online network's state up from the stored one,
    without gradient (R2D2): the trained steps start from that state, detached, so no gradient
    reaches the burn-in inputs. The target network runs the whole slice (no gradient anyway).

    Args:
        value_network: a keyed recurrent Q network writing ``"action_value"`` (e.g.
            ``TensorDictSequential(LSTMModule(...), QValueActor(..., in_key="embed"))``).
        burn_in: steps at the start of each slice left out of the loss.
        n_steps: the ``n`` of the n-step return (R2D2: 5).
        value_rescaling: learn ``h(Q)`` (R2D2's invertible rescaling, eps 1e-3).
        priority_eta: each slice's priority is ``eta max_t |delta_t| + (1 - eta) mean_t
            |delta_t|`` over its trained steps (R2D2: 0.9).
        loss_function: ``"smooth_l1"`` (default), ``"l2"`` or ``"l1"``.
        double_dqn: select ``a*`` with the online network.
        gamma: discount.

    Reads the network's in-keys (their ``("next", ...)`` twins for the extra step; the stored
    recurrent state at ``t = 0``), ``"is_init"``, ``"action"`` (index ``[B, L]``),
    ``("next", "reward"|"terminated")`` (bool flags; ``("next", "truncated"|"done")`` too when
    present: no kept step but the last may end an episode, else a ValueError), ``"mask"`` where
    the slices are padded, and PER's ``"priority_weight"`` ``[B, L]`` when present (each step's
    loss weighed). ``"action"`` may be an index or one-hot ``[B, L, n]``. Returns
    ``loss``, batch means of ``chosen_action_value`` and ``value_target`` (kept trained steps),
    and ``td_error`` ``[B]`` (each slice's priority).

    Shapes:
        batch ``[B, L]``; reward and flags ``[B, L, 1]``.
    """

    _outputs = (LOSS, CHOSEN_ACTION_VALUE, VALUE_TARGET)

    def __init__(
        self,
        value_network: TensorDictModuleBase,
        *,
        burn_in: int = 0,
        n_steps: int = 1,
        value_rescaling: bool = False,
        priority_eta: float = 0.9,
        loss_function: str = "smooth_l1",
        double_dqn: bool = True,
        gamma: float = 0.99,
    ) -> None:
        super().__init__(gamma=gamma, loss_function=loss_function)
        if burn_in < 0:
            raise ValueError(f"burn_in must be >= 0, got {burn_in}")
        check_counts("DRQNLoss", n_steps=n_steps)
        if not 0.0 <= priority_eta <= 1.0:
            raise ValueError(f"priority_eta must lie in [0, 1], got {priority_eta}")
        self._init_value(value_network, delay_value=True, double_dqn=double_dqn)
        self.burn_in, self.n_steps = burn_in, n_steps
        self.value_rescaling, self.priority_eta = value_rescaling, priority_eta

    def _extended(self, batch: TensorDictBase, last: torch.Tensor) -> TensorDict:
        """The slice plus one step, each input after the last kept step ``last`` ``[B]`` being
        that step's ``("next", ...)`` value (the real next observation; padding after it)."""
        owner = type(self).__name__
        size, steps = batch.batch_size
        # Recurrent states (the network writes their ("next", ...) itself): only t = 0 is read.
        states = set(self._state_keys())
        rows = torch.arange(size, device=last.device)
        after = torch.arange(steps + 1, device=last.device) > last.unsqueeze(1)  # [B, L + 1]
        out = {}
        for key in self.value_network.in_keys:
            value = require(batch, key, owner)
            if key in states:  # only t = 0 is read
                out[key] = torch.cat([value, value[:, -1:]], dim=1)
                continue
            if key == IS_INIT:  # the steps after the last continue its episode
                end = torch.zeros_like(value[:, 0])
            else:
                end = require(batch, next_key(key), owner, "needed after the slice's last step")
                end = end[rows, last]
            ext = torch.cat([value, end.unsqueeze(1)], dim=1)
            fill = after.reshape(*after.shape, *(1,) * (ext.dim() - 2))
            out[key] = torch.where(fill, end.unsqueeze(1), ext)
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

    def _slice_transitions(
        self, batch: TensorDictBase
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(reward, terminated, kept)`` ``[B, L]`` and the last kept step ``[B]``, checked: the
        kept steps (``"mask"``, else all) lead each slice and only the last kept one may end the
        episode (``Q(s_{t+1})`` is read one step later in the same sequence)."""
        keys = self.tensor_keys
        reward, terminated = self._reward_terminated(batch)
        ended = terminated
        for name in (TRUNCATED, keys.done):
            if batch.get(next_key(name), None) is not None:
                ended = ended | self._flag(batch, next_key(name))
        kept = batch.get(MASK, None)
        if kept is None:
            kept = torch.ones_like(ended)
        elif kept.shape != ended.shape or kept.dtype != torch.bool:
            raise ValueError(
                f"{type(self).__name__}: 'mask' must be a bool {list(ended.shape)} mask of the "
                f"padded slices, got {kept.dtype} {list(kept.shape)}"
            )
        last = kept.sum(1) - 1
        steps = torch.arange(ended.shape[1], device=ended.device)
        leads = kept == (steps <= last.unsqueeze(1))
        if not bool(leads.all()) or bool((last < 0).any()):
            b = int((~leads.all(1) | (last < 0)).nonzero()[0])
            raise ValueError(
                f"{type(self).__name__}: slice {b}'s 'mask' {kept[b].tolist()} must keep its "
                "first steps and only those (padding follows the episode's end)"
            )
        early = ended & (steps < last.unsqueeze(1))
        if bool(early.any()):
            b, t = (int(i) for i in early.nonzero()[0])
            raise ValueError(
                f"{type(self).__name__}: slice {b} ends its episode at step {t} of "
                f"{batch.batch_size[1]} ({next_key(keys.done)!r}); a slice must hold one "
                "episode's steps, only its last kept one done (ReplayBuffer.sample_slices), "
                "since Q(s_{t+1}) is read one step later in the same sequence"
            )
        return reward, terminated, kept, last

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
        reward, terminated, kept, last = self._slice_transitions(batch)
        seq = self._extended(batch, last)
        b = self.burn_in
        trained_seq = self._burned_in(seq) if b else seq
        q = self._sequence_q(self.value_network, trained_seq)  # positions b .. L: [B, L+1-b, n]
        with torch.no_grad():
            target = self._targets(reward, terminated, last, q, seq)  # [B, L - b]
        action = self._action_index(batch, q.shape[-1])[:, b:]  # index or one-hot
        try:
            chosen = q[:, :-1].gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
        except RuntimeError as error:
            self._check_index(action, q.shape[-1], error)
            raise
        trained = kept[:, b:]
        count = trained.sum().clamp_min(1)
        weights = self._slice_weights(batch)
        per_step = self._distance(chosen, target) * trained  # [B, L - b], padding left out
        if weights is not None:
            per_step = per_step * weights[:, b:]
        abs_error = torch.where(trained, (chosen.detach() - target).abs(), 0.0)
        mean = abs_error.sum(1) / trained.sum(1).clamp_min(1)
        eta = self.priority_eta
        out = {
            LOSS: per_step.sum() / count,
            self.tensor_keys.priority: eta * abs_error.max(1).values + (1 - eta) * mean,  # [B]
            CHOSEN_ACTION_VALUE: (chosen.detach() * trained).sum() / count,
            VALUE_TARGET: (target * trained).sum() / count,
        }
        return self._output(out)

    def _targets(
        self,
        reward: torch.Tensor,
        terminated: torch.Tensor,
        last: torch.Tensor,
        q: torch.Tensor,
        seq: TensorDict,
    ) -> torch.Tensor:
        """``y_t`` ``[B, L - burn_in]`` for the trained steps (the class docstring's formula)."""
        b, steps = self.burn_in, reward.shape[1]
        t = torch.arange(b, steps, device=reward.device).expand(reward.shape[0], -1)
        horizon = (last.unsqueeze(1) - t + 1).clamp(1, self.n_steps)  # h_t
        ret = torch.zeros_like(t, dtype=reward.dtype)
        for k in range(self.n_steps):
            at = (t + k).clamp(max=steps - 1)
            ret = ret + (k < horizon) * self.gamma**k * reward.gather(1, at)
        boot = t + horizon  # the bootstrap position, <= last + 1 <= L
        keep = ~terminated.gather(1, boot - 1)
        next_target = self._sequence_q(self.target_value_network, seq)  # [B, L + 1, n]
        n = next_target.shape[-1]
        at_boot = next_target.gather(1, boot.unsqueeze(-1).expand(-1, -1, n))
        if self.double_dqn:  # the online values at the same positions (q starts at b)
            best = q.gather(1, (boot - b).unsqueeze(-1).expand(-1, -1, n)).argmax(-1, True)
        else:
            best = at_boot.argmax(-1, keepdim=True)
        value = at_boot.gather(-1, best).squeeze(-1)
        if self.value_rescaling:
            value = value_unscale(value)
        target = ret + self.gamma**horizon * keep.to(value.dtype) * value
        return value_rescale(target) if self.value_rescaling else target
