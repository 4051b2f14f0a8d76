"""The memcpy fast path of ``extend`` (tdrl._fast.storage): whatever it skips must still be
caught, and with the fast paths off (the ``fast_mode`` fixture) the checked path does the same.

Each test first lets a good batch through (so the fast path and its cached signature are warm),
then feeds a batch that differs in one way the fast path must notice: it is either stored
exactly like the checked path would store it, or rejected with an error naming the key.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from tdrl.data import PrioritizedReplayBuffer, ReplayBuffer


def batch(value: float, streams: int = 4) -> TensorDict:
    """A [streams] batch with float, bool and int leaves, one nested level."""
    base = torch.arange(streams, dtype=torch.float32) + value
    return TensorDict(
        {
            "observation": base.unsqueeze(-1).repeat(1, 3),
            "action": base.unsqueeze(-1) * 2,
            "next": {
                "observation": base.unsqueeze(-1).repeat(1, 3) + 1,
                "reward": base.unsqueeze(-1),
                "done": (base.long() % 2 == 0).unsqueeze(-1),
            },
            "collector": {"traj_ids": base.long()},
        },
        batch_size=[streams],
    )


def warm(rb: ReplayBuffer, times: int = 3) -> None:
    for i in range(times):
        rb.extend(batch(10.0 * i))


def assert_last_step_is(rb: ReplayBuffer, expected: TensorDict) -> None:
    step = rb.storage[(rb.stream_storage.cursor - 1) % rb.stream_storage.length]
    for key in expected.keys(True, True):
        assert torch.equal(step[key], expected[key]), key


def checked_calls_against_the_reference(monkeypatch, make, capacity: int, streams: int) -> int:
    """Extend one buffer with ``make(0.0), make(1.0), ...`` (25 batches after a first one) and
    write the same batches into another through the checked path (per-leaf copies, the
    reference); assert the two hold the same; return how often the first took the checked path."""
    fast, slow = (ReplayBuffer(capacity, num_streams=streams) for _ in range(2))
    fast.extend(make(-1.0))
    slow.extend(make(-1.0))
    storage = fast.stream_storage
    checked = storage.write_checked
    calls = []
    monkeypatch.setattr(storage, "write_checked", lambda td: calls.append(1) or checked(td))
    for i in range(25):  # wraps around the stored steps per stream
        fast.extend(make(float(i)))
        slow.stream_storage.write_checked(make(float(i)))
    assert fast.stream_storage.cursor == slow.stream_storage.cursor and len(fast) == len(slow)
    assert (fast.storage == slow.storage).all()
    return len(calls)


def test_fast_path_stores_exactly_what_the_checked_path_stores(monkeypatch, fast_mode):
    calls = checked_calls_against_the_reference(monkeypatch, batch, 40, 4)
    assert calls == (0 if fast_mode else 25)  # fast: every batch took the fast path


@pytest.mark.parametrize(
    ("key", "value", "error", "match"),
    [
        (("next", "reward"), torch.zeros(4, 1, dtype=torch.float64), TypeError, "float64"),
        (("next", "done"), torch.zeros(4, 1, dtype=torch.uint8), TypeError, "uint8"),
        ("observation", torch.zeros(4, 3, 1), ValueError, r"\(3, 1\).*\(3,\)"),
        ("observation", torch.zeros(4, 1, 3), ValueError, r"\(1, 3\).*\(3,\)"),
        (("collector", "traj_ids"), torch.zeros(4, 1, dtype=torch.int64), ValueError, r"\(1,\)"),
    ],
)
def test_same_keys_with_a_different_dtype_or_trailing_shape_are_rejected(
    key, value, error, match, fast_mode
):
    rb = ReplayBuffer(40, num_streams=4)
    warm(rb)
    bad = batch(99.0)
    bad.set(key, value)
    name = repr(key if isinstance(key, str) else key)
    with pytest.raises(error, match=rf"{re.escape(name)}.*{match}"):
        rb.extend(bad)
    assert len(rb) == 12 and rb.stream_storage.cursor == 3  # nothing written


def test_non_contiguous_leaves_are_stored_correctly(fast_mode):
    rb = ReplayBuffer(40, num_streams=4)
    warm(rb)
    b = batch(50.0)
    wide = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    b["observation"] = wide[:, ::2]  # [4, 3], strides (6, 2)
    b["next", "observation"] = torch.arange(12, dtype=torch.float32).reshape(3, 4).T  # [4, 3]
    assert not b["observation"].is_contiguous() and not b["next", "observation"].is_contiguous()
    rb.extend(b)
    assert_last_step_is(rb, b)


def test_a_leaf_swapped_between_extends_is_read_afresh(fast_mode):
    rb = ReplayBuffer(40, num_streams=4)
    b = batch(1.0)
    rb.extend(b)
    b["next", "reward"] = torch.full((4, 1), 7.0)  # same TensorDict object, new leaf
    b["observation"].fill_(-3.0)  # and an in-place change of an old one
    rb.extend(b)
    assert_last_step_is(rb, b)
    b["action"] = torch.zeros(4, 2)  # now a wrong trailing shape on the same object
    with pytest.raises(ValueError, match=r"'action'.*\(2,\).*\(1,\)"):
        rb.extend(b)


def test_key_order_extra_and_missing_nested_keys(fast_mode):
    rb = ReplayBuffer(40, num_streams=4)
    warm(rb)
    good = batch(5.0)
    reordered = TensorDict(
        {k: good[k] for k in reversed(list(good.keys(True, True)))}, batch_size=[4]
    )
    rb.extend(reordered)  # insertion order differs: stored by key all the same
    assert_last_step_is(rb, good)
    extra = batch(6.0).set(("next", "extra"), torch.zeros(4))
    with pytest.raises(KeyError, match=r"extra \[\('next', 'extra'\)\]"):
        rb.extend(extra)
    swapped = batch(6.0)  # same count of entries in "next", one key renamed
    swapped["next"] = swapped["next"].rename_key_("reward", "rewards")
    with pytest.raises(KeyError, match=r"missing \[\('next', 'reward'\)\].*'rewards'"):
        rb.extend(swapped)
    flat = batch(6.0)
    flat["next"] = torch.zeros(4, 1)  # a tensor where a sub-TensorDict was
    with pytest.raises(KeyError, match="missing"):
        rb.extend(flat)
    assert len(rb) == 16


def test_other_tensordict_types_and_a_wrapping_time_batch(fast_mode):
    rb = ReplayBuffer(40, num_streams=4)
    warm(rb)
    lazy = LazyStackedTensorDict.lazy_stack([batch(8.0)[i] for i in range(4)])
    rb.extend(lazy)  # not a plain TensorDict: the checked path stores it
    assert_last_step_is(rb, batch(8.0))
    one = ReplayBuffer(5)  # one stream: [T] batches are T steps; the third one wraps
    for start in (0, 3, 6):
        one.extend(TensorDict({"x": torch.arange(start, start + 3.0)}, batch_size=[3]))
    assert sorted(one.storage["x"][:, 0].tolist()) == [4.0, 5.0, 6.0, 7.0, 8.0]
    assert one.stream_storage.cursor == 4


def test_cpu_device_batches_take_the_fast_path_and_meta_ones_are_refused(monkeypatch, fast_mode):
    # device="cpu" (what VecEnv.step returns) lets the fast path read the device once per batch
    # instead of per leaf; a batch on another device must still reach the checked path.
    rb = ReplayBuffer(40, num_streams=4)
    rb.extend(batch(0.0).to("cpu"))
    storage = rb.stream_storage
    checked = storage.write_checked
    calls = []
    monkeypatch.setattr(storage, "write_checked", lambda td: calls.append(1) or checked(td))
    b = batch(1.0).to("cpu")
    assert b.device == torch.device("cpu") and b["next"].device == torch.device("cpu")
    rb.extend(b)
    assert_last_step_is(rb, b)
    assert len(calls) == (0 if fast_mode else 1)
    with pytest.raises(ValueError, match="'action': a meta tensor has no data"):
        rb.extend(batch(2.0).to("meta"))
    assert len(calls) == (1 if fast_mode else 2) and len(rb) == 8  # checked, nothing written


def test_prioritized_buffer_takes_the_fast_path_and_sets_new_priorities():
    rb = PrioritizedReplayBuffer(40, num_streams=4, alpha=1.0, eps=1e-12, generator=0)
    warm(rb)
    rb.update_priority(torch.arange(12), torch.full((12,), 2.0))
    rb.extend(batch(3.0))
    assert np.allclose(rb._tree.leaves()[:16], 2.0)  # the new 4 items got the max, 2


def test_requires_grad_and_zero_stride_leaves(fast_mode):
    rb = ReplayBuffer(40, num_streams=4)
    warm(rb)
    b = batch(4.0)
    b["observation"] = b["observation"].clone().requires_grad_()
    b["next", "reward"] = torch.tensor([[3.0]]).expand(4, 1)  # stride 0: not contiguous
    rb.extend(b)
    assert_last_step_is(rb, b.detach())


def test_a_one_element_negative_view_is_stored_with_its_sign(fast_mode):
    # The .imag of a conjugated complex tensor is a real tensor whose bytes hold the value's
    # negation; with one element it is contiguous, so a raw byte copy would store the wrong sign.
    rb = ReplayBuffer(40, num_streams=1)
    for i in range(3):
        rb.extend(batch(10.0 * i, streams=1))
    b = batch(5.0, streams=1)
    b["next", "reward"] = torch.complex(torch.zeros(1, 1), torch.full((1, 1), 3.0)).conj().imag
    assert b["next", "reward"].is_neg() and b["next", "reward"].is_contiguous()
    rb.extend(b)
    assert_last_step_is(rb, b)  # -3.0


def test_compiled_gather_matches_index_select_and_rejects_bad_indices(fast_mode):
    rb = ReplayBuffer(40, num_streams=4)
    warm(rb, 10)
    s = rb.stream_storage
    index = torch.tensor([39, 0, 5, 5, 17])
    fast = s.gather(index)
    reference = [flat.index_select(0, index) for flat in s.flat]
    for a, b in zip(fast, reference, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
    strided = torch.arange(10)[::2]  # a non-contiguous index takes the per-leaf path
    assert all(torch.equal(a, f[strided]) for a, f in zip(s.gather(strided), s.flat, strict=True))
    for bad in (torch.tensor([3, 40]), torch.tensor([-41])):
        with pytest.raises((IndexError, RuntimeError)):
            s.gather(bad)


def test_float32_and_float64_priorities_give_the_same_tree():
    trees = []
    for dtype in (torch.float32, torch.float64):
        rb = PrioritizedReplayBuffer(40, num_streams=4, alpha=0.7, eps=0.01, generator=0)
        warm(rb, 10)
        priority = torch.linspace(0.0, 3.0, 40, dtype=dtype)
        rb.update_priority(torch.arange(40), priority)
        trees.append(rb._tree.leaves())
    expected = (np.linspace(0.0, 3.0, 40).astype(np.float32).astype(np.float64) + 0.01) ** 0.7
    for leaves in trees:
        np.testing.assert_allclose(leaves, expected, rtol=1e-6)


@pytest.mark.parametrize("streams, steps", [(4, 1), (1, 3), (1, 1)])
def test_one_step_rollouts_and_single_stream_rollouts_take_the_fast_path(
    monkeypatch, fast_mode, streams, steps
):
    # [S, 1] (a collector of one step a batch) and [1, T] (one env) lie in memory as the
    # storage's rows; a [S, T] rollout with S, T > 1 is stream-major and must be transposed.
    def rollout(value: float) -> TensorDict:
        x = torch.arange(streams * steps, dtype=torch.float32).view(streams, steps) + 10 * value
        return TensorDict(
            {"x": x.unsqueeze(-1), "next": {"done": (x.long() % 3 == 0).unsqueeze(-1)}},
            batch_size=[streams, steps],
        )

    calls = checked_calls_against_the_reference(monkeypatch, rollout, 12 * streams, streams)
    assert calls == (0 if fast_mode else 25)
    # a stream-major [2, 3] rollout still goes through the checked (transposing) path
    two = ReplayBuffer(12, num_streams=2)
    x = torch.arange(6.0).view(2, 3, 1)
    for _ in range(2):
        two.extend(TensorDict({"x": x}, batch_size=[2, 3]))
    assert two.storage["x"][:3, :, 0].tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]


def test_a_wrapper_subclass_and_a_graph_are_stored_as_plain_data(fast_mode):
    # A wrapper subclass has no data of its own (data_ptr 0: the raw copy read from NULL);
    # an input that requires grad is stored as data, without a graph, in both modes.
    from torch.testing._internal.two_tensor import TwoTensor

    rb = ReplayBuffer(16, generator=0)
    rb.extend(TensorDict({"x": torch.zeros(4, 2)}, [4]))
    rb.extend(TensorDict({"x": torch.zeros(4, 2)}, [4]))  # the fast path is set up now
    wrapped = TwoTensor(torch.ones(4, 2), torch.ones(4, 2) * 2)
    rb.extend(TensorDict({"x": wrapped}, [4]))
    assert torch.equal(rb.storage["x"][8:12, 0], torch.zeros(4, 2).copy_(wrapped))
    lin = torch.nn.Linear(3, 2)
    graph = TensorDict({"x": lin(torch.randn(4, 3))}, [4])
    for _ in range(3):
        graph_rb = ReplayBuffer(16, generator=0)
        graph_rb.extend(graph)
        graph_rb.extend(graph)
    leaf = graph_rb.stream_storage.leaves[0]
    assert leaf.grad_fn is None and not leaf.requires_grad
    assert not graph_rb.sample(4)["x"].requires_grad
    assert torch.equal(graph_rb.storage["x"][:4, 0], graph["x"].detach())


def test_samples_are_gathered_on_the_cpu_whatever_the_default_device(fast_mode):
    rb = PrioritizedReplayBuffer(16, generator=0)
    for _ in range(3):
        rb.extend(TensorDict({"id": torch.arange(4)}, [4], device="cpu"))
    previous = torch.get_default_device()
    torch.set_default_device("meta")  # the raw copies wrote host bytes to a meta address
    try:
        sample = rb.sample(5)
    finally:
        torch.set_default_device(previous)
    assert sample["id"].device.type == "cpu" and bool((sample["id"] < 4).all())


def test_bfloat16_priorities_set_what_float32_ones_set():
    rbs = [PrioritizedReplayBuffer(16, generator=0) for _ in range(2)]
    for rb, dtype in zip(rbs, (torch.float32, torch.bfloat16), strict=True):
        rb.extend(TensorDict({"id": torch.arange(4)}, [4]))
        rb.update_priority(torch.arange(4), torch.tensor([0.5, 1.0, 2.0, 4.0], dtype=dtype))
    assert torch.equal(rbs[0].state_dict()["priority"], rbs[1].state_dict()["priority"])


@pytest.mark.parametrize("buffer_type", [ReplayBuffer, PrioritizedReplayBuffer])
def test_a_copied_or_pickled_buffer_is_independent_of_the_original(fast_mode, buffer_type):
    import copy
    import gc
    import pickle

    rb = buffer_type(16, num_streams=4, generator=0)
    warm(rb)  # the fast writer and gatherer are built and bound to rb's memory
    copied = copy.deepcopy(rb)
    unpickled = pickle.loads(pickle.dumps(rb))
    before = rb.storage["observation"].clone()
    for other in (copied, unpickled):
        assert torch.equal(other.storage["observation"], before)
        other.extend(batch(99.0))  # into the copy only
        assert torch.equal(rb.storage["observation"], before), "the copy wrote into rb"
        assert len(other) == len(rb) + 4 and other.stream_storage.cursor != rb.stream_storage.cursor
    rb.extend(batch(50.0))  # into the original only
    assert not (copied.storage["observation"] == 50.0).any()
    del rb
    gc.collect()  # the copies own their memory: sampling after the original is gone
    for other in (copied, unpickled):
        obs = other.sample(256)["observation"][:, 0]
        assert set(obs.tolist()) == {base + v for base in (0.0, 10.0, 20.0, 99.0) for v in range(4)}
