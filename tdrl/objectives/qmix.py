"""Value decomposition for a team of agents: VDN (Sunehag et al. 2017, arXiv 1706.05296) and QMIX
(Rashid et al. 2018, arXiv 1803.11485)."""

from __future__ import annotations

from typing import Any, Unpack

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from tdrl.keyed import next_key, require
from tdrl.keys import (
    ACTION,
    ACTION_MASK,
    ACTION_VALUE,
    AGENTS,
    CHOSEN_ACTION_VALUE,
    LOSS,
    NEXT,
    STATE,
    TD_ERROR,
    TERMINATED,
    VALUE_TARGET,
)
from tdrl.objectives.common import agent_mask
from tdrl.objectives.dqn import Q_DEFAULTS, QOptions
from tdrl.objectives.offpolicy import OffPolicyLoss, over_defaults
from tdrl.objectives.target import make_target
from tdrl.ops import distance


class QMixLoss(OffPolicyLoss):
    """Q-learning of a team's value ``Q_tot = Mix(Q_1(o_1, a_1), ..., Q_n(o_n, a_n); s)``.

    ::

        a*_i = argmax_a Q_i(o'_i, a)   (double_dqn)   or   argmax_a Q'_i(o'_i, a)
               (over the valid actions, where the batch has ("next", group, "action_mask"))
        y    = r + gamma (1 - terminated) Mix'(Q'_1(o'_1, a*_1), ..., Q'_n(o'_n, a*_n); s')
        loss = mean_B l(Mix(Q_1(o_1, a_1), ...; s) - y)

    An agent absent from a step (``(group, "mask")`` False: it left its episode early) adds
    nothing: its ``Q_i`` enters the mix as 0 (PyMARL's padding). At ``s'`` so does the value of
    an agent absent at ``s`` or terminated at ``s'`` (``("next", group, "terminated")``), while
    one cut by the time limit keeps its bootstrap (its mask under ``"next"`` is False once the
    episode is over, so that mask is not what decides).

    ``r`` and ``terminated`` are the team's (``("next", "reward")`` and ``("next",
    "terminated")`` at the root: ``recipes/qmix.py`` makes the reward the mean of the agents', as
    BenchMARL does, and keeps the env's episode flag, terminal when every agent is), so a
    truncated step bootstraps from the real next observations. VDN's
    mixer is the sum (TorchRL's ``VDNMixer``); QMIX's a monotonic network whose weights a
    hypernetwork makes from the state (TorchRL's ``QMixer``): ``dQ_tot / dQ_i >= 0``.

    Args:
        local_value_network: writes ``(group, "action_value")`` ``[B, n_agents, n_actions]``
            from the group's entries (``OnGroup(QValueActor(MultiAgentMLP(...)))``).
        mixer: ``mixer(chosen [B, n_agents, 1], state [B, *S]) -> [B, 1]`` (TorchRL's
            ``QMixer``), or ``mixer(chosen) -> [B, 1]`` with ``state_key=None`` (``VDNMixer``).
        n_agents: the agents the mixer mixes; a batch with another count is refused.
        state_key: the global state the mixer reads (None: none).
        group: the agents' group key.
        **options: DQN's (:class:`~tdrl.objectives.dqn.QOptions`): ``loss_function`` (``"l2"``,
            BenchMARL's and TorchRL's), ``delay_value`` (True: target copies of the local
            network and the mixer), ``double_dqn`` (False; True selects ``a*`` with the online
            local network), ``gamma`` (0.99).

    Returns ``loss``, ``td_error`` ``[B]``, ``chosen_action_value`` (the mean ``Q_tot``) and
    ``value_target``.

    Shapes:
        batch ``[B]``; ``(group, "action")`` ``[B, n_agents]`` int64; reward and flags ``[B, 1]``.
    """

    def __init__(
        self,
        local_value_network: TensorDictModuleBase,
        mixer: torch.nn.Module,
        *,
        n_agents: int,
        state_key: NestedKey | None = STATE,
        group: str = AGENTS,
        **options: Unpack[QOptions],
    ) -> None:
        opts = over_defaults(type(self).__name__, options, Q_DEFAULTS)
        super().__init__(gamma=opts["gamma"], loss_function=opts["loss_function"])
        # the online networks first, then the targets: the parameter order optimizers (and
        # their checkpointed state) follow
        self.value_network, self.mixer = local_value_network, mixer
        self._init_value(local_value_network, opts["delay_value"], opts["double_dqn"])
        self.target_mixer = make_target(mixer) if opts["delay_value"] else mixer
        self.n_agents, self.state_key, self.group = n_agents, state_key, group
        self.set_keys(action=(group, ACTION), action_value=(group, ACTION_VALUE))

    _outputs: tuple[NestedKey, ...] = (LOSS, CHOSEN_ACTION_VALUE, VALUE_TARGET)

    @property
    def in_keys(self) -> list[NestedKey]:  # type: ignore[override]
        """The local network's inputs and (QMIX) the state, at the root and under ``"next"``."""
        found = super().in_keys
        if self.state_key is not None:
            found += [self.state_key, next_key(self.state_key)]
        return found

    def target_pairs(self) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        pairs = super().target_pairs()  # the local network's
        return [*pairs, (self.mixer, self.target_mixer)] if self.delay_value else pairs

    def _agent_values(self, network: Any, td: TensorDictBase) -> torch.Tensor:
        """``Q_i(o_i, .)`` ``[B, n_agents, n_actions]``, its agent count checked."""
        out = network(td.select(*network.in_keys, strict=False))
        values = require(out, self.tensor_keys.action_value, type(self).__name__)
        if values.dim() != 3 or values.shape[1] != self.n_agents:
            raise ValueError(
                f"{type(self).__name__}: {self.tensor_keys.action_value!r} has shape "
                f"{tuple(values.shape)}; the mixer mixes {self.n_agents} agents, so it must be "
                f"[B, {self.n_agents}, n_actions]"
            )
        return values

    def _mask(self, batch: TensorDictBase) -> torch.Tensor | None:
        """``(group, "mask")`` ``[B, n_agents]`` (None: every agent takes part), checked."""
        want = (*batch.batch_size, self.n_agents)
        return agent_mask(batch, self.group, want, type(self).__name__)

    @staticmethod
    def _present(chosen: torch.Tensor, present: torch.Tensor | None) -> torch.Tensor:
        """``chosen`` ``[B, n_agents, 1]`` with the absent agents' values 0."""
        return chosen if present is None else torch.where(present.unsqueeze(-1), chosen, 0.0)

    def _mix(self, mixer: Any, chosen: torch.Tensor, td: TensorDictBase) -> torch.Tensor:
        if self.state_key is None:
            return mixer(chosen)
        return mixer(chosen, require(td, self.state_key, type(self).__name__))

    @torch.no_grad()
    def value_target(self, batch: TensorDictBase) -> torch.Tensor:
        """``y`` ``[B]`` (no gradient)."""
        reward, terminated, discount = self._transition(batch)
        nxt: TensorDictBase = require(batch, NEXT, type(self).__name__)  # type: ignore[assignment]
        target_values = self._agent_values(self.target_value_network, nxt)
        select = self._agent_values(self.value_network, nxt) if self.double_dqn else target_values
        valid = nxt.get((self.group, ACTION_MASK), None)  # masked envs: the best valid action
        if valid is not None:
            select = select.masked_fill(~valid, float("-inf"))
        best = select.argmax(-1, keepdim=True)
        present = self._mask(batch)  # at s; at s' also not terminated on its own
        if present is not None:
            alone = nxt.get((self.group, TERMINATED), None)
            present = present if alone is None else present & ~alone.reshape(present.shape)
        chosen = self._present(target_values.gather(-1, best), present)
        mixed = self._mix(self.target_mixer, chosen, nxt)
        return reward + discount * (~terminated).to(reward.dtype) * mixed.squeeze(-1)

    def forward(self, batch: TensorDictBase) -> TensorDict:
        target = self.value_target(batch)
        action = require(batch, self.tensor_keys.action, type(self).__name__)
        if action.shape != (*batch.batch_size, self.n_agents) or action.is_floating_point():
            raise ValueError(
                f"{type(self).__name__}: {self.tensor_keys.action!r} must be an int64 index of "
                f"shape {(*batch.batch_size, self.n_agents)}, got {tuple(action.shape)} "
                f"{action.dtype}"
            )
        values = self._agent_values(self.value_network, batch)
        chosen = self._present(values.gather(-1, action.unsqueeze(-1)), self._mask(batch))
        q_tot = self._mix(self.mixer, chosen, batch).squeeze(-1)
        loss = distance(q_tot, target, self.loss_function).mean()
        return TensorDict(
            {
                LOSS: loss,
                TD_ERROR: (q_tot - target).abs().detach(),
                CHOSEN_ACTION_VALUE: q_tot.detach().mean(),
                VALUE_TARGET: target.mean(),
            },
            batch_size=[],
        )
