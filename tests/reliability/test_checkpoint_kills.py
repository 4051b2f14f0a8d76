"""A save killed at any stage leaves a run that resumes: from the new checkpoint if it was
complete, else from the previous one, with a buffer that matches its counters; and a sync run
resumed after such a kill logs exactly what an uninterrupted run logs."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

from tdrl.collectors import Collector
from tdrl.data import ReplayBuffer
from tdrl.envs import make_vec_env
from tdrl.trainers import checkpoint as checkpoint_module
from tdrl.trainers import configure, latest_checkpoint, read_csv
from tdrl.trainers.run import resume_run, save_run


class Killed(BaseException):
    """Stands for SIGKILL at one point of a save (nothing after it runs)."""


class Stages:
    """Counts the file operations of a save (fsync of each file, renames, removals) and kills the
    save at the ``kill_at``-th one (0: never)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, kill_at: int = 0) -> None:
        self.count, self.kill_at = 0, kill_at
        for obj, name in ((checkpoint_module, "_fsync"), (os, "replace"), (shutil, "rmtree")):
            original = getattr(obj, name)
            monkeypatch.setattr(obj, name, self._wrap(original))

    def _wrap(self, original):
        def staged(*args, **kwargs):
            self.count += 1
            if self.count == self.kill_at:
                raise Killed(f"killed at stage {self.count}")
            return original(*args, **kwargs)

        return staged


def _state(root: Path):
    env = make_vec_env("CartPole-v1", 2, seed=0)
    collector = Collector(env, None, 10)
    buffer = ReplayBuffer(200)
    net = torch.nn.Linear(4, 2)
    return env, collector, buffer, net


def test_a_kill_at_every_stage_of_a_save_leaves_a_resumable_checkpoint(tmp_path, monkeypatch):
    root = tmp_path / "run"
    env, collector, buffer, net = _state(root)
    with env:
        buffer.extend(collector.rollout())
        save_run(root, collector, {"frames": collector.frames}, buffer, net=net)  # frames 10
        buffer.extend(collector.rollout())  # frames 20, the save that gets killed
        with monkeypatch.context() as m:
            stages = Stages(m)
            save_run(tmp_path / "count", collector, {"frames": 20}, buffer, net=net)
        total = stages.count
        assert total >= 10  # every file, the manifest, the folder, the switch, the cleanup
        outcomes = set()
        for k in range(1, total + 1):
            trial = tmp_path / f"trial{k}"
            shutil.copytree(root, trial)
            with monkeypatch.context() as m:
                Stages(m, kill_at=k)
                with pytest.raises(Killed):
                    save_run(trial, collector, {"frames": collector.frames}, buffer, net=net)
            fresh_buffer, fresh_collector = ReplayBuffer(200), Collector(env, None, 10)
            counters = resume_run(trial, fresh_collector, fresh_buffer, net=torch.nn.Linear(4, 2))
            assert counters is not None, f"stage {k}: nothing to resume from"
            frames = counters["frames"]
            assert frames in (10, 20), k
            assert len(fresh_buffer) == frames, f"stage {k}: buffer and counters disagree"
            assert fresh_collector.frames == frames
            outcomes.add(frames)
        assert outcomes == {10, 20}  # early kills keep the old one, late ones the new one


@pytest.mark.parametrize("kill_at", [3, 9])
def test_a_sync_run_resumed_after_a_killed_save_logs_what_an_uninterrupted_run_logs(
    kill_at, tmp_path, monkeypatch
):
    sys.path.insert(0, str(Path(__file__).parents[2] / "recipes"))
    import dqn

    tiny = dict(
        total_frames=1024, init_random_frames=256, frames_per_batch=64, eval_every=512,
        eval_episodes=2, eval_envs=2, batch_size=16, hidden_sizes=(16, 16), progress=False,
        tensorboard=False, curve=False, checkpoint_every=256, log_every=0,
    )  # fmt: skip
    straight = configure(dqn.Config, log_dir=str(tmp_path / "straight"), **tiny)
    dqn.main(straight)
    killed = configure(straight, log_dir=str(tmp_path / "killed"))
    saves = {"n": 0}
    from tdrl.trainers import run as run_module

    real_save = run_module.save_run

    def save_then_maybe_die(*args, **kwargs):
        saves["n"] += 1
        if saves["n"] == 3:  # the third checkpoint is killed part-way
            with monkeypatch.context() as m:
                Stages(m, kill_at=kill_at)
                return real_save(*args, **kwargs)
        return real_save(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(run_module, "save_run", save_then_maybe_die)
        with pytest.raises(Killed):
            dqn.main(killed)
    assert latest_checkpoint(Path(killed.run.log_dir)) is not None
    dqn.main(configure(killed, resume=True))
    expected = [
        {k: v for k, v in r.items() if "time" not in k}
        for r in read_csv(tmp_path / "straight" / "train.csv")
    ]
    got = [
        {k: v for k, v in r.items() if "time" not in k}
        for r in read_csv(tmp_path / "killed" / "train.csv")
    ]
    assert got == expected


def test_a_truncated_last_csv_row_does_not_break_resume_and_steps_keep_one_format(tmp_path):
    from tdrl.trainers.run import drop_rows_after

    log = tmp_path / "train.csv"
    log.write_text("step,loss\n100,0.5\n200,0.25\n300,0.1\n400,0.0")  # last row cut by a kill
    with open(log, "a") as f:
        f.write("\n5")  # a row cut inside its first cell
    drop_rows_after(tmp_path, 300)
    assert log.read_text().splitlines() == ["step,loss", "100,0.5", "200,0.25", "300,0.1"]
    with pytest.raises(ValueError, match="data row 2"):
        (tmp_path / "bad.csv").write_text("step,loss\n100,0.5\n1x0,0.2\n200,0.1\n")
        read_csv(tmp_path / "bad.csv")
