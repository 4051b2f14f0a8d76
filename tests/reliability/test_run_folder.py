"""A run folder never loses data: what a resume cannot read is refused (never written over), two
processes never share a folder, a full disk is an error that keeps the last checkpoint, and
unfinished saves are cleared when a run resumes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tdrl.collectors import Collector
from tdrl.data import ReplayBuffer
from tdrl.modules import actor_critic
from tdrl.trainers import Run, configure, latest_checkpoint, make_envs
from tdrl.trainers.checkpoint import CHECKPOINTS, MANIFEST, write_checkpoint_dir
from tdrl.trainers.config import LogConfig, RunConfig, RunFolderError, configclass


@configclass
class Config:
    run: RunConfig = RunConfig(
        env_id="CartPole-v1", total_frames=32, num_envs=2, eval_every=0, checkpoint_every=16,
        log=LogConfig(progress=False, tensorboard=False, curve=False),
    )  # fmt: skip


def _train(log_dir: Path, *, resume: bool = False, total_frames: int = 32) -> Run:
    """A short run (random actions, no updates) with checkpoints every 16 steps."""
    cfg = configure(Config, log_dir=str(log_dir), resume=resume, total_frames=total_frames)
    env, eval_env = make_envs(cfg.run)
    actor, _, _ = actor_critic(env.observation_spec, env.action_spec, hidden_sizes=(8,))
    run = Run.from_config(cfg.run, "X", {"actor": actor}, eval_env=eval_env, policy=actor)
    collector = Collector(env, None, 8, cfg.run.total_frames)
    with run:
        for _ in run.resume(collector):
            run.step()
    return run


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("damage", ["no manifest", "old layout"])
def test_resume_refuses_a_checkpoint_it_cannot_read_and_changes_nothing(tmp_path, damage):
    _train(tmp_path)
    checkpoints = tmp_path / CHECKPOINTS
    (folder,) = checkpoints.iterdir()
    if damage == "no manifest":  # a step folder written by something else, or half-deleted
        (folder / MANIFEST).unlink()
        culprit = folder.name
    else:  # a flat checkpoint file of another layout, where the step folders go
        (folder / "checkpoint.pt").rename(checkpoints / "checkpoint.pt")
        shutil.rmtree(folder)
        culprit = "checkpoint.pt"
    before = _tree(tmp_path)
    with pytest.raises(ValueError, match=f"{culprit}.* is not a checkpoint tdrl can read"):
        _train(tmp_path, resume=True, total_frames=64)
    after = {k: v for k, v in _tree(tmp_path).items() if k != ".lock"}
    assert after == {k: v for k, v in before.items() if k != ".lock"}  # logs and files intact


def test_a_save_removes_unfinished_and_older_complete_folders_only(tmp_path):
    def write(folder: Path) -> None:
        (folder / "a").write_bytes(b"x")

    write_checkpoint_dir(tmp_path, 10, write)
    foreign = tmp_path / "000000000005"  # a step folder without a manifest: not ours to delete
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    (tmp_path / "000000000015.tmp").mkdir()
    newest = write_checkpoint_dir(tmp_path, 20, write)
    assert sorted(p.name for p in tmp_path.iterdir()) == [foreign.name, newest.name]
    assert (foreign / "notes.txt").read_text() == "keep me"


HOLD = """
import sys, time
from pathlib import Path
from tdrl.trainers.lock import lock_run_folder
lock = lock_run_folder(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(60)
"""


def test_a_second_process_on_a_run_folder_is_refused_until_the_first_ends(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(RunFolderError, match=rf"in use by process {holder.pid}"):
            _train(tmp_path)
        assert not (tmp_path / CHECKPOINTS).exists()  # the refused run wrote nothing
        with pytest.raises(RunFolderError, match="in use"):
            _train(tmp_path, resume=True)
    finally:
        holder.kill()
        holder.wait()
    _train(tmp_path)  # the lock went with the killed process
    assert latest_checkpoint(tmp_path) is not None


def test_resume_clears_unfinished_saves(tmp_path):
    _train(tmp_path)
    stale = tmp_path / CHECKPOINTS / "000000000024.tmp"  # a save killed or out of disk
    stale.mkdir()
    (stale / "buffer.bin").write_bytes(b"\0" * 4096)
    cfg = configure(Config, log_dir=str(tmp_path), resume=True, total_frames=64)
    env, eval_env = make_envs(cfg.run)
    actor, _, _ = actor_critic(env.observation_spec, env.action_spec, hidden_sizes=(8,))
    run = Run.from_config(cfg.run, "X", {"actor": actor}, eval_env=eval_env, policy=actor)
    with run:
        next(run.resume(Collector(env, None, 8, cfg.run.total_frames)))
        assert run.frames == 32 and not stale.exists()  # gone at resume, before any save


FILL = """
import sys
from pathlib import Path
import torch
from tensordict import TensorDict
from tdrl.data import ReplayBuffer
from tdrl.trainers.checkpoint import write_checkpoint_dir
root = Path(sys.argv[1])
small = ReplayBuffer(10)
small.extend(TensorDict({"observation": torch.zeros(10, 4)}, batch_size=[10]))
write_checkpoint_dir(root, 1, lambda folder: small.save(folder / "buffer"))
big = ReplayBuffer(3000)
big.extend(TensorDict({"observation": torch.randn(3000, 1000)}, batch_size=[3000]))  # 12 MB
try:
    write_checkpoint_dir(root, 2, lambda folder: big.save(folder / "buffer"))
except OSError as err:
    print("refused:", err, flush=True)
"""


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB file system (tmpfs; needs the right to mount, else the test skips)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True
        )
    except OSError as err:  # no mount command
        pytest.skip(f"cannot mount a small tmpfs here: {err}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_during_a_save_is_an_error_that_keeps_the_last_checkpoint(small_disk):
    # The buffer is written through memory maps: without a check, a full disk is SIGBUS.
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(FILL), str(small_disk)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, f"the process died (signal {-done.returncode}): {done.stderr}"
    assert "refused:" in done.stdout and "disk full" in done.stdout
    assert sorted(os.listdir(small_disk)) == ["000000000001"]  # no .tmp left, the last one kept
    root = small_disk.parent
    (root / CHECKPOINTS).symlink_to(small_disk)
    assert latest_checkpoint(root) == root / CHECKPOINTS / "000000000001"  # verified, intact
    restored = ReplayBuffer(10)
    restored.load(root / CHECKPOINTS / "000000000001" / "buffer")
    assert len(restored) == 10
