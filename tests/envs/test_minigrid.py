"""MiniGrid through tdrl.envs (the minigrid extra): the 7x7 view as [3, 7, 7] uint8 within the
index bounds, equal to minigrid's own image; and the on-policy networks and exploration bonuses
built on it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from tdrl.collectors import Collector
from tdrl.envs import make_vec_env

pytest.importorskip("minigrid")
TASK = "MiniGrid-DoorKey-5x5-v0"


def test_the_view_is_minigrids_image_channels_first_within_its_index_bounds():
    from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX, STATE_TO_IDX

    with make_vec_env(f"tdrl/{TASK}", 2, seed=3) as env:
        spec = env.observation_spec["observation"]
        assert spec.shape == (2, 3, 7, 7) and spec.dtype == torch.uint8
        high = spec.space.high[0, :, 0, 0].tolist()
        assert high == [max(OBJECT_TO_IDX.values()), max(COLOR_TO_IDX.values()),
                        max(STATE_TO_IDX.values())]  # fmt: skip
        batch = Collector(env, None, 64).rollout()
    obs = batch["observation"]
    assert bool((obs <= spec.space.high[:1, None]).all())
    own = gym.make(TASK)
    image, _ = own.reset(seed=3)
    np.testing.assert_array_equal(
        batch["observation"][0, 0].numpy(), image["image"].transpose(2, 0, 1)
    )


@pytest.mark.parametrize("bonus", ["rnd", "icm"])
def test_the_exploration_bonuses_take_the_view(bonus):
    from tdrl.estimators import GAE
    from tdrl.keys import NEXT_INTRINSIC_REWARD
    from tdrl.objectives import A2CLoss
    from tdrl.trainers.config import IntrinsicConfig, NetworkConfig

    with make_vec_env(f"tdrl/{TASK}", 2, seed=0) as env:
        nets = NetworkConfig().build(env.observation_spec, env.action_spec)
        parts = IntrinsicConfig(intrinsic=bonus, intrinsic_coeff=1.0).build(
            env.observation_spec, env.action_spec, nets, lmbda=0.95, critic_coeff=0.5
        )
        batch = Collector(env, nets.actor, 32).rollout()
    parts.module.intrinsic_reward(batch)
    reward = batch[NEXT_INTRINSIC_REWARD]
    assert (
        reward.shape == (2, 16, 1) and bool(torch.isfinite(reward).all()) and reward.abs().sum() > 0
    )
    loss = A2CLoss(nets.actor, nets.critic)
    objective, estimator = parts.attach(
        loss, GAE(gamma=0.99, lmbda=0.95, value_network=nets.critic)
    )
    with torch.no_grad():
        estimator(batch)  # both advantages, mixed, and the intrinsic value targets
    out = objective(batch.reshape(-1))
    assert {*loss.out_keys, "loss_intrinsic_value"} <= set(out.keys())
    assert all(torch.isfinite(v) for v in out.values())


def _first_views(env, episodes: int) -> list[torch.Tensor]:
    """The first observation of ``episodes`` episodes of every env (random actions between)."""
    views = [env.reset()["observation"]]
    batch = Collector(env, None, 100 * env.num_envs).rollout()  # episodes of 20 steps
    done = batch["next", "done"][..., 0]
    starts = batch["observation"][:, 1:][done[:, :-1]]  # the steps right after an episode end
    return [*views[0], *starts[:episodes]]


def test_a_layout_seed_gives_every_episode_of_every_env_the_same_layout():
    with make_vec_env(f"tdrl/{TASK}", 2, seed=3, layout_seed=7, max_steps=20) as env:
        fixed = _first_views(env, 6)
    with make_vec_env(f"tdrl/{TASK}", 2, seed=3, max_steps=20) as env:
        fresh = _first_views(env, 6)
    assert len(fixed) >= 4 and len(fresh) >= 4  # two resets and some episode ends each
    assert all(torch.equal(view, fixed[0]) for view in fixed)
    assert not all(torch.equal(view, fresh[0]) for view in fresh)
    own = gym.make(TASK)
    image, _ = own.reset(seed=7)  # the layout is minigrid's for that seed
    np.testing.assert_array_equal(fixed[0].numpy(), image["image"].transpose(2, 0, 1))


def test_a_bad_layout_seed_is_refused_by_name():
    from tdrl.trainers.config import PixelConfig

    with pytest.raises(ValueError, match=r"layout_seed must be an int >= 0 or None, got -3"):
        make_vec_env(f"tdrl/{TASK}", 1, layout_seed=-3)
    with pytest.raises(ValueError, match=r"--layout-seed must be >= 0 \(-1: a new layout"):
        PixelConfig(layout_seed=-2)
    assert PixelConfig(layout_seed=4).env_kwargs(f"tdrl/{TASK}")[0] == {"layout_seed": 4}
    with pytest.raises(ValueError, match=r"--layout-seed 4: only the tdrl/MiniGrid-\* tasks .* "
                                         r"'CartPole-v1' has none"):  # fmt: skip
        PixelConfig(layout_seed=4).env_kwargs("CartPole-v1")
