"""Async env workers: no hangs, and errors that name the worker (index, pid, exit code or
signal) and carry its traceback in the message itself."""

from __future__ import annotations

import os
import signal
import time
import warnings

import pytest
import torch

from tdrl.envs import DEFAULT_STEP_TIMEOUT, make_vec_env
from tests.tiny_envs import Tiny


def _step(env):
    td = env.reset()
    td["action"] = torch.zeros(env.num_envs, 1)
    return env.step(td)


def test_async_envs_have_a_default_timeout_and_reject_bad_ones():
    env = make_vec_env(lambda: Tiny(), 2, mode="async")
    try:
        assert env.step_timeout == DEFAULT_STEP_TIMEOUT > 0
    finally:
        env.close()
    for bad in (0, -1.0, float("nan"), "5"):
        with pytest.raises(ValueError, match="step_timeout"):
            make_vec_env(lambda: Tiny(), 1, mode="async", step_timeout=bad)


def test_worker_traceback_is_in_the_error_message_even_with_warnings_ignored():
    env = make_vec_env([lambda: Tiny(), lambda: Tiny(fail_at=1)], 2, mode="async")
    pid = env.worker_processes[1].pid
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError) as info:
            _step(env)
    message = str(info.value)
    assert f"worker 1 (pid {pid}) raised" in message
    assert "ValueError: env failed on step 1" in message
    assert "worker traceback" in message and "in step" in message  # the frame of Tiny.step


def test_killed_worker_is_named_with_its_signal():
    env = make_vec_env(lambda: Tiny(), 2, mode="async")
    td = env.reset()
    victim = env.worker_processes[0]
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(timeout=5)
    td["action"] = torch.zeros(2, 1)
    with pytest.raises(
        RuntimeError, match=rf"worker 0 \(pid {victim.pid}\) died: killed by SIGKILL"
    ):
        env.step(td)


@pytest.mark.workers
def test_stopped_and_sigterm_ignoring_workers_time_out_and_are_killed():
    # Worker 0 is stopped (SIGSTOP), worker 1 ignores SIGTERM and hangs in step: the step times
    # out naming both, and closing escalates to SIGKILL instead of hanging.
    env = make_vec_env(
        [lambda: Tiny(), lambda: Tiny(sleep=10**6, ignore_sigterm=True)],
        2,
        mode="async",
        step_timeout=1.0,
    )
    processes = env.worker_processes
    td = env.reset()
    os.kill(processes[0].pid, signal.SIGSTOP)
    td["action"] = torch.zeros(2, 1)
    start = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        env.step(td)
    assert time.monotonic() - start < 20
    message = str(info.value)
    assert f"worker 0 (pid {processes[0].pid}) did not answer (stopped)" in message
    assert f"worker 1 (pid {processes[1].pid}) did not answer" in message
    assert not any(p.is_alive() for p in processes)
    assert processes[1].exitcode == -signal.SIGKILL  # SIGTERM was ignored


@pytest.mark.workers
def test_close_does_not_hang_on_a_stopped_worker():
    env = make_vec_env(lambda: Tiny(ignore_sigterm=True), 2, mode="async")
    processes = env.worker_processes
    env.reset()
    os.kill(processes[1].pid, signal.SIGSTOP)
    start = time.monotonic()
    env.close()
    assert time.monotonic() - start < 20
    assert not any(p.is_alive() for p in processes)


def _interrupt_step(env, td) -> None:
    """Ctrl-C (a KeyboardInterrupt from SIGALRM) 0.1 s into ``env.step(td)``."""
    previous = signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    signal.setitimer(signal.ITIMER_REAL, 0.1)
    try:
        with pytest.raises(KeyboardInterrupt):
            env.step(td)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_interrupted_step_leaves_a_clear_error_and_a_usable_env_after_reset():
    env = make_vec_env(lambda: Tiny(sleep=0.5), 2, mode="async")
    try:
        td = env.reset()
        td["action"] = torch.zeros(2, 1)
        _interrupt_step(env, td)
        with pytest.raises(RuntimeError, match="interrupted.*reset the env"):
            env.step(td)
        td = env.reset()  # usable again
        td["action"] = torch.zeros(2, 1)
        out = env.step(td)
        assert out["next", "reward"].shape == (2, 1)
        # A reset right after an interrupt (no step in between) works too.
        _interrupt_step(env, td)
        env.reset()
        td["action"] = torch.zeros(2, 1)
        assert env.step(td)["next", "reward"].shape == (2, 1)
    finally:
        env.close()


def test_an_integer_obs_dtype_is_refused_not_truncating():
    for bad in (torch.int64, torch.uint8, "float32"):
        with pytest.raises(TypeError, match="obs_dtype must be a floating torch dtype"):
            make_vec_env("Pendulum-v1", 1, obs_dtype=bad)  # type: ignore[arg-type]
