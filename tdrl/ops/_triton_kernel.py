"""The reverse affine scan as one Triton kernel (imported only where Triton is installed).

Row ``n`` is one program. It walks its row from the end in chunks of ``BLOCK`` steps, read in
reverse so that step ``s`` of a chunk is time ``T - 1 - (k * BLOCK + s)``. Step ``s`` is the map
``x -> c_s x + a_s``; ``tl.associative_scan`` composes the maps of a chunk in ``log2(BLOCK)``
levels in registers (composition of affine maps is associative), and the chunk's solution is its
composed map applied to the carry: the solution at the chunk's first time step after it. A
padded step beyond the row's start reads ``c = a = 0`` and is never stored.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _compose(c1, a1, c2, a2):  # type: ignore[no-untyped-def]
    # (x -> c2 x + a2) after (x -> c1 x + a1)
    return c1 * c2, a1 * c2 + a2


@triton.jit
def reverse_scan_kernel(a_ptr, c_ptr, x_ptr, T, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    base = tl.program_id(0).to(tl.int64) * T
    step = tl.arange(0, BLOCK)
    carry = tl.zeros((), dtype=x_ptr.dtype.element_ty)
    for k in tl.range(0, (T + BLOCK - 1) // BLOCK):
        t = T - 1 - (k * BLOCK + step)
        inside = t >= 0
        a = tl.load(a_ptr + base + t, mask=inside, other=0.0)
        c = tl.load(c_ptr + base + t, mask=inside, other=0.0)
        coeff, offset = tl.associative_scan((c, a), 0, _compose)
        x = offset + coeff * carry
        tl.store(x_ptr + base + t, x, mask=inside)
        carry = tl.sum(tl.where(step == BLOCK - 1, x, 0.0), 0)
