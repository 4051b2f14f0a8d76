"""tdrl.data: replay buffers on preallocated TensorDict storage."""

from tdrl.data.prioritized import PrioritizedReplayBuffer
from tdrl.data.replay_buffer import ReplayBuffer
from tdrl.data.storage import StreamStorage
from tdrl.data.sum_tree import SumTree

__all__ = ["PrioritizedReplayBuffer", "ReplayBuffer", "StreamStorage", "SumTree"]
