"""make_vec_env(..., backend="envpool"): envpool's next-step autoreset turned into tdrl's
same-step contract (real final observation in ("next", ...), a fresh root observation right
after an episode end, no wasted step), checked against envpool stepped by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdrl.collectors import Collector
from tdrl.envs import make_vec_env

envpool = pytest.importorskip("envpool")


def test_collector_batches_keep_the_episode_end_contract():
    with make_vec_env("Hopper-v5", 4, seed=0, backend="envpool") as env:
        assert env.action_spec.dtype == torch.float32 and env.num_envs == 4
        batch = next(iter(Collector(env, None, frames_per_batch=1200, total_frames=1200)))
    terminated = batch["next", "terminated"].squeeze(-1)
    assert terminated.sum() >= 4
    final = batch["next", "observation"][terminated]
    # Hopper's health check fails on the real final observation (|angle| >= 0.2 or z <= 0.7)
    assert ((final[:, 1].abs() >= 0.2) | (final[:, 0] <= 0.7)).all()
    traj = batch["collector", "traj_ids"]
    for env_i, t in torch.nonzero(terminated[:, :-1]).tolist():
        assert traj[env_i, t + 1] != traj[env_i, t]  # a new episode starts at once
        start = batch["observation"][env_i, t + 1]
        assert abs(float(start[0]) - 1.25) < 0.01 and start[1:].abs().max() < 0.01  # reset state
    # Inside an episode, each root observation is the previous next observation.
    same = ~terminated[:, :-1]
    torch.testing.assert_close(
        batch["observation"][:, 1:][same], batch["next", "observation"][:, :-1][same]
    )


def test_transitions_equal_envpool_stepped_by_hand():
    actions = np.random.default_rng(0).uniform(-1, 1, (300, 2, 3)).astype(np.float32)
    with make_vec_env("Hopper-v5", 2, seed=5, backend="envpool") as env:
        td = env.reset()
        ours = []
        for a in actions:
            td["action"] = torch.from_numpy(a)
            td, root = env.step_and_maybe_reset(td)
            ours.append(td.clone())
            td = root
    raw = envpool.make("Hopper-v5", env_type="gymnasium", num_envs=2, batch_size=2, seed=5)
    raw.reset()
    pending = np.zeros(2, bool)
    t = 0
    rows: list[tuple[np.ndarray, float, bool]] = [[] for _ in range(2)]  # per env, real steps
    while min(len(r) for r in rows) < 300:
        # envpool's own next-step mode: an ended env's next step is its reset (action ignored)
        a = np.stack([actions[min(len(rows[i]), 299), i] for i in range(2)])
        obs, reward, term, trunc, _ = raw.step(a.astype(np.float64))
        for i in range(2):
            if pending[i]:
                pending[i] = False
                continue
            if len(rows[i]) < 300:
                rows[i].append((obs[i].astype(np.float32), float(reward[i]), bool(term[i])))
            pending[i] = term[i] or trunc[i]
        t += 1
    for step, td in enumerate(ours):
        for i in range(2):
            obs, reward, term = rows[i][step]
            np.testing.assert_allclose(td["next", "observation"][i].numpy(), obs, rtol=1e-6)
            assert abs(float(td["next", "reward"][i]) - reward) < 1e-5
            assert bool(td["next", "terminated"][i]) == term


def test_bad_envpool_requests_are_named():
    with pytest.raises(ValueError, match="envpool has no task 'Hopper-v9'.*Hopper-v5"):
        make_vec_env("Hopper-v9", 2, backend="envpool")
    with pytest.raises(ValueError, match="mode='sync'"):
        make_vec_env("Hopper-v5", 2, mode="async", backend="envpool")
    with pytest.raises(ValueError, match="backend must be"):
        make_vec_env("Hopper-v5", 2, backend="brax")  # type: ignore[arg-type]


def test_seed_none_draws_fresh_episodes_and_a_seed_repeats_them():
    def first_observation(seed):
        with make_vec_env("Hopper-v5", 2, seed=seed, backend="envpool") as env:
            return env.reset()["observation"]

    # gymnasium's seed=None draws from fresh entropy: two pools start from different states
    assert not torch.equal(first_observation(None), first_observation(None))
    torch.testing.assert_close(first_observation(3), first_observation(3), rtol=0, atol=0)


def test_tdrl_atari_ids_run_on_envpool_as_on_gymnasium():
    """tdrl/<Game>-v5 on envpool: the gymnasium env's spec (4 stacked 84x84 uint8 frames,
    oldest first, shifting by one a step), a lost life ends a training episode, and an option
    envpool has no counterpart for is named."""
    pytest.importorskip("ale_py")
    options = dict(frame_stack=4, terminal_on_life_loss=True)
    with (
        make_vec_env("tdrl/Breakout-v5", 2, seed=0, backend="envpool", **options) as pool,
        make_vec_env("tdrl/Breakout-v5", 1, seed=0, **options) as reference,
    ):
        for spec in (pool.observation_spec, reference.observation_spec):
            assert spec["observation"].shape[1:] == (4, 84, 84)
            assert spec["observation"].dtype == torch.uint8
        assert pool.action_spec.space.n == reference.action_spec.space.n == 4
        batch = next(iter(Collector(pool, None, frames_per_batch=600, total_frames=600)))
    done = batch["next", "done"].squeeze(-1)
    assert batch["next", "terminated"].any()  # lives lost by a random policy
    going = ~done
    newer = batch["next", "observation"][going]
    older = batch["observation"][going]
    assert torch.equal(newer[:, :3], older[:, 1:])  # the stack moves by one frame a step
    with pytest.raises(ValueError, match=r"options \['clip_rewards'\] have no envpool"):
        make_vec_env("tdrl/Breakout-v5", 1, backend="envpool", clip_rewards=True)
