"""tdrl.data: replay buffers on preallocated TensorDict storage; Minari datasets."""

from tdrl.data import batches
from tdrl.data.augment import RandomShift
from tdrl.data.batches import *  # noqa: F403  (what a training loop does with batches: its __all__)
from tdrl.data.datasets import load_minari, save_minari, split_episodes
from tdrl.data.her import HER_STRATEGIES, HERReplayBuffer
from tdrl.data.prioritized import PrioritizedReplayBuffer
from tdrl.data.replay_buffer import ReplayBuffer
from tdrl.data.storage import StreamStorage
from tdrl.data.sum_tree import SumTree

__all__ = [
    "HER_STRATEGIES",
    "HERReplayBuffer",
    "PrioritizedReplayBuffer",
    "RandomShift",
    "ReplayBuffer",
    "StreamStorage",
    "SumTree",
    "load_minari",
    "save_minari",
    "split_episodes",
]
__all__ += batches.__all__
