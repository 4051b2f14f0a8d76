"""tdrl.data: replay buffers on preallocated TensorDict storage; Minari datasets."""

from tdrl.data.batches import (
    POLICY_OUTPUTS,
    make_replay_buffer,
    minibatches,
    transitions,
    truncate_streams,
    updates_due,
)
from tdrl.data.datasets import load_minari, save_minari, split_episodes
from tdrl.data.prioritized import PrioritizedReplayBuffer
from tdrl.data.replay_buffer import ReplayBuffer
from tdrl.data.storage import StreamStorage
from tdrl.data.sum_tree import SumTree

__all__ = [
    "POLICY_OUTPUTS",
    "make_replay_buffer",
    "minibatches",
    "transitions",
    "truncate_streams",
    "updates_due",
    "PrioritizedReplayBuffer",
    "ReplayBuffer",
    "StreamStorage",
    "SumTree",
    "load_minari",
    "save_minari",
    "split_episodes",
]
