"""PrioritizedReplayBuffer and SumTree: frequencies follow p^alpha, weights follow Schaul et al."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.data import PrioritizedReplayBuffer, SumTree


def fill(rb, items: int, streams: int = 2) -> None:
    for t in range(items // streams):
        rb.extend(
            TensorDict({"observation": torch.full((streams, 1), float(t))}, batch_size=[streams])
        )


def test_sum_tree_batched_update_and_search_match_a_cumsum():
    rng = np.random.default_rng(0)
    tree = SumTree(37)  # not a power of two
    values = rng.random(37)
    tree.update(np.arange(37), values)
    tree.update(np.array([3, 3, 5]), np.array([9.0, 2.0, 0.0]))  # duplicates: the last wins
    values[3], values[5] = 2.0, 0.0
    assert tree.total == pytest.approx(values.sum()) and tree.min == 0.0
    mass = rng.random(1000) * values.sum()
    expected = np.searchsorted(np.cumsum(values), mass, side="right")
    assert np.array_equal(tree.find(mass), expected)
    assert 5 not in tree.find(mass)


def test_frequencies_follow_priority_to_the_alpha():
    alpha, items = 0.7, 20
    rb = PrioritizedReplayBuffer(items, alpha=alpha, beta=0.5, eps=1e-12, generator=0)
    fill(rb, items)
    priority = np.arange(1, items + 1, dtype=np.float64)
    rb.update_priority(torch.arange(items), torch.as_tensor(priority))
    counts = np.zeros(items)
    for _ in range(40):
        np.add.at(counts, rb.sample(1000)["index"].numpy(), 1)
    expected = priority**alpha / (priority**alpha).sum() * counts.sum()
    stat = ((counts - expected) ** 2 / expected).sum()
    df = items - 1  # Wilson-Hilferty chi-square quantile at alpha = 0.001 (z = 3.09)
    assert stat < df * (1 - 2 / (9 * df) + 3.09 * math.sqrt(2 / (9 * df))) ** 3


def test_importance_weights_match_the_formula():
    alpha, beta, eps = 0.6, 0.4, 0.01
    rb = PrioritizedReplayBuffer(16, alpha=alpha, beta=beta, eps=eps, generator=1)
    fill(rb, 16)
    priority = np.random.default_rng(2).random(16) * 3
    rb.update_priority(np.arange(16), priority)
    s = rb.sample(64)
    P = (priority + eps) ** alpha / ((priority + eps) ** alpha).sum()
    w = (16 * P) ** -beta
    expected = w[s["index"].numpy()] / w.max()  # Schaul et al. 2015, Alg. 1 line 10
    np.testing.assert_allclose(s["priority_weight"].numpy(), expected, rtol=1e-5)
    assert s["priority_weight"].dtype == torch.float32 and s["priority_weight"].shape == (64,)


def test_new_items_get_the_max_priority_and_stale_slots_are_replaced():
    rb = PrioritizedReplayBuffer(8, alpha=1.0, eps=1e-12, generator=0)
    fill(rb, 4)
    rb.update_priority([0, 1, 2, 3], [5.0, 0.5, 0.5, 0.5])
    fill(rb, 4)  # items 4..7 get p = 5 (the max seen)
    assert np.allclose(rb._tree.leaves(), [5, 0.5, 0.5, 0.5, 5, 5, 5, 5])
    fill(rb, 2)  # overwrites items 0, 1 with max priority
    assert np.allclose(rb._tree.leaves()[:2], [5, 5]) and rb._tree.total == pytest.approx(31.0)


def test_bad_priorities_name_the_value_and_index():
    rb = PrioritizedReplayBuffer(8, generator=0)
    with pytest.raises(RuntimeError, match="empty"):
        rb.sample(2)
    fill(rb, 8)
    before = rb._tree.sums.copy()
    for bad, text in ((-1.0, "-1.0"), (float("nan"), "nan"), (float("inf"), "inf")):
        with pytest.raises(ValueError, match=rf"priority\[1\] = {text} \(index 4\)"):
            rb.update_priority(torch.tensor([3, 4]), torch.tensor([1.0, bad]))
    with pytest.raises(ValueError, match="2 indices but 3 priorities"):
        rb.update_priority([1, 2], [1.0, 1.0, 1.0])
    with pytest.raises(IndexError, match=r"index\[0\] = 8"):
        rb.update_priority([8], [1.0])
    sample = rb.sample(2)  # the whole sample given where its "index" entry belongs
    with pytest.raises(TypeError, match=r"index must be a tensor or array, got TensorDict"):
        rb.update_priority(sample, torch.ones(2))
    with pytest.raises(TypeError, match="priority must be a tensor or array, got dict"):
        rb.update_priority(sample["index"], {"td_error": torch.ones(2)})
    assert np.array_equal(rb._tree.sums, before)  # nothing was written


def test_a_priority_whose_leaf_would_overflow_the_float32_tree_is_refused():
    # (p + eps)^alpha above float32 max / capacity could make the tree's total inf: sampling
    # would then pick the last item with weight 1 whatever the priorities.
    rb = PrioritizedReplayBuffer(8, alpha=1.0, generator=0)
    fill(rb, 8)
    before, top = rb._tree.sums.copy(), rb.max_priority
    limit = float(np.finfo(np.float32).max) / 8
    for bad in (1e300, 2 * limit):
        with pytest.raises(ValueError, match=r"priority\[1\] = .* \(index 5\) is too large"):
            rb.update_priority(torch.tensor([2, 5]), torch.tensor([1.0, bad], dtype=torch.float64))
    squared = PrioritizedReplayBuffer(8, alpha=2.0, generator=0)
    fill(squared, 8)
    with pytest.raises(ValueError, match="too large"):
        squared.update_priority([0], [1e20])  # finite, but its square is not in float32
    assert np.array_equal(rb._tree.sums, before) and rb.max_priority == top  # nothing written
    rb.update_priority([5], [limit / 2])  # large but safe: the total stays finite
    assert math.isfinite(rb._tree.total)
    assert (rb.sample(64)["index"] == 5).float().mean() > 0.9


def test_an_empty_state_empties_a_filled_buffer_and_a_bad_state_changes_nothing():
    empty_state = PrioritizedReplayBuffer(8, generator=1).state_dict()
    rb = PrioritizedReplayBuffer(8, generator=0)
    fill(rb, 8)
    rb.update_priority([0], [5.0])
    rb.load_state_dict(empty_state)
    assert len(rb) == 0 and rb.max_priority == 1.0
    with pytest.raises(RuntimeError, match="empty"):
        rb.sample(2)
    fill(rb, 4)  # the buffer works again, with fresh priorities
    assert np.allclose(rb._tree.leaves()[:4], 1.0) and rb._tree.total == pytest.approx(4.0)

    full = PrioritizedReplayBuffer(8, generator=2)
    fill(full, 8)
    state = full.state_dict()
    keep = rb.state_dict()
    sums, rng = rb._tree.sums.copy(), rb.sampler_state()
    del state["priority"]
    with pytest.raises(ValueError, match="'priority': expected 8 leaf priorities, got None"):
        rb.load_state_dict(state)
    state = full.state_dict()
    state["rng"] = {**state["rng"], "index": "00ff"}
    with pytest.raises(ValueError, match="'index' generator state"):
        rb.load_state_dict(state)
    assert np.array_equal(rb._tree.sums, sums) and rb.sampler_state() == rng
    assert (rb.storage == keep["storage"]).all() and len(rb) == 4
