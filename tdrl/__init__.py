"""tdrl: deep reinforcement learning on TensorDicts."""

from tdrl._fast import set_fast

__version__ = "0.1.0"
__all__ = ["set_fast"]
