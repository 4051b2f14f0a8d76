"""tdrl.ops value estimators against definitions, properties, backends and bad input."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tdrl.ops import InputError, gae, td0_return, td1_return, td_lambda_return, vtrace
from tests.ops.estimator_reference import (
    gae_ref,
    td0_ref,
    td1_ref,
    td_lambda_ref,
    vtrace_ref,
)

POLICIES = ["bootstrap", "mask", "terminate"]
BACKENDS = ["numba", "torch"]


def make_batch(flags: list[str], rows: int = 3, seed: int = 0, dtype=torch.float64):
    """Rows of one flag pattern ('.' ordinary, 'x' terminated, 't' truncated), values chained
    inside episodes; the value after a terminal state is NaN (it must never be read)."""
    g = torch.Generator().manual_seed(seed)
    t_len = len(flags[0])
    terminated = torch.tensor([[c == "x" for c in f] for f in flags]).repeat(rows, 1)
    truncated = torch.tensor([[c == "t" for c in f] for f in flags]).repeat(rows, 1)
    n = terminated.shape[0]
    reward = torch.randn(n, t_len, generator=g, dtype=dtype)
    value = torch.randn(n, t_len, generator=g, dtype=dtype)
    final = torch.randn(n, t_len, generator=g, dtype=dtype)  # V of real final observations
    done = terminated | truncated
    next_value = torch.cat([value[:, 1:], final[:, -1:]], 1)
    next_value = torch.where(done, final, next_value)
    next_value = torch.where(terminated, float("nan"), next_value)
    log_rho = 0.7 * torch.randn(n, t_len, generator=g, dtype=dtype)
    return [x.unsqueeze(-1) for x in (reward, value, next_value, terminated, truncated, log_rho)]


# Mixes all four episode-end kinds; episodes end and restart inside rows; row 2 ends on a cut.
FLAGS = [
    "...x..t....x.t..",
    "t..t.x.xx...t...",
    "..x....t..t....t",
    "................",
]


def per_row(fn, *tensors, **kw):
    outs = [fn(*(x[i, :, 0].numpy() for x in tensors), **kw) for i in range(tensors[0].shape[0])]
    if isinstance(outs[0], tuple):
        return tuple(torch.tensor(np.stack(o)).unsqueeze(-1) for o in zip(*outs, strict=True))
    return torch.tensor(np.stack(outs)).unsqueeze(-1)


def triton_runs() -> bool:
    from tdrl.ops import _triton

    return torch.cuda.is_available() and _triton.usable(torch.zeros(1, device="cuda"))


@pytest.mark.parametrize("backend", [*BACKENDS, "triton"])
@pytest.mark.parametrize("truncation", POLICIES)
def test_against_definitions(truncation, backend, device):
    if device == "cuda" and backend == "numba":
        pytest.skip("the numba kernels are CPU-only (backend='numba' refuses CUDA tensors)")
    if backend == "triton" and (device == "cpu" or not triton_runs()):
        pytest.skip("the Triton scan runs on CUDA tensors, where Triton imports")
    batch = make_batch(FLAGS)
    rows = [x[..., 0].numpy() for x in batch]
    r, v, nv, term, trunc, log_rho = (x.to(device) for x in batch)
    gamma = torch.full_like(r, 0.9)
    kw = dict(truncation=truncation, backend=backend)
    ref_gamma = gamma[..., 0].cpu().numpy()

    def ref(fn, *args, **k):
        out = [fn(*(a[i] for a in args), gamma=ref_gamma[i], truncation=truncation, **k)
               for i in range(r.shape[0])]  # fmt: skip
        if isinstance(out[0], tuple):
            return tuple(
                torch.tensor(np.stack(o), device=device).unsqueeze(-1)
                for o in zip(*out, strict=True)
            )
        return torch.tensor(np.stack(out), device=device).unsqueeze(-1)

    nr, nvv, nnv, nterm, ntrunc, nlr = rows
    adv, target = gae(r, v, nv, term, truncated=trunc, gamma=0.9, lmbda=0.8, **kw)
    ref_adv, ref_target = ref(gae_ref, nr, nvv, nnv, nterm, ntrunc, lmbda=0.8)
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(target, ref_target)

    got = td_lambda_return(r, nv, term, truncated=trunc, value=v, gamma=gamma, lmbda=0.8, **kw)
    torch.testing.assert_close(got, ref(td_lambda_ref, nr, nvv, nnv, nterm, ntrunc, lmbda=0.8))
    got = td1_return(r, nv, term, truncated=trunc, value=v, gamma=0.9, **kw)
    torch.testing.assert_close(got, ref(td1_ref, nr, nvv, nnv, nterm, ntrunc))
    got = td0_return(r, nv, term, truncated=trunc, value=v, gamma=0.9, truncation=truncation)
    torch.testing.assert_close(got, ref(td0_ref, nr, nvv, nnv, nterm, ntrunc))
    adv, vs = vtrace(r, v, nv, log_rho, term, truncated=trunc, gamma=0.9, rho_thresh=1.2,
                     c_thresh=0.9, **kw)  # fmt: skip
    ref_adv, ref_vs = ref(vtrace_ref, nr, nvv, nnv, nlr, nterm, ntrunc, rho_thresh=1.2,
                          c_thresh=0.9)  # fmt: skip
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(vs, ref_vs)


def test_policies_differ_exactly_at_truncated_steps():
    r, v, nv, term, trunc, _ = make_batch(FLAGS)
    out = {p: gae(r, v, nv, term, truncated=trunc, gamma=0.9, lmbda=0.8, truncation=p)[1]
           for p in POLICIES}  # fmt: skip
    # the steps whose value target depends on a truncated step's treatment: the truncated step
    # and its episode's earlier steps; nothing else may change
    touched = torch.zeros_like(trunc)
    for i in range(r.shape[0]):
        for t in range(r.shape[1]):
            if trunc[i, t, 0]:
                s = t
                while s >= 0 and (s == t or not (term[i, s, 0] or trunc[i, s, 0])):
                    touched[i, s, 0] = True
                    s -= 1
    for p in ("mask", "terminate"):
        diff = (out[p] - out["bootstrap"]).abs() > 1e-9
        assert diff.any()
        assert not (diff & ~touched).any()
        assert (diff[trunc]).all()  # every truncated step's target changes


def test_auto_backend_keeps_the_device_and_matches_the_cpu_kernel_at_ppo_size(device):
    # [num_envs, T] as a MuJoCo PPO batch has it, float32, many episode ends: the default
    # backend on `device` (numba on CPU, the Triton scan on CUDA: two chunks of 1024 steps a
    # row) against the CPU kernel, and the outputs stay where the inputs live.
    g = torch.Generator().manual_seed(5)
    b, t = 16, 2048
    r, v, nv = (torch.randn(b, t, 1, generator=g) for _ in range(3))
    log_rho = 0.5 * torch.randn(b, t, 1, generator=g)
    term = torch.rand(b, t, 1, generator=g) < 0.01
    trunc = (torch.rand(b, t, 1, generator=g) < 0.01) & ~term
    cpu = (r, v, nv, term, trunc, log_rho)
    on = [x.to(device) for x in cpu]
    tol = dict(rtol=1e-4, atol=1e-4)
    for p in POLICIES:
        want = gae(*cpu[:4], truncated=trunc, gamma=0.99, lmbda=0.95, truncation=p)
        got = gae(*on[:4], truncated=on[4], gamma=0.99, lmbda=0.95, truncation=p)
        assert got.advantage.device.type == device
        torch.testing.assert_close(got.advantage.cpu(), want.advantage, **tol)
        want = vtrace(*cpu[:3], log_rho, term, truncated=trunc, gamma=0.99, truncation=p)
        got = vtrace(*on[:3], on[5], on[3], truncated=on[4], gamma=0.99, truncation=p)
        torch.testing.assert_close(got.value_target.cpu(), want.value_target, **tol)
        want = td_lambda_return(r, nv, term, truncated=trunc, value=v, gamma=0.99, lmbda=0.95,
                                truncation=p)  # fmt: skip
        got = td_lambda_return(on[0], on[2], on[3], truncated=on[4], value=on[1], gamma=0.99,
                               lmbda=0.95, truncation=p)  # fmt: skip
        torch.testing.assert_close(got.cpu(), want, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_backends_agree_and_layouts(dtype):
    r, v, nv, term, trunc, log_rho = make_batch(FLAGS, rows=4, seed=3, dtype=dtype)
    nv = torch.nan_to_num(nv)
    tol = dict(rtol=1e-5, atol=1e-5)
    for p in POLICIES:
        a = gae(r, v, nv, term, truncated=trunc, gamma=0.99, lmbda=0.95, truncation=p,
                backend="numba")  # fmt: skip
        b = gae(r, v, nv, term, truncated=trunc, gamma=0.99, lmbda=0.95, truncation=p,
                backend="torch")  # fmt: skip
        torch.testing.assert_close(a, b, **tol)
        a = vtrace(r, v, nv, log_rho, term, truncated=trunc, gamma=0.99, truncation=p,
                   backend="numba")  # fmt: skip
        b = vtrace(r, v, nv, log_rho, term, truncated=trunc, gamma=0.99, truncation=p,
                   backend="torch")  # fmt: skip
        torch.testing.assert_close(a, b, **tol)
    # time_dim=-1 (no trailing dim) and a leading time dim give the same numbers
    a = gae(r, v, nv, term, truncated=trunc, gamma=0.99, lmbda=0.95)
    sq = [x.squeeze(-1) for x in (r, v, nv, term, trunc)]
    b = gae(*sq[:4], truncated=sq[4], gamma=0.99, lmbda=0.95, time_dim=-1)
    torch.testing.assert_close(a.advantage.squeeze(-1), b.advantage)
    tr = [x.transpose(0, 1) for x in (r, v, nv, term, trunc)]
    c = gae(*tr[:4], truncated=tr[4], gamma=0.99, lmbda=0.95, time_dim=0)
    torch.testing.assert_close(a.advantage, c.advantage.transpose(0, 1))


def test_gradients_on_torch_path():
    r, v, nv, term, trunc, _ = make_batch(FLAGS, dtype=torch.float64)
    nv = torch.nan_to_num(nv)
    v = v.clone().requires_grad_()
    adv, _ = gae(r, v, nv, term, truncated=trunc, gamma=0.9, lmbda=0.8)  # auto -> torch
    assert adv.requires_grad
    torch.autograd.gradcheck(
        lambda v_: gae(r, v_, nv, term, truncated=trunc, gamma=0.9, lmbda=0.8)[0], (v,)
    )


def test_the_triton_backend_is_refused_where_it_cannot_run_and_a_gradient_skips_it(device):
    r, v, nv, term, trunc, _ = (x.to(device) for x in make_batch(FLAGS, dtype=torch.float32))
    nv = torch.nan_to_num(nv)
    kw = dict(truncated=trunc, gamma=0.9, lmbda=0.8)
    if device == "cpu" or not triton_runs():
        with pytest.raises(ValueError, match="backend='triton' needs CUDA"):
            gae(r, v, nv, term, backend="triton", **kw)
        return
    v = v.clone().requires_grad_()
    with pytest.raises(ValueError, match="no gradient"):
        gae(r, v, nv, term, backend="triton", **kw)
    adv, _ = gae(r, v, nv, term, **kw)  # auto: the differentiable torch scan
    adv.sum().backward()
    assert v.grad is not None and v.grad.abs().sum() > 0
    with torch.no_grad():
        fast = gae(r, v, nv, term, **kw)[0]  # auto without a gradient: the Triton scan
    torch.testing.assert_close(fast, adv.detach())


def test_a_failed_triton_kernel_falls_back_under_auto_and_raises_when_asked_for(monkeypatch):
    # No GPU here: a kernel that fails at launch stands in for a failed compile. Under "auto"
    # reverse_scan returns None, so Rows.scan runs the torch scan (one warning, the kernel off
    # from then on); asked for by name, the kernel's error propagates.
    from tdrl.ops import _triton

    class Failing:
        def __getitem__(self, grid):
            raise RuntimeError("no C compiler for Triton's launcher")

    monkeypatch.setattr(_triton, "_kernel", lambda: Failing())
    monkeypatch.setattr(_triton, "_broken", [])
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    a, c = torch.randn(2, 9), torch.full((2, 9), 0.9)
    with pytest.raises(RuntimeError, match="no C compiler"):
        _triton.reverse_scan(a, c, strict=True)
    monkeypatch.setattr(_triton, "_broken", [])
    with pytest.warns(RuntimeWarning, match="the torch scan runs instead"):
        assert _triton.reverse_scan(a, c) is None
    assert _triton._broken and not _triton.usable(a.cuda() if torch.cuda.is_available() else a)


def test_a_per_step_gamma_in_half_precision_or_with_a_gradient_picks_the_right_backend():
    r, v, nv, term, trunc, _ = make_batch(FLAGS, dtype=torch.float32)
    nv = torch.nan_to_num(nv)
    gamma = torch.full_like(r, 0.875)  # exact in bfloat16
    want = gae(r, v, nv, term, truncated=trunc, gamma=gamma, lmbda=0.8, backend="torch")
    # a bfloat16 gamma is computed in float32, as half-precision rewards are: numba takes it
    half = gae(r, v, nv, term, truncated=trunc, gamma=gamma.bfloat16(), lmbda=0.8,
               backend="numba")  # fmt: skip
    torch.testing.assert_close(half.advantage, want.advantage)
    # a gamma that needs a gradient goes to the torch scan (a kernel would drop it)
    g = gamma.clone().requires_grad_()
    gae(r, v, nv, term, truncated=trunc, gamma=g, lmbda=0.8).advantage.sum().backward()
    assert g.grad is not None and g.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="no gradient"):
        gae(r, v, nv, term, truncated=trunc, gamma=g, lmbda=0.8, backend="numba")


def test_per_step_gamma():
    r, v, nv, term, trunc, _ = make_batch(FLAGS)
    gamma = torch.rand_like(r) * 0.5 + 0.5
    rows = [x[..., 0].numpy() for x in (r, v, nv, term, trunc)]
    for backend in BACKENDS:
        got = td_lambda_return(r, nv, term, truncated=trunc, gamma=gamma, lmbda=0.7,
                               backend=backend)  # fmt: skip
        for i in range(r.shape[0]):
            want = td_lambda_ref(*rows_i(rows, i), gamma=gamma[i, :, 0].numpy(), lmbda=0.7,
                                 truncation="bootstrap")  # fmt: skip
            np.testing.assert_allclose(got[i, :, 0].numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("n", [1, 4, 5, 7])
@pytest.mark.parametrize("truncation", POLICIES)
def test_kernels_with_a_per_step_gamma_on_blocked_and_leftover_rows(truncation, n):
    # The GAE, TD(lambda) and V-trace kernels take rows in blocks of four, side by side, and the
    # rest one at a time: every row against the definition, with its own per-step discounts
    # (some 0), done passed beside truncated, and values that do not chain (a value read where
    # a next value belongs shows; "mask" keeps them chained, which its reference assumes)
    r, v, nv, term, trunc, log_rho = (x[:n] for x in make_batch(FLAGS, rows=2, seed=3))
    g = torch.Generator().manual_seed(4)
    if truncation != "mask":
        v = v + torch.randn(v.shape, generator=g, dtype=v.dtype)
    gamma = torch.rand(r.shape, generator=g, dtype=r.dtype) * 0.5 + 0.5
    gamma[:, 2::7] = 0.0
    kw = dict(truncated=trunc, gamma=gamma, lmbda=0.8, truncation=truncation, backend="numba")
    done = term | trunc
    adv, target = gae(r, v, nv, term, done, **kw)
    ret = td_lambda_return(r, nv, term, done, value=v, **kw)
    del kw["lmbda"]
    vt_adv, vs = vtrace(r, v, nv, log_rho, term, done, rho_thresh=1.2, c_thresh=0.9, **kw)
    rows = [x[..., 0].numpy() for x in (r, v, nv, term, trunc)]
    close = dict(rtol=1e-12, atol=1e-12)
    for i in range(n):
        gi = gamma[i, :, 0].numpy()
        want_adv, want_target = gae_ref(*rows_i(rows, i), gamma=gi, lmbda=0.8,
                                        truncation=truncation)  # fmt: skip
        np.testing.assert_allclose(adv[i, :, 0].numpy(), want_adv, **close)
        np.testing.assert_allclose(target[i, :, 0].numpy(), want_target, **close)
        want = td_lambda_ref(*rows_i(rows, i), gamma=gi, lmbda=0.8, truncation=truncation)
        np.testing.assert_allclose(ret[i, :, 0].numpy(), want, **close)
        r_i, v_i, nv_i, term_i, trunc_i = rows_i(rows, i)
        want_adv, want_vs = vtrace_ref(r_i, v_i, nv_i, log_rho[i, :, 0].numpy(), term_i, trunc_i,
                                       gamma=gi, rho_thresh=1.2, c_thresh=0.9,
                                       truncation=truncation)  # fmt: skip
        np.testing.assert_allclose(vt_adv[i, :, 0].numpy(), want_adv, **close)
        np.testing.assert_allclose(vs[i, :, 0].numpy(), want_vs, **close)


def rows_i(rows, i):
    return [x[i] for x in rows]


# --- hypothesis properties ----------------------------------------------------------------------
flag_rows = st.integers(1, 3).flatmap(
    lambda n: st.integers(1, 24).flatmap(
        lambda t: st.lists(st.text(alphabet=".xt", min_size=t, max_size=t), min_size=n, max_size=n)
    )
)
SETTINGS = settings(max_examples=40, deadline=None)


@SETTINGS
@given(flags=flag_rows, seed=st.integers(0, 2**16), gamma=st.floats(0.0, 1.0),
       truncation=st.sampled_from(POLICIES))  # fmt: skip
def test_lambda_limits(flags, seed, gamma, truncation):
    r, v, nv, term, trunc, _ = make_batch(flags, rows=1, seed=seed)
    kw = dict(truncated=trunc, value=v, gamma=gamma, truncation=truncation)
    rows = [x[..., 0].numpy() for x in (r, v, nv, term, trunc)]
    g = np.full(r.shape[1], gamma)
    for backend in BACKENDS:
        one = td_lambda_return(r, nv, term, lmbda=1.0, backend=backend, **kw)
        zero = td_lambda_return(r, nv, term, lmbda=0.0, backend=backend, **kw)
        torch.testing.assert_close(zero, td0_return(r, nv, term, **kw))
        for i in range(r.shape[0]):  # lambda = 1 is Monte Carlo, bootstrapped at cuts
            mc = td1_ref(*rows_i(rows, i), gamma=g, truncation=truncation)
            np.testing.assert_allclose(one[i, :, 0].numpy(), mc, rtol=1e-9, atol=1e-9)


@SETTINGS
@given(flags=flag_rows, seed=st.integers(0, 2**16), lmbda=st.floats(0.0, 1.0),
       truncation=st.sampled_from(POLICIES))  # fmt: skip
def test_gae_target_is_td_lambda_when_values_chain(flags, seed, lmbda, truncation):
    r, v, nv, term, trunc, _ = make_batch(flags, rows=1, seed=seed)
    for backend in BACKENDS:
        _, target = gae(r, v, nv, term, truncated=trunc, gamma=0.97, lmbda=lmbda,
                        truncation=truncation, backend=backend)  # fmt: skip
        ret = td_lambda_return(r, nv, term, truncated=trunc, value=v, gamma=0.97, lmbda=lmbda,
                               truncation=truncation, backend=backend)  # fmt: skip
        torch.testing.assert_close(target, ret)


@SETTINGS
@given(flags=flag_rows, seed=st.integers(0, 2**16), truncation=st.sampled_from(POLICIES),
       backend=st.sampled_from(BACKENDS))  # fmt: skip
def test_split_at_done_and_concat(flags, seed, truncation, backend):
    r, v, nv, term, trunc, log_rho = make_batch(flags[:1], rows=1, seed=seed)  # one row
    done = (term | trunc)[0, :, 0]
    cuts = [int(i) + 1 for i in done.nonzero() if int(i) + 1 < r.shape[1]]
    bounds = [0, *cuts, r.shape[1]]

    def run(sl):
        x = [t[:, sl] for t in (r, v, nv, term, trunc, log_rho)]
        a = gae(x[0], x[1], x[2], x[3], truncated=x[4], gamma=0.9, lmbda=0.8,
                truncation=truncation, backend=backend)  # fmt: skip
        b = vtrace(x[0], x[1], x[2], x[5], x[3], truncated=x[4], gamma=0.9,
                   truncation=truncation, backend=backend)  # fmt: skip
        return torch.cat([*a, *b], -1)

    whole = run(slice(None))
    pieces = torch.cat([run(slice(a, b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)], 1)
    torch.testing.assert_close(whole, pieces)


# --- the infinite-horizon test (Pardo et al. 2018; SB3's test of timeout handling) --------------
@pytest.mark.parametrize("estimator", ["td0", "gae"])
def test_infinite_horizon_value(estimator):
    """Reward 1 forever, cut every N steps, never terminated: V* = 1 / (1 - gamma)."""
    gamma, n_cut, t_len = 0.9, 5, 40
    reward = torch.ones(1, t_len, 1)
    truncated = torch.zeros(1, t_len, 1, dtype=torch.bool)
    truncated[:, n_cut - 1 :: n_cut] = True
    terminated = torch.zeros_like(truncated)
    fitted = {}
    for policy in ("bootstrap", "terminate"):
        v = 0.0  # a single-parameter value function, regressed on its own targets
        for _ in range(400):
            value = torch.full_like(reward, v)
            if estimator == "td0":
                target = td0_return(reward, value, terminated, truncated=truncated, gamma=gamma,
                                    truncation=policy)  # fmt: skip
            else:
                target = gae(reward, value, value, terminated, truncated=truncated, gamma=gamma,
                             lmbda=0.9, truncation=policy).value_target  # fmt: skip
            v += 0.5 * (float(target.mean()) - v)
        fitted[policy] = v
    assert math.isclose(fitted["bootstrap"], 1 / (1 - gamma), rel_tol=1e-3)
    assert fitted["terminate"] < 0.6 / (1 - gamma)


# --- bad input ----------------------------------------------------------------------------------
def test_bad_input_names_the_argument():
    r, v, nv, term, trunc, log_rho = make_batch(FLAGS, rows=1)
    nv = torch.nan_to_num(nv)
    kw = dict(gamma=0.9, lmbda=0.9)
    with pytest.raises(InputError, match=r"value: shape \(4, 15, 1\)"):
        gae(r, v[:, 1:], nv, term, truncated=trunc, **kw)
    with pytest.raises(InputError, match="terminated: episode-end flags must be torch.bool"):
        gae(r, v, nv, term.float(), truncated=trunc, **kw)
    with pytest.raises(InputError, match="truncated: shape"):
        gae(r, v, nv, term, truncated=trunc[:, :-1], **kw)
    with pytest.raises(InputError, match="next_value: dtype"):
        gae(r, v, nv.float(), term, truncated=trunc, **kw)
    bad_done = term | trunc
    bad_done[0, 0, 0] = ~bad_done[0, 0, 0]
    for backend in BACKENDS:
        with pytest.raises(InputError, match=r"done: must be terminated \| truncated"):
            gae(r, v, nv, term, bad_done, truncated=trunc, backend=backend, **kw)
        with pytest.raises(InputError, match="done: must be True wherever terminated"):
            gae(r, v, nv, term, torch.zeros_like(term), backend=backend, **kw)
        for j, name in enumerate(("reward", "value", "next_value")):
            bad = [r.clone(), v.clone(), nv.clone()]
            bad[j][0, 2, 0] = float("nan")
            msg = rf"{name}: contains NaN or inf \(first at index \(0, 2, 0\)"
            with pytest.raises(InputError, match=msg):
                gae(*bad, term, truncated=trunc, backend=backend, **kw)
        with pytest.raises(InputError, match="log_rho: contains NaN"):
            vtrace(r, v, nv, log_rho * float("nan"), term, truncated=trunc, gamma=0.9,
                   backend=backend)  # fmt: skip
    with pytest.raises(ValueError, match="truncation must be one of"):
        gae(r, v, nv, term, truncated=trunc, truncation="ignore", **kw)
    with pytest.raises(InputError, match="truncation='mask' needs value"):
        td_lambda_return(r, nv, term, truncated=trunc, gamma=0.9, lmbda=0.9, truncation="mask")


def test_td0_unchecked_elementwise_path_equals_checked_path() -> None:
    # validate=False with same-shape inputs takes td0_return's elementwise shortcut (the
    # off-policy Bellman target); it must give the checked path's numbers, flags included.
    g = torch.Generator().manual_seed(3)
    reward, next_value = torch.randn(2, 64, generator=g), torch.randn(2, 64, generator=g)
    terminated = torch.rand(2, 64, generator=g) < 0.2
    next_value[terminated] = float("nan")  # a terminal V(s') never leaks in
    for gamma in (0.97, 0.99 ** torch.randint(1, 4, (2, 64), generator=g).double()):
        fast = td0_return(reward, next_value, terminated, gamma=gamma, validate=False)
        checked = td0_return(
            reward, torch.nan_to_num(next_value), terminated, gamma=gamma, time_dim=-1
        )
        torch.testing.assert_close(fast, checked)
        assert fast.dtype == reward.dtype
        torch.testing.assert_close(fast[terminated], reward[terminated])


@pytest.mark.parametrize("k", [1, 2, 3, 7, 8, 9])
def test_doubling_cumprod_is_cumprod_with_zeros_and_underflow(k):
    # The GPU path's running product (log2 K doublings) against torch's cumprod, on values
    # with exact zeros (episode ends) and products that underflow to 0.
    from tdrl.ops.scan import _doubling_cumprod

    g = torch.Generator().manual_seed(k)
    x = torch.rand(5, 4, k, generator=g, dtype=torch.float64)
    x[x < 0.2] = 0.0
    x[0] = 1e-200
    torch.testing.assert_close(_doubling_cumprod(x), x.cumprod(-1), rtol=1e-12, atol=0)
    assert (_doubling_cumprod(x)[0, :, 1:] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_are_computed_in_float32_and_returned_in_their_dtype(dtype):
    # bfloat16 rounds gamma = 0.999 to 1.0 (300 undiscounted steps gave 300, not 260.0), and
    # float16 sums overflow at 65504 (which, on the torch path, turned other episodes to NaN)
    ones, ended = torch.ones(1, 300), torch.zeros(1, 300, dtype=torch.bool)
    exact = td1_return(ones, ones, ended, truncated=ended, gamma=0.999, time_dim=-1)
    half = td1_return(ones.to(dtype), ones.to(dtype), ended, truncated=ended, gamma=0.999,
                      time_dim=-1)  # fmt: skip
    assert half.dtype == dtype
    torch.testing.assert_close(half.float(), exact, rtol=1e-2, atol=0.0)
    reward = torch.zeros(1, 16)
    reward[0, 8:] = 20_000.0
    terminated = torch.zeros(1, 16, dtype=torch.bool)
    terminated[0, 7] = True
    zeros = torch.zeros(1, 16, dtype=dtype)
    for backend in ("auto", "torch"):
        advantage, _ = gae(reward.to(dtype), zeros, zeros, terminated, gamma=0.99, lmbda=0.95,
                           time_dim=-1, backend=backend)  # fmt: skip
        assert advantage.dtype == dtype
        assert torch.equal(advantage[0, :8], zeros[0, :8])  # the first episode earns nothing
    from tensordict import TensorDict

    from tdrl.estimators import TD1Estimator

    td = TensorDict({
        ("next", "reward"): torch.ones(1, 300, 1, dtype=dtype),
        ("next", "terminated"): torch.zeros(1, 300, 1, dtype=torch.bool),
        ("next", "done"): torch.zeros(1, 300, 1, dtype=torch.bool),
        "state_value": torch.ones(1, 300, 1, dtype=dtype),
        ("next", "state_value"): torch.ones(1, 300, 1, dtype=dtype),
    }, batch_size=[1, 300])  # fmt: skip
    TD1Estimator(gamma=0.999)(td)
    assert abs(float(td["value_target"][0, 0]) - float(exact[0, 0])) < 0.01 * float(exact[0, 0])


def test_vtrace_clips_and_nstep_flags_are_checked():
    from tdrl.ops import nstep_return

    x = torch.zeros(1, 3, 1)
    flags = torch.zeros(1, 3, 1, dtype=torch.bool)
    for name in ("rho_thresh", "c_thresh"):
        for bad in (math.nan, 0.0, -1.0):
            with pytest.raises(InputError, match=f"{name}.*must be > 0"):
                vtrace(x, x, x, x, flags, gamma=0.9, **{name: bad})
    terminated = torch.tensor([[False, True, False]])
    with pytest.raises(InputError, match="done.*True wherever terminated is"):
        nstep_return(torch.ones(1, 3), None, terminated, torch.zeros(1, 3, dtype=torch.bool),
                     gamma=1.0, n=3, time_dim=-1)  # fmt: skip


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_under_mask_a_truncated_steps_next_value_is_not_read_nor_checked(backend):
    # "mask" is for envs without a final observation: their next value there may be NaN
    T = 5
    r, v, nv = torch.ones(1, T, 1), torch.full((1, T, 1), 0.5), torch.full((1, T, 1), 0.7)
    term = torch.zeros(1, T, 1, dtype=torch.bool)
    trunc = term.clone()
    trunc[0, 2] = True
    kw = dict(truncated=trunc, gamma=0.9, truncation="mask")
    ops = {
        "gae": lambda n: gae(r, v, n, term, trunc, lmbda=0.95, backend=backend, **kw)[0],
        "td_lambda": lambda n: td_lambda_return(
            r, n, term, trunc, value=v, lmbda=0.95, backend=backend, **kw
        ),  # fmt: skip
        "td1": lambda n: td1_return(r, n, term, trunc, value=v, backend=backend, **kw),
        "td0": lambda n: td0_return(r, n, term, trunc, value=v, **kw),
        "vtrace": lambda n: vtrace(
            r, v, n, torch.zeros_like(r), term, trunc, backend=backend, **kw
        )[0],  # fmt: skip
    }
    unread, read = nv.clone(), nv.clone()
    unread[0, 2] = math.nan
    read[0, 1] = math.nan  # a running step's next value is read: still refused
    for name, op in ops.items():
        assert torch.equal(op(unread), op(nv)), name
        with pytest.raises(InputError, match="next_value: contains NaN"):
            op(read)


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_an_infinite_reward_is_refused_and_a_zero_importance_ratio_is_not(backend):
    # the torch scan multiplies 0 * inf into NaN, which reached the other episodes
    reward, zeros = torch.zeros(1, 8, 1), torch.zeros(1, 8, 1)
    reward[0, 5] = math.inf
    terminated = torch.zeros(1, 8, 1, dtype=torch.bool)
    terminated[0, 3] = True
    with pytest.raises(InputError, match=r"reward: contains NaN or inf .*\(0, 5, 0\)"):
        gae(reward, zeros, zeros, terminated, gamma=0.9, lmbda=0.9, backend=backend)
    log_rho = zeros.clone()
    log_rho[0, 2] = -math.inf  # the target policy never takes the logged action: rho = 0
    advantage, _ = vtrace(zeros + 1, zeros, zeros, log_rho, terminated, gamma=0.9,
                          backend=backend)  # fmt: skip
    assert torch.isfinite(advantage).all() and advantage[0, 2] == 0
