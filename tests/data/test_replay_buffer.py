"""ReplayBuffer: storage layout, circular overwrite, uniform sampling, bad input, save/load."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from tdrl.data import PrioritizedReplayBuffer, ReplayBuffer


def steps(num: int, start: int = 0, streams: int = 2) -> list[TensorDict]:
    """``num`` [streams] batches whose observation encodes (step, stream)."""
    out = []
    for t in range(start, start + num):
        value = torch.tensor([100.0 * t + s for s in range(streams)])
        out.append(
            TensorDict(
                {
                    "observation": value.unsqueeze(-1).repeat(1, 3),
                    "next": {
                        "observation": value.unsqueeze(-1).repeat(1, 3) + 100,
                        "reward": value.unsqueeze(-1),
                    },
                },
                batch_size=[streams],
            )
        )
    return out


def stored_values(rb: ReplayBuffer) -> set[float]:
    obs = rb.storage["observation"][..., 0].reshape(-1)
    return set(obs[: len(rb)].tolist())


def test_rollout_is_stored_per_stream_in_time_order(rollout):
    td = rollout(3, 40)
    rb = ReplayBuffer(300)
    rb.extend(td[:, :25])
    rb.extend(td[:, 25:])
    assert rb.num_streams == 3 and len(rb) == 120
    stored = rb.storage[:40]  # [L, S] time-major
    for key in td.keys(True, True):
        torch.testing.assert_close(stored[key].transpose(0, 1), td[key], rtol=0, atol=0)


@pytest.mark.parametrize("extend_as", ["steps", "rollouts"])
def test_circular_overwrite_keeps_exactly_the_newest_capacity_items(extend_as):
    rb = ReplayBuffer(8, num_streams=2)  # 4 steps per stream
    batches = steps(11)
    if extend_as == "steps":
        for b in batches:
            rb.extend(b)
    else:
        rollout = torch.stack(batches, 1)  # [2, 11]
        rb.extend(rollout[:, :3])
        rb.extend(rollout[:, 3:10])  # wraps around inside one extend
        rb.extend(rollout[:, 10:])
    assert len(rb) == 8
    assert stored_values(rb) == {100.0 * t + s for t in range(7, 11) for s in range(2)}


def test_single_stream_time_batches_and_a_batch_longer_than_the_buffer():
    rb = ReplayBuffer(5)
    flat = [torch.cat(steps(3, start=3 * i, streams=1)) for i in range(4)]  # [3] time batches
    for b in flat:
        rb.extend(b)
    assert rb.num_streams == 1 and len(rb) == 5
    assert stored_values(rb) == {100.0 * t for t in range(7, 12)}
    rb.extend(torch.cat(steps(7, start=20, streams=1)))  # longer than capacity: newest 5 kept
    assert stored_values(rb) == {100.0 * t for t in range(22, 27)}
    sample = rb.sample(50)
    assert set(sample["observation"][:, 0].tolist()) <= {100.0 * t for t in range(22, 27)}


def test_sample_returns_the_stored_item_at_index(rollout):
    td = rollout(3, 40)
    rb = ReplayBuffer(90, generator=1)  # wraps: 30 of 40 steps per stream kept
    rb.extend(td)
    sample = rb.sample(64)
    flat = rb.storage.reshape(-1)
    for key in td.keys(True, True):
        torch.testing.assert_close(sample[key], flat[sample["index"]][key], rtol=0, atol=0)
    assert sample.batch_size == (64,)


def _chi2_critical(df: int, z: float) -> float:
    # Wilson-Hilferty approximation of the chi-square quantile (z: standard-normal quantile).
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def test_uniform_sampling_passes_a_chi_square_test():
    rb = ReplayBuffer(60, num_streams=3, generator=0)
    for b in steps(27, streams=3):  # 20 per stream kept, 60 items, wrapped
        rb.extend(b)
    counts = np.zeros(60)
    for _ in range(30):
        np.add.at(counts, rb.sample(1000)["index"].numpy(), 1)
    expected = counts.sum() / 60
    stat = ((counts - expected) ** 2 / expected).sum()
    assert stat < _chi2_critical(59, 3.09)  # alpha = 0.001
    assert stat > _chi2_critical(59, -3.09)  # and not suspiciously regular


def test_seeded_sampling_is_reproducible():
    a, b = ReplayBuffer(20, generator=3), ReplayBuffer(20, generator=3)
    for rb in (a, b):
        for x in steps(5):
            rb.extend(x)
    assert torch.equal(a.sample(32)["index"], b.sample(32)["index"])


# --- bad input -------------------------------------------------------------------------------
def test_bad_input_raises_errors_that_name_the_fault():
    rb = ReplayBuffer(20, num_streams=2)
    with pytest.raises(RuntimeError, match="empty"):
        rb.sample(4)
    good = steps(1)[0]
    rb.extend(good)
    missing = good.exclude(("next", "reward"))
    with pytest.raises(KeyError, match=r"missing \[\('next', 'reward'\)\]"):
        rb.extend(missing)
    extra = good.clone().set("extra", torch.zeros(2))
    with pytest.raises(KeyError, match="extra"):
        rb.extend(extra)
    wrong_shape = good.clone().set("observation", torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"'observation'.*\(4,\).*\(3,\)"):
        rb.extend(wrong_shape)
    wrong_dtype = good.clone().set("observation", torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"'observation'.*float64.*float32"):
        rb.extend(wrong_dtype)
    with pytest.raises(ValueError, match=r"batch size \(3,\).*2 env streams"):
        rb.extend(torch.cat([good, good[:1]]))
    assert len(rb) == 2  # nothing of the bad batches was written
    with pytest.raises(ValueError, match="n_steps"):
        ReplayBuffer(4, n_steps=5)
    with pytest.raises(ValueError, match="n_steps=3 exceeds the 2 steps"):
        ReplayBuffer(4, num_streams=2, n_steps=3).extend(good)
    with pytest.raises(ValueError, match="batch_size"):
        rb.sample(0)


# --- save / load -----------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_save_then_load_is_exact(cls, rollout, tmp_path):
    td = rollout(3, 40)
    rb = cls(60, n_steps=3, gamma=0.9, generator=5)
    rb.extend(td)  # wraps: cursor != 0
    if cls is PrioritizedReplayBuffer:
        s = rb.sample(16)
        rb.update_priority(s["index"], torch.rand(16) * 5)
    rb.save(tmp_path / "rb")
    loaded = cls(60, n_steps=3, gamma=0.9)
    loaded.load(tmp_path / "rb")
    assert len(loaded) == len(rb) and loaded.num_streams == rb.num_streams
    assert loaded.stream_storage.cursor == rb.stream_storage.cursor == 40 % 20
    assert (loaded.storage == rb.storage).all()
    if cls is PrioritizedReplayBuffer:
        assert np.array_equal(loaded._tree.sums, rb._tree.sums)
        assert np.array_equal(loaded._tree.mins, rb._tree.mins)
        assert loaded.max_priority == rb.max_priority
    # the sampler state travels too: the next samples are identical
    assert (loaded.sample(32) == rb.sample(32)).all()
    # and the loaded buffer goes on like the original
    for b in (rb, loaded):
        b.extend(td[:, :5])
    assert (loaded.storage == rb.storage).all()


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_a_partly_filled_buffer_saves_only_its_filled_rows_and_loads_exactly(
    cls, rollout, tmp_path
):
    td = rollout(3, 40)
    rb = cls(30_000, generator=5)  # 10,000 rows per stream, 40 filled
    rb.extend(td)
    rb.save(tmp_path / "rb")
    saved = sum(f.stat().st_size for f in (tmp_path / "rb").rglob("*") if f.is_file())
    full = sum(v.numel() * v.element_size() for v in rb.storage.values(True, True))
    assert saved < full / 50  # the filled 40 of 10,000 rows, not the whole capacity
    loaded = cls(30_000)
    loaded.load(tmp_path / "rb")
    assert len(loaded) == len(rb) == 120 and loaded.stream_storage.cursor == 40
    assert (loaded.storage[:40] == rb.storage[:40]).all()
    assert (loaded.sample(64) == rb.sample(64)).all()
    for b in (rb, loaded):  # and it goes on like the original
        b.extend(td[:, :5])
    assert (loaded.storage[:45] == rb.storage[:45]).all()


def test_sampler_state_is_json_and_a_numpy_only_state_still_loads(rollout):
    # Uniform indices come from a torch generator, slices and priorities from numpy's: both
    # travel in sampler_state (as JSON values, what save() writes), and a state saved before
    # the torch generator existed (numpy's alone) restores numpy's and leaves the other be.
    td = rollout(2, 30)

    def buffer(seed: int) -> ReplayBuffer:
        rb = ReplayBuffer(64, generator=seed)
        rb.extend(td)
        return rb

    rb = buffer(3)
    state = json.loads(json.dumps(rb.sampler_state()))
    first = rb.sample(8)["index"], rb.sample_slices(2, 3)["index"]
    other = buffer(99)
    other.load_sampler_state(state)
    again = other.sample(8)["index"], other.sample_slices(2, 3)["index"]
    assert all((a == b).all() for a, b in zip(first, again, strict=True))
    legacy = buffer(99)
    index_state = legacy.index_generator.get_state()
    legacy.load_sampler_state(state["numpy"])
    assert (legacy.index_generator.get_state() == index_state).all()
    assert (legacy.sample_slices(2, 3)["index"] == first[1]).all()
    for bad in ("zz", "00ff"):  # not hex; hex of the wrong length
        with pytest.raises(ValueError, match="'index' generator state"):
            legacy.load_sampler_state({**state, "index": bad})


def test_state_dict_round_trip_and_empty_buffer(tmp_path):
    rb = ReplayBuffer(10)
    rb.save(tmp_path / "empty")
    other = ReplayBuffer(10)
    other.load(tmp_path / "empty")
    assert len(other) == 0
    rb.extend(torch.cat(steps(4, streams=1)))
    other.load_state_dict(rb.state_dict())
    assert (other.storage == rb.storage).all() and len(other) == 4
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(11).load_state_dict(rb.state_dict())


def test_a_buffer_on_any_device_samples_what_the_cpu_buffer_does(rollout, device):
    # Same generator, same writes: uniform n-step, slice, frame-stacked and prioritized samples
    # (with their priority updates) on `device` equal the CPU buffer's, and live on `device`.
    from tdrl.collectors import Collector
    from tdrl.data import PrioritizedReplayBuffer
    from tdrl.envs import FrameStack, make_vec_env
    from tests.tiny_envs import Counting

    td = rollout(3, 40)
    with make_vec_env(lambda: FrameStack(Counting(), 4), 3, seed=0) as env:
        stacks = Collector(env, None, 3 * 40).rollout()  # 4-frame stacks, as the buffer's
    kinds = {
        "nstep": (lambda dev: ReplayBuffer(90, device=dev, n_steps=3, gamma=0.9, generator=3), td),
        "frames": (
            lambda dev: ReplayBuffer(
                90, device=dev, generator=3, frame_keys=["observation"], frame_stack=4
            ),
            stacks,
        ),
        "per": (lambda dev: PrioritizedReplayBuffer(90, device=dev, n_steps=2, generator=3), td),
    }
    for name, (make, data) in kinds.items():
        cpu, other = make("cpu"), make(device)
        for part in (data[:, :25], data[:, 25:]):
            cpu.extend(part)
            other.extend(part.to(device))
        for _ in range(3):
            want, got = cpu.sample(16), other.sample(16)
            assert got.device.type == device and got["observation"].device.type == device
            assert (got.cpu() == want).all()
            if isinstance(cpu, PrioritizedReplayBuffer):
                priority = want["index"].float().remainder(7) + 0.5
                cpu.update_priority(want["index"], priority)
                other.update_priority(got["index"], priority.to(device))
        if not isinstance(cpu, PrioritizedReplayBuffer):  # its slices draw starts by priority
            want, got = cpu.sample_slices(4, 4), other.sample_slices(4, 4)  # <= 5-step episodes
            assert (got.cpu() == want).all()
        if name != "frames":  # padded slices take no frame stacks
            want, got = cpu.sample_slices(4, 4, pad=True), other.sample_slices(4, 4, pad=True)
            assert got["mask"].device.type == device and (got.cpu() == want).all()


def test_disk_backed_storage_samples_what_the_in_memory_one_does(rollout, tmp_path, fast_mode):
    td = rollout(3, 40)
    ram = ReplayBuffer(90, n_steps=3, gamma=0.9, generator=7)
    disk = ReplayBuffer(90, n_steps=3, gamma=0.9, generator=7, storage_path=tmp_path / "rb")
    for part in (td[:, :25], td[:, 25:]):  # wraps around the 30 steps per stream
        ram.extend(part)
        disk.extend(part)
    files = sorted(p.name for p in (tmp_path / "rb").iterdir())
    assert len(files) == len(list(td.keys(True, True))) and all(f.endswith(".bin") for f in files)
    assert (ram.storage == disk.storage).all()
    for _ in range(3):
        a, b = ram.sample(64), disk.sample(64)
        assert (a == b).all()
    assert (ram.sample_slices(8, 4) == disk.sample_slices(8, 4)).all()
    # the data are in the files: a fresh memory map of one leaf reads the same values
    leaf = disk.stream_storage.leaves[0]
    again = torch.from_file(
        str(tmp_path / "rb" / "leaf0.bin"), size=leaf.numel(), dtype=leaf.dtype
    ).view(leaf.shape)
    assert torch.equal(again, leaf)
    # a new buffer on the same folder (a resumed run, a new process) allocates afresh and
    # loads a saved state; the old buffer's data stay readable
    before = disk.storage.clone()
    disk.save(tmp_path / "saved")
    resumed = ReplayBuffer(90, n_steps=3, gamma=0.9, generator=7, storage_path=tmp_path / "rb")
    resumed.load(tmp_path / "saved")
    assert (resumed.storage == before).all() and (disk.storage == before).all()
    resumed.extend(td[:, :5])  # and writes into its own files


def test_a_refused_load_leaves_a_disk_backed_buffer_and_its_files_as_they_were(rollout, tmp_path):
    folder = tmp_path / "rb"
    disk = ReplayBuffer(60, generator=7, storage_path=folder)
    disk.extend(rollout(3, 20))
    other = ReplayBuffer(60, generator=8)
    other.extend(rollout(3, 20) * 2)
    good = other.state_dict()
    bad = dict(good, rng={"numpy": good["rng"]["numpy"], "index": "00"})
    files = {p.name: (p.stat().st_ino, p.read_bytes()) for p in folder.iterdir()}
    before = disk.storage.clone()
    with pytest.raises(ValueError, match="unusable 'index' generator state"):
        disk.load_state_dict(bad)  # its files were replaced by the half-loaded state before
    assert {p.name: (p.stat().st_ino, p.read_bytes()) for p in folder.iterdir()} == files
    assert (disk.storage == before).all()
    disk.load_state_dict(good)
    assert (disk.storage == other.storage).all() and not (folder / ".loading").exists()
    leaf = disk.stream_storage.leaves[0]
    again = torch.from_file(str(folder / "leaf0.bin"), size=leaf.numel(), dtype=leaf.dtype)
    assert torch.equal(again.view(leaf.shape), leaf)  # the loaded data are in the folder's files
    assert sorted(p.name for p in folder.iterdir()) == sorted(files)


def test_an_empty_batch_is_checked_like_any_other():
    rb = ReplayBuffer(10)
    rb.extend(torch.stack(steps(2), 1))  # a [2, 2] rollout: 2 streams
    empty = steps(1)[0].unsqueeze(1)[:, :0]  # [2, 0]
    rb.extend(empty)  # writes nothing
    assert len(rb) == 4
    wrong = empty.clone()
    wrong["junk"] = torch.zeros(2, 0)
    with pytest.raises(KeyError, match=r"extra \['junk'\]"):
        rb.extend(wrong)
    wide = empty.clone()
    wide["observation"] = wide["observation"].double()
    with pytest.raises((TypeError, ValueError), match="'observation'"):
        rb.extend(wide)
    assert len(rb) == 4


def test_storage_starts_as_zeros_in_every_dtype():
    # the storage comes from numpy's zeroed memory where numpy has the dtype, torch's otherwise
    batch = TensorDict(
        {
            "observation": torch.ones(8, 17),
            "half": torch.ones(8, 2, dtype=torch.bfloat16),  # no numpy twin: torch.zeros
            "next": {"done": torch.ones(8, 1, dtype=torch.bool)},
        },
        batch_size=[8],
    )
    rb = ReplayBuffer(1_000, num_streams=8)
    rb.extend(batch)
    for key, value in (("observation", 1.0), ("half", 1.0), (("next", "done"), True)):
        leaf = rb.storage[key]
        assert bool((leaf[0] == value).all()) and not bool(leaf[1:].any()), key
        assert leaf.dtype == batch[key].dtype
