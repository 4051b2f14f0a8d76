"""GAE, TD(0), TD(1) and TD(lambda) estimators: keyed wrappers of ``tdrl.ops.returns``.

Each reads ``("next", "reward")``, ``("next", "terminated")``, ``("next", "done")`` and, if
present, ``("next", "truncated")``; values from ``"state_value"``/``("next", "state_value")`` or
from ``value_network`` applied to the root and ``("next", ...)`` inputs in one batched call; and
writes ``"advantage"`` and ``"value_target"``. ``truncation`` picks what a truncated step does
(see ``tdrl.ops.returns``); with ``"bootstrap"`` the numbers equal TorchRL 0.14's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tensordict import TensorDictBase
from torch import Tensor

from tdrl.estimators.base import ValueEstimator
from tdrl.ops import gae, standardize, td0_return, td_lambda_return


class GAE(ValueEstimator):
    """Generalized advantage estimation (Schulman et al. 2015, arXiv:1506.02438).

    Args:
        gamma: Discount.
        lmbda: GAE lambda (a number, or a tensor of one element).
        value_network: Critic writing ``"state_value"``, or ``None`` to read values from the batch.
        average_gae: Standardize the advantage over the batch.
        differentiable: Keep the graph (the torch scan); otherwise a compiled kernel runs
            (numba on CPU, Triton on CUDA).
        time_dim: Time dim of the batch (default: the dim named ``"time"``, else the last).
        truncation: ``"bootstrap"`` (default), ``"mask"`` or ``"terminate"``.
        validate: Check inputs (shapes, dtypes, flags, NaN).
        **kwargs: TorchRL 0.14's other arguments (``vectorized``, ``shifted``, ``device``, ...).
    """

    def __init__(
        self,
        *,
        gamma: float | Tensor,
        lmbda: float | Tensor,
        value_network: Any = None,
        average_gae: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(gamma=gamma, value_network=value_network, **kwargs)
        self.lmbda = self._lmbda(lmbda)
        self.average_gae = average_gae

    def _estimate(
        self, tensordict: TensorDictBase, params: Any, target_params: Any, time_dim: int
    ) -> tuple[Tensor, Tensor]:
        x = self._read(tensordict, params, target_params)
        advantage, value_target = self._call_op(
            gae, x.reward, x.value, x.next_value, x.terminated, x.done, truncated=x.truncated,
            gamma=x.gamma, lmbda=self.lmbda, time_dim=time_dim,
        )  # fmt: skip
        if self.average_gae:
            advantage = standardize(advantage)
        return advantage, value_target


class TDLambdaEstimator(ValueEstimator):
    """TD(lambda) return as value target, ``advantage = target - value`` (Sutton & Barto ch. 12).

    Args:
        gamma: Discount.
        lmbda: Lambda (a number, or a tensor of one element).
        value_network: Critic, or ``None`` to read values from the batch.
        average_rewards: Standardize rewards over the batch first (the batch is not modified).
        **kwargs: As :class:`GAE`.
    """

    def __init__(
        self,
        *,
        gamma: float | Tensor,
        lmbda: float | Tensor = 0.95,
        value_network: Any = None,
        average_rewards: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(gamma=gamma, value_network=value_network, **kwargs)
        self.lmbda = self._lmbda(lmbda)
        self.average_rewards = average_rewards

    def _target_op(self) -> Callable[..., Tensor]:
        """The op that computes the value target (TD(0) swaps in the one-step target)."""
        return functools.partial(td_lambda_return, lmbda=self.lmbda)

    def _estimate(
        self, tensordict: TensorDictBase, params: Any, target_params: Any, time_dim: int
    ) -> tuple[Tensor, Tensor]:
        x = self._read(tensordict, params, target_params)
        reward = standardize(x.reward) if self.average_rewards else x.reward
        target = self._call_op(
            self._target_op(), reward, x.next_value, x.terminated, x.done,
            truncated=x.truncated, value=x.value, gamma=x.gamma, time_dim=time_dim,
        )  # fmt: skip
        return target - x.value, target


class TD1Estimator(TDLambdaEstimator):
    """TD(1): Monte Carlo return to the end of each episode segment, bootstrapped at cuts."""

    def __init__(self, *, gamma: float | Tensor, value_network: Any = None, **kwargs: Any) -> None:
        super().__init__(gamma=gamma, lmbda=1.0, value_network=value_network, **kwargs)


class TD0Estimator(TDLambdaEstimator):
    """TD(0): the one-step target ``r + gamma (1 - terminated) V(s')``."""

    def __init__(self, *, gamma: float | Tensor, value_network: Any = None, **kwargs: Any) -> None:
        super().__init__(gamma=gamma, lmbda=0.0, value_network=value_network, **kwargs)

    def _target_op(self) -> Callable[..., Tensor]:
        return td0_return
