"""Fixtures shared by the whole suite."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest
import torch

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


@pytest.fixture(params=["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
def device(request: pytest.FixtureRequest) -> str:
    """Runs a test on the CPU and, on a machine with one, on a CUDA device: the CUDA paths are
    checked against the same definitions as the CPU ones (``pytest -k cuda`` selects them)."""
    return request.param


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A local Ray (2 CPUs) for a module's RayCollector tests, shut down after them; nothing
    without the ray extra."""
    if importlib.util.find_spec("ray") is None:
        yield
        return
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()
