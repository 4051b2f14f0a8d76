"""nstep_return / nstep_steps against a reference written from the definition."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tdrl.ops import InputError
from tdrl.ops.nstep import nstep_return, nstep_steps


def reference(reward, next_value, terminated, done, gamma, n):
    """Explicit sums over [T] vectors: walk forward from t, stop at a done or the axis end."""
    T = reward.shape[0]
    out = torch.zeros(T, dtype=torch.float64)
    steps = torch.zeros(T, dtype=torch.int64)
    for t in range(T):
        total, k = 0.0, 0
        for i in range(n):
            if t + i >= T:
                break
            total += gamma**i * float(reward[t + i])
            k += 1
            if done[t + i]:
                break
        last = t + k - 1
        if next_value is not None and not terminated[last]:
            total += gamma**k * float(next_value[last])
        out[t], steps[t] = total, k
    return out, steps


flags = st.lists(st.sampled_from(["ordinary", "terminated", "truncated"]), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(pattern=flags, n=st.integers(1, 6), gamma=st.floats(0.5, 1.0), bootstrap=st.booleans())
def test_matches_definition(pattern, n, gamma, bootstrap):
    T = len(pattern)
    g = torch.Generator().manual_seed(T * 7 + n)
    reward = torch.randn(T, generator=g, dtype=torch.float64)
    next_value = torch.randn(T, generator=g, dtype=torch.float64) if bootstrap else None
    terminated = torch.tensor([p == "terminated" for p in pattern])
    done = torch.tensor([p != "ordinary" for p in pattern])
    expected, expected_steps = reference(reward, next_value, terminated, done, gamma, n)
    # [B=2, T, 1] with time_dim=-2 (the default layout), the second row shifted by nothing
    stack = lambda x: torch.stack([x, x]).unsqueeze(-1)  # noqa: E731
    got = nstep_return(
        stack(reward),
        None if next_value is None else stack(next_value),
        stack(terminated),
        stack(done),
        gamma=gamma,
        n=n,
    )
    torch.testing.assert_close(got[0, :, 0], expected)
    torch.testing.assert_close(got[1, :, 0], expected)
    assert torch.equal(nstep_steps(stack(done), n)[0, :, 0], expected_steps)


def test_terminated_and_truncated_differ_only_in_the_bootstrap():
    reward = torch.ones(4, 1)
    next_value = torch.full((4, 1), 10.0)
    end = torch.tensor([False, True, False, False]).unsqueeze(-1)
    no = torch.zeros(4, 1, dtype=torch.bool)
    term = nstep_return(reward, next_value, end, end, gamma=0.5, n=3)
    trunc = nstep_return(reward, next_value, no, end, gamma=0.5, n=3)
    # t=0 and t=1 stop at the end at t=1: truncation bootstraps, termination does not
    torch.testing.assert_close(trunc[:2] - term[:2], torch.tensor([[0.25 * 10], [0.5 * 10]]))
    torch.testing.assert_close(trunc[2:], term[2:])


def test_n1_is_td0_and_large_n_is_monte_carlo():
    T = 6
    reward, next_value = torch.randn(T, 1), torch.randn(T, 1)
    no = torch.zeros(T, 1, dtype=torch.bool)
    torch.testing.assert_close(
        nstep_return(reward, next_value, no, no, gamma=0.9, n=1), reward + 0.9 * next_value
    )
    discounts = 0.9 ** torch.arange(T, dtype=torch.float32)
    mc0 = (discounts * reward[:, 0]).sum() + 0.9**T * next_value[-1, 0]  # unfinished end: bootstrap
    torch.testing.assert_close(
        nstep_return(reward, next_value, no, no, gamma=0.9, n=100)[0, 0], mc0
    )


def test_time_dim_and_errors():
    reward = torch.randn(5, 3)  # [T, B] with time first
    done = torch.rand(5, 3) > 0.7
    a = nstep_return(reward, None, done, done, gamma=0.9, n=3, time_dim=0)
    b = nstep_return(
        reward.T.unsqueeze(-1), None, done.T.unsqueeze(-1), done.T.unsqueeze(-1), gamma=0.9, n=3
    )
    torch.testing.assert_close(a, b[..., 0].T)
    with pytest.raises(InputError, match="done: shape"):
        nstep_return(reward, None, done, done[:2], gamma=0.9, n=3, time_dim=0)
    with pytest.raises(InputError, match="n: the horizon must be an int >= 1"):
        nstep_steps(done, 0)
    for bad in (1.5, -0.1, float("nan"), torch.tensor([0.9, float("nan")])):
        with pytest.raises(InputError, match="gamma"):
            nstep_return(reward, None, done, done, gamma=bad, n=3, time_dim=0)
    with pytest.raises(InputError, match="done: episode-end flags must be torch.bool"):
        nstep_steps(done.float(), 2)
