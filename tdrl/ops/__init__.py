"""tdrl.ops."""

from tdrl.ops.nstep import nstep_return, nstep_steps  # noqa: F401
