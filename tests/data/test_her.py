"""HERReplayBuffer: which step a hindsight goal comes from, the relabelled reward and flags, the
episode bookkeeping across a wrapped ring and a save/load, and what it refuses.

The data are real bit-flipping rollouts (``tdrl/BitFlipping5-v0``, random actions) through the
vector env, each step tagged with its stream's episode number and its time, so every check below
compares with those tags: the definitions, not the buffer's own offsets."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl import keys
from tdrl.data import HERReplayBuffer, make_replay_buffer
from tdrl.envs import BitFlipping, make_vec_env

STREAMS, T, N_BITS = 3, 4, 5


def rollouts(batches: int, seed: int = 0) -> list[TensorDict]:
    """``[STREAMS, T]`` batches with ``"episode"`` (per stream, +1 after each done) and
    ``"time"`` (the stream's step count) tags."""
    env = make_vec_env(f"tdrl/BitFlipping{N_BITS}-v0", STREAMS, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    td = env.reset()
    episode = torch.zeros(STREAMS)
    time = 0
    out = []
    for _ in range(batches):
        steps = []
        for _ in range(T):
            td["action"] = torch.randint(0, N_BITS, (STREAMS,), generator=gen)
            td["episode"], td["time"] = episode.clone(), torch.full((STREAMS,), float(time))
            step, td = env.step_and_maybe_reset(td)
            steps.append(step)
            episode += step["next", "done"].squeeze(-1).float()
            time += 1
        out.append(torch.stack(steps, 1))
    env.close()
    return out


def her_buffer(capacity: int, strategy: str = "future", k: int = 4, **kwargs) -> HERReplayBuffer:
    return HERReplayBuffer(
        capacity, compute_reward=BitFlipping.compute_reward,
        compute_terminated=BitFlipping.compute_terminated, strategy=strategy, n_sampled_goal=k,
        generator=0, **kwargs,
    )  # fmt: skip


def filled(strategy: str = "future", capacity: int = 3 * 40, batches: int = 25) -> HERReplayBuffer:
    buf = her_buffer(capacity, strategy)
    for batch in rollouts(batches):  # 100 steps a stream into 40: the ring wraps
        buf.extend(batch)
    return buf


def tags(buf: HERReplayBuffer, flat: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(episode, time, stream) of flat storage indices."""
    store = buf.storage.reshape(-1)
    return (
        store["episode"][flat].numpy(),
        store["time"][flat].numpy(),
        (flat % STREAMS).numpy(),
    )


def episode_bounds(buf: HERReplayBuffer) -> dict[tuple[int, int], tuple[float, float, bool]]:
    """(stream, episode) -> (first stored time, last stored time, whether it ended), from the
    tags and the stored done flags."""
    store = buf.storage
    out: dict[tuple[int, int], tuple[float, float, bool]] = {}
    for s in range(STREAMS):
        for e, t, d in zip(
            store["episode"][:, s].tolist(), store["time"][:, s].tolist(),
            store["next", "done"][:, s, 0].tolist(), strict=True,
        ):  # fmt: skip
            lo, hi, ended = out.get((s, int(e)), (t, t, False))
            out[(s, int(e))] = (min(lo, t), max(hi, t), ended or d)
    return out


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_the_goal_step_is_in_the_transitions_episode_where_the_strategy_says(strategy):
    buf = filled(strategy)
    bounds = episode_bounds(buf)
    index = torch.arange(len(buf))  # every stored transition
    goal = buf.goal_steps(index.repeat(20))
    ep, time, stream = tags(buf, index.repeat(20))
    goal_ep, goal_time, goal_stream = tags(buf, goal)
    assert (goal_stream == stream).all() and (goal_ep == ep).all()  # never another episode
    first = np.array([bounds[(s, int(e))][0] for s, e in zip(stream, ep, strict=True)])
    last = np.array([bounds[(s, int(e))][1] for s, e in zip(stream, ep, strict=True)])
    assert (goal_time >= first).all() and (goal_time <= last).all()
    if strategy == "future":
        assert (goal_time >= time).all()  # never before the transition
        assert (goal_time > time).any() and (goal_time == time).any()
    elif strategy == "final":
        assert (goal_time == last).all()
    else:
        assert (goal_time < time).any() and (goal_time > time).any()


def test_future_reaches_the_episodes_last_step_and_an_unfinished_episodes_newest():
    buf = filled("future")
    bounds = episode_bounds(buf)
    index = torch.arange(len(buf)).repeat(200)
    goal = buf.goal_steps(index)
    ep, _, stream = tags(buf, index)
    _, goal_time, _ = tags(buf, goal)
    for (s, e), (_, last, _) in bounds.items():
        mask = (stream == s) & (ep == e)
        assert goal_time[mask].max() == last  # every step to the end can be drawn
    unfinished = [key for key, (_, _, ended) in bounds.items() if not ended]
    assert len(unfinished) == STREAMS  # each stream's current episode is stored so far


def test_relabelled_samples_carry_the_env_reward_and_flags_of_their_new_goal():
    buf = filled("future")
    stored = buf.storage.reshape(-1)
    out = buf.sample(4096)
    achieved, desired = out["next", "achieved_goal"].numpy(), out["desired_goal"]
    assert torch.equal(desired, out["next", "desired_goal"])
    expected = BitFlipping.compute_reward(achieved, desired.numpy(), {})
    np.testing.assert_array_equal(out["next", "reward"].squeeze(-1).numpy(), expected)
    reached = torch.as_tensor(BitFlipping.compute_terminated(achieved, desired.numpy(), {}))
    assert torch.equal(out["next", "terminated"].squeeze(-1), reached)
    assert torch.equal(out["next", "done"], out["next", "terminated"] | out["next", "truncated"])
    changed = (desired != stored["desired_goal"][out["index"]]).any(-1).float().mean()
    assert 0.6 < float(changed) < 0.85  # k = 4: 4/5 relabelled, a few to the same goal
    assert reached.float().mean() > 0.15  # hindsight goals are often reached goals
    # the stored data are untouched
    assert (stored["next", "reward"].squeeze(-1).numpy() == BitFlipping.compute_reward(
        stored["next", "achieved_goal"].numpy(), stored["desired_goal"].numpy(), {}
    )).all()  # fmt: skip


def test_no_hindsight_goals_samples_as_stored():
    buf = her_buffer(3 * 40, k=0)
    for batch in rollouts(5):
        buf.extend(batch)
    out = buf.sample(256)
    stored = buf.storage.reshape(-1)[out["index"]]
    for key in ("desired_goal", ("next", "reward"), ("next", "terminated")):
        assert torch.equal(out[key], stored[key])


def test_save_and_load_find_the_same_episodes(tmp_path):
    buf = filled("episode")
    buf.save(tmp_path / "rb")
    again = her_buffer(3 * 40, "episode")
    again.load(tmp_path / "rb")
    storage = buf.stream_storage
    assert storage is not None
    np.testing.assert_array_equal(again._to_end, buf._to_end)
    # steps since the episode start, as far back as stored (the loaded buffer sees no further)
    position = np.arange(storage.length)[:, None]
    before = (position - storage.oldest()) % storage.length
    np.testing.assert_array_equal(
        np.minimum(again._since_start, before), np.minimum(buf._since_start, before)
    )
    index = torch.arange(len(buf))
    assert torch.equal(again.goal_steps(index), buf.goal_steps(index))  # same generator state


def test_refused_with_the_value_named():
    with pytest.raises(ValueError, match="unknown HER strategy 'later'"):
        her_buffer(100, "later")
    with pytest.raises(ValueError, match="n_sampled_goal must be an int >= 0, got -1"):
        her_buffer(100, k=-1)
    with pytest.raises(ValueError, match="n_steps=3"):
        her_buffer(100, n_steps=3)
    with pytest.raises(ValueError, match="prioritized"):
        make_replay_buffer(100, prioritized=True, her="future", compute_reward=len)
    batch = rollouts(1)[0]
    buf = her_buffer(100)
    with pytest.raises(KeyError, match="desired_goal"):
        buf.extend(batch.exclude("desired_goal"))
    wrong = batch.clone()
    wrong["next", "reward"] = wrong["next", "reward"] - 1.0
    with pytest.raises(ValueError, match=r"stored \('next', 'reward'\) -2 \(batch item \(0, 0\)"):
        buf.extend(wrong)
    assert len(buf) == 0  # refused before anything was written
    buf.extend(batch)
    assert len(buf) == STREAMS * T


def test_bit_flipping_env_rewards_terminates_at_the_goal_and_truncates_after_n_steps():
    env = BitFlipping(n_bits=4)
    obs, _ = env.reset(seed=3)
    assert not np.array_equal(obs["observation"], obs["desired_goal"])
    np.testing.assert_array_equal(obs["observation"], obs["achieved_goal"])
    differing = np.flatnonzero(obs["observation"] != obs["desired_goal"])
    for i, bit in enumerate(differing):
        obs, reward, terminated, truncated, _ = env.step(np.int64(bit))
        last = i == len(differing) - 1
        assert (reward, terminated, truncated) == (
            (0.0, True, False) if last else (-1.0, False, False)
        )
    env.reset(seed=3)
    flags = [env.step(np.int64(0))[2:4] for _ in range(4)]  # flipping one bit back and forth
    assert flags[-1] == (False, True) and all(f == (False, False) for f in flags[:-1])
    with pytest.raises(ValueError, match="n_bits must be an int >= 1"):
        BitFlipping(n_bits=0)
    assert keys.DESIRED_GOAL in env.observation_space.spaces


def test_the_transform_sees_the_relabelled_goal_at_the_root_and_under_next():
    from tdrl.envs import make_vec_env as make
    from tdrl.modules import network_inputs

    env = make(f"tdrl/BitFlipping{N_BITS}-v0", 1, seed=0)
    inputs = network_inputs(env.observation_spec, ["observation", "desired_goal"])
    env.close()
    buf = her_buffer(3 * 40, transform=inputs.transform)
    for batch in rollouts(10):
        buf.extend(batch)
    out = buf.sample(512)
    for where in ((), ("next",)):
        flat = out[(*where, "observation_flat")]
        assert torch.equal(flat[:, N_BITS:], out[(*where, "desired_goal")])
        assert torch.equal(flat[:, :N_BITS], out[(*where, "observation")])
    stored = buf.storage.reshape(-1)["desired_goal"][out["index"]]
    assert (out["desired_goal"] != stored).any()  # relabelled before the transform ran


def test_a_compute_terminated_that_is_not_vectorized_is_called_per_goal_pair():
    def one_flag(achieved, desired, info):  # a single answer for any batch, as the mazes give
        return bool(np.all(np.asarray(achieved) == np.asarray(desired)))

    buf = HERReplayBuffer(
        3 * 40, compute_reward=BitFlipping.compute_reward, compute_terminated=one_flag,
        generator=0,
    )  # fmt: skip
    for batch in rollouts(10):
        buf.extend(batch)
    out = buf.sample(1024)
    reached = BitFlipping.compute_terminated(
        out["next", "achieved_goal"].numpy(), out["desired_goal"].numpy(), {}
    )
    assert reached.any() and not reached.all()
    np.testing.assert_array_equal(out["next", "terminated"].squeeze(-1).numpy(), reached)


@pytest.mark.parametrize("strategy", ["future", "final"])
def test_a_stream_cut_by_truncate_streams_ends_its_episodes_there(strategy):
    """A resume with fresh envs cuts every stream (truncate_streams marks the newest step done
    after it was indexed): no goal may come from the episodes written after the cut."""
    from tdrl.data import truncate_streams

    buf = her_buffer(3 * 60, strategy)
    batches = rollouts(10)
    for batch in batches[:4]:  # 16 steps: the cut falls inside an episode (most last 5 steps)
        buf.extend(batch)
    assert not buf.storage["next", "done"][15].all()
    truncate_streams(buf)
    for batch in batches[4:]:
        batch = batch.clone()
        batch["episode"] = batch["episode"] + 1000  # the envs started fresh episodes
        buf.extend(batch)
    bounds = episode_bounds(buf)
    index = torch.arange(len(buf)).repeat(20)
    ep, time, stream = tags(buf, index)
    goal_ep, goal_time, _ = tags(buf, buf.goal_steps(index))
    assert (goal_ep == ep).all()
    if strategy == "final":
        last = np.array([bounds[(s, int(e))][1] for s, e in zip(stream, ep, strict=True)])
        assert (goal_time == last).all()
    else:
        assert (goal_time >= time).all()
