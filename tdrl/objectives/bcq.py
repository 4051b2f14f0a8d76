"""BCQ: batch-constrained deep Q-learning for offline data, continuous (Fujimoto, Meger & Precup
2019, arXiv 1812.02900) and discrete (Fujimoto et al. 2019, arXiv 1910.01708), with the acting
modules that choose actions the way the losses' targets do (one place for each rule)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Unpack

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn

from tdrl.keyed import check_counts, require
from tdrl.keys import (
    ACTION,
    ACTION_VALUE,
    CHOSEN_ACTION_VALUE,
    LOGITS,
    LOSS,
    LOSS_ACTOR,
    LOSS_QVALUE,
    LOSS_VAE,
    NEXT,
)
from tdrl.objectives.ddpg import CriticOptions, DeterministicActorCriticLoss
from tdrl.objectives.dqn import DQNLoss
from tdrl.objectives.offpolicy import (
    OffPolicyKeys,
    actor_critic_value,
    bellman_target,
    critic_values,
    module_box,
)

__all__ = [
    "BCQActor",
    "BCQLoss",
    "DiscreteBCQActor",
    "DiscreteBCQLoss",
    "imitation_mask",
    "perturbed_samples",
]


def perturbed_samples(
    vae: Any,
    perturbation: Any,
    td: TensorDictBase,
    num_samples: int,
    action_key: NestedKey = ACTION,
) -> tuple[TensorDictBase, torch.Tensor]:
    """``num_samples`` decoder actions per state, perturbed: ``a_i = xi(s, a~_i)``,
    ``a~_i ~ G(s)`` (no gradient to the VAE; the perturbation keeps its graph).

    Returns the states repeated sample-major, ``[n * B]`` (row ``i * B + b`` is state ``b``), and
    the actions ``[n * B, A]``.
    """
    states = td.select(*vae.in_keys, *perturbation.in_keys, strict=False).exclude(action_key)
    B = td.shape[0]
    repeated = states.unsqueeze(0).expand(num_samples, B).reshape(num_samples * B)
    observation = require(repeated, vae.in_keys[0], type(vae).__name__)
    with torch.no_grad():
        repeated.set(action_key, vae.decode(observation))
    action = require(perturbation(repeated.copy()), action_key, type(perturbation).__name__)
    return repeated, action


class BCQLoss(DeterministicActorCriticLoss):
    """BCQ's three losses on data transitions ``(s, a, r, s')`` (Fujimoto et al. 2019, Alg. 1):

    ::

        loss_vae    = mean_B w (mean_A (a~ - a)^2 + 0.5 mean_L KL(N(mean, std) || N(0, 1)))
        a'_i        = xi'(s', a~_i),  a~_i ~ G(s'),  i < num_samples             (no gradient)
        y           = r + discount (1 - terminated) max_i [lmbda min_e Q'_e(s', a'_i)
                                                           + (1 - lmbda) max_e Q'_e(s', a'_i)]
        loss_qvalue = sum_e mean_B w (Q_e(s, a) - y)^2
        loss_actor  = -mean_B w Q_0(s, xi(s, a~)),  a~ ~ G(s)     (gradients to xi only)

    ``a~ = decoder(s, mean + std eps)`` in ``loss_vae``; the KL term per latent dim is
    ``-0.5 (1 + log std^2 - mean^2 - std^2)``: the paper's ELBO (sec. 4.1) with the authors'
    code's means and KL weight 0.5. The target is the soft clipped double Q (eq. 13) over
    ``num_samples`` = 10 sampled actions. A truncated step bootstraps from its real final
    observation; a terminated one does not. Targets: the perturbation model's and the critics'
    (``SoftUpdate``); the VAE has none. Act with :class:`BCQActor`.

    Args:
        actor_network: the perturbation model (``BCQPerturbation``), writing ``"action"``.
        qvalue_network: an ``EnsembleCritic`` or one keyed critic (copied).
        vae_network: a ``BCQVAE`` (``encode``, ``decode`` and its observation key first).
        num_samples, lmbda: ``n`` and ``lambda`` (10 and 0.75 in the paper).
        **options: ``num_qvalue_nets``, ``loss_function``, ``delay_actor``, ``delay_qvalue``,
            ``gamma``: TorchRL's names, defaults as :class:`~tdrl.objectives.TD3Loss`'s.

    Reads the networks' in_keys (root and ``"next"``), ``action``, ``("next",
    "reward"|"terminated")``, optional ``steps_to_next_obs``/``gamma`` and ``priority_weight``.
    Returns ``loss_actor``, ``loss_qvalue``, ``loss_vae`` and ``td_error`` ``[B]``.

    Shapes:
        batch ``[B]``; action ``[B, A]``; reward and flags ``[B, 1]``.
    """

    _outputs = (LOSS_ACTOR, LOSS_QVALUE, LOSS_VAE)

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: nn.Module | Sequence[nn.Module],
        vae_network: TensorDictModuleBase,
        *,
        num_samples: int = 10,
        lmbda: float = 0.75,
        **options: Unpack[CriticOptions],
    ) -> None:
        super().__init__(actor_network, qvalue_network, **options)
        if num_samples < 1 or not 0.0 <= lmbda <= 1.0:
            raise ValueError(
                f"need num_samples >= 1 and lmbda in [0, 1]; got {num_samples}, {lmbda}"
            )
        self.vae_network = vae_network
        self.num_samples, self.lmbda = num_samples, lmbda

    def _action_box(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        return module_box(self.vae_network)  # the box its decoder's actions lie in

    def _act(self, actor: Any, td: TensorDictBase) -> torch.Tensor:
        """BCQ's actor perturbs a decoder sample, ``xi(s, a~)``: what the actor loss
        differentiates (``Q_0`` frozen, the VAE outside the graph)."""
        return perturbed_samples(self.vae_network, actor, td, 1, self.tensor_keys.action)[1]

    @torch.no_grad()
    def value_target(self, batch: TensorDictBase) -> torch.Tensor:
        """``y`` ``[B]`` (no gradient)."""
        reward, terminated, discount = self._transition(batch)
        next_td = self._get(batch, NEXT)
        n, B, key = self.num_samples, batch.shape[0], self.tensor_keys.action
        states, action = perturbed_samples(
            self.vae_network, self.target_actor_network, next_td, n, key
        )
        next_q = critic_values(self.target_qvalue_network, states, action, key)  # [E, n * B]
        soft = self.lmbda * next_q.min(0).values + (1.0 - self.lmbda) * next_q.max(0).values
        return bellman_target(reward, soft.view(n, B).max(0).values, terminated, discount)

    def vae_loss(self, batch: TensorDictBase) -> torch.Tensor:
        """``loss_vae`` (gradients to the VAE only)."""
        action_key = self.tensor_keys.action
        observation = self._get(batch, self.vae_network.in_keys[0])
        action = self._get(batch, action_key)
        expected = (*batch.batch_size, self.vae_network.action_dim)
        if action.shape != expected:
            raise ValueError(
                f"BCQLoss: {action_key!r} has shape {tuple(action.shape)}, expected {expected}"
            )
        mean, std = self.vae_network.encode(observation, action)
        z = mean + std * torch.randn_like(std)
        reconstruction = self.vae_network.decode(observation, z)
        kl = -0.5 * (1.0 + torch.log(std.pow(2)) - mean.pow(2) - std.pow(2))
        per_sample = (reconstruction - action).pow(2).mean(-1) + 0.5 * kl.mean(-1)
        return self._mean(per_sample, self._weights(batch))

    def _more_losses(self, batch: TensorDictBase) -> dict[NestedKey, torch.Tensor]:
        return {LOSS_VAE: self.vae_loss(batch)}


class BCQActor(TensorDictModuleBase):
    """BCQ's policy (Fujimoto et al. 2019, sec. 4): ``num_samples`` actions from the VAE,
    perturbed, and the one of highest ``Q_0``: ``pi(s) = argmax_i Q_0(s, xi(s, a~_i))``.

    The choice is greedy in every interaction mode (the draws of ``G(s)`` remain random).

    Args:
        vae_network, actor_network: the loss's VAE and perturbation model.
        qvalue_network: the loss's critic ensemble (``loss.qvalue_network``).
        num_samples: ``n`` (10 in the paper).

    Shapes:
        reads the observation ``[*B, obs]``; writes ``action`` ``[*B, A]``.
    """

    def __init__(
        self,
        vae_network: TensorDictModuleBase,
        actor_network: TensorDictModuleBase,
        qvalue_network: Any,
        *,
        num_samples: int = 10,
    ) -> None:
        super().__init__()
        check_counts(type(self).__name__, num_samples=num_samples)
        self.vae_network, self.actor_network = vae_network, actor_network
        self.qvalue_network, self.num_samples = qvalue_network, num_samples
        in_keys = [*vae_network.in_keys, *actor_network.in_keys, *qvalue_network.in_keys]
        self.in_keys = [key for key in dict.fromkeys(in_keys) if key != ACTION]
        self.out_keys = [ACTION]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        flat = tensordict.select(*self.in_keys, strict=False).reshape(-1)
        n, B = self.num_samples, flat.shape[0]
        states, action = perturbed_samples(self.vae_network, self.actor_network, flat, n)
        q = actor_critic_value(self.qvalue_network, states, action, ACTION, "first").view(n, B)
        best = q.argmax(0)  # [B]
        chosen = action.view(n, B, -1)[best, torch.arange(B, device=best.device)]
        tensordict.set(ACTION, chosen.reshape(*tensordict.batch_size, -1))
        return tensordict


# --- discrete -------------------------------------------------------------------------------


def imitation_mask(logits: torch.Tensor, threshold: float) -> torch.Tensor:
    """Discrete BCQ's allowed actions: ``pi(a | s) / max_b pi(b | s) > threshold`` (Fujimoto et
    al. 2019, arXiv 1910.01708, sec. 4), from the imitation head's logits (the softmax's
    normalizer cancels: ``logits_a - max_b logits_b > log threshold``). The most likely action is
    always allowed (``threshold`` < 1); ``threshold`` = 0 allows every action (plain DQN).

    Shapes:
        ``[*B, n]`` -> bool ``[*B, n]``.
    """
    if threshold <= 0.0:
        return torch.ones_like(logits, dtype=torch.bool)
    return logits - logits.max(-1, keepdim=True).values > math.log(threshold)


def _greedy_allowed(
    action_value: torch.Tensor, logits: torch.Tensor, threshold: float
) -> torch.Tensor:
    """``argmax`` of ``Q`` over the allowed actions ``[*B]``."""
    allowed = imitation_mask(logits, threshold)
    return action_value.masked_fill(~allowed, torch.finfo(action_value.dtype).min).argmax(-1)


@dataclasses.dataclass(frozen=True)
class DiscreteBCQKeys(OffPolicyKeys):
    """:class:`OffPolicyKeys` plus the imitation head's ``logits``."""

    logits: NestedKey = LOGITS


def _heads(
    value_network: Any,
    imitation_network: Any,
    td: TensorDictBase,
    keys: DiscreteBCQKeys,
    owner: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Q(s, .), logits(s))`` ``[B, n]`` each: one call of a shared network that writes both,
    or one of each network."""
    out = value_network(td.select(*value_network.in_keys, strict=False))
    action_value = require(out, keys.action_value, owner)
    if imitation_network is not None:
        out = imitation_network(td.select(*imitation_network.in_keys, strict=False))
    logits = require(out, keys.logits, owner)
    if logits.shape != action_value.shape:
        raise ValueError(
            f"{owner}: {keys.logits!r} has shape {tuple(logits.shape)}, "
            f"{keys.action_value!r} {tuple(action_value.shape)}: one logit per action is needed"
        )
    return action_value, logits


def _check_threshold(threshold: float) -> None:
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"threshold must lie in [0, 1) (1 would allow no action), got {threshold}")


class DiscreteBCQLoss(DQNLoss):
    """Discrete BCQ (Fujimoto et al. 2019, arXiv 1910.01708, sec. 4, and the authors' code):

    ::

        allowed(s', a) = pi(a | s') / max_b pi(b | s') > threshold      (online imitation head)
        a*             = argmax_{a allowed} Q(s', a)                      (online Q)
        y              = r + discount (1 - terminated) Q'(s', a*)
        loss           = mean_B w huber(Q(s, a) - y) - mean_B w log pi(a | s)
                         + logit_penalty mean_{B, n} logits(s)^2

    ``pi = softmax(logits)``, trained by cross-entropy on the data's actions; the penalty (1e-2)
    is the authors'. A truncated step bootstraps from its real final observation; a terminated
    one does not. The target network is a copy of ``value_network`` (``HardUpdate`` every 8000
    steps on Atari in the paper, or ``SoftUpdate``). Act with :class:`DiscreteBCQActor`.

    Args:
        value_network: a keyed module writing ``"action_value"`` ``[B, n]`` (``QValueActor``);
            with ``imitation_network=None`` it also writes ``"logits"`` (a shared trunk).
        imitation_network: a separate keyed module writing ``"logits"`` (``CategoricalActor``).
        threshold: ``tau`` (0.3 in the paper). ``logit_penalty``: the logits' L2 weight.
        loss_function: ``"smooth_l1"`` (Huber, the paper's) or ``"l2"``.
        delay_value, gamma: :class:`DQNLoss`'s.

    Reads what :class:`DQNLoss` reads and the ``"logits"`` the networks write. Returns ``loss``
    (all three terms), ``td_error`` ``[B]``, ``chosen_action_value`` and ``value_target``;
    ``set_keys`` also takes ``logits``.

    Shapes:
        batch ``[B]``; action index ``[B]``/``[B, 1]`` or one-hot ``[B, n]``; flags ``[B, 1]``.
    """

    def __init__(
        self,
        value_network: TensorDictModuleBase,
        imitation_network: TensorDictModuleBase | None = None,
        *,
        threshold: float = 0.3,
        logit_penalty: float = 1e-2,
        loss_function: str = "smooth_l1",
        delay_value: bool = True,
        gamma: float = 0.99,
    ) -> None:
        super().__init__(
            value_network, loss_function=loss_function, delay_value=delay_value, gamma=gamma
        )
        _check_threshold(threshold)
        if logit_penalty < 0:
            raise ValueError(f"logit_penalty must be >= 0, got {logit_penalty}")
        self.imitation_network = imitation_network
        self.threshold, self.logit_penalty = threshold, logit_penalty
        self.tensor_keys: DiscreteBCQKeys = DiscreteBCQKeys()

    def _heads(self, td: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        owner = type(self).__name__
        return _heads(self.value_network, self.imitation_network, td, self.tensor_keys, owner)

    @torch.no_grad()
    def value_target(self, batch: TensorDictBase) -> torch.Tensor:
        """``y`` ``[B]`` (no gradient)."""
        reward, terminated, discount = self._transition(batch)
        next_td = self._get(batch, NEXT)
        best = _greedy_allowed(*self._heads(next_td), self.threshold)
        next_target_q = self._action_values(self.target_value_network, next_td)
        next_value = next_target_q.gather(-1, best.unsqueeze(-1)).squeeze(-1)
        return bellman_target(reward, next_value, terminated, discount)

    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        out = super().forward(batch)  # DQN's TD term on the target above, and its diagnostics
        logits = self._heads(batch)[1]
        index = self._action_index(batch, logits.shape[-1])
        log_prob = self._gather_action(logits.log_softmax(-1), index)
        imitation = self._mean(-log_prob, self._weights(batch))
        out[LOSS] = out[LOSS] + imitation + self.logit_penalty * logits.pow(2).mean()
        return out


class DiscreteBCQActor(TensorDictModuleBase):
    """Discrete BCQ's greedy policy: ``argmax_a Q(s, a)`` over the actions the imitation head
    allows (:func:`imitation_mask`), in every interaction mode.

    Args:
        value_network, imitation_network: as for :class:`DiscreteBCQLoss`.
        threshold: ``tau`` (0.3).

    Shapes:
        reads the observation; writes ``action_value`` ``[*B, n]``, ``action`` (int64) ``[*B]``
        and ``chosen_action_value`` ``[*B, 1]``.
    """

    def __init__(
        self,
        value_network: TensorDictModuleBase,
        imitation_network: TensorDictModuleBase | None = None,
        *,
        threshold: float = 0.3,
    ) -> None:
        super().__init__()
        _check_threshold(threshold)
        self.value_network, self.imitation_network = value_network, imitation_network
        self.threshold = threshold
        nets = [value_network] if imitation_network is None else [value_network, imitation_network]
        self.in_keys = list(dict.fromkeys(key for net in nets for key in net.in_keys))
        self.out_keys = [ACTION_VALUE, ACTION, CHOSEN_ACTION_VALUE]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        keys = DiscreteBCQKeys()
        owner = type(self).__name__
        action_value, logits = _heads(
            self.value_network, self.imitation_network, tensordict, keys, owner
        )
        action = _greedy_allowed(action_value, logits, self.threshold)
        tensordict.set(ACTION_VALUE, action_value)
        tensordict.set(ACTION, action)
        tensordict.set(CHOSEN_ACTION_VALUE, action_value.gather(-1, action.unsqueeze(-1)))
        return tensordict
