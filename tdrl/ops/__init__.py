"""tdrl.ops: pure torch math over ``[*B, T, *F]`` tensors; no keys, no tensordict.

Value estimators (``returns``, ``vtrace``) are exact at every episode end (terminated,
truncated, unfinished at the batch end) under a truncation policy; see ``tdrl.ops.returns``.
"""

from tdrl.ops._common import AdvantageEstimate, InputError
from tdrl.ops.returns import gae, td0_return, td1_return, td_lambda_return
from tdrl.ops.scan import reverse_linear_scan
from tdrl.ops.vtrace import vtrace

# nstep_return (tdrl/ops/nstep.py) is written in the replay-buffer worktree; the lead merges it.

__all__ = [
    "AdvantageEstimate",
    "InputError",
    "gae",
    "reverse_linear_scan",
    "td0_return",
    "td1_return",
    "td_lambda_return",
    "vtrace",
]
