"""tdrl: deep reinforcement learning on TensorDicts."""

__version__ = "0.1.0"
