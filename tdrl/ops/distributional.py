r"""Distributional value targets and losses: C51's categorical projection (Bellemare et al. 2017,
arXiv 1707.06887) and the quantile Huber loss of QR-DQN and IQN (Dabney et al. 2017, arXiv
1710.10044; 2018, arXiv 1806.06923).

Episode ends as in every tdrl target: a terminated transition does not bootstrap (its target
distribution is all at ``r``); a truncated one bootstraps from the distribution of its real final
observation, like an ordinary step (partial-episode bootstrapping, Pardo et al. 2018).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from tdrl.ops._common import InputError

__all__ = [
    "categorical_projection",
    "check_support",
    "expectile_loss",
    "quantile_huber_loss",
    "support",
]


def check_support(v_min: float, v_max: float, num_atoms: int) -> None:
    """Raise ``InputError`` naming the argument unless ``v_min < v_max`` and ``num_atoms >= 2``."""
    if not v_min < v_max:
        raise InputError("v_min", f"must be < v_max, got v_min={v_min}, v_max={v_max}")
    if num_atoms < 2:
        raise InputError("num_atoms", f"must be >= 2, got {num_atoms}")


def support(v_min: float, v_max: float, num_atoms: int) -> Tensor:
    """The fixed atoms ``z_j = v_min + j (v_max - v_min) / (num_atoms - 1)``, ``[num_atoms]``."""
    check_support(v_min, v_max, num_atoms)
    return torch.linspace(v_min, v_max, num_atoms)


def categorical_projection(
    next_probs: Tensor,
    reward: Tensor,
    terminated: Tensor,
    atoms: Tensor,
    *,
    discount: float | Tensor,
) -> Tensor:
    r"""C51's target: the distribution of ``r + discount (1 - terminated) Z(s')`` projected onto
    the atoms (Bellemare et al. 2017, Algorithm 1).

    With ``Tz_j = clip(r + discount m z_j, v_min, v_max)`` (``m = 0`` after a terminal state) and
    ``b_j = (Tz_j - v_min) / dz``, the mass ``p_j`` of atom ``j`` goes to the atoms around
    ``b_j``, in proportion to closeness:

        m_l += p_j (u - b_j),   m_u += p_j (b_j - l),   l = floor(b_j), u = ceil(b_j)

    and all of it to ``l`` when ``b_j`` lands on an atom (``l = u``, where the paper's formula
    would lose it). The result sums to 1 in every row.

    Args:
        next_probs: ``p_j(s', a*)``, each row a distribution over the atoms.
        reward: ``r`` (n-step: the discounted sum).
        terminated: bool; True: no bootstrap.
        atoms: the support ``z`` (evenly spaced, increasing; :func:`support`).
        discount: ``gamma`` or per-sample ``gamma ** k`` (n-step samples).

    Shapes:
        next_probs ``[B, K]``; reward, terminated and a tensor discount ``[B]``; atoms ``[K]``;
        returns ``[B, K]``.
    """
    K = atoms.shape[-1]
    if atoms.dim() != 1 or K < 2:
        raise InputError("atoms", f"must be a 1-D support of >= 2 atoms, got {tuple(atoms.shape)}")
    if next_probs.dim() != 2 or next_probs.shape[-1] != K:
        raise InputError(
            "next_probs", f"must be [B, {K}] (one distribution per sample), got "
            f"{tuple(next_probs.shape)}",
        )  # fmt: skip
    B = next_probs.shape[0]
    for name, x in (("reward", reward), ("terminated", terminated)):
        if x.shape != (B,):
            raise InputError(name, f"must be [B] = [{B}], got {tuple(x.shape)}")
    if terminated.dtype != torch.bool:
        raise InputError("terminated", f"must be bool, got {terminated.dtype}")
    v_min, v_max = atoms[0], atoms[-1]
    delta = (v_max - v_min) / (K - 1)
    # A terminated row's next state is not read: its mass all lands on r (every tz below is r),
    # and any distribution gives that; a uniform one keeps a NaN of s' out (DQN and QR-DQN
    # replace their terminated bootstraps the same way).
    next_probs = torch.where(terminated.unsqueeze(-1), 1.0 / K, next_probs)
    keep = (~terminated).to(next_probs.dtype)
    scale = keep * discount if isinstance(discount, Tensor) else keep * float(discount)
    tz = (reward.unsqueeze(-1) + scale.unsqueeze(-1) * atoms).clamp(v_min, v_max)  # [B, K]
    b = ((tz - v_min) / delta).clamp(0, K - 1)
    lower, upper = b.floor(), b.ceil()
    # On an atom (lower == upper) the weights (upper - b) and (b - lower) are both 0: give the
    # whole mass to that atom instead.
    on_atom = (upper == lower).to(next_probs.dtype)
    to_lower = next_probs * (upper - b + on_atom)
    to_upper = next_probs * (b - lower)
    out = torch.zeros_like(next_probs)
    out.scatter_add_(-1, lower.long(), to_lower)
    out.scatter_add_(-1, upper.long(), to_upper)
    return out


def quantile_huber_loss(
    quantiles: Tensor, target: Tensor, taus: Tensor, *, kappa: float = 1.0
) -> Tensor:
    r"""Quantile Huber loss per sample (Dabney et al. 2017, eq. 10; IQN eq. 3):

        u_ij = target_j - quantiles_i
        rho_ij = |tau_i - 1{u_ij < 0}| L_kappa(u_ij) / kappa
        loss = sum_i mean_j rho_ij

    with ``L_kappa(u) = u^2 / 2`` for ``|u| <= kappa`` and ``kappa (|u| - kappa / 2)`` beyond
    (``kappa = 0``: the plain quantile loss ``|tau - 1{u < 0}| |u|``). ``target`` carries no
    gradient here: pass it detached.

    Args:
        quantiles: ``theta_i(s, a)``, predicted at fractions ``taus``.
        target: target samples ``r + discount (1 - terminated) theta_j(s', a*)``.
        taus: the fractions of ``quantiles``, ``[N]`` or per sample ``[B, N]`` (IQN).
        kappa: Huber threshold, >= 0.

    Shapes:
        quantiles ``[B, N]``, target ``[B, M]``, taus ``[N]`` or ``[B, N]``; returns ``[B]``.
    """
    if not (math.isfinite(kappa) and kappa >= 0):  # NaN: every loss NaN; inf: every loss 0
        raise InputError("kappa", f"must be >= 0 and finite, got {kappa}")
    if quantiles.dim() != 2 or quantiles.shape[-1] < 1:
        raise InputError("quantiles", f"must be [B, N] with N >= 1, got {tuple(quantiles.shape)}")
    B, N = quantiles.shape
    if target.dim() != 2 or target.shape[0] != B:
        raise InputError("target", f"must be [B, M] = [{B}, M], got {tuple(target.shape)}")
    if taus.shape not in ((N,), (B, N)):
        raise InputError("taus", f"must be [{N}] or [{B}, {N}], got {tuple(taus.shape)}")
    # [B, N, M] pairs as broadcast views: the fused elementwise losses never build u itself
    # (about half the time of a QR-DQN step on 200 quantiles was the chain of elementwise ops).
    pred = quantiles.unsqueeze(-1).expand(B, N, target.shape[-1])
    samples = target.unsqueeze(-2).expand_as(pred)
    if kappa == 0:
        huber = nn.functional.l1_loss(pred, samples, reduction="none")
    else:  # L_kappa(u) / kappa: smooth_l1 with beta = kappa is exactly that
        huber = nn.functional.smooth_l1_loss(pred, samples, reduction="none", beta=kappa)
    tau = taus.unsqueeze(-1).to(huber.dtype)  # [B or 1, N, 1]
    weight = torch.where(samples < pred.detach(), 1.0 - tau, tau)  # |tau - 1{u < 0}|
    return (weight * huber).mean(dim=-1).sum(dim=-1)


def expectile_loss(diff: Tensor, expectile: float) -> Tensor:
    r"""Asymmetric squared loss ``|expectile - 1{diff < 0}| diff^2`` elementwise (IQL's value
    loss, Kostrikov et al. 2021, arXiv 2110.06169, eq. 5, with ``diff = Q(s, a) - V(s)``):
    minimizing its mean over samples of ``Q`` puts ``V`` at their ``expectile``-expectile
    (0.5: the mean; towards 1: the maximum over the data's actions).

    Shapes:
        any; returns the same shape.
    """
    if not 0.0 < expectile < 1.0:
        raise InputError("expectile", f"must lie in (0, 1), got {expectile}")
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return weight * diff.pow(2)
