"""tdrl.envs: layout, same-step autoreset against hand-stepped gymnasium envs, dict obs, faults."""

from __future__ import annotations

import os
import signal
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from tdrl.envs import make_vec_env
from tests.tiny_envs import Episodic, Tiny


def _hand_episode_end(env_id: str, seed: int, actions: list[np.ndarray], **make_kwargs):
    """Steps one gymnasium env by hand; returns (obs after each step, flags, reset obs at end)."""
    env = gym.make(env_id, **make_kwargs)
    env.reset(seed=seed)
    observations, flags = [], []
    for action in actions:
        obs, _, terminated, truncated, _ = env.step(action)
        observations.append(obs)
        flags.append((terminated, truncated))
        if terminated or truncated:
            reset_obs, _ = env.reset()
            env.close()
            return observations, flags, reset_obs
    env.close()
    return observations, flags, None


def _run_until_done(env, max_steps: int = 400):
    """Steps a VecEnv with random actions until some env ends; returns the per-step records."""
    generator = torch.Generator().manual_seed(1)
    root = env.reset()
    records = []
    for _ in range(max_steps):
        root["action"] = env.rand_action(generator)
        td, next_root = env.step_and_maybe_reset(root)
        records.append((td, next_root))
        if td["next", "done"].any():
            return records
        root = next_root
    raise AssertionError("no episode ended")


@pytest.mark.parametrize(
    ("env_id", "make_kwargs", "flag"),
    [("Hopper-v5", {}, "terminated"), ("HalfCheetah-v5", {"max_episode_steps": 6}, "truncated")],
)
def test_episode_end_holds_real_final_obs_and_reset_obs_follows(env_id, make_kwargs, flag):
    seed = 3
    with make_vec_env(env_id, 2, seed=seed, **make_kwargs) as env:
        records = _run_until_done(env)
    td, next_root = records[-1]
    ended = td["next", "done"].squeeze(-1).nonzero().squeeze(-1).tolist()
    for i in ended:
        actions = [r[0]["action"][i].numpy() for r in records]
        observations, flags, reset_obs = _hand_episode_end(env_id, seed + i, actions, **make_kwargs)
        assert reset_obs is not None and len(observations) == len(records)
        # Every transition's next obs is the real one, also the last.
        for (step_td, _), obs in zip(records, observations, strict=True):
            expected = torch.as_tensor(obs, dtype=torch.float32)
            torch.testing.assert_close(step_td["next", "observation"][i], expected)
        terminated, truncated = flags[-1]
        assert bool(td["next", "terminated"][i]) == terminated
        assert bool(td["next", "truncated"][i]) == truncated
        assert (terminated, truncated) == ((True, False) if flag == "terminated" else (False, True))
        assert bool(td["next", "done"][i])
        # The next root holds the reset observation, with flags False.
        torch.testing.assert_close(
            next_root["observation"][i], torch.as_tensor(reset_obs, dtype=torch.float32)
        )
        assert not next_root["done"][i].any()
    assert td["next", "done"].shape == (2, 1) and td["next", "done"].dtype == torch.bool


def test_reset_layout_specs_and_obs_dtype():
    with make_vec_env("HalfCheetah-v5", 3, seed=0) as env:
        td = env.reset()
        assert td.batch_size == (3,)
        assert td["observation"].shape == (3, 17) and td["observation"].dtype == torch.float32
        for key in ("done", "terminated", "truncated"):
            assert td[key].shape == (3, 1) and td[key].dtype == torch.bool and not td[key].any()
        assert env.observation_spec["observation"].shape == (3, 17)
        assert env.action_spec.shape == (3, 6) and env.action_spec.dtype == torch.float32
        assert (env.action_spec.space.low == -1).all() and (env.action_spec.space.high == 1).all()
        assert env.action_spec.is_in(env.rand_action())
        td["action"] = env.rand_action()
        td = env.step(td)
        assert td["next", "reward"].shape == (3, 1) and td["next", "reward"].dtype == torch.float32
        assert td["next", "observation"].dtype == torch.float32
    with make_vec_env("HalfCheetah-v5", 2, seed=0, obs_dtype=torch.float64) as env:
        assert env.reset()["observation"].dtype == torch.float64


def test_same_seed_same_reset_different_seed_differs():
    with make_vec_env("Hopper-v5", 2, seed=5) as a, make_vec_env("Hopper-v5", 2, seed=5) as b:
        torch.testing.assert_close(a.reset()["observation"], b.reset()["observation"])
        assert not torch.equal(a.reset(seed=6)["observation"], b.reset(seed=5)["observation"])


class SplitQposQvel(gym.ObservationWrapper):
    """HalfCheetah's flat obs -> {"qpos": ..., "extra": {"qvel": ...}} (a nested Dict space)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        inf = np.inf
        self.observation_space = gym.spaces.Dict(
            {
                "qpos": gym.spaces.Box(-inf, inf, (8,), np.float64),
                "extra": gym.spaces.Dict({"qvel": gym.spaces.Box(-inf, inf, (9,), np.float64)}),
            }
        )

    def observation(self, observation: np.ndarray) -> dict:
        return {"qpos": observation[:8], "extra": {"qvel": observation[8:]}}


def _split_cheetah() -> gym.Env:
    return SplitQposQvel(gym.make("HalfCheetah-v5", max_episode_steps=4))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_dict_observations_become_nested_keys(mode):
    with (
        make_vec_env(_split_cheetah, 2, mode=mode, seed=1) as env,
        make_vec_env("HalfCheetah-v5", 2, seed=1, max_episode_steps=4) as flat,
    ):
        assert env.observation_keys == [("extra", "qvel"), "qpos"]  # the space's (sorted) order
        td, ref = env.reset(), flat.reset()
        assert td["qpos"].shape == (2, 8) and td["extra", "qvel"].shape == (2, 9)
        assert td["qpos"].dtype == torch.float32
        assert env.observation_spec["extra", "qvel"].shape == (2, 9)
        for _ in range(4):  # the 4th step truncates: the final obs must come through as a dict
            action = flat.rand_action()
            td["action"], ref["action"] = action, action.clone()
            td, next_td = env.step_and_maybe_reset(td)
            ref, next_ref = flat.step_and_maybe_reset(ref)
            joined = torch.cat([td["next", "qpos"], td["next", "extra", "qvel"]], -1)
            torch.testing.assert_close(joined, ref["next", "observation"])
            td, ref = next_td, next_ref
        assert ref["done"].shape == (2, 1)
        torch.testing.assert_close(
            torch.cat([td["qpos"], td["extra", "qvel"]], -1), ref["observation"]
        )


def test_bad_actions_raise_naming_what_is_wrong():
    with make_vec_env("HalfCheetah-v5", 2, seed=0) as env:
        td = env.reset()
        with pytest.raises(KeyError, match="'action'"):
            env.step(td.clone())
        td["action"] = torch.zeros(2, 5)
        with pytest.raises(ValueError, match=r"'action' has shape \(2, 5\), expected \(2, 6\)"):
            env.step(td)
        td["action"] = torch.zeros(2, 6, dtype=torch.float64)
        with pytest.raises(
            TypeError, match="'action' has dtype torch.float64, expected torch.float32"
        ):
            env.step(td)
        wrong_batch = env.reset()[:1]
        wrong_batch["action"] = torch.zeros(1, 6)
        with pytest.raises(ValueError, match=r"batch size \(1,\), expected \(2,\)"):
            env.step(wrong_batch)


def test_unknown_env_id_is_named():
    with pytest.raises(ValueError, match="'NoSuchEnv-v0'"):
        make_vec_env("NoSuchEnv-v0", 2)


def test_a_vector_env_with_next_step_autoreset_is_refused():
    # gym.make_vec's default (NEXT_STEP) answers the step after an episode end with a dummy
    # transition (final obs -> reset obs, reward 0, not done); it must not be collected.
    from tdrl.envs import VecEnv

    next_step = gym.make_vec("CartPole-v1", 2, vectorization_mode="sync")
    with pytest.raises(ValueError, match="same-step autoreset, got autoreset_mode=.*NEXT_STEP"):
        VecEnv(next_step)
    next_step.close()
    same_step = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1")] * 2, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    env = VecEnv(same_step, seed=0)
    assert env.reset()["observation"].shape == (2, 4)
    env.close()


def test_out_of_bounds_actions_are_clipped_or_rejected():
    big = torch.full((2, 6), 5.0)
    with (
        make_vec_env("HalfCheetah-v5", 2, seed=0) as a,
        make_vec_env("HalfCheetah-v5", 2, seed=0) as b,
    ):
        td_a, td_b = a.reset(), b.reset()
        td_a["action"], td_b["action"] = big.clone(), torch.ones(2, 6)
        a.step(td_a)
        b.step(td_b)
        torch.testing.assert_close(td_a["next", "observation"], td_b["next", "observation"])
        torch.testing.assert_close(td_a["next", "reward"], td_b["next", "reward"])
        assert torch.equal(td_a["action"], big)  # the stored action is the policy's, unclipped
    with make_vec_env("HalfCheetah-v5", 2, seed=0, out_of_bounds="reject") as env:
        td = env.reset()
        td["action"] = big
        with pytest.raises(ValueError, match="out of bounds"):
            env.step(td)
        td["action"] = torch.full((2, 6), float("nan"))
        with pytest.raises(ValueError, match="out of bounds"):
            env.step(td)


def test_close_twice_and_use_after_close():
    env = make_vec_env("Hopper-v5", 2, mode="async", seed=0)
    processes = env.worker_processes
    assert len(processes) == 2 and all(p.is_alive() for p in processes)
    env.close()
    env.close()
    assert not any(p.is_alive() for p in processes)
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


def test_async_worker_error_surfaces_quickly_without_orphans():
    factories = [lambda: Tiny(), lambda: Tiny(fail_at=3)]
    env = make_vec_env(factories, 2, mode="async", seed=0)
    processes = env.worker_processes
    td = env.reset()
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="ValueError: env failed on step 3"):
        for _ in range(5):
            td["action"] = torch.zeros(2, 1)
            td = env.step_and_maybe_reset(td)[1]
    assert time.monotonic() - start < 10
    assert not any(p.is_alive() for p in processes)
    assert env.closed
    env.close()  # still safe


def _fails_fast_without_orphans(env, td, processes, error, match) -> None:
    """``env.step(td)`` raises ``error`` within 10 s and no worker process is left alive."""
    start = time.monotonic()
    with pytest.raises(error, match=match):
        env.step(td)
    assert time.monotonic() - start < 10
    assert not any(p.is_alive() for p in processes)


@pytest.mark.workers
def test_async_step_timeout():
    env = make_vec_env(lambda: Tiny(sleep=30), 2, mode="async", step_timeout=0.5)
    processes = env.worker_processes
    td = env.reset()
    td["action"] = torch.zeros(2, 1)
    _fails_fast_without_orphans(env, td, processes, TimeoutError, "step_timeout=0.5")


@pytest.mark.workers
def test_async_worker_killed_surfaces_as_error():
    env = make_vec_env("Hopper-v5", 2, mode="async", seed=0)
    processes = env.worker_processes
    td = env.reset()
    os.kill(processes[1].pid, signal.SIGKILL)
    processes[1].join(timeout=5)
    td["action"] = torch.zeros(2, 3)
    _fails_fast_without_orphans(
        env, td, processes, RuntimeError, "an env worker failed during step"
    )


def test_a_rejected_action_names_its_env_its_dimension_and_that_dimensions_bounds():
    from tdrl.envs import VecEnv

    space = gym.spaces.Box(np.array([-1.0, -2.0]), np.array([1.0, 2.0]), dtype=np.float32)
    vec = gym.vector.SyncVectorEnv(
        [lambda: Episodic(5, action_space=space)] * 2,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    with VecEnv(vec, seed=0, out_of_bounds="reject") as env:
        td = env.reset()
        td["action"] = torch.tensor([[0.0, 0.0], [1.5, 0.0]])  # 1.5 is inside dimension 1's
        with pytest.raises(
            ValueError,
            match=r"1.5 of env 1 at dimension \(0,\) is out of bounds "
            r"\[-1.0, 1.0\]",
        ):
            env.step(td)


def test_random_actions_on_unbounded_dimensions_are_finite_and_follow_the_bounds_they_have():
    # gymnasium's Box.sample: unbounded -> normal, bounded below -> low + exponential, bounded
    # above -> high - exponential, bounded -> uniform
    from tdrl.envs import VecEnv

    inf = np.inf
    space = gym.spaces.Box(
        np.array([-inf, 0.5, -inf, -1.0]), np.array([inf, inf, -0.5, 1.0]), dtype=np.float32
    )
    vec = gym.vector.SyncVectorEnv(
        [lambda: Episodic(5, action_space=space)] * 2,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    with VecEnv(vec, seed=0) as env:
        a = env.rand_action(torch.Generator().manual_seed(0), steps=2000)
        assert a.shape == (2, 2000, 4) and a.dtype == torch.float32
        assert bool(a.isfinite().all())
        free, low, high, both = a.unbind(-1)
        assert free.min() < -1 and free.max() > 1 and abs(float(free.mean())) < 0.1
        assert low.min() >= 0.5 and low.max() > 2.5
        assert high.max() <= -0.5 and high.min() < -2.5
        assert both.min() >= -1 and both.max() <= 1
        again = env.rand_action(torch.Generator().manual_seed(0), steps=2000)
        assert torch.equal(a, again)  # the generator alone decides


def test_an_ended_episode_without_its_final_observation_is_refused():
    # A vector env that does not state its autoreset mode is checked step by step: next-step
    # autoreset would store gymnasium's dummy step (final obs paired with the reset obs).
    from tdrl.collectors import Collector
    from tdrl.envs import VecEnv

    vec = gym.vector.SyncVectorEnv([lambda: Episodic(2)] * 2)  # NEXT_STEP
    vec.metadata = {k: v for k, v in vec.metadata.items() if k != "autoreset_mode"}
    with VecEnv(vec, seed=0) as env:
        with pytest.raises(RuntimeError, match="env 0 ended an episode without its final obs"):
            Collector(env, None, 8).rollout()
    same = gym.vector.SyncVectorEnv(
        [lambda: Episodic(2)] * 2, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    same.metadata = {k: v for k, v in same.metadata.items() if k != "autoreset_mode"}
    with VecEnv(same, seed=0) as env:
        batch = Collector(env, None, 8).rollout()
        assert batch["next", "terminated"].sum() == 4  # episodes of 2 over 4 steps x 2 envs


def test_a_restored_sync_env_continues_exactly_and_an_async_env_refuses_the_state():
    from tdrl.envs.state import env_state, load_env_state

    actions = np.random.default_rng(0).uniform(-1, 1, (120, 2, 3)).astype(np.float32)

    def trace(env, steps):
        rows = []
        for action in steps:
            out = env.step_arrays(action)
            rows.append((out.observation[0].copy(), out.reward.copy(), out.terminated.copy()))
        return rows

    with make_vec_env("Hopper-v5", 2, seed=3) as a, make_vec_env("Hopper-v5", 2, seed=77) as b:
        a.reset_arrays()
        trace(a, actions[:40])
        state = env_state(a)
        b.reset_arrays()
        assert load_env_state(b, state, reseed=0)
        # Hopper under random actions ends episodes every ~20 steps: the 80 steps after the
        # restore cross several resets, which draw from the restored random streams.
        expected, got = trace(a, actions[40:]), trace(b, actions[40:])
        assert sum(int(t.sum()) for _, _, t in expected) >= 2
        for (obs_a, rew_a, term_a), (obs_b, rew_b, term_b) in zip(expected, got, strict=True):
            np.testing.assert_array_equal(obs_a, obs_b)
            np.testing.assert_array_equal(rew_a, rew_b)
            np.testing.assert_array_equal(term_a, term_b)
    with make_vec_env("Hopper-v5", 2, mode="async", seed=3) as c:
        assert env_state(c) is None
        with pytest.raises(ValueError, match="mode='sync'"):
            load_env_state(c, state, reseed=0)
        assert not load_env_state(c, None, reseed=5)
