"""CRR (Wang et al. 2020, arXiv 2006.15134): critic-regularized regression, for offline data."""

from __future__ import annotations

from typing import Any, Literal

import torch
from tensordict import TensorDictBase

from tdrl.keys import LOSS_ACTOR, LOSS_QVALUE, NEXT
from tdrl.objectives.offpolicy import OffPolicyLoss, bellman_target, critic_values, module_box


class CRRLoss(OffPolicyLoss):
    """CRR's actor and critic losses on data transitions:

    ::

        y           = r + discount (1 - terminated) mean_j min_e Q'_e(s', a'_j),  a'_j ~ pi(s')
        loss_qvalue = sum_e mean_B w (Q_e(s, a) - y)^2
        A(s, a)     = min_e Q_e(s, a) - mean_j min_e Q_e(s, a_j),  a_j ~ pi(s)      (no gradient)
                      (max_j in place of mean_j with advantage="max", the paper's A_max)
        loss_actor  = -mean_B w f(A(s, a)) log pi(a | s)
        f           = 1[A > 0] ("binary")  or  min(exp(A / beta), max_weight) ("exp")

    (the paper's eq. 3 and its two filters; ``num_samples`` = m = 4 there; its critic is
    distributional, this one a plain ensemble with the clipped minimum). A truncated step
    bootstraps from its real final observation; a terminated one does not.

    Args:
        actor_network: a probabilistic actor with ``get_dist``.
        qvalue_network: an ``EnsembleCritic`` or one keyed critic.
        mode: ``"binary"`` or ``"exp"``. ``beta``, ``max_weight``: the exp filter's.
        advantage: the baseline over the sampled actions, ``"mean"`` (the paper's ``A_mean``,
            default) or ``"max"`` (``A_max``: only actions better than every sampled one pass
            the binary filter). The target always takes the mean (an expectation under pi).
        num_samples: policy actions per state for the value baseline and the target.
        gamma: discount.

    Shapes:
        batch ``[B]``; action ``[B, A]``; reward and flags ``[B, 1]``.
    """

    _outputs = (LOSS_ACTOR, LOSS_QVALUE)
    _continuous_action = True

    def __init__(
        self,
        actor_network: Any,
        qvalue_network: Any,
        *,
        mode: Literal["binary", "exp"] = "binary",
        advantage: Literal["mean", "max"] = "mean",
        beta: float = 1.0,
        max_weight: float = 20.0,
        num_samples: int = 4,
        num_qvalue_nets: int = 2,
        gamma: float = 0.99,
    ) -> None:
        super().__init__(gamma=gamma, loss_function="l2")
        if mode not in ("binary", "exp"):
            raise ValueError(f"mode must be 'binary' or 'exp', got {mode!r}")
        if advantage not in ("mean", "max"):
            raise ValueError(f"advantage must be 'mean' or 'max', got {advantage!r}")
        if not beta > 0 or num_samples < 1:
            raise ValueError(f"need beta > 0 and num_samples >= 1, got {beta}, {num_samples}")
        if not max_weight > 0:  # <= 0 would push the actor away from the data's actions
            raise ValueError(f"max_weight must be > 0, got {max_weight}")
        self.actor_network = actor_network
        self._init_critics(qvalue_network, num_qvalue_nets, delay_qvalue=True)
        self.mode, self.advantage, self.beta, self.max_weight = mode, advantage, beta, max_weight
        self.num_samples = num_samples

    def _action_box(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        return module_box(self.actor_network)  # a bounded actor's (TanhGaussianActor)

    @torch.no_grad()
    def _sampled_value(self, critic: Any, td: TensorDictBase, reduce: str = "mean") -> torch.Tensor:
        """``mean_j`` (or ``max_j``) ``min_e Q_e(s, a_j)`` over ``num_samples`` actions ``[B]``."""
        m, B = self.num_samples, td.shape[0]
        states = td.select(*self.actor_network.in_keys, strict=False)
        repeated = states.unsqueeze(0).expand(m, B).reshape(m * B)
        action = self.actor_network.get_dist(repeated).sample()
        inputs = td.select(*critic.in_keys, strict=False).unsqueeze(0).expand(m, B).reshape(m * B)
        q = critic_values(critic, inputs, action, self.tensor_keys.action)  # [E, m * B]
        q = q.min(dim=0).values.view(m, B)
        return q.mean(0) if reduce == "mean" else q.max(0).values

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        reward, terminated, discount = self._transition(batch)
        weights = self._weights(batch)
        action_key = self.tensor_keys.action
        action = self._get(batch, action_key)
        next_value = self._sampled_value(self.target_qvalue_network, self._get(batch, NEXT))
        y = bellman_target(reward, next_value, terminated, discount)
        q = critic_values(self.qvalue_network, batch, None, action_key)  # [E, B]
        loss_qvalue = self._mean(self._distance(q, y.expand_as(q)).sum(0), weights)
        baseline = self._sampled_value(self.qvalue_network, batch, self.advantage)
        advantage = q.detach().min(dim=0).values - baseline
        if self.mode == "binary":
            filter_ = (advantage > 0).to(advantage.dtype)
        else:
            filter_ = torch.exp(advantage / self.beta).clamp(max=self.max_weight)
        # select: an actor that writes its outputs (TorchRL's) leaves the caller's batch alone
        dist = self.actor_network.get_dist(batch.select(*self.actor_network.in_keys))
        log_prob = dist.log_prob(action).reshape(advantage.shape)
        out = {
            LOSS_ACTOR: self._mean(-filter_ * log_prob, weights),
            LOSS_QVALUE: loss_qvalue,
            self.tensor_keys.priority: (q.detach() - y).abs().max(dim=0).values,
        }
        return self._output(out)
