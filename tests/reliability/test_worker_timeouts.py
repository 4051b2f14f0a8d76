"""Worker collectors never wait forever: a stopped (SIGSTOP) worker counts as dead after the
collector's timeout and is restarted or raised, as the async envs' workers are; a killed
(SIGKILL) Ray worker is restarted. Each case finishes in seconds; they run with -m workers."""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import math
import os
import signal
import time

import pytest
import torch
from torch import nn

from tdrl import keys
from tdrl.collectors import ProcessCollector, RayCollector, WorkerCollector
from tdrl.modules import CategoricalActor

HAS_RAY = importlib.util.find_spec("ray") is not None
BACKENDS = [
    pytest.param("ray", marks=[pytest.mark.ray, pytest.mark.skipif(not HAS_RAY, reason="no ray")]),
    "process",
]


def make(backend: str, request: pytest.FixtureRequest | None = None, **kwargs) -> WorkerCollector:
    torch.manual_seed(0)
    if backend == "ray" and request is not None:
        request.getfixturevalue("local_ray")  # a local Ray for this module's Ray cases
    cls = RayCollector if backend == "ray" else ProcessCollector
    return cls("CartPole-v1", CategoricalActor(nn.Linear(4, 2)), 40, num_workers=2, **kwargs)


def pid_of(remote: WorkerCollector, w: int) -> int:
    if isinstance(remote, RayCollector):
        actor = remote.workers[w]
        return remote.ray.get(actor.__ray_call__.remote(lambda self: os.getpid()), timeout=30)
    assert isinstance(remote, ProcessCollector)
    return remote.pids[w]


def test_the_timeout_has_a_default_and_bad_ones_are_refused():
    with pytest.raises(ValueError, match="timeout must be a number of seconds > 0 or None, got 0"):
        make("process", timeout=0)
    for bad in (True, math.nan, -1.0):
        with pytest.raises(ValueError, match="timeout must be a number of seconds > 0"):
            make("process", timeout=bad)
    default = inspect.signature(WorkerCollector).parameters["timeout"].default
    assert default == 120.0
    for bad in (None, 0, math.nan):
        with pytest.raises(ValueError, match="start_timeout must be a number of seconds > 0, got"):
            make("process", start_timeout=bad)


@pytest.mark.workers
def test_a_worker_stopped_while_it_starts_raises_after_the_start_timeout():
    """A new worker's first rollout may take start_timeout (600 s by default: a loaded machine
    starts slowly); a shorter one given by the caller bounds a hung start."""
    with make("process", timeout=1.0, start_timeout=3.0, on_worker_failure="raise") as remote:
        for pid in remote.pids:  # before their first rollout: still starting
            os.kill(pid, signal.SIGSTOP)
        start = time.monotonic()
        try:
            with pytest.raises(RuntimeError, match=r"worker.* 0 of 2 died \(no reply within"):
                remote.rollout()
        finally:
            for pid in remote.pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        assert 2.9 < time.monotonic() - start < 120  # the start allowance, not the 1 s timeout


# The restart, after the 2 s timeout, takes a new worker's start: well under the 600 s start
# allowance, but over a minute on a loaded 2-core machine.
BOUND = 180


@pytest.mark.workers  # the default run keeps one worker smoke per backend (test_worker_collectors)
@pytest.mark.parametrize("sync", [True, False])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stopped_worker_is_restarted_after_the_timeout(backend, sync, request):
    with make(backend, request, timeout=2.0, sync=sync) as remote:
        answered: set[int] = set()  # async: both workers past their start (ids mod 2: worker)
        while answered != {0, 1}:
            answered |= set((remote.rollout()[keys.COLLECTOR_TRAJ_IDS] % 2).unique().tolist())
        stopped = pid_of(remote, 0)
        os.kill(stopped, signal.SIGSTOP)
        try:
            start = time.monotonic()
            with pytest.warns(RuntimeWarning, match=r"0 died \(no reply within timeout=2.0 s"):
                while not remote.restarts and time.monotonic() - start < BOUND:
                    batch = remote.rollout()  # async: worker 1's batches meanwhile
            assert remote.restarts == 1 and batch.shape[0] == (2 if sync else 1)
            assert time.monotonic() - start < BOUND
            assert pid_of(remote, 0) != stopped
        finally:
            with contextlib.suppress(ProcessLookupError):  # the restart may have killed it
                os.kill(stopped, signal.SIGKILL)


@pytest.mark.workers
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_stopped_worker_raises_naming_it_when_asked_to(backend, request):
    with make(backend, request, timeout=2.0, on_worker_failure="raise") as remote:
        remote.rollout()
        stopped = pid_of(remote, 1)
        os.kill(stopped, signal.SIGSTOP)
        try:
            with pytest.raises(RuntimeError, match=r"worker.* 1 of 2 died \(no reply within"):
                remote.rollout()
        finally:
            with contextlib.suppress(ProcessLookupError):  # the restart may have killed it
                os.kill(stopped, signal.SIGKILL)


@pytest.mark.workers
@pytest.mark.skipif(not HAS_RAY, reason="no ray")
@pytest.mark.ray
def test_a_sigkilled_ray_worker_is_restarted_in_seconds(request):
    with make("ray", request, timeout=10.0) as remote:
        remote.rollout()
        os.kill(pid_of(remote, 1), signal.SIGKILL)
        start = time.monotonic()
        with pytest.warns(RuntimeWarning, match="1 died"):
            batch = remote.rollout()
        assert remote.restarts == 1 and batch.shape[0] == 2
        assert time.monotonic() - start < 30
