"""MADDPG (Lowe et al. 2017, arXiv 1706.02275): deterministic actors of their own observations
and, for every agent, a centralized critic of all agents' observations and actions."""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdrl.keyed import next_key, require
from tdrl.keys import (
    ACTION,
    AGENTS,
    LOSS_ACTOR,
    LOSS_VALUE,
    NEXT,
    REWARD,
    STATE_ACTION_VALUE,
    TD_ERROR,
    TERMINATED,
)
from tdrl.objectives.common import agent_mask, masked_mean
from tdrl.objectives.offpolicy import OffPolicyLoss, frozen
from tdrl.objectives.target import make_target
from tdrl.ops import distance


class MADDPGLoss(OffPolicyLoss):
    """DDPG over a group of agents, each with its own reward and terminal flag.

    ::

        y_i        = r_i + gamma (1 - terminated_i) Q'_i(o', mu'(o'))
        loss_value = mean_(B, i present) l(Q_i(o, a) - y_i)
        loss_actor = -mean_(B, i present) Q_i(o, mu(o))        (gradients to the actors only)

    An agent is present at a step unless ``(group, "mask")`` says it has left its episode; an
    absent agent's steps carry no loss and no gradient.

    ``o`` and ``a`` are all agents' observations and actions: the critic sees the joint action
    (centralized), the actors their own observation. The actor loss takes every agent's current
    action, as TorchRL's and BenchMARL's MADDPG do (the paper's takes the other agents' stored
    ones). A truncated step bootstraps from the real next observations.

    Args:
        actor_network: writes ``(group, "action")`` ``[B, n_agents, A]`` from the group's entries
            (``OnGroup(DeterministicActor(MultiAgentMLP(...)))``).
        value_network: writes ``(group, "state_action_value")`` ``[B, n_agents, 1]`` from the
            group's observations and actions (``OnGroup(StateActionCritic(MultiAgentMLP(...,
            centralized=True)))``).
        group: the agents' group key.
        loss_function: ``"l2"`` (BenchMARL's), ``"smooth_l1"`` or ``"l1"``.
        delay_actor, delay_value: keep target copies (both by default, as the paper).
        gamma: discount.

    Returns ``loss_actor``, ``loss_value`` and ``td_error`` ``[B]`` (the mean over the agents
    present).

    Shapes:
        batch ``[B]``; per-agent reward and flags ``[B, n_agents, 1]``.
    """

    _continuous_action = False  # the action is [B, n_agents, A]: checked here
    _outputs = (LOSS_ACTOR, LOSS_VALUE)

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        value_network: TensorDictModuleBase,
        *,
        group: str = AGENTS,
        loss_function: str = "l2",
        delay_actor: bool = True,
        delay_value: bool = True,
        gamma: float = 0.99,
    ) -> None:
        super().__init__(gamma=gamma, loss_function=loss_function)
        self.group = group
        self.set_keys(action=(group, ACTION), reward=(group, REWARD),
                      terminated=(group, TERMINATED))  # fmt: skip
        self._init_actor(actor_network, delay_actor)
        self.value_network, self.delay_value = value_network, delay_value
        self.target_value_network = make_target(value_network) if delay_value else value_network

    def _q(self, critic: TensorDictModuleBase, td: TensorDictBase) -> torch.Tensor:
        out = critic(td.select(*critic.in_keys, strict=False))
        return require(out, (self.group, STATE_ACTION_VALUE), type(self).__name__)

    def _acting(self, actor: TensorDictModuleBase, td: TensorDictBase) -> TensorDictBase:
        """``td``'s observations with ``actor``'s actions (a new TensorDict; ``td`` is kept)."""
        return actor(td.select(*actor.in_keys, *self.value_network.in_keys, strict=False).copy())

    @torch.no_grad()
    def value_target(self, batch: TensorDictBase) -> torch.Tensor:
        """``y`` ``[B, n_agents, 1]`` (no gradient)."""
        owner = type(self).__name__
        reward = require(batch, next_key(self.tensor_keys.reward), owner)
        terminated = require(batch, next_key(self.tensor_keys.terminated), owner)
        if reward.shape != terminated.shape or reward.dim() != 3:
            raise ValueError(
                f"{owner}: {next_key(self.tensor_keys.reward)!r} {tuple(reward.shape)} and "
                f"{next_key(self.tensor_keys.terminated)!r} {tuple(terminated.shape)} must both "
                "be [B, n_agents, 1]"
            )
        nxt = self._acting(self.target_actor_network, require(batch, NEXT, owner))
        next_q = self._q(self.target_value_network, nxt)
        return reward + self.gamma * (~terminated).to(reward.dtype) * next_q

    def forward(self, batch: TensorDictBase) -> TensorDict:
        self._check_batch(batch)
        target = self.value_target(batch)
        q = self._q(self.value_network, batch)
        if q.shape != target.shape:
            raise ValueError(
                f"{type(self).__name__}: the critic's {(self.group, STATE_ACTION_VALUE)!r} has "
                f"shape {tuple(q.shape)}, the per-agent target {tuple(target.shape)}"
            )
        present = agent_mask(batch, self.group, tuple(q.shape[:-1]), type(self).__name__)
        loss_value = masked_mean(distance(q, target, self.loss_function), present)
        with frozen(self.value_network):  # the actor loss moves the actors only
            acting = self._acting(self.actor_network, batch)
            if present is not None:  # an absent agent's actor gets no gradient: its stored
                key = (self.group, ACTION)  # action stands in the joint action the critic reads
                stored = require(batch, key, type(self).__name__)
                acting.set(key, torch.where(present.unsqueeze(-1), acting.get(key), stored))
            loss_actor = -masked_mean(self._q(self.value_network, acting), present)
        error = (q - target).abs().detach().squeeze(-1)  # [B, n_agents]
        if present is None:
            td_error = error.mean(-1)
        else:  # the mean over the agents present (0 where none is)
            kept = torch.where(present, error, 0.0)
            td_error = kept.sum(-1) / present.sum(-1).clamp_min(1).to(error.dtype)
        return TensorDict(
            {LOSS_ACTOR: loss_actor, LOSS_VALUE: loss_value, TD_ERROR: td_error}, batch_size=[]
        )
