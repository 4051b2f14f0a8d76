"""An env-provided "action_mask" observation: stored as bool, checked against the action space,
and an all-false row is an error naming the env."""

from __future__ import annotations

import pytest
import torch

from tdrl.collectors import Collector
from tdrl.envs import make_vec_env
from tests.tiny_envs import Masked


def test_mask_is_a_bool_observation_with_a_spec():
    with make_vec_env(lambda: Masked(), 2, seed=0) as env:
        assert env.observation_spec["action_mask"].dtype == torch.bool
        batch = next(iter(Collector(env, None, frames_per_batch=16, total_frames=16)))
    mask = batch["action_mask"]
    assert mask.dtype == torch.bool and mask.shape == (2, 8, 4)
    assert (mask.sum(-1) == 2).all()


def test_mask_of_the_wrong_shape_is_named():
    with pytest.raises(
        ValueError, match=r"'action_mask' has shape \(3,\) per env, expected \(4,\)"
    ):
        make_vec_env(lambda: Masked(mask_size=3), 1)


def test_all_false_mask_row_is_an_error_naming_the_env():
    factories = [lambda: Masked(), lambda: Masked(empty_at=3)]
    with make_vec_env(factories, 2, seed=0) as env:
        collector = Collector(env, None, frames_per_batch=16, total_frames=16)
        with pytest.raises(ValueError, match="'action_mask' of env 1 allows no action"):
            next(iter(collector))


def test_random_actions_follow_the_current_mask_and_cover_it():
    # Random actions (no policy, init_random_frames, evaluate without a policy) are drawn one
    # step at a time among the actions the mask allows then; Masked pays +1 for a valid one.
    from tdrl.collectors import evaluate

    with make_vec_env(lambda: Masked(), 3, seed=0) as env:
        batch = Collector(env, None, frames_per_batch=3 * 64, total_frames=3 * 64).rollout()
        result = evaluate(env, None, n_episodes=3, seed=1)
    action, mask = batch["action"], batch["action_mask"]
    assert mask.gather(-1, action.unsqueeze(-1)).all()  # always an allowed action
    assert (batch["next", "reward"] == 1.0).all()
    counts = torch.bincount(action.reshape(-1), minlength=4)
    assert (counts > 30).all()  # both allowed actions of each step are drawn (192 draws)
    assert result["return_mean"] == 8.0  # 8 valid steps an episode


def test_random_actions_on_a_masked_env_need_the_current_mask():
    with make_vec_env(lambda: Masked(), 2, seed=0) as env:
        with pytest.raises(ValueError, match="drawn one step at a time from the current mask"):
            env.rand_action(steps=4)
