"""benchmarks/parity_dqn.py: tdrl's DQN update is SB3's on equal weights and batches (needs the
bench extra's stable-baselines3; skipped without it)."""

from __future__ import annotations

import pytest

pytest.importorskip("stable_baselines3")

from tests.bench_scripts import load

parity = load("parity_dqn")


@pytest.mark.parametrize("max_grad_norm", [10.0, 0.05])  # the table's clip; one that binds
def test_a_dqn_update_and_target_copy_equal_sb3s_on_the_same_weights_and_batches(max_grad_norm):
    steps, scale = parity.compare(
        "CartPole-v1", updates=12, batch_size=64, target_every=4, max_grad_norm=max_grad_norm
    )
    assert len(steps) == 12 and scale > 0.01
    for step in steps:  # the same maths through other kernels (fused Adam): rounding only
        assert step.loss_tdrl == pytest.approx(step.loss_sb3, rel=1e-5)
        assert step.max_weight_difference < 1e-6
    # the losses move (the weights are stepped), and after each target copy the next loss
    # reads the new target in both libraries alike
    assert len({round(step.loss_tdrl, 6) for step in steps}) == len(steps)
