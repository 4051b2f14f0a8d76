"""Pixel envs (tdrl.envs.pixels) on real MinAtar and Atari games through make_vec_env: uint8
channels-first frames, the episode-end contract, life loss, reward clipping, and frame stacks
that never cross an episode start and equal the replay buffer's."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from tdrl.collectors import Collector
from tdrl.data import ReplayBuffer
from tdrl.envs import ChannelsFirst, FrameStack, RewardClipping, make_vec_env
from tdrl.envs.pixels import register_pixel_tasks
from tdrl.keys import NEXT_REWARD_UNCLIPPED
from tests.tiny_envs import Counting

minatar = pytest.importorskip("minatar")
pytest.importorskip("ale_py")

OBS, NEXT_OBS = "observation", ("next", "observation")


def collect(env_id: str, steps: int, num_envs: int = 1, seed: int = 0, **kwargs):
    """One batch of random actions ``[num_envs, steps]`` and the collector's ended episodes."""
    with make_vec_env(env_id, num_envs, seed=seed, **kwargs) as env:
        collector = Collector(env, None, steps * num_envs)
        batch = collector.rollout()
        return batch, collector.episodes


def replay(env_id: str, seed: int, actions, **kwargs) -> list[np.ndarray]:
    """The observations a single env gives for ``actions`` after ``reset(seed=seed)``, stopping
    at the first episode end (its real final observation last)."""
    env = gym.make(env_id, **kwargs)
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for action in actions:
        obs, _, terminated, truncated, _ = env.step(int(action))
        out.append(obs)
        if terminated or truncated:
            break
    env.close()
    return out


def test_minatar_frames_are_minatars_state_channels_first_as_uint8():
    from minatar.gym import BaseEnv

    raw = BaseEnv("breakout", use_minimal_action_set=True)
    ours = gym.make("MinAtar/Breakout-v1")
    assert ours.observation_space.shape == (4, 10, 10)
    assert ours.observation_space.dtype == np.uint8
    assert gym.make("MinAtar/Breakout-v0").action_space.n == 6  # all actions
    assert ours.action_space.n == 3  # Breakout's minimal set
    state, _ = raw.reset(seed=3)
    obs, _ = ours.reset(seed=3)
    for action in [0, 1, 2, 2, 1, 0, 1]:
        np.testing.assert_array_equal(obs, np.moveaxis(state, -1, 0).astype(np.uint8))
        state, *_ = raw.step(action)
        obs, *_ = ours.step(action)
    assert obs.dtype == np.uint8 and set(np.unique(obs)) <= {0, 1}


def test_make_vec_env_gives_uint8_chw_frames_and_specs():
    with make_vec_env("MinAtar/Seaquest-v1", 2, seed=0) as env:
        td = env.reset()
        assert td[OBS].shape == (2, 10, 10, 10) and td[OBS].dtype == torch.uint8
        assert env.observation_spec[OBS].dtype == torch.uint8
    with make_vec_env("tdrl/Pong-v5", 2, seed=0, frame_stack=4) as env:
        td = env.reset()
        assert td[OBS].shape == (2, 4, 84, 84) and td[OBS].dtype == torch.uint8
        assert int(env.observation_spec[OBS].space.high.max()) == 255
        assert td[OBS].float().std() > 0  # a real screen, not a blank one


def test_async_workers_give_the_same_frames_as_sync():
    sync, _ = collect("MinAtar/Breakout-v1", 40, num_envs=2, seed=1)
    asynchronous, _ = collect("MinAtar/Breakout-v1", 40, num_envs=2, seed=1, mode="async")
    assert torch.equal(sync[OBS], asynchronous[OBS])
    assert torch.equal(sync[NEXT_OBS], asynchronous[NEXT_OBS])


def test_minatar_termination_delivers_the_real_final_observation():
    batch, episodes = collect("MinAtar/Breakout-v1", 300, seed=3)
    terminated = batch["next", "terminated"][0, :, 0]
    assert terminated.any() and not batch["next", "truncated"].any()
    t = int(terminated.nonzero()[0])
    # The same seed and actions in a single env: its final frame is the one in ("next", ...).
    frames = replay("MinAtar/Breakout-v1", 3, batch["action"][0])
    assert len(frames) == t + 2
    np.testing.assert_array_equal(batch[NEXT_OBS][0, t].numpy(), frames[-1])
    np.testing.assert_array_equal(batch[OBS][0, t].numpy(), frames[-2])
    # The next root is the new episode's first frame, not the final one.
    assert not torch.equal(batch[OBS][0, t + 1], batch[NEXT_OBS][0, t])
    assert len(episodes) >= 1


def test_atari_time_limit_is_truncation_with_the_real_final_observation():
    batch, _ = collect("tdrl/Pong-v5", 30, max_episode_steps=12)
    truncated = batch["next", "truncated"][0, :, 0]
    assert truncated.nonzero().flatten().tolist() == [11, 23]
    assert not batch["next", "terminated"].any()
    frames = replay("tdrl/Pong-v5", 0, batch["action"][0], max_episode_steps=12)
    assert len(frames) == 13
    np.testing.assert_array_equal(batch[NEXT_OBS][0, 11].numpy(), frames[-1])
    assert not torch.equal(batch[OBS][0, 12], batch[NEXT_OBS][0, 11])  # the reset frame


def _step_until(env: gym.Env, stop, rng: np.random.Generator, limit: int = 2000):
    for _ in range(limit):
        _, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        if stop(terminated, truncated):
            return terminated, truncated
    raise AssertionError(f"no stop within {limit} steps")


def test_life_loss_terminates_the_episode_but_not_the_game_only_when_asked():
    rng = np.random.default_rng(0)
    env = gym.make("tdrl/Breakout-v5", terminal_on_life_loss=True)
    env.reset(seed=0)
    ale = env.unwrapped.ale
    assert ale.lives() == 5
    _step_until(env, lambda te, tr: te or tr, rng)
    assert ale.lives() == 4 and not ale.game_over()  # a life was lost, the game goes on
    env.reset()
    assert ale.lives() == 4  # the next episode continues the game, not a new one
    # Without the option, losing a life is no episode end.
    env = gym.make("tdrl/Breakout-v5")
    env.reset(seed=0)
    ale = env.unwrapped.ale
    lives_before = ale.lives()
    terminated, _ = _step_until(env, lambda te, tr: ale.lives() < lives_before or te, rng)
    assert not terminated and ale.lives() == lives_before - 1


def test_life_loss_through_make_vec_env_gives_terminated_steps_per_life():
    with_option, episodes = collect("tdrl/Breakout-v5", 200, terminal_on_life_loss=True)
    without, _ = collect("tdrl/Breakout-v5", 200)
    lost = int(with_option["next", "terminated"].sum())
    assert lost >= 3  # random play in Breakout loses a life every few dozen steps
    assert len(episodes) == lost
    assert int(without["next", "terminated"].sum()) < lost


def test_reward_clipping_keeps_the_raw_reward_and_the_logged_returns():
    # Space Invaders pays 5 to 30 points an invader: random play scores above 1 quickly.
    batch, episodes = collect("tdrl/SpaceInvaders-v5", 300, max_episode_steps=150)
    raw = batch["next", "reward"].clone()
    assert raw.max() > 1
    clipped = RewardClipping()(batch)
    assert clipped is batch  # in place, like TorchRL's transforms
    torch.testing.assert_close(batch[NEXT_REWARD_UNCLIPPED], raw)
    torch.testing.assert_close(batch["next", "reward"], raw.clamp(-1, 1))
    RewardClipping()(batch)  # again: the unclipped copy is kept, not overwritten by clipped ones
    torch.testing.assert_close(batch[NEXT_REWARD_UNCLIPPED], raw)
    # The collector logged game scores: the unclipped rewards of each episode add up to them.
    ids = batch["collector", "traj_ids"][0]
    assert len(episodes) == 2
    for tid, ret in zip(episodes["traj_ids"], episodes["episode_return"], strict=True):
        assert float(raw[0, ids == tid].sum()) == pytest.approx(float(ret))
        assert float(batch["next", "reward"][0, ids == tid].sum()) < float(ret)
    with pytest.raises(ValueError, match="clamp_min < clamp_max"):
        RewardClipping(1.0, -1.0)


def expected_stacks(batch, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stacks of the last k root frames of the same episode (the first one repeated), built
    step by step from an unstacked batch; and their ("next", ...) twins."""
    n, steps = batch.batch_size
    roots, nexts = [], []
    for i in range(n):
        row_roots, row_nexts, episode = [], [], []
        for t in range(steps):
            if t == 0 or batch["next", "done"][i, t - 1, 0]:
                episode = []
            episode.append(batch[OBS][i, t])
            last = ([episode[0]] * k + episode)[-k:]
            row_roots.append(torch.cat(last))
            row_nexts.append(torch.cat([*last[1:], batch[NEXT_OBS][i, t]]))
        roots.append(torch.stack(row_roots))
        nexts.append(torch.stack(row_nexts))
    return torch.stack(roots), torch.stack(nexts)


def test_frame_stack_restarts_at_every_episode_start():
    k, steps = 4, 26

    def stacked() -> gym.Env:
        return FrameStack(Counting(), k)

    with make_vec_env(Counting, 2, seed=0) as env:
        plain = Collector(env, None, 2 * steps).rollout()
    with make_vec_env(stacked, 2, seed=0) as env:
        assert env.observation_spec[OBS].shape == (2, k, 2, 2)
        batch = Collector(env, None, 2 * steps).rollout()
    root, nxt = expected_stacks(plain, k)
    assert torch.equal(batch[OBS], root)
    assert torch.equal(batch[NEXT_OBS], nxt)
    # Both kinds of episode end occur, and at each episode start the whole stack is the new
    # episode's first frame (frames are unique: one of an earlier episode would differ).
    assert batch["next", "terminated"].any() and batch["next", "truncated"].any()
    for i in range(2):
        starts = [0] + [t + 1 for t in range(steps - 1) if plain["next", "done"][i, t, 0]]
        for t in starts:
            assert (batch[OBS][i, t] == plain[OBS][i, t]).all()  # only the new episode's frame


def buffer_stacks_match_env_stacks(plain, stacked, k: int, slice_len: int) -> int:
    """Samples slices with frame_stack=k from a buffer of ``plain``; each must equal
    ``stacked`` at the same place. Returns how many samples started a new episode's stack."""
    n, steps = plain.batch_size
    buffer = ReplayBuffer(n * steps, generator=0)
    buffer.extend(plain)
    sample = buffer.sample_slices(64, slice_len, frame_stack=k)
    index = sample["index"]  # flat p * S + s
    position, stream = index // n, index % n
    channels = plain[OBS].shape[2]
    for key in (OBS, NEXT_OBS):
        got = sample[key]  # [B, L, k, C, H, W]
        got = got.reshape(*got.shape[:2], k * channels, *got.shape[-2:])
        assert torch.equal(got, stacked[key][stream, position])
    first_in_episode = (position == 0) | plain["next", "done"][
        stream, (position - 1).clamp(min=0), 0
    ]
    return int(first_in_episode.sum())


def test_buffer_frame_stacks_equal_env_stacks_with_hand_built_episode_ends():
    k, steps = 4, 40
    with make_vec_env(Counting, 2, seed=0) as env:
        plain = Collector(env, None, 2 * steps).rollout()
    with make_vec_env(lambda: FrameStack(Counting(), k), 2, seed=0) as env:
        stacked = Collector(env, None, 2 * steps).rollout()
    assert buffer_stacks_match_env_stacks(plain, stacked, k, slice_len=1) > 0


def test_buffer_frame_stacks_equal_env_stacks_on_minatar():
    k, steps = 4, 150
    plain, _ = collect("MinAtar/Breakout-v1", steps, num_envs=2, seed=5)
    stacked, _ = collect("MinAtar/Breakout-v1", steps, num_envs=2, seed=5, frame_stack=k)
    assert stacked[OBS].shape == (2, steps, 4 * k, 10, 10)
    assert torch.equal(stacked[OBS][:, :, -4:], plain[OBS])  # the same games, frame for frame
    assert plain["next", "terminated"].sum() >= 2  # episode starts inside the batch
    buffer_stacks_match_env_stacks(plain, stacked, k, slice_len=4)


def test_wrappers_refuse_layouts_they_cannot_handle():
    with pytest.raises(ValueError, match=r"\[H, W\] or \[H, W, C\]"):
        ChannelsFirst(gym.make("CartPole-v1"))
    floats = Counting()
    floats.observation_space = gym.spaces.Box(0.0, 1.0, (2, 2, 1), np.float32)
    with pytest.raises(ValueError, match="bool or uint8 frames, got float32"):
        ChannelsFirst(floats)
    with pytest.raises(ValueError, match=r"\[C, H, W\]"):
        FrameStack(gym.make("CartPole-v1"), 4)
    with pytest.raises(ValueError, match="num_frames must be >= 1"):
        FrameStack(Counting(), 0)


def test_registration_replaces_minatars_own_bool_frames():
    import minatar.gym

    with warnings.catch_warnings():  # gymnasium warns that minatar overrides tdrl's ids
        warnings.simplefilter("ignore")
        minatar.gym.register_envs()  # minatar's plugin: [10, 10, C] bool frames
    assert gym.make("MinAtar/Breakout-v1").observation_space.dtype == np.bool_
    register_pixel_tasks()
    assert gym.make("MinAtar/Breakout-v1").observation_space.shape == (4, 10, 10)
