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
