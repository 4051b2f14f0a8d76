"""Fixtures shared by the whole suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import tdrl
from tdrl import _fast


@pytest.fixture(params=[True, False], ids=["fast", "plain"])
def fast_mode(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Runs a test once with the fast paths and once with their plain twins (``tdrl.set_fast``);
    yields whether the fast paths are on. Equivalence tests compare the two."""
    if request.param and not _fast.supported():
        pytest.skip("fast paths are off outside the tested torch / tensordict versions")
    previous = tdrl.set_fast(request.param)
    try:
        yield request.param
    finally:
        tdrl.set_fast(previous)
