"""Datasets and replay buffers refuse data that would train on what never happened: NaN or
infinite values, flags that are not bool, early terminations, mismatched lengths, a capacity
that would cut a dataset, empty rollouts, metadata counting episodes the data lack, changed
dataset files, frame stacks of another size than the buffer's; each error names the key,
episode, file or value at fault."""

from __future__ import annotations

import json
import tracemalloc

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.data import ReplayBuffer
from tests.rollouts import rollout

minari = pytest.importorskip("minari")
from minari.data_collector import EpisodeBuffer  # noqa: E402

from tdrl.data import load_minari, save_minari  # noqa: E402


@pytest.fixture(autouse=True)
def datasets_root(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    return tmp_path / "datasets"


def episode(T: int, seed: int = 0, **arrays) -> dict:
    """A Pendulum-shaped episode of T steps ending terminated; ``arrays`` replace its entries."""
    rng = np.random.default_rng(seed)
    out = {
        "observations": rng.standard_normal((T + 1, 3)).astype(np.float32),
        "actions": rng.uniform(-1, 1, (T, 1)).astype(np.float32),
        "rewards": np.ones(T),
        "terminations": np.arange(T) == T - 1,
        "truncations": np.zeros(T, dtype=bool),
    }
    return {**out, **arrays}


def make_dataset(name: str, episodes: list[dict]) -> str:
    """Written with Minari itself (which takes these episodes as they are), not save_minari."""
    env = gym.make("Pendulum-v1")
    buffers = [
        EpisodeBuffer(id=i, **{k: list(v) for k, v in e.items()}) for i, e in enumerate(episodes)
    ]
    minari.create_dataset_from_buffers(
        name, buffers, env=env.spec, observation_space=env.observation_space,
        action_space=env.action_space,
    )  # fmt: skip
    env.close()
    return name


def test_nonfinite_episodes_are_refused_or_dropped_with_a_count():
    observations = episode(5)["observations"]
    observations[2, 1] = np.nan
    rewards = np.ones(4)
    rewards[3] = np.inf
    make_dataset("tdrl/nan-v0", [episode(3), episode(5, observations=observations),
                                 episode(4, rewards=rewards)])  # fmt: skip
    with pytest.raises(
        ValueError, match=r"'tdrl/nan-v0', episode 1: non-finite observations at step 2"
    ):
        load_minari("tdrl/nan-v0")
    with pytest.warns(UserWarning, match=r"dropped 2 of 3 episodes .*\[1, 2\]"):
        kept = load_minari("tdrl/nan-v0", on_nonfinite="drop")
    assert len(kept) == 3  # episode 0 only
    assert kept.storage["collector", "traj_ids"].unique().tolist() == [0]
    bad = rollout()
    bad["action"][1, 4] = float("nan")
    with pytest.raises(ValueError, match=r"episode 3: non-finite actions at step 1"):
        save_minari(bad, "tdrl/nan-save-v0", "Pendulum-v1")
    with pytest.warns(UserWarning, match="dropped 1 of 4"):
        saved = save_minari(bad, "tdrl/nan-save-v0", "Pendulum-v1", on_nonfinite="drop")
    assert saved.total_episodes == 3 and saved.total_steps == 9


def test_flags_that_are_not_bool_are_refused_naming_key_and_dtype():
    make_dataset("tdrl/float-flags-v0", [episode(4, terminations=np.full(4, 0.5))])
    with pytest.raises(TypeError, match=r"episode 0: terminations are float64, must be bool"):
        load_minari("tdrl/float-flags-v0")
    bad = rollout()
    bad["next", "truncated"] = bad["next", "truncated"].float()
    with pytest.raises(TypeError, match=r"\('next', 'truncated'\) is torch.float32"):
        save_minari(bad, "tdrl/float-flags-save-v0", "Pendulum-v1")


def test_a_termination_before_the_last_step_is_refused():
    make_dataset("tdrl/early-v0", [episode(3), episode(5, terminations=np.arange(5) >= 1)])
    with pytest.raises(ValueError, match=r"episode 1: terminated at step 1 of 5, before its last"):
        load_minari("tdrl/early-v0")


def test_length_mismatches_name_the_key_episode_and_dataset():
    make_dataset("tdrl/short-v0", [episode(3), episode(4, actions=np.zeros((3, 1), np.float32))])
    with pytest.raises(ValueError, match=r"'tdrl/short-v0', episode 1: 3 actions for 4 rewards"):
        load_minari("tdrl/short-v0")


def test_a_capacity_below_the_dataset_size_is_an_error_not_a_tail():
    make_dataset("tdrl/size-v0", [episode(3), episode(4)])
    with pytest.raises(ValueError, match=r"capacity=5 is below the 7 steps of dataset 'tdrl/size"):
        load_minari("tdrl/size-v0", capacity=5)
    assert len(load_minari("tdrl/size-v0", capacity=10)) == 7


def test_an_empty_rollout_is_a_clear_error(datasets_root):
    with pytest.raises(ValueError, match=r"rollout is empty \(batch size \(2, 0\)\)"):
        save_minari(rollout(steps=0), "tdrl/empty-v0", "Pendulum-v1")
    assert not (datasets_root / "tdrl" / "empty-v0").exists()


def test_a_huge_episode_count_in_the_metadata_allocates_nothing(datasets_root):
    make_dataset("tdrl/count-v0", [episode(3), episode(4)])
    meta = datasets_root / "tdrl" / "count-v0" / "data" / "metadata.json"
    data = json.loads(meta.read_text())
    data["total_episodes"] = 10**15  # an index array of it: 8 PB
    meta.write_text(json.dumps(data))
    tracemalloc.start()
    try:
        with pytest.raises(
            ValueError, match=r"counts 1000000000000000 episodes; reading episode 2"
        ):
            load_minari("tdrl/count-v0")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20


def test_changed_dataset_files_are_refused_naming_the_dataset(datasets_root):
    save_minari(rollout(), "tdrl/rot-v0", "Pendulum-v1")
    folder = datasets_root / "tdrl" / "rot-v0"
    before = load_minari("tdrl/rot-v0").storage
    data = folder / "data" / "main_data.hdf5"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x10  # one bit flipped
    data.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"'tdrl/rot-v0' at .*'main_data.hdf5' does not match"):
        load_minari("tdrl/rot-v0")
    record = json.loads((folder / "tdrl_files.json").read_text())["files"]
    assert record.keys() == {"main_data.hdf5", "metadata.json"}
    # a dataset without the record (made elsewhere, or before tdrl wrote one) loads unchecked
    raw[len(raw) // 2] ^= 0x10
    data.write_bytes(bytes(raw))
    (folder / "tdrl_files.json").unlink()
    assert (load_minari("tdrl/rot-v0").storage == before).all()


def stacked_frames(env_stack: int, channels: int, steps: int = 8) -> TensorDict:
    """One stream of ``steps`` steps of an env stacking ``env_stack`` frames of ``channels``
    channels (2x2, each frame distinct), the stack filled with the first frame at the reset."""
    frames = torch.arange(1, steps + 2, dtype=torch.uint8).view(-1, 1, 1, 1)
    frames = (frames * 10 + torch.arange(channels, dtype=torch.uint8).view(1, -1, 1, 1)).expand(
        -1, -1, 2, 2
    )

    def stack(t: int) -> torch.Tensor:
        return torch.cat([frames[max(t - j, 0)] for j in range(env_stack - 1, -1, -1)])

    false = torch.zeros(1, steps, 1, dtype=torch.bool)
    return TensorDict(
        {
            "observation": torch.stack([stack(t) for t in range(steps)]).unsqueeze(0),
            "action": torch.zeros(1, steps, 1),
            "next": {
                "observation": torch.stack([stack(t + 1) for t in range(steps)]).unsqueeze(0),
                "reward": torch.zeros(1, steps, 1),
                "done": false,
                "terminated": false.clone(),
                "truncated": false.clone(),
            },
        },
        batch_size=[1, steps],
    )


@pytest.mark.parametrize(
    ("buffer_stack", "env_stack", "channels"), [(2, 4, 1), (4, 1, 4), (2, 3, 2)]
)
def test_a_frame_stack_that_is_not_the_envs_is_refused_naming_both(
    buffer_stack, env_stack, channels
):
    batch = stacked_frames(env_stack, channels)
    buffer = ReplayBuffer(32, frame_keys=["observation"], frame_stack=buffer_stack)
    named = rf"'observation'.*read as frame_stack={buffer_stack} .* fits frame_stack={env_stack} "
    with pytest.raises(ValueError, match=named):
        buffer.extend(batch)
    assert len(buffer) == 0
    right = ReplayBuffer(32, frame_keys=["observation"], frame_stack=env_stack, generator=0)
    right.extend(batch)
    sample = right.sample(16)
    t = sample["index"]  # one stream: the flat index is the step
    assert torch.equal(sample["observation"], batch["observation"][0, t])
    assert torch.equal(sample["next", "observation"], batch["next", "observation"][0, t])


def test_extend_refuses_a_nonfinite_batch_naming_the_key():
    batch = rollout(steps=1)[:, 0]  # [2]: one step of two streams (the fast writer's layout)
    buffer = ReplayBuffer(20, generator=0)
    buffer.extend(batch)
    buffer.extend(batch)  # the compiled writer takes this layout from now on
    bad = batch.clone()
    bad["next", "reward"][1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"non-finite \('next', 'reward'\) at batch index \(1,\)"):
        buffer.extend(bad)
    bad = rollout()
    bad["observation"][0, 3, 2] = -float("inf")
    with pytest.raises(ValueError, match=r"non-finite 'observation' at batch index \(0, 3\)"):
        buffer.extend(bad)
    assert len(buffer) == 4  # nothing of either was written
    unchecked = ReplayBuffer(20, on_nonfinite="ignore")
    unchecked.extend(bad)
    assert len(unchecked) == 12
    with pytest.raises(ValueError, match="on_nonfinite must be 'raise' or 'ignore'"):
        ReplayBuffer(20, on_nonfinite="drop")


def test_on_nonfinite_changed_after_the_first_writes_holds_for_the_fast_writes():
    batch = rollout(steps=1)[:, 0]  # [2]: the fast writer's layout from the second write on
    bad = batch.clone()
    bad["next", "reward"][0, 0] = float("nan")
    buffer = ReplayBuffer(20, on_nonfinite="ignore")
    for _ in range(3):
        buffer.extend(batch)
    buffer.on_nonfinite = "raise"
    with pytest.raises(ValueError, match=r"non-finite \('next', 'reward'\) at batch index \(0,\)"):
        buffer.extend(bad)
    assert len(buffer) == 6  # nothing of it was written
    buffer.extend(batch)
    buffer.on_nonfinite = "ignore"
    buffer.extend(bad)
    assert len(buffer) == 10 and buffer.storage["next", "reward"].isnan().sum() == 1
    with pytest.raises(ValueError, match="on_nonfinite must be 'raise' or 'ignore', got 'drop'"):
        buffer.on_nonfinite = "drop"  # type: ignore[assignment]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
# -nan: a NaN with its sign bit set (the compiled scan reads the exponent bits)
@pytest.mark.parametrize("bad", [float("nan"), -float("nan"), float("inf"), -float("inf")])
def test_the_compiled_write_refuses_what_the_checked_one_does(dtype, bad):
    from tensordict import TensorDict

    def batch(value: float) -> TensorDict:
        x = torch.full((4, 3), 0.5, dtype=dtype)
        x[2, 1] = value
        return TensorDict({"x": x, "y": torch.ones(4, 2)}, batch_size=[4])

    buffer = ReplayBuffer(40)
    for _ in range(3):  # from the second write on, the compiled writer takes this layout
        buffer.extend(batch(0.5))
    huge = torch.finfo(dtype).max  # finite values whose sum overflows are finite all the same
    buffer.extend(batch(huge))
    buffer.extend(batch(-torch.finfo(dtype).tiny / 2))  # a subnormal: finite
    assert len(buffer) == 20
    with pytest.raises(ValueError, match=r"non-finite 'x' at batch index \(2,\)"):
        buffer.extend(batch(bad))
    assert len(buffer) == 20  # nothing of it was written
    assert buffer.storage["x"][:, :, 1].isfinite().all()
