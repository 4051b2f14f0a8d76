"""CQL (Kumar et al. 2020, arXiv 2006.04779): conservative Q-learning for offline data, on SAC
(continuous actions) and on DQN (discrete)."""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDictBase

from tdrl.keys import LOSS, LOSS_ALPHA_PRIME, LOSS_QVALUE, NEXT
from tdrl.objectives.dqn import DQNLoss
from tdrl.objectives.offpolicy import critic_values, rsample_and_log_prob
from tdrl.objectives.sac import SACLoss

__all__ = ["CQLLoss", "DiscreteCQLLoss", "conservative_gap"]


def conservative_gap(
    q_data: torch.Tensor, q_sampled: torch.Tensor, log_density: torch.Tensor
) -> torch.Tensor:
    """CQL(H)'s regularizer per critic and sample (Kumar et al., eq. 4, with importance
    sampling as in the authors' code):

        gap = log sum_i exp(Q(s, a_i) - log rho(a_i)) - Q(s, a_data)

    over sampled actions ``a_i`` of densities ``rho`` (uniform, the policy at ``s`` and at ``s'``).

    Shapes:
        q_data ``[E, B]``; q_sampled and log_density ``[E, K, B]`` (``K`` sampled actions, the
        density broadcastable); returns ``[E, B]``.
    """
    return torch.logsumexp(q_sampled - log_density, dim=-2) - q_data


class CQLLoss(SACLoss):
    """SAC with CQL's conservative critic term:

    ::

        loss_qvalue = SAC's + weight * alpha' * sum_e mean_B w (gap_e - target_action_gap)
                      (alpha' = 1 and no target_action_gap without the Lagrange variant)
        gap_e       = conservative_gap over num_random uniform actions, and num_random policy
                      actions at s and at s' (each weighed by its density, log pi detached)

    While :attr:`behavior_cloning` is set, the actor learns the authors' warm-up objective
    instead of SAC's (``policy_eval_start`` in their code, ``bc_steps`` in CORL's): maximum
    likelihood of the data's actions with SAC's entropy term,

    ::

        loss_actor  = mean_B w (alpha log pi(a~|s) - log pi(a_data|s)),  a~ ~ pi(.|s)

    the critics and ``alpha`` learning as without it. A training loop sets it for its first
    steps (``recipes/offline.py --cql-bc-steps``).

    With ``with_lagrange`` the multiplier ``alpha' = exp(log_alpha_prime)`` (clamped to [0, 1e6])
    is learned by ``loss_alpha_prime = -weight * alpha' * mean_e mean_B w (gap_e -
    target_action_gap)``: the mean over critics, the authors' ``(-min_qf1_loss -
    min_qf2_loss) * 0.5`` for two (TorchRL's too); the gap is detached there and ``alpha'`` in
    ``loss_qvalue``, so each term trains its own parameter. Without it ``alpha' = 1`` and
    ``target_action_gap`` does not matter.

    Args:
        weight: CQL's alpha (5.0 for the D4RL MuJoCo tasks in the authors' code).
        num_random: sampled actions per kind and state (10).
        with_lagrange, target_action_gap, lagrange_init: the automatic variant (Kumar et al.,
            eq. 30; ``tau`` there). The threshold is applied as in eq. 30, ``weight * alpha' *
            (gap - tau)``; the authors' code computes ``alpha' * (weight * gap - tau)``, whose
            balance point is ``gap = tau / weight``, so divide a threshold taken from their
            configs by ``weight``.
        action_low, action_high: the action box the uniform actions are drawn from (float or
            ``[A]``); default: the actor's ``action_low`` / ``action_high`` (tdrl's actors
            have them); an actor without them needs these, else a ValueError.
        behavior_cloning: the actor's objective is the warm-up's above (an attribute the loop
            may change between steps).
        deterministic_backup: leave SAC's entropy term ``- alpha log pi(a'|s')`` out of the
            Bellman target, as the authors' script does by default (``--deterministic_backup
            True`` in ``d4rl/examples/cql_mujoco_new.py``) and TorchRL's ``CQLLoss``. The class
            keeps SAC's soft target by default (``False``); ``recipes/offline.py`` leaves it
            out by default.
        **kwargs: :class:`SACLoss`'s.
    """

    _outputs = (*SACLoss._outputs, LOSS_ALPHA_PRIME)  # type: ignore[assignment]

    def __init__(
        self,
        actor_network: Any,
        qvalue_network: Any,
        *,
        weight: float = 5.0,
        num_random: int = 10,
        with_lagrange: bool = False,
        target_action_gap: float = 10.0,
        lagrange_init: float = 1.0,
        action_low: float | torch.Tensor | None = None,
        action_high: float | torch.Tensor | None = None,
        deterministic_backup: bool = False,
        behavior_cloning: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(actor_network, qvalue_network, **kwargs)
        self.deterministic_backup = bool(deterministic_backup)
        self.behavior_cloning = bool(behavior_cloning)
        low = getattr(actor_network, "action_low", None) if action_low is None else action_low
        high = getattr(actor_network, "action_high", None) if action_high is None else action_high
        if low is None or high is None:
            raise ValueError(
                "CQLLoss draws uniform actions from the action box, and the actor has no "
                "action_low/action_high: pass action_low= and action_high="
            )
        low_t = torch.as_tensor(low, dtype=torch.float32).detach().clone()
        high_t = torch.as_tensor(high, dtype=torch.float32).detach().clone()
        if not bool((high_t > low_t).all()):  # False for NaN
            raise ValueError(
                f"CQLLoss: need action_low < action_high, got {low_t.tolist()} and "
                f"{high_t.tolist()}"
            )
        self.register_buffer("_action_low", low_t, persistent=False)
        self.register_buffer("_action_high", high_t, persistent=False)
        if not weight >= 0 or num_random < 1 or lagrange_init <= 0:
            raise ValueError(
                f"need weight >= 0, num_random >= 1 and lagrange_init > 0; got {weight}, "
                f"{num_random}, {lagrange_init}"
            )
        self.weight, self.num_random = weight, num_random
        self.with_lagrange, self.target_action_gap = with_lagrange, target_action_gap
        log_init = torch.tensor(math.log(lagrange_init))
        if with_lagrange:
            self.log_alpha_prime = torch.nn.Parameter(log_init)
        else:
            self.register_buffer("log_alpha_prime", torch.zeros(()))

    def _action_box(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._action_low, self._action_high

    def _bounds(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The box ``[A]`` (a float bound broadcast over the action's entries)."""
        shape = like.shape[1:]
        return self._action_low.to(like).expand(shape), self._action_high.to(like).expand(shape)

    def value_target(
        self, batch: TensorDictBase, alpha: torch.Tensor | None = None
    ) -> torch.Tensor:
        """SAC's soft target, without its entropy term under ``deterministic_backup``."""
        if self.deterministic_backup:
            alpha = torch.zeros_like(self.alpha if alpha is None else alpha)
        return super().value_target(batch, alpha)

    def actor_loss(
        self, batch: TensorDictBase, alpha: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss_actor, log_prob [B] detached)``: SAC's, or the warm-up's while
        :attr:`behavior_cloning` is set."""
        if not self.behavior_cloning:
            return super().actor_loss(batch, alpha)
        alpha = self.alpha if alpha is None else alpha
        states = batch.select(*self.actor_network.in_keys, strict=False)
        dist = self.actor_network.get_dist(states)
        action, log_prob = rsample_and_log_prob(dist)
        data_log_prob = dist.log_prob(self._get(batch, self.tensor_keys.action))
        if data_log_prob.shape == action.shape:  # a per-dimension log-prob
            data_log_prob = data_log_prob.sum(-1)
        self.target_entropy(action)
        per_sample = alpha * log_prob - data_log_prob
        return self._mean(per_sample, self._weights(batch)), log_prob.detach()

    def _policy_q(
        self, td: TensorDictBase, at: TensorDictBase
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``Q_e(s, a_i)`` ``[E, K, B]`` of ``K`` policy actions at ``at``'s states, and their
        ``log pi`` ``[K, B]`` (no gradient to the actor)."""
        K, B = self.num_random, td.shape[0]
        states = at.select(*self.actor_network.in_keys, strict=False)
        repeated = states.unsqueeze(0).expand(K, B).reshape(K * B)
        with torch.no_grad():
            action, log_prob = self._sample(repeated)
        critic: Any = self.qvalue_network
        inputs = td.select(*critic.in_keys, strict=False)
        inputs = inputs.unsqueeze(0).expand(K, B).reshape(K * B)
        q = critic_values(self.qvalue_network, inputs, action, self.tensor_keys.action)
        return q.view(-1, K, B), log_prob.view(K, B)

    def gap(self, batch: TensorDictBase) -> torch.Tensor:
        """``gap_e`` ``[E, B]`` of the current critics on ``batch``."""
        action_key = self.tensor_keys.action
        data_action = self._get(batch, action_key)
        K, B = self.num_random, batch.shape[0]
        q_data = critic_values(self.qvalue_network, batch, None, action_key)
        low, high = self._bounds(data_action)
        uniform = low + (high - low) * torch.rand(K * B, *data_action.shape[1:]).to(data_action)
        critic: Any = self.qvalue_network
        inputs = batch.select(*critic.in_keys, strict=False)
        inputs = inputs.unsqueeze(0).expand(K, B).reshape(K * B)
        q_random = critic_values(self.qvalue_network, inputs, uniform, action_key).view(-1, K, B)
        log_uniform = -torch.log(high - low).sum().expand(K, B)
        q_current, logp_current = self._policy_q(batch, batch)
        q_next, logp_next = self._policy_q(batch, self._get(batch, NEXT))
        q_sampled = torch.cat([q_random, q_current, q_next], dim=1)
        log_density = torch.cat([log_uniform, logp_current, logp_next], dim=0)
        return conservative_gap(q_data, q_sampled, log_density)

    def _critic_terms(self, batch: TensorDictBase, alpha: torch.Tensor) -> dict[str, torch.Tensor]:
        loss_qvalue, td_error = super().qvalue_loss(batch, alpha)  # SAC's, without the gap
        gap = self.gap(batch)  # [E, B]
        if self.with_lagrange:
            gap = gap - self.target_action_gap
        weights = self._weights(batch)
        per_sample = gap.sum(0)
        alpha_prime = self.log_alpha_prime.exp().clamp(0.0, 1e6)
        conservative = self.weight * alpha_prime.detach() * self._mean(per_sample, weights)
        if self.with_lagrange:
            per_critic = per_sample.detach() / gap.shape[0]  # mean over the critics
            lagrange = -alpha_prime * self.weight * self._mean(per_critic, weights)
        else:
            lagrange = torch.zeros((), device=per_sample.device)
        return {
            LOSS_QVALUE: loss_qvalue + conservative,
            self.tensor_keys.priority: td_error,
            LOSS_ALPHA_PRIME: lagrange,
        }

    def qvalue_loss(
        self, batch: TensorDictBase, alpha: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss_qvalue, td_error [B])`` with the conservative term: what a critic-only step
        trains (``actor_every > 1``); ``alpha'`` learns from :meth:`forward`'s output only."""
        terms = self._critic_terms(batch, self.alpha if alpha is None else alpha)
        return terms[LOSS_QVALUE], terms[self.tensor_keys.priority]


class DiscreteCQLLoss(DQNLoss):
    """DQN with CQL(H)'s conservative term for discrete actions (Kumar et al. 2020, eq. 4, the
    logsumexp over all actions exactly):

    ::

        loss = DQN's / 2 + weight * mean_B w (log sum_a exp Q(s, a) - Q(s, a_data))

    The TD term is halved as in eq. 4 (``1/2 E (Q - B Q)^2``) and TorchRL's
    ``DiscreteCQLLoss`` (``0.5 * distance_loss``), so ``weight`` is the paper's alpha (1.0 for
    Atari there, 4.0 in some follow-ups). Everything else (double Q, n-step, PER, the episode
    ends of the target, the priorities) is :class:`DQNLoss`'s.
    """

    def __init__(self, value_network: Any, *, weight: float = 1.0, **kwargs: Any) -> None:
        super().__init__(value_network, **kwargs)
        if not weight >= 0:
            raise ValueError(f"weight must be >= 0, got {weight}")
        self.weight = weight

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        out = super().forward(batch)
        action_value = self._action_values(self.value_network, batch)
        index = self._action_index(batch, action_value.shape[-1])
        gap = torch.logsumexp(action_value, dim=-1) - self._gather_action(action_value, index)
        out[LOSS] = 0.5 * out[LOSS] + self.weight * self._mean(gap, self._weights(batch))
        return out
