"""A reverse linear recurrence solved blockwise in pure torch (differentiable, any device).

Every estimator here is one affine recurrence run backwards in time,
``x_t = a_t + c_t * x_{t+1}`` with ``x_T = 0`` (GAE: ``a = delta``, ``c = gamma * lambda`` inside
an episode and 0 at its end). A Python loop over T costs T small kernel launches; instead the
time axis is cut into blocks of K steps. Inside a block the solution with a zero carry-in is a
``K x K`` upper-triangular matrix of running products of ``c`` times ``a``; the blocks are then
chained by the same recurrence on the block starts, solved recursively, so the work is a few
batched matmuls and ``log_K(T)`` levels instead of T steps.

The running products come from ``cumprod`` over a matrix whose lower triangle is 1, never from
dividing cumulative products, so zeros in ``c`` (episode ends) and underflow of long products
are exact: a product that underflows is the correct limit 0, not a NaN.
"""

from __future__ import annotations

import torch
from torch import Tensor


def reverse_linear_scan(a: Tensor, c: Tensor, block: int = 8) -> Tensor:
    """Solve ``x_t = a_t + c_t x_{t+1}`` backwards over the last dim, with ``x_T = 0``.

    Args:
        a: Offsets.
        c: Coefficients, same shape as ``a``.
        block: Block length K; memory is ``numel * K``. 8 measured fastest on CPU at
            ``[64, 2048]`` (benchmarks/estimators.py).

    Returns:
        ``x``, same shape as ``a``; differentiable in ``a`` and ``c``.

    Shapes:
        a, c, x: ``[N, T]``.
    """
    n, t = a.shape
    if t <= block:
        return _solve_block(a.unsqueeze(1), c.unsqueeze(1))[0].squeeze(1)
    nb = -(-t // block)
    pad = nb * block - t
    if pad:
        # Padding after the real end: a = 0 there, so the carry into the last real step is 0.
        a = torch.nn.functional.pad(a, (0, pad))
        c = torch.nn.functional.pad(c, (0, pad))
    a_b = a.reshape(n, nb, block)
    c_b = c.reshape(n, nb, block)
    local, carry = _solve_block(a_b, c_b)
    # Block starts obey the same recurrence: X_b = local_b[0] + carry_b[0] * X_{b+1}.
    starts = reverse_linear_scan(local[..., 0], carry[..., 0], block)
    next_start = torch.cat([starts[:, 1:], starts.new_zeros(n, 1)], dim=1)
    x = local + carry * next_start.unsqueeze(-1)
    return x.reshape(n, nb * block)[:, :t]


def _solve_block(a: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
    """Per block: the zero-carry solution and ``prod_{i=t}^{K-1} c_i`` (the carry-in weight).

    Shapes:
        a, c: ``[N, nb, K]``; both outputs ``[N, nb, K]``.
    """
    k = a.shape[-1]
    upper = torch.ones(k, k, dtype=torch.bool, device=a.device).triu()
    # prods[t, j] = prod_{i=t}^{j} c_i for j >= t (ones below the diagonal leave it untouched).
    prods = torch.where(upper, c.unsqueeze(-2), torch.ones((), dtype=c.dtype, device=c.device))
    # cumprod, except for large inputs off the CPU (see _doubling_cumprod)
    small = a.device.type == "cpu" or prods.numel() < _DOUBLING_FROM
    prods = prods.cumprod(-1) if small else _doubling_cumprod(prods)
    # weight[t, j] = prod_{i=t}^{j-1} c_i for j >= t (1 on the diagonal), 0 below it.
    ones = torch.ones_like(prods[..., :1])
    weight = torch.cat([ones, prods[..., :-1]], dim=-1) * upper
    local = (weight @ a.unsqueeze(-1)).squeeze(-1)
    return local, prods[..., -1]


# Running-product entries from which a GPU uses the doublings: on large inputs ([1024, 1000], 8M
# entries) cumprod takes most of the GPU time and the doublings are several times faster; on
# smaller ones ([64, 2048] and below) their extra kernel launches cost more than they save
# (``benchmarks/estimators.py --device cuda``).
_DOUBLING_FROM = 1 << 22


def _doubling_cumprod(x: Tensor) -> Tensor:
    """``x.cumprod(-1)`` in ``log2(K)`` elementwise products (each entry times the one ``d``
    before it, d = 1, 2, 4, ...): torch's CUDA scan kernel is slow on a short last dim over
    many rows. On the CPU cumprod is the faster one (this is about 20x slower there). Exact
    with zeros, like cumprod."""
    k, d = x.shape[-1], 1
    while d < k:
        x = torch.cat([x[..., :d], x[..., d:] * x[..., :-d]], dim=-1)
        d *= 2
    return x
