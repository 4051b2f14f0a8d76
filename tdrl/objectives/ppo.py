"""Clipped-surrogate PPO loss (Schulman et al. 2017, arXiv 1707.06347) and its update loop."""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase

from tdrl.keys import CLIP_FRACTION, ENTROPY, KL_APPROX, LOSS_CRITIC, LOSS_OBJECTIVE
from tdrl.objectives.common import (
    OnPolicyLoss,
    as_batch_shape,
    masked_mean,
    require,
)


class ClipPPOLoss(OnPolicyLoss):
    """PPO-Clip: ``L = -E[min(r A, clip(r, 1 - e, 1 + e) A)]``, ``r = pi(a|s) / pi_old(a|s)``.

    Reads ``"action"``, ``"action_log_prob"`` (the behaviour policy's, ``[*B]`` or ``[*B, 1]``),
    ``"advantage"`` and, with a critic, ``"value_target"`` (and ``"state_value"``, the value at
    collection time, when ``clip_value`` is set), plus the networks' in-keys. Returns
    ``"loss_objective"``, ``"loss_critic"`` (with a critic), ``"loss_entropy"`` (when
    ``entropy_coeff`` > 0) to sum, and detached ``"entropy"``, ``"kl_approx"`` (Schulman's k3
    estimator ``E[(r - 1) - log r]``), ``"clip_fraction"`` and ``"value_clip_fraction"``. Advantages
    are never computed here: run an estimator on the whole rollout first. Hyperparameter names
    are TorchRL's; defaults follow the MuJoCo setups of SB3 / Tianshou / CleanRL where TorchRL's
    differ (entropy_coeff 0, critic_coeff 0.5 with squared error, advantage normalization on).

    Args:
        actor_network: provides ``get_dist(td)`` (tdrl actors, TorchRL ``ProbabilisticActor``).
        critic_network: writes ``"state_value"``; ``None`` for an actor-only loss.
        clip_epsilon: ratio clip range.
        entropy_coeff: weight of the entropy bonus.
        critic_coeff: weight of the critic loss.
        loss_critic_type: ``"l2"``, ``"l1"`` or ``"smooth_l1"``.
        normalize_advantage: normalize advantages per minibatch.
        clip_value: value-clipping range; ``True`` uses ``clip_epsilon``; ``None`` disables.

    Shapes:
        batch ``[*B]``; every output is a scalar.
    """

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        critic_network: TensorDictModuleBase | None = None,
        *,
        clip_epsilon: float = 0.2,
        entropy_coeff: float = 0.0,
        critic_coeff: float = 0.5,
        loss_critic_type: str = "l2",
        normalize_advantage: bool = True,
        clip_value: float | bool | None = None,
    ) -> None:
        if not 0 < clip_epsilon < 1:
            raise ValueError(f"clip_epsilon must be in (0, 1), got {clip_epsilon}")
        if clip_value is True:
            clip_value = clip_epsilon
        super().__init__(
            actor_network, critic_network, critic_coeff=critic_coeff,
            loss_critic_type=loss_critic_type, clip_value=clip_value or None,
            entropy_coeff=entropy_coeff, normalize_advantage=normalize_advantage,
        )  # fmt: skip
        self.clip_epsilon = clip_epsilon

    supports_mask = True

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        owner = type(self).__name__
        keys = self.tensor_keys
        action = require(tensordict, keys.action, owner)
        old_log_prob = require(tensordict, keys.sample_log_prob, owner)
        dist = self._dist(tensordict)
        log_prob = dist.log_prob(action)
        old_log_prob = as_batch_shape(old_log_prob, log_prob.shape, keys.sample_log_prob, owner)
        mask = self._mask(tensordict, log_prob.shape)  # multi-agent: absent agents left out
        advantage = self._advantage(tensordict, log_prob.shape, mask)
        log_ratio = log_prob - old_log_prob.detach()
        ratio = log_ratio.exp()
        clipped = ratio.clamp(1.0 - self.clip_epsilon, 1.0 + self.clip_epsilon)
        surrogate = torch.minimum(ratio * advantage, clipped * advantage)
        out = {LOSS_OBJECTIVE: -masked_mean(surrogate, mask)}
        entropy = self._entropy(dist, out, mask)
        if self.critic_network is not None:
            out[LOSS_CRITIC], value_clip_fraction = self._critic_loss(tensordict, mask)
            if value_clip_fraction is not None:
                out["value_clip_fraction"] = value_clip_fraction
        with torch.no_grad():
            out[ENTROPY] = entropy
            out[KL_APPROX] = masked_mean((ratio - 1.0) - log_ratio, mask)
            out[CLIP_FRACTION] = masked_mean(
                ((ratio - 1.0).abs() > self.clip_epsilon).float(), mask
            )
        return self._output(out)
