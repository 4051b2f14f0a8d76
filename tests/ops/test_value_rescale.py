"""R2D2's value rescaling h and its inverse (Pohlen et al. 2018, arXiv 1805.11593)."""

from __future__ import annotations

import math

import torch

from tdrl.ops import value_rescale, value_unscale


def test_h_is_its_formula_and_the_inverse_undoes_it_in_float32_and_float64():
    for x, eps in ((0.0, 1e-3), (3.0, 1e-3), (-8.0, 1e-2), (1e4, 1e-3)):
        expected = math.copysign(math.sqrt(abs(x) + 1) - 1, x) + eps * x
        assert math.isclose(float(value_rescale(torch.tensor(x, dtype=torch.float64), eps)),
                            expected, rel_tol=1e-12, abs_tol=1e-12)  # fmt: skip
    wide = torch.linspace(-1e4, 1e4, 20001, dtype=torch.float64)
    torch.testing.assert_close(value_unscale(value_rescale(wide)), wide, rtol=1e-10, atol=1e-9)
    small = torch.linspace(-2.0, 2.0, 4001)  # float32 near 0, where sqrt(1 + ...) - 1 cancels
    back = value_unscale(value_rescale(small))
    assert back.dtype == torch.float32 and (back - small).abs().max() < 1e-5
