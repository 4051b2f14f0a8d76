"""V-trace estimator (Espeholt et al. 2018, arXiv:1802.01561), a keyed ``tdrl.ops.vtrace``."""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase
from torch import Tensor

from tdrl.estimators.base import ValueEstimator
from tdrl.ops import standardize, vtrace


class VTrace(ValueEstimator):
    """V-trace targets ``vs`` (-> ``"value_target"``) and policy-gradient advantages.

    The behaviour policy's log-probability of the taken action is read from ``"action_log_prob"``
    (key ``sample_log_prob``). The target policy's is the current ``actor_network``'s
    ``log_prob`` of ``"action"`` or, with ``actor_network=None``, read from ``"target_log_prob"``.
    (TorchRL 0.14's VTrace instead scores a *new* sample of the actor; tdrl scores the taken action,
    as the paper's importance weights require.)

    Args:
        gamma: Discount.
        actor_network: A probabilistic actor with ``get_dist``, or ``None``.
        value_network: Critic, or ``None`` to read values from the batch.
        rho_thresh: ``rho_bar`` (> 0).
        c_thresh: ``c_bar`` (> 0; the paper takes ``c_bar <= rho_bar``).
        average_adv: Standardize the advantage over the batch.
        **kwargs: As :class:`tdrl.estimators.GAE`.
    """

    def __init__(
        self,
        *,
        gamma: float | Tensor,
        actor_network: Any = None,
        value_network: Any = None,
        rho_thresh: float | Tensor = 1.0,
        c_thresh: float | Tensor = 1.0,
        average_adv: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(gamma=gamma, value_network=value_network, **kwargs)
        self.__dict__["actor_network"] = actor_network
        self.rho_thresh = float(rho_thresh)
        self.c_thresh = float(c_thresh)
        if not (self.rho_thresh > 0 and self.c_thresh > 0):  # False for NaN
            raise ValueError(
                f"VTrace: rho_thresh and c_thresh must be > 0 (clips of importance ratios), "
                f"got rho_thresh={self.rho_thresh}, c_thresh={self.c_thresh}"
            )
        self.average_adv = average_adv

    @property
    def in_keys(self) -> list[Any]:
        k = self.tensor_keys
        extra = [k.target_log_prob] if self.actor_network is None else [k.action]
        return super().in_keys + [k.sample_log_prob, *extra]

    def _estimate(
        self, tensordict: TensorDictBase, params: Any, target_params: Any, time_dim: int
    ) -> tuple[Tensor, Tensor]:
        signals = self._read(tensordict, params, target_params)
        reward = signals.reward
        k = self.tensor_keys
        log_mu = self._get(tensordict, k.sample_log_prob, "the behaviour policy's log-prob")
        if self.actor_network is None:
            log_pi = self._get(tensordict, k.target_log_prob, "or pass actor_network")
        else:
            dist = self.actor_network.get_dist(tensordict)
            log_pi = dist.log_prob(self._get(tensordict, k.action)).detach()
        for key, x in ((k.sample_log_prob, log_mu), (k.target_log_prob, log_pi)):
            if x.numel() != reward.numel():
                raise ValueError(
                    f"VTrace: key {key!r} has shape {tuple(x.shape)}, expected one log-prob per "
                    f"step like reward {tuple(reward.shape)}"
                )
        log_rho = (log_pi.reshape(reward.shape) - log_mu.reshape(reward.shape)).to(reward.dtype)
        advantage, value_target = self._call_op(
            vtrace, reward, signals.value, signals.next_value, log_rho, signals.terminated,
            signals.done, truncated=signals.truncated, gamma=signals.gamma,
            rho_thresh=self.rho_thresh,
            c_thresh=self.c_thresh, time_dim=time_dim,
        )  # fmt: skip
        if self.average_adv:
            advantage = standardize(advantage)
        return advantage, value_target
