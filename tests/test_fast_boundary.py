"""The fast-path boundary (docs/design.md, "Fast paths"): private torch / tensordict APIs, ctypes
and raw pointers appear in ``tdrl/_fast/`` only. import-linter forbids the ``ctypes`` import
outside it; this scan catches the attribute-level uses an import graph cannot show."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tdrl

ROOT = Path(tdrl.__file__).parent
FAST = ROOT / "_fast"

# What only tdrl._fast may spell (docstrings and comments included: the plain twin names its
# fast twin by its tdrl._fast path, not by the private API it calls).
PRIVATE = re.compile(
    r"torch\._[A-Za-z]"  # torch._foreach_*, torch._fused_adam_, torch._C, ...
    r"|\._tensordict\b|_new_unsafe|\bctypes\b|_has_names|_extended_shape"
    r"|_forward_(pre_)?hooks|_optimizer_step_(pre|post)_hooks|_global_optimizer_"
    r"|torch\.optim\.optimizer\b|\.grad = None|data_ptr\(|\._get_kwargs\b"
)

SOURCES = sorted(p for p in ROOT.rglob("*.py") if FAST not in p.parents)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_api_outside_the_fast_package(path: Path) -> None:
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert not hits, "private API outside tdrl/_fast:\n" + "\n".join(hits)


def test_the_scan_sees_the_fast_package() -> None:
    # The pattern is not vacuous: the fast package itself matches it.
    assert any(PRIVATE.search(p.read_text()) for p in FAST.rglob("*.py")) or not list(
        FAST.rglob("*.py")
    )


def test_switch_round_trip() -> None:
    previous = tdrl.set_fast(False)
    try:
        assert not tdrl._fast.enabled()
        tdrl.set_fast(True)
        assert tdrl._fast.enabled() == tdrl._fast.supported()
    finally:
        tdrl.set_fast(previous)
