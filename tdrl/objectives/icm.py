"""The intrinsic curiosity module (Pathak et al. 2017, arXiv 1705.05363): an exploration bonus
from how badly a forward model predicts the next state's features, in a feature space learned
by predicting the action from two states."""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn
from torch.nn import functional as F

from tdrl import keys as K
from tdrl.keyed import require
from tdrl.modules.normalization import RewardScaling
from tdrl.objectives.bonus import IntrinsicBonus, write_intrinsic_reward


class ICMLoss(IntrinsicBonus):
    """ICM's intrinsic reward and its models' losses.

    With ``phi`` the feature network, ``f`` the forward model and ``g`` the inverse model, on a
    transition ``(s, a, s')``::

        e        = 1/2 ||f(phi(s), a) - phi(s')||^2
        r_int    = reward_scale * e / std(R)               written to ("next", "intrinsic_reward")
        loss_icm_forward = beta * mean e,                  phi(s') without a gradient
        loss_icm_inverse = (1 - beta) * mean CE(g(phi(s), phi(s')), a)      (discrete actions)
                         = (1 - beta) * mean 1/2 ||g(phi(s), phi(s')) - a||^2  (continuous)

    ``a`` enters ``f`` one-hot for discrete actions. ``R`` is the running discounted sum of
    ``reward_scale * e`` per env across episode ends, as :class:`~tdrl.objectives.RNDLoss` keeps
    (Burda et al. 2018, arXiv 1808.04355, normalize curiosity rewards so);
    ``normalize_rewards=False`` leaves the division out. ``phi(s')``, the forward model's
    target, enters the forward loss without a gradient, so that loss cannot pull the features
    toward its own predictions; ``phi(s)`` carries one there as in the inverse loss (Tianshou's
    ``ICMPolicy`` lets the target's gradient through too). :meth:`intrinsic_reward` runs on a
    whole ``[num_envs, T]`` rollout and writes the reward with all-False intrinsic episode flags,
    as :class:`~tdrl.objectives.RNDLoss` does, for a non-episodic intrinsic return;
    ``forward`` gives the two losses on minibatches. ``first_visit=True`` pays the reward only
    where ``s'`` is new to its episode (:class:`~tdrl.objectives.bonus.IntrinsicBonus`).

    Args:
        feature_net: observations to features ``[*B, k]``.
        forward_net: ``[*B, k + A]`` (features, one-hot or continuous action) to ``[*B, k]``.
        inverse_net: ``[*B, 2k]`` to ``[*B, A]`` (logits, or the action).
        num_actions: ``A``: the number of discrete actions, or the action's size.
        discrete: whether actions are indices (int) or vectors.
        beta: the forward loss's share (the paper: 0.2).
        reward_scale: ``eta`` of the paper's ``r = eta/2 ||.||^2`` over its 1/2 (the paper:
            0.01 with its own scale of rewards; intrinsic advantages here get their own weight).
        gamma: the discount of ``R``.
        normalize_rewards: divide by ``std(R)``.
        observation_key, action_key: the entries read.
        first_visit: reward only an episode's first visit of each observation.
    """

    def __init__(
        self,
        feature_net: nn.Module,
        forward_net: nn.Module,
        inverse_net: nn.Module,
        *,
        num_actions: int,
        discrete: bool,
        beta: float = 0.2,
        reward_scale: float = 1.0,
        gamma: float = 0.99,
        normalize_rewards: bool = True,
        observation_key: NestedKey = K.OBSERVATION,
        action_key: NestedKey = K.ACTION,
        first_visit: bool = False,
    ) -> None:
        super().__init__(first_visit)
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"ICMLoss: beta must be in [0, 1], got {beta}")
        if not reward_scale >= 0:  # NaN too
            raise ValueError(f"ICMLoss: reward_scale must be >= 0, got {reward_scale}")
        self.feature_net, self.forward_net, self.inverse_net = feature_net, forward_net, inverse_net
        self.num_actions, self.discrete = num_actions, discrete
        self.beta, self.reward_scale = beta, reward_scale
        self.observation_key, self.action_key = observation_key, action_key
        self.reward_scaling = (
            RewardScaling(
                gamma,
                in_key=K.NEXT_INTRINSIC_REWARD,
                done_key=(K.NEXT, K.INTRINSIC_DONE),
                clip=None,
            )  # fmt: skip
            if normalize_rewards
            else None
        )
        self.in_keys = [observation_key, action_key, (K.NEXT, observation_key)]
        self.out_keys = [K.LOSS_ICM_FORWARD, K.LOSS_ICM_INVERSE]

    def _action(self, td: TensorDictBase) -> torch.Tensor:
        """The action as the forward model reads it: one-hot ``[N, A]`` or the vector."""
        action = require(td, self.action_key, "ICMLoss")
        if self.discrete:
            if action.is_floating_point():
                raise TypeError(
                    f"ICMLoss: key {self.action_key!r}: discrete=True takes integer action "
                    f"indices, got dtype {action.dtype}"
                )
            index = action.reshape(-1)
            if bool(((index < 0) | (index >= self.num_actions)).any()):
                raise ValueError(
                    f"ICMLoss: key {self.action_key!r}: action indices outside [0, "
                    f"{self.num_actions})"
                )
            return F.one_hot(index, self.num_actions).float()
        if action.shape[-1] != self.num_actions:
            raise ValueError(
                f"ICMLoss: key {self.action_key!r} has shape {tuple(action.shape)}, not "
                f"[..., {self.num_actions}]"
            )
        return action.reshape(-1, self.num_actions)

    def _parts(self, td: TensorDictBase) -> tuple[torch.Tensor, ...]:
        """``(phi(s), phi(s'), a)``, flat ``[N, ...]``."""
        obs = require(td, self.observation_key, "ICMLoss")
        next_obs = require(td, (K.NEXT, self.observation_key), "ICMLoss")
        n = td.batch_size.numel()
        phi = self.feature_net(obs.reshape(n, *obs.shape[td.batch_dims :]))
        phi_next = self.feature_net(next_obs.reshape(n, *next_obs.shape[td.batch_dims :]))
        return phi, phi_next, self._action(td)

    def forward_error(
        self, phi: torch.Tensor, action: torch.Tensor, phi_next: torch.Tensor
    ) -> torch.Tensor:
        """``e = 1/2 ||f(phi, a) - phi'||^2`` per row ``[N]`` (``phi'`` as given)."""
        predicted = self.forward_net(torch.cat([phi, action], dim=-1))
        return 0.5 * (predicted - phi_next).pow(2).sum(-1)

    @torch.no_grad()
    def intrinsic_reward(self, rollout: TensorDictBase) -> TensorDictBase:
        """Write ``("next", "intrinsic_reward")`` ``[*B, 1]`` and the all-False intrinsic episode
        flags into ``rollout``; returns it."""
        phi, phi_next, action = self._parts(rollout)
        if rollout.batch_dims != 2:
            raise ValueError(
                f"ICMLoss.intrinsic_reward: expects a [num_envs, T] rollout, got batch size "
                f"{tuple(rollout.batch_size)}"
            )
        reward = self.reward_scale * self.forward_error(phi, action, phi_next)
        if self.first_visit:
            next_obs = rollout.get((K.NEXT, self.observation_key))
            reward = reward * self.first_visits(rollout, next_obs).reshape(-1).to(reward.dtype)
        write_intrinsic_reward(rollout, reward, self.reward_scaling)
        return rollout

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        phi, phi_next, action = self._parts(tensordict)
        forward_loss = self.forward_error(phi, action, phi_next.detach()).mean()
        predicted = self.inverse_net(torch.cat([phi, phi_next], dim=-1))
        if self.discrete:
            inverse_loss = F.cross_entropy(predicted, action.argmax(-1))
        else:
            inverse_loss = 0.5 * (predicted - action).pow(2).sum(-1).mean()
        return TensorDict(
            {
                K.LOSS_ICM_FORWARD: self.beta * forward_loss,
                K.LOSS_ICM_INVERSE: (1.0 - self.beta) * inverse_loss,
            },
            batch_size=[],
        )
