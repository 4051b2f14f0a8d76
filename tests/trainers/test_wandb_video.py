"""W&B logging (offline, no network) and evaluation videos from a recipe run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

RUN = """
import sys, json
sys.path.insert(0, {recipes!r})
import ppo
from tdrl.trainers import configure
cfg = configure(ppo.Config, env_id={env!r}, total_frames=256, num_envs=2, frames_per_batch=64,
    eval_every=256, eval_episodes=2, eval_envs=2, hidden_sizes=(8, 8), progress=False,
    tensorboard=False, curve=False, log_dir={log_dir!r}, wandb={wandb}, video={video},
    resume={resume})
result = ppo.main(cfg)
print(json.dumps({{"frames": result["frames"]}}))
"""


def _run(
    tmp_path: Path, env: str, wandb: bool, video: bool, resume: bool = False
) -> subprocess.CompletedProcess:
    code = RUN.format(
        recipes=str(ROOT / "recipes"), env=env, log_dir=str(tmp_path / "run"), wandb=wandb,
        video=video, resume=resume,
    )  # fmt: skip
    environ = {**os.environ, "WANDB_MODE": "offline", "MUJOCO_GL": "egl", "WANDB_SILENT": "true"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=environ, capture_output=True, text=True,
        timeout=240,
    )  # fmt: skip


def test_wandb_offline_run_holds_the_logged_scalars(tmp_path):
    pytest.importorskip("wandb")
    out = _run(tmp_path, "CartPole-v1", wandb=True, video=False)
    assert out.returncode == 0, out.stderr[-2000:]
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1
    # The offline record (protobuf) holds the metric names and the config as plain strings.
    data = runs[0].read_bytes()
    for name in (b"train/loss_objective", b"eval/return_mean", b"total_frames"):
        assert name in data, name


@pytest.mark.slow  # a recipe in a subprocess; the W&B smoke stays
def test_a_resumed_run_continues_its_wandb_run(tmp_path):
    pytest.importorskip("wandb")
    for resume in (False, True):
        out = _run(tmp_path, "CartPole-v1", wandb=True, video=False, resume=resume)
        assert out.returncode == 0, out.stderr[-2000:]
    run_id = (tmp_path / "run" / "wandb_id").read_text()
    runs = sorted((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert runs and all(p.name.endswith(f"-{run_id}") for p in runs)


@pytest.mark.slow  # a recipe in a subprocess; the W&B smoke stays
def test_video_has_one_frame_per_step_plus_the_reset(tmp_path):
    imageio = pytest.importorskip("imageio.v2")
    pytest.importorskip("imageio_ffmpeg")
    out = _run(tmp_path, "Hopper-v5", wandb=False, video=True)
    assert out.returncode == 0, out.stderr[-2000:]
    path = tmp_path / "run" / "video" / "final.mp4"
    assert path.stat().st_size > 1000
    frames = imageio.mimread(path, memtest=False)
    lengths = [int(line.split()[-1]) for line in out.stdout.splitlines() if "video frames" in line]
    assert lengths == [len(frames)]  # the frames written are the frames recorded
    assert 2 <= len(frames) <= 1001  # the reset frame plus one per step of one episode
    first = frames[0]
    assert first.shape == (256, 256, 3) and first.std() > 0  # a rendered scene, not a blank
