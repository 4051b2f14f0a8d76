"""GAIL (Ho & Ermon 2016, arXiv 1606.03476): a discriminator between expert and policy
state-action pairs, whose output is the policy's reward."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey, unravel_key
from torch.nn.functional import softplus

from tdrl.keyed import check_finite, renamed, require
from tdrl.keys import (
    ACTION,
    COLLECTOR_ACTION,
    COLLECTOR_OBSERVATION,
    D_LOGITS,
    DISCRIMINATOR_EXPERT,
    DISCRIMINATOR_POLICY,
    GP_LOSS,
    LOSS,
    OBSERVATION,
)
from tdrl.objectives.common import SKIP_CHECK

__all__ = ["GAILKeys", "GAILLoss", "gail_reward"]


@dataclasses.dataclass(frozen=True)
class GAILKeys:
    """Keys :class:`GAILLoss` reads (TorchRL's ``GAILLoss`` names and defaults)."""

    expert_observation: NestedKey = OBSERVATION
    expert_action: NestedKey = ACTION
    collector_observation: NestedKey = COLLECTOR_OBSERVATION
    collector_action: NestedKey = COLLECTOR_ACTION
    discriminator_pred: NestedKey = D_LOGITS


def _logits(discriminator: Any, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """The discriminator's logit ``[B]`` for pairs ``(observation, action)``: it reads its two
    in-keys (observation, then action) and writes ``discriminator_pred`` (its one out-key)."""
    obs_key, action_key = discriminator.in_keys
    td = TensorDict({obs_key: observation, action_key: action}, batch_size=observation.shape[:1])
    logits = discriminator(td).get(discriminator.out_keys[0])
    return logits.reshape(observation.shape[0])


class GAILLoss(TensorDictModuleBase):
    """The discriminator's loss: expert pairs labelled 1, the policy's (collector's) labelled 0.

    ::

        D(s, a) = sigmoid(logit(s, a))
        loss    = mean_expert -log D(s, a) + mean_policy -log(1 - D(s, a))
                  (+ gp_lambda mean_x (|grad_x logit(x)| - 1)^2 at x = u x_E + (1 - u) x_pi,
                   u ~ U(0, 1), with ``use_grad_penalty``: Gulrajani et al. 2017, 1704.00028)

    The policy's reward is :func:`gail_reward` (``-log(1 - D)``). Reads the expert's
    ``observation`` / ``action`` and the policy's ``collector_observation`` /
    ``collector_action`` (TorchRL's ``GAILLoss`` keys; ``set_keys`` renames them), as flat
    ``[B]`` batches; the two may differ in size. Returns ``loss`` (what to call backward on),
    and detached diagnostics ``gp_loss``, ``discriminator_expert`` and ``discriminator_policy``
    (the mean ``D`` on each side). Each side needs at least one pair; a NaN or an infinity in
    the four entries is refused, naming it (``loss.validate_inputs = False`` skips that check).

    Args:
        discriminator_network: a keyed module reading (observation, action) and writing one
            logit ``[B, 1]`` (e.g. ``StateActionCritic(mlp(obs + act, 1), out_key="d_logits")``).
        use_grad_penalty, gp_lambda: the gradient penalty and its weight (TorchRL's names).

    Shapes:
        observations ``[B, obs]``, actions ``[B, act]``; every output is a scalar.
    """

    validate_inputs: bool = True

    def __init__(
        self, discriminator_network: Any, *, use_grad_penalty: bool = False, gp_lambda: float = 10.0
    ) -> None:
        super().__init__()
        if len(getattr(discriminator_network, "in_keys", ())) != 2:
            raise ValueError(
                "GAILLoss: the discriminator must read two keys (observation, action), got "
                f"{getattr(discriminator_network, 'in_keys', None)}"
            )
        if not (math.isfinite(gp_lambda) and gp_lambda >= 0):  # NaN would make the loss NaN
            raise ValueError(f"gp_lambda must be finite and >= 0, got {gp_lambda}")
        self.discriminator_network = discriminator_network
        self.use_grad_penalty, self.gp_lambda = use_grad_penalty, gp_lambda
        self.tensor_keys = GAILKeys()
        self.out_keys = [LOSS, GP_LOSS, DISCRIMINATOR_EXPERT, DISCRIMINATOR_POLICY]

    @property
    def in_keys(self) -> list[NestedKey]:  # type: ignore[override]
        k = self.tensor_keys
        return [k.expert_observation, k.expert_action, k.collector_observation, k.collector_action]

    def set_keys(self, **keys: NestedKey) -> GAILLoss:
        """Rename the keys the loss reads (TorchRL's ``set_keys``); returns ``self``."""
        self.tensor_keys = renamed(self.tensor_keys, type(self).__name__, **keys)
        return self

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        k, name = self.tensor_keys, type(self).__name__
        expert_obs = require(batch, k.expert_observation, name)
        expert_action = require(batch, k.expert_action, name)
        policy_obs = require(batch, k.collector_observation, name)
        policy_action = require(batch, k.collector_action, name)
        for side, key, obs, action in (
            ("expert", k.expert_action, expert_obs, expert_action),
            ("policy", k.collector_action, policy_obs, policy_action),
        ):
            if obs.dim() != 2 or action.dim() != 2 or obs.shape[0] != action.shape[0]:
                raise ValueError(
                    f"{name}: observations and actions must be [B, obs] and [B, act] with one B; "
                    f"{key!r} has shape {tuple(action.shape)} beside {tuple(obs.shape)}"
                )
            if obs.shape[0] == 0:  # a mean over no pairs is NaN
                shape = tuple(action.shape)
                raise ValueError(f"{name}: no {side} pairs ({key!r} has shape {shape})")
        if self.validate_inputs:
            check_finite(batch, frozenset(map(unravel_key, self.in_keys)), name, SKIP_CHECK)
        net = self.discriminator_network
        expert_logit = _logits(net, expert_obs, expert_action)
        policy_logit = _logits(net, policy_obs, policy_action)
        # -log sigmoid(l) = softplus(-l); -log(1 - sigmoid(l)) = softplus(l): stable in l.
        loss = softplus(-expert_logit).mean() + softplus(policy_logit).mean()
        penalty = loss.new_zeros(())
        if self.use_grad_penalty:
            penalty = self._grad_penalty(expert_obs, expert_action, policy_obs, policy_action)
            loss = loss + penalty
        out = {
            LOSS: loss,
            GP_LOSS: penalty.detach(),
            DISCRIMINATOR_EXPERT: torch.sigmoid(expert_logit.detach()).mean(),
            DISCRIMINATOR_POLICY: torch.sigmoid(policy_logit.detach()).mean(),
        }
        return TensorDict(out, batch_size=[])

    def _grad_penalty(
        self,
        expert_obs: torch.Tensor,
        expert_action: torch.Tensor,
        policy_obs: torch.Tensor,
        policy_action: torch.Tensor,
    ) -> torch.Tensor:
        n = min(expert_obs.shape[0], policy_obs.shape[0])
        u = torch.rand(n, 1, dtype=expert_obs.dtype, device=expert_obs.device)
        obs = (u * expert_obs[:n] + (1 - u) * policy_obs[:n]).requires_grad_(True)
        action = (u * expert_action[:n] + (1 - u) * policy_action[:n]).requires_grad_(True)
        logit = _logits(self.discriminator_network, obs, action)
        grads = torch.autograd.grad(logit.sum(), (obs, action), create_graph=True)
        norm = torch.cat(grads, dim=-1).norm(dim=-1)
        return self.gp_lambda * (norm - 1).pow(2).mean()


@torch.no_grad()
def gail_reward(
    discriminator_network: Any, observation: torch.Tensor, action: torch.Tensor
) -> torch.Tensor:
    """The policy's reward ``-log(1 - D(s, a))`` (Ho & Ermon's cost ``log D`` of the policy's
    pairs, with D the probability of "expert"; higher where the pair looks like the expert's).

    Shapes:
        observation ``[*B, obs]``, action ``[*B, act]``; returns ``[*B, 1]`` (a reward entry).
    """
    batch = observation.shape[:-1]
    flat_obs = observation.reshape(-1, observation.shape[-1])
    flat_action = action.reshape(flat_obs.shape[0], -1)
    logit = _logits(discriminator_network, flat_obs, flat_action)
    return softplus(logit).reshape(*batch, 1)
