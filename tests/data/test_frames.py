"""Frame-efficient replay (ReplayBuffer(frame_keys=..., frame_stack=k)): one stored frame a step,
stacks rebuilt at sampling equal to the env's own stacks (root and next, the real final frame at
every episode end, across batch cuts and ring wrap-around), n-step, slices, PER, save/load, and
errors for data that cannot be stored this way."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tdrl.collectors import Collector
from tdrl.data import PrioritizedReplayBuffer, ReplayBuffer
from tdrl.envs import FrameStack, make_vec_env
from tests.tiny_envs import Counting

K = 4
OBS, NEXT_OBS = "observation", ("next", "observation")


def rollouts(num_envs: int, steps: int, batches: int, k: int = K):
    """Consecutive ``[num_envs, steps]`` batches of env-stacked Counting frames (unique frames,
    episodes of 3, 1, 5, 2 steps ending terminated and truncated in turn)."""
    with make_vec_env(lambda: FrameStack(Counting(), k), num_envs, seed=0) as env:
        collector = Collector(env, None, num_envs * steps)
        return [collector.rollout() for _ in range(batches)]


def ground_truth(batches):
    """Stream-major ``[S, T_total]`` of all batches, concatenated in time."""
    return torch.cat(batches, 1)


def check_against_env(sample, truth, length: int, k: int = K, n_steps: int = 1) -> int:
    """Every sampled item's root and next stacks equal the env's at the same step; returns how
    many items were checked (items among a full ring's oldest k - 1 steps of a stream are left
    out: their stacks stop at the oldest stored frame)."""
    S, total = truth.batch_size
    index = sample["index"].reshape(-1)
    position, stream = index // S, index % S
    newest = total - 1
    t = newest - (newest - position) % length  # the step stored at that position
    oldest = max(total - length, 0)
    keep = t >= oldest + (k - 1) if total > length else torch.ones_like(t, dtype=torch.bool)
    root = sample[OBS].reshape(-1, *sample[OBS].shape[-3:])
    nxt = sample[NEXT_OBS].reshape(-1, *sample[NEXT_OBS].shape[-3:])
    assert torch.equal(root[keep], truth[OBS][stream[keep], t[keep]])
    if n_steps == 1:
        assert torch.equal(nxt[keep], truth[NEXT_OBS][stream[keep], t[keep]])
    else:
        steps = sample["steps_to_next_obs"].reshape(-1)
        last = t + steps - 1
        assert torch.equal(nxt[keep], truth[NEXT_OBS][stream[keep], last[keep]])
    return int(keep.sum())


def test_samples_equal_the_env_stacks_across_batch_cuts_and_episode_ends():
    batches = rollouts(num_envs=2, steps=7, batches=5)
    truth = ground_truth(batches)
    assert truth["next", "terminated"].any() and truth["next", "truncated"].any()
    buffer = ReplayBuffer(1000, frame_keys=[OBS], frame_stack=K, generator=0)
    for batch in batches:
        buffer.extend(batch)
    sample = buffer.sample(2000)
    assert sample[OBS].shape == (2000, K, 2, 2) and sample[NEXT_OBS].shape == (2000, K, 2, 2)
    assert check_against_env(sample, truth, length=500) == 2000
    # every stored step was drawn, so every episode end's real final frame was checked
    assert sample["index"].unique().numel() == 2 * 35


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
        ),
    ],
)
def test_a_buffer_fed_cpu_rollouts_keeps_its_frames_on_its_device(tmp_path, device):
    batches = rollouts(num_envs=2, steps=7, batches=5)
    truth = ground_truth(batches)
    cpu = ReplayBuffer(30, frame_keys=[OBS], frame_stack=K, generator=0)
    buffer = ReplayBuffer(30, device=device, frame_keys=[OBS], frame_stack=K, generator=0)
    for batch in batches:  # the ring wraps: final frames of overwritten and live episodes
        cpu.extend(batch)
        buffer.extend(batch)
    a, b = cpu.sample(500), buffer.sample(500)
    assert b[OBS].device.type == device and (a == b.cpu()).all()
    check_against_env(a, truth, length=15)
    buffer.save(tmp_path / "rb")
    loaded = ReplayBuffer(30, device=device, frame_keys=[OBS], frame_stack=K, generator=0)
    loaded.load(tmp_path / "rb")  # the sampler state too: the next draws agree
    c, d = loaded.sample(500), buffer.sample(500)
    assert c[NEXT_OBS].device.type == device and (c == d).all()


def test_one_frame_is_stored_a_step_and_the_next_observation_not_at_all():
    batches = rollouts(num_envs=2, steps=6, batches=1)
    buffer = ReplayBuffer(100, frame_keys=[OBS], frame_stack=K)
    buffer.extend(batches[0])
    stored = buffer.storage
    assert stored[OBS].shape == (50, 2, 1, 2, 2)
    assert NEXT_OBS not in stored.keys(include_nested=True)
    plain = ReplayBuffer(100)
    plain.extend(batches[0])
    frame_bytes = 1 * 2 * 2

    def per_step(rb: ReplayBuffer) -> float:
        return (
            sum(x.numel() * x.element_size() for x in rb.storage.values(True, True)) / rb.capacity
        )

    assert per_step(plain) - per_step(buffer) == (2 * K - 1) * frame_bytes


@pytest.mark.parametrize("batch_steps", [1, 3, 8])
def test_wrapped_ring_keeps_real_final_frames_and_grows_the_final_ring(batch_steps):
    # 30 steps a stream in a ring of 12: wraps twice; ~1 episode end every 3 steps, so the
    # final-frame ring (16 slots at first) must grow or reuse only slots no stored step needs
    batches = rollouts(num_envs=2, steps=batch_steps, batches=max(30 // batch_steps, 4))
    truth = ground_truth(batches)
    buffer = ReplayBuffer(24, frame_keys=[OBS], frame_stack=K, generator=1)
    for batch in batches:
        buffer.extend(batch)
    checked = check_against_env(buffer.sample(3000), truth, length=12)
    assert checked > 2000


def test_n_step_samples_end_their_next_stack_at_step_t_plus_k_minus_1():
    batches = rollouts(num_envs=3, steps=10, batches=3)
    truth = ground_truth(batches)
    buffer = ReplayBuffer(300, frame_keys=[OBS], frame_stack=K, n_steps=3, gamma=0.9)
    for batch in batches:
        buffer.extend(batch)
    sample = buffer.sample(1000)
    assert set(sample["steps_to_next_obs"].unique().tolist()) == {1, 2, 3}
    check_against_env(sample, truth, length=100, n_steps=3)


def test_slices_carry_the_env_stacks():
    batches = rollouts(num_envs=2, steps=20, batches=2)
    truth = ground_truth(batches)
    buffer = ReplayBuffer(200, frame_keys=[OBS], frame_stack=K, generator=3)
    for batch in batches:
        buffer.extend(batch)
    sample = buffer.sample_slices(40, 2)
    assert sample[OBS].shape == (40, 2, K, 2, 2)
    check_against_env(sample, truth, length=100)
    with pytest.raises(ValueError, match="stacks its frame_keys itself"):
        buffer.sample_slices(4, 2, frame_stack=2)


def test_prioritized_buffer_and_save_load_round_trip(tmp_path):
    batches = rollouts(num_envs=2, steps=9, batches=4)
    truth = ground_truth(batches)
    buffer = PrioritizedReplayBuffer(40, frame_keys=[OBS], frame_stack=K, generator=0)
    for batch in batches[:3]:
        buffer.extend(batch)
    buffer.save(tmp_path / "rb")
    loaded = PrioritizedReplayBuffer(40, frame_keys=[OBS], frame_stack=K, generator=0)
    loaded.load(tmp_path / "rb")
    for rb in (buffer, loaded):
        rb.extend(batches[3])  # the pending next frames of the newest steps came back too
    a, b = buffer.sample(500), loaded.sample(500)
    assert (a == b).all()
    check_against_env(a, truth, length=20)
    with pytest.raises(ValueError, match="saved with frame_keys"):
        PrioritizedReplayBuffer(40, generator=0).load(tmp_path / "rb")


def test_an_env_stack_of_one_frame_works_too():
    batches = rollouts(num_envs=2, steps=8, batches=2, k=1)
    truth = ground_truth(batches)
    buffer = ReplayBuffer(64, frame_keys=[OBS], frame_stack=1, generator=0)
    for batch in batches:
        buffer.extend(batch)
    check_against_env(buffer.sample(200), truth, length=32, k=1)


def test_data_that_cannot_be_rebuilt_is_refused_before_anything_is_written():
    first, second, third = rollouts(num_envs=2, steps=5, batches=3)
    buffer = ReplayBuffer(100, frame_keys=[OBS], frame_stack=K)
    buffer.extend(first)
    cursor = buffer.stream_storage.cursor
    with pytest.raises(ValueError, match=r"'observation'.*stream \d, the stored newest step"):
        buffer.extend(third)  # skips `second`: the stored newest frames do not lead into it
    assert buffer.stream_storage.cursor == cursor  # nothing written
    shuffled = second.clone()
    shuffled[OBS] = second[OBS].flip(1)
    with pytest.raises(ValueError, match=r"'observation'.*stream \d, step \d of the batch"):
        buffer.extend(shuffled)
    assert buffer.stream_storage.cursor == cursor
    buffer.extend(second)  # the right data still go in
    with pytest.raises(ValueError, match=r"frame_stack=4 frames"):
        buffer.extend(second[:, :1].apply(lambda x: x[:, :, :3] if x.dim() == 5 else x))
    with pytest.raises(KeyError, match="frame key 'pixels'"):
        ReplayBuffer(100, frame_keys=["pixels"], frame_stack=K).extend(first)
    with pytest.raises(ValueError, match="needs frame_keys"):
        ReplayBuffer(100, frame_stack=4)
    with pytest.raises(ValueError, match="frame_stack must be >= 1"):
        ReplayBuffer(100, frame_keys=[OBS], frame_stack=0)


def test_frames_of_a_real_minatar_game_round_trip():
    pytest.importorskip("minatar")
    with make_vec_env("MinAtar/Breakout-v1", 2, seed=5, frame_stack=K) as env:
        collector = Collector(env, None, 2 * 60)
        batches = [collector.rollout() for _ in range(3)]
    truth = ground_truth(batches)
    assert truth["next", "terminated"].sum() >= 2
    buffer = ReplayBuffer(400, frame_keys=[OBS], frame_stack=K, generator=0)
    for batch in batches:
        buffer.extend(batch)
    sample = buffer.sample(600)
    assert sample[OBS].shape == (600, 4 * K, 10, 10) and sample[OBS].dtype == torch.uint8
    check_against_env(sample, truth, length=200)
    assert np.isclose(
        sum(x.numel() for x in buffer.storage.values(True, True) if x.dtype == torch.uint8)
        / buffer.capacity,
        4 * 10 * 10,
    )


def test_a_step_marked_done_after_it_was_written_keeps_its_real_next_frame():
    # A resumed run whose envs restart marks each stream's newest step truncated
    # (tdrl.data.truncate_streams); the restarted envs' frames are then accepted, and the
    # marked step still bootstraps from the next frame it really had.
    from tdrl.data import truncate_streams

    first, _, third = rollouts(num_envs=2, steps=5, batches=3)
    buffer = ReplayBuffer(100, frame_keys=[OBS], frame_stack=K, generator=0)
    buffer.extend(first)
    truncate_streams(buffer)
    buffer.extend(third)  # does not follow `first`: accepted after the seam
    sample = buffer.sample(400)
    at_seam = sample["index"] // 2 == 4  # first's last step, both streams
    assert at_seam.any() and sample["next", "truncated"][at_seam].all()
    stream = sample["index"][at_seam] % 2
    assert torch.equal(sample[NEXT_OBS][at_seam], first[NEXT_OBS][stream, 4])


def test_an_empty_state_forgets_the_stored_frames():
    batches = rollouts(num_envs=2, steps=9, batches=2)
    buffer = ReplayBuffer(40, frame_keys=[OBS], frame_stack=K, generator=0)
    buffer.extend(batches[0])
    empty = ReplayBuffer(40, frame_keys=[OBS], frame_stack=K, generator=0)
    buffer.load_state_dict(empty.state_dict())
    assert len(buffer) == 0
    buffer.extend(batches[1])  # starts over as a fresh buffer would
    fresh = ReplayBuffer(40, frame_keys=[OBS], frame_stack=K, generator=0)
    fresh.extend(batches[1])
    assert len(buffer) == len(fresh) == 18
    assert (buffer.storage == fresh.storage).all()
    assert (buffer.sample(200) == fresh.sample(200)).all()  # the loaded sampler state too


def test_stacked_or_large_frames_are_stored_once_and_minatar_frames_plainly():
    # Frame-efficient storage where it saves memory that matters (stacks, Atari's 84x84); the
    # plain, faster write and sample for MinAtar's 10x10 frames and for flat observations.
    pytest.importorskip("minatar")
    from tdrl.data.frames import store_frames_once

    with make_vec_env("MinAtar/Breakout-v1", 1) as env:
        assert not store_frames_once(env.observation_spec, 1)
    with make_vec_env("MinAtar/Breakout-v1", 1, frame_stack=2) as env:
        assert store_frames_once(env.observation_spec, 2)
    with make_vec_env("CartPole-v1", 1) as env:
        assert not store_frames_once(env.observation_spec, 1)
    pytest.importorskip("ale_py")
    with make_vec_env("tdrl/Pong-v5", 1) as env:
        assert store_frames_once(env.observation_spec, 1)  # 84x84: 7,056 bytes a frame
