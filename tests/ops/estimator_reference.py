"""Reference estimators written from the definitions: explicit sums over each episode segment.

No recursion: every output is a sum over the steps from t to the end of t's segment, as the
papers define it. Works on one row at a time (float64 numpy), time along axis 0.

Segment of t: t .. e, where e is the first step >= t that is done, or the batch's last step.
Truncation policies as in ``tdrl.ops.returns``: ``"terminate"`` makes truncated steps terminal;
``"mask"`` gives a truncated step advantage 0 and target V(s_t), and ends the segment of the
steps before it one step earlier, bootstrapping from V(s_{t+1}) there (equal to the op's
definition when values chain: next_value[t] == value[t+1] inside an episode; test data chains).
"""

from __future__ import annotations

import numpy as np


def _flags(terminated: np.ndarray, truncated: np.ndarray, truncation: str):
    terminated = terminated.astype(bool).copy()
    truncated = truncated.astype(bool) & ~terminated
    if truncation == "terminate":
        terminated |= truncated
        truncated = np.zeros_like(truncated)
    masked = truncated if truncation == "mask" else np.zeros_like(truncated)
    done = terminated | truncated
    end = done.copy()
    end[-1] = True
    if truncation == "mask":
        # the step before a masked step (same episode) becomes the end of its segment
        end[:-1] |= masked[1:] & ~done[:-1]
    return terminated, masked, end


def _segment_end(end: np.ndarray, t: int) -> int:
    e = t
    while not end[e]:
        e += 1
    return e


def _discount(gamma: np.ndarray, t: int, k: int) -> float:
    """prod_{j=t}^{k-1} gamma_j."""
    return float(np.prod(gamma[t:k]))


def gae_ref(r, v, nv, terminated, truncated, gamma, lmbda, truncation):
    """A_t = sum_{k=t}^{e} (prod_{j<k} gamma_j lambda) delta_k (Schulman et al., eq. 16)."""
    term, masked, end = _flags(terminated, truncated, truncation)
    t_len = len(r)
    nv_used = np.where(term, 0.0, nv)
    delta = r + gamma * nv_used - v
    adv = np.zeros(t_len)
    for t in range(t_len):
        if masked[t]:
            continue
        e = _segment_end(end, t)
        adv[t] = sum(_discount(gamma, t, k) * lmbda ** (k - t) * delta[k] for k in range(t, e + 1))
    return adv, adv + v


def nstep_ref(r, nv, term, gamma, t, n):
    """G_t^(n) = sum_{k<n} (prod gamma) r_{t+k} + (prod_{j<n} gamma) (1 - term) V'_{t+n-1}."""
    ret = sum(_discount(gamma, t, t + k) * r[t + k] for k in range(n))
    last = t + n - 1
    return ret + _discount(gamma, t, t + n) * (0.0 if term[last] else nv[last])


def td_lambda_ref(r, v, nv, terminated, truncated, gamma, lmbda, truncation):
    """(1 - lambda) sum_{n<N} lambda^{n-1} G^(n) + lambda^{N-1} G^(N) (Sutton & Barto 12.3)."""
    term, masked, end = _flags(terminated, truncated, truncation)
    out = np.zeros(len(r))
    for t in range(len(r)):
        if masked[t]:
            out[t] = v[t]
            continue
        n_max = _segment_end(end, t) - t + 1
        mix = sum(
            (1 - lmbda) * lmbda ** (n - 1) * nstep_ref(r, nv, term, gamma, t, n)
            for n in range(1, n_max)
        )
        out[t] = mix + lmbda ** (n_max - 1) * nstep_ref(r, nv, term, gamma, t, n_max)
    return out


def td1_ref(r, v, nv, terminated, truncated, gamma, truncation):
    """Monte Carlo to the segment end, bootstrapped there unless terminal."""
    term, masked, end = _flags(terminated, truncated, truncation)
    out = np.zeros(len(r))
    for t in range(len(r)):
        n_max = _segment_end(end, t) - t + 1
        out[t] = v[t] if masked[t] else nstep_ref(r, nv, term, gamma, t, n_max)
    return out


def td0_ref(r, v, nv, terminated, truncated, gamma, truncation):
    term, masked, _ = _flags(terminated, truncated, truncation)
    return np.where(masked, v, r + gamma * np.where(term, 0.0, nv))


def vtrace_ref(r, v, nv, log_rho, terminated, truncated, gamma, rho_thresh, c_thresh, truncation):
    """vs_t = V_t + sum_{s=t}^{e} (prod_{i<s} gamma_i c_i) rho_s delta_s (Espeholt et al., eq. 1);
    advantage_t = rho_t (r_t + gamma_t q_t - V_t), q_t = vs_{t+1} inside the segment else V'_t."""
    term, masked, end = _flags(terminated, truncated, truncation)
    rho = np.exp(log_rho)
    rho_bar = np.minimum(rho, rho_thresh)
    c = np.minimum(rho, c_thresh)
    nv_used = np.where(term, 0.0, nv)
    delta = r + gamma * nv_used - v
    t_len = len(r)
    vs = v.astype(np.float64).copy()
    for t in range(t_len):
        if masked[t]:
            continue
        e = _segment_end(end, t)
        vs[t] += sum(
            float(np.prod(gamma[t:s] * c[t:s])) * rho_bar[s] * delta[s] for s in range(t, e + 1)
        )
    adv = np.zeros(t_len)
    for t in range(t_len):
        if masked[t]:
            continue
        q = nv_used[t] if end[t] else vs[t + 1]
        adv[t] = rho_bar[t] * (r[t] + gamma[t] * q - v[t])
    return adv, vs
