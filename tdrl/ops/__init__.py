"""tdrl.ops: pure torch math over ``[*B, T, *F]`` tensors; no keys, no tensordict.

Value estimators (``returns``, ``vtrace``) are exact at every episode end (terminated,
truncated, unfinished at the batch end) under a truncation policy; see ``tdrl.ops.returns``.
``nstep_return`` is the n-step return the replay buffer and the off-policy losses share.
"""

from tdrl.ops._common import AdvantageEstimate, InputError
from tdrl.ops.nstep import nstep_return, nstep_steps
from tdrl.ops.returns import gae, td0_return, td1_return, td_lambda_return
from tdrl.ops.scan import reverse_linear_scan
from tdrl.ops.standardize import DISTANCES, distance, standardize, value_rescale, value_unscale
from tdrl.ops.vtrace import vtrace

__all__ = [
    "DISTANCES",
    "AdvantageEstimate",
    "InputError",
    "distance",
    "gae",
    "nstep_return",
    "nstep_steps",
    "reverse_linear_scan",
    "standardize",
    "td0_return",
    "td1_return",
    "td_lambda_return",
    "value_rescale",
    "value_unscale",
    "vtrace",
]
