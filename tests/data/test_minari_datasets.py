"""Minari datasets <-> replay buffers: a round trip keeps every transition, the episode ends,
terminated apart from truncated and the real final observations; bad data is named."""

from __future__ import annotations

import pytest
import torch

from tdrl import keys
from tdrl.collectors import Collector
from tdrl.data import ReplayBuffer
from tdrl.envs import make_vec_env

minari = pytest.importorskip("minari")
from tdrl.data import load_minari, save_minari, split_episodes  # noqa: E402


@pytest.fixture(autouse=True)
def datasets_root(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))


def hopper_rollout() -> torch.Tensor:
    # Random Hopper-v5 falls within ~20-60 steps (terminated); a 25-step time limit cuts the
    # rest (truncated); the batch end cuts the last episode of each env mid-way.
    env = make_vec_env("Hopper-v5", 2, seed=0, max_episode_steps=25)
    batch = Collector(env, None, 2 * 90).rollout()
    env.close()
    assert batch["next", "terminated"].any() and batch["next", "truncated"].any()
    return batch


def test_round_trip_keeps_every_transition_and_episode_end():
    batch = hopper_rollout()
    buffer = ReplayBuffer(1000, num_streams=2)
    buffer.extend(batch)
    dataset = save_minari(buffer, "tdrl/hopper-test-v0", "Hopper-v5", ref_min_score=-1.0,
                          ref_max_score=100.0)  # fmt: skip
    episodes = split_episodes(batch)
    assert dataset.total_episodes == len(episodes) and dataset.total_steps == 180
    loaded = load_minari("tdrl/hopper-test-v0")
    stored = loaded.storage[:, 0]  # one stream: episode after episode, in row order
    assert len(loaded) == 180
    row_major = batch.reshape(-1)  # env 0's steps, then env 1's: the episodes' order
    for key in (keys.OBSERVATION, keys.ACTION, keys.NEXT_OBSERVATION, keys.NEXT_REWARD,
                keys.NEXT_TERMINATED):  # fmt: skip
        torch.testing.assert_close(stored[key], row_major[key].to(stored[key].dtype))
    # truncated: the time limit's, plus the two cuts at the batch end (not terminal there)
    cut = row_major["next", "truncated"].clone().view(2, 90, 1)
    cut[:, -1] |= ~row_major["next", "terminated"].view(2, 90, 1)[:, -1]
    torch.testing.assert_close(stored["next", "truncated"], cut.view(180, 1))
    assert not (stored["next", "terminated"] & stored["next", "truncated"]).any()
    ids = stored["collector", "traj_ids"]
    ends = stored["next", "done"].squeeze(-1)
    assert ((ids[1:] != ids[:-1]) == ends[:-1]).all()  # a new id exactly after each end
    # the terminal steps keep the unhealthy final observation, not a reset one
    final = stored["next", "observation"][stored["next", "terminated"].squeeze(-1)]
    assert (final[:, 0] < 0.8).any() or (final[:, 1].abs() > 0.2).any()
    # back again: the same episodes
    again = split_episodes(loaded.storage.transpose(0, 1))
    assert len(again) == len(episodes)
    for a, b in zip(again, episodes, strict=True):
        for name in a:
            assert (
                (a[name] == b[name]).all()
                if a[name].dtype == bool
                else torch.allclose(
                    torch.as_tensor(a[name]).double(), torch.as_tensor(b[name]).double()
                )
            )


def test_a_dataset_is_written_whole_or_not_at_all_and_bad_input_is_named(tmp_path):
    batch = hopper_rollout()
    save_minari(batch, "tdrl/once-v0", "Hopper-v5")
    with pytest.raises(FileExistsError, match="tdrl/once-v0"):
        save_minari(batch, "tdrl/once-v0", "Hopper-v5")
    with pytest.raises(KeyError, match="'action'"):
        save_minari(batch.exclude("action"), "tdrl/noaction-v0", "Hopper-v5")
    root = tmp_path / "datasets"
    # the dataset, and the new namespace's metadata Minari writes beside it
    assert sorted(p.name for p in (root / "tdrl").iterdir()) == [
        "namespace_metadata.json",
        "once-v0",
    ]
    from minari import namespace

    assert "tdrl" in namespace.list_local_namespaces()
    namespace.get_namespace_metadata("tdrl")  # raised "does not exist locally" before
    assert not any(p.name.startswith(".tdrl-") for p in root.iterdir())  # no staging left
    # observations that do not fit the env are refused before anything is written
    with pytest.raises(ValueError, match=r"observations of shape \(11,\) per step do not fit"):
        save_minari(batch, "tdrl/wrong-env-v0", "Pendulum-v1")
    assert not (root / "tdrl" / "wrong-env-v0").exists()
    with pytest.raises(ValueError, match="empty"):
        save_minari(ReplayBuffer(10), "tdrl/empty-v0", "Hopper-v5")


def test_an_episode_without_an_end_flag_loads_as_truncated_and_slices_stay_inside_it():
    # Minari's create_dataset_from_buffers accepts episodes whose last step has neither flag;
    # loaded as they are, nothing would end them and slices would run into the next episode.
    import gymnasium as gym
    import numpy as np
    from minari.data_collector import EpisodeBuffer

    env = gym.make("Pendulum-v1")
    rng = np.random.default_rng(0)
    lengths = (5, 6)
    buffers = [
        EpisodeBuffer(
            id=i, observations=list(rng.standard_normal((T + 1, 3)).astype(np.float32)),
            actions=list(rng.uniform(-1, 1, (T, 1)).astype(np.float32)),
            rewards=list(np.ones(T)), terminations=[False] * T, truncations=[False] * T,
        )
        for i, T in enumerate(lengths)
    ]  # fmt: skip
    minari.create_dataset_from_buffers(
        "tdrl/noflag-v0", buffers, env=env.spec, observation_space=env.observation_space,
        action_space=env.action_space,
    )  # fmt: skip
    env.close()
    stored = load_minari("tdrl/noflag-v0").storage[:, 0]
    last = torch.tensor([4, 10])  # each episode's last step
    truncated = torch.zeros(11, dtype=torch.bool)
    truncated[last] = True
    assert torch.equal(stored["next", "truncated"].view(-1), truncated)
    assert torch.equal(stored["next", "done"].view(-1), truncated)
    assert not stored["next", "terminated"].any()  # cut, not terminal: it still bootstraps
    buffer = load_minari("tdrl/noflag-v0", generator=0)
    ids = buffer.sample_slices(64, 4)["collector", "traj_ids"]
    assert (ids == ids[:, :1]).all()  # no slice spans two episodes


def test_integer_observations_keep_their_dtype_and_float_ones_become_float32():
    import gymnasium as gym
    import numpy as np
    from minari.data_collector import EpisodeBuffer

    env = gym.make("Pendulum-v1")
    rng = np.random.default_rng(0)
    for name, dtype, space in (
        ("tdrl/pixels-v0", np.uint8, gym.spaces.Box(0, 255, (3,), np.uint8)),
        ("tdrl/float64-v0", np.float64, gym.spaces.Box(-np.inf, np.inf, (3,), np.float64)),
    ):
        T = 4
        observations = rng.integers(0, 255, (T + 1, 3)).astype(dtype)
        buffer = EpisodeBuffer(
            id=0, observations=list(observations), actions=list(np.zeros((T, 1), np.float32)),
            rewards=list(np.ones(T)), terminations=[False] * (T - 1) + [True],
            truncations=[False] * T,
        )  # fmt: skip
        minari.create_dataset_from_buffers(
            name, [buffer], env=env.spec, observation_space=space, action_space=env.action_space
        )
        stored = load_minari(name).storage[:, 0]
        want = torch.uint8 if dtype == np.uint8 else torch.float32  # float32 before: 4x pixels
        assert stored["observation"].dtype == stored["next", "observation"].dtype == want
        assert torch.equal(stored["observation"].double(), torch.as_tensor(observations[:T]))
    env.close()


def test_a_missing_dataset_says_where_it_was_looked_for_and_how_to_make_it(tmp_path, monkeypatch):
    pytest.importorskip("minari")
    from tdrl.data import load_minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"'tdrl/absent-v0' under .*make_dataset.py"):
        load_minari("tdrl/absent-v0")
