"""n-step returns (Sutton & Barto 2018, Sec. 7.1; Rainbow, arXiv 1710.02298): pure torch."""

from __future__ import annotations

import torch
from torch import Tensor

from tdrl.ops._common import InputError, check_discount, check_done

__all__ = ["nstep_return", "nstep_steps"]


def _time_first(x: Tensor, time_dim: int) -> Tensor:
    return x.movedim(time_dim, 0)


def nstep_steps(done: Tensor, n: int, *, time_dim: int = -2) -> Tensor:
    """Number of steps ``k_t`` an n-step return from ``t`` takes.

    ``k_t = min(n, T - t, 1 + min{j >= 0 : done[t + j]})``: up to n steps, stopping after the
    first step whose ``("next", "done")`` is set and at the end of the time axis.

    Args:
        done: ``("next", "done")`` flags (terminated or truncated), bool.
        n: the horizon, ``n >= 1``.
        time_dim: the time dimension of ``done``.

    Shapes:
        done ``[*B, T, *F]`` (time at ``time_dim``) -> ``k`` int64 of the same shape.
    """
    if not isinstance(n, int) or n < 1:
        raise InputError("n", f"the horizon must be an int >= 1, got {n!r}")
    if done.dtype != torch.bool:
        raise InputError("done", f"episode-end flags must be torch.bool, got {done.dtype}")
    d = _time_first(done, time_dim)
    T = d.shape[0]
    steps = torch.zeros(d.shape, dtype=torch.int64, device=d.device)
    alive = torch.ones(d.shape, dtype=torch.bool, device=d.device)
    # A loop over the horizon n (small), never over T: step i adds step t + i for all t at once.
    for i in range(min(n, T)):
        steps[: T - i] += alive[: T - i]
        alive[: T - i] &= ~d[i:]
    return steps.movedim(0, time_dim)


def nstep_return(
    reward: Tensor,
    next_value: Tensor | None,
    terminated: Tensor,
    done: Tensor,
    *,
    gamma: float,
    n: int,
    time_dim: int = -2,
) -> Tensor:
    """n-step return target, stopping at episode ends and at the end of the time axis.

    With ``k_t`` from :func:`nstep_steps` and ``V(s_{t+1}) = next_value[t]``::

        G_t = sum_{i=0}^{k_t - 1} gamma^i r_{t+i}
              + gamma^{k_t} (1 - terminated[t + k_t - 1]) V(s_{t + k_t})

    A terminated end (``("next", "terminated")``) stops the sum and drops the bootstrap (the
    terminal state's value is 0). A truncated end (``done`` and not ``terminated``) stops the sum
    and bootstraps from the real final observation's value. The end of the time axis (an
    unfinished episode) stops the sum early and bootstraps. ``next_value=None`` returns only the
    discounted reward sum (what a replay buffer stores in ``("next", "reward")``).

    Args:
        reward: ``("next", "reward")`` r_t.
        next_value: V(s_{t+1}) per step, or None.
        terminated: ``("next", "terminated")``, bool.
        done: ``("next", "done")`` (terminated or truncated), bool.
        gamma: discount.
        n: horizon, ``n >= 1`` (``n = 1`` is the TD(0) target).
        time_dim: the time dimension.

    Shapes:
        reward, next_value, terminated, done ``[*B, T, *F]`` -> ``[*B, T, *F]``.
    """
    check_discount("gamma", gamma)
    for name, x in (("next_value", next_value), ("terminated", terminated), ("done", done)):
        if x is not None and x.shape != reward.shape:
            raise InputError(
                name, f"shape {tuple(x.shape)} does not match reward's {tuple(reward.shape)}"
            )
    if terminated.dtype != torch.bool:
        raise InputError(
            "terminated", f"episode-end flags must be torch.bool, got {terminated.dtype}"
        )
    if done is not terminated and done.dtype == torch.bool:  # (nstep_steps names another)
        check_done(terminated, done, None)  # a terminal step not done: the sum would go on
    steps = nstep_steps(done, n, time_dim=time_dim)
    r = _time_first(reward, time_dim)
    k = _time_first(steps, time_dim)
    T = r.shape[0]
    ret = torch.zeros_like(r)
    for i in range(min(n, T)):
        ret[: T - i] += torch.where(k[: T - i] > i, r[i:] * gamma**i, 0.0)
    if next_value is not None:
        last = k - 1 + torch.arange(T, device=r.device).view(T, *([1] * (r.dim() - 1)))
        value = _time_first(next_value, time_dim).gather(0, last)
        nonterminal = ~_time_first(terminated, time_dim).bool().gather(0, last)
        # gamma ** k of an int tensor is float32 whatever the reward's dtype: compute it in
        # the value's dtype so float64 returns stay exact (found by the hypothesis test).
        discount = torch.pow(gamma, k.to(value.dtype))
        ret = ret + discount * nonterminal * value
    return ret.movedim(0, time_dim)
