"""A resume continues the same run or says why not: a checkpoint of another recipe, with other
settings or on other data is refused (naming each difference) unless --resume-allow-changes;
weights, buffer data and counters no run could have written are refused naming the file and
entry; a file the manifest does not list is refused; IMPALA on Ray killed mid-save resumes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from recipes import a2c, dqn, ppo
from tdrl.data.integrity import file_records
from tdrl.trainers import configure, latest_checkpoint, read_csv
from tdrl.trainers.checkpoint import CHECKPOINTS, MANIFEST
from tdrl.trainers.config import RunFolderError, flat_dict

QUIET = dict(progress=False, tensorboard=False, curve=False)
ON_POLICY = dict(
    env_id="CartPole-v1", total_frames=384, num_envs=2, frames_per_batch=64, eval_every=192,
    eval_episodes=2, eval_envs=2, hidden_sizes=(16, 16), checkpoint_every=64, **QUIET,
)  # fmt: skip


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but the lock, by its path: what a refused resume must keep."""
    files = (p for p in root.rglob("*") if p.is_file() and p.name != ".lock")
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in files}


def _ppo(log_dir: Path, **changes):
    cfg = configure(ppo.Config, **ON_POLICY, epochs=2, minibatch_size=32, log_dir=str(log_dir))
    return configure(cfg, **changes)


def test_changed_settings_are_refused_by_name_until_allowed(tmp_path):
    first = _ppo(tmp_path, stop_after_frames=128)
    ppo.main(first)  # paused at step 128
    old = flat_dict(first)
    before = _tree(tmp_path)
    changed = configure(first, resume=True, gamma=0.9, lr=1e-3)
    with pytest.raises(RunFolderError) as refused:
        ppo.main(changed)
    message = str(refused.value)
    assert f"gamma {old['gamma']!r} -> 0.9" in message
    assert f"lr {old['lr']!r} -> 0.001" in message
    assert "000000000128" in message and "--resume-allow-changes" in message
    assert "stop_after_frames" not in message and "log_dir" not in message
    assert _tree(tmp_path) == before  # nothing written, nothing removed

    ppo.main(configure(changed, resume_allow_changes=True))  # goes on to 256, warns
    assert f"gamma {old['gamma']!r} -> 0.9" in (tmp_path / "warnings.log").read_text()
    saved = json.loads((latest_checkpoint(tmp_path) / "run.json").read_text())
    assert saved["recipe"] == "ppo" and saved["config"]["gamma"] == 0.9
    # the run's bookkeeping may change without the flag: budget, evaluation, pause, device
    last = configure(changed, total_frames=448, eval_episodes=3, stop_after_frames=0, device="cpu")
    assert ppo.main(last)["frames"] == 448
    assert [r["step"] for r in read_csv(tmp_path / "eval.csv")] == [192, 384, 448]


def test_a_checkpoint_of_another_recipe_is_refused_naming_it(tmp_path):
    a2c.main(configure(a2c.Config, **ON_POLICY, log_dir=str(tmp_path), stop_after_frames=128))
    before = _tree(tmp_path)
    with pytest.raises(RunFolderError, match="written by the recipe 'a2c', this is 'ppo'"):
        ppo.main(_ppo(tmp_path, resume=True))
    assert _tree(tmp_path) == before


def test_an_offline_run_is_refused_on_other_data_under_the_same_id(tmp_path, monkeypatch):
    pytest.importorskip("minari")
    from recipes import offline
    from tdrl.collectors import Collector
    from tdrl.data import save_minari
    from tdrl.envs import make_vec_env

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))

    def write_dataset(steps: int) -> None:
        shutil.rmtree(tmp_path / "datasets" / "tdrl" / "hopper-tiny-v0", ignore_errors=True)
        with make_vec_env("Hopper-v5", 2, seed=steps) as env:
            save_minari(Collector(env, None, steps).rollout(), "tdrl/hopper-tiny-v0", "Hopper-v5")

    write_dataset(400)
    run = tmp_path / "run"
    first = configure(
        offline.Config, dataset="tdrl/hopper-tiny-v0", algo="bc", total_frames=60,
        eval_every=30, checkpoint_every=30, stop_after_frames=30, batch_size=16,
        hidden_sizes=(16,), eval_episodes=1, log_dir=str(run), **QUIET,
    )  # fmt: skip
    offline.main(first)
    write_dataset(200)  # the same id, other steps
    before = _tree(run)
    resumed = configure(first, resume=True, stop_after_frames=0)
    with pytest.raises(RunFolderError) as refused:
        offline.main(resumed)
    assert "dataset transitions 400 -> 200" in str(refused.value)
    assert "dataset sha256 '" in str(refused.value)
    assert _tree(run) == before
    result = offline.main(configure(resumed, resume_allow_changes=True))
    assert result["frames"] == 60


# --- what a checkpoint holds: counters, weights, buffer data, the manifest's file list --------
DQN = dict(
    total_frames=512, init_random_frames=256, frames_per_batch=64, eval_every=256,
    eval_episodes=2, eval_envs=2, batch_size=16, hidden_sizes=(16, 16), checkpoint_every=64,
    **QUIET,
)  # fmt: skip


@pytest.fixture(scope="module")
def paused_dqn(tmp_path_factory) -> Path:
    """A DQN run (replay buffer, gradient steps at utd 0.5) paused at step 320."""
    root = tmp_path_factory.mktemp("paused") / "run"
    dqn.main(configure(dqn.Config, **DQN, log_dir=str(root), stop_after_frames=320))
    return root


def _copy(paused: Path, to: Path) -> tuple[Path, Path]:
    shutil.copytree(paused, to)
    return to, latest_checkpoint(to)


def _resume(run: Path):
    return dqn.main(configure(dqn.Config, **DQN, log_dir=str(run), resume=True))


def _resave(folder: Path, payload=None, buffer_leaf: tuple[str, float] | None = None) -> None:
    """Change a checkpoint as a save would have written it: edit ``checkpoint.pt`` with
    ``payload(p)``, or set row 0 of a buffer leaf; then new SHA-256 sums in both manifests."""
    if payload is not None:
        p = torch.load(folder / "checkpoint.pt", weights_only=True)
        payload(p)
        torch.save(p, folder / "checkpoint.pt")
    if buffer_leaf is not None:
        name, value = buffer_leaf
        tensors = folder / "buffer" / "tensors"
        leaf = np.memmap(tensors / "storage" / f"{name}.memmap", dtype=np.float32, mode="r+")
        leaf[0] = value
        leaf.flush()
        del leaf
        meta = json.loads((folder / "buffer" / "meta.json").read_text())
        meta["files"] = file_records(tensors)
        (folder / "buffer" / "meta.json").write_text(json.dumps(meta))
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"] = {k: v for k, v in file_records(folder).items() if k != MANIFEST}
    (folder / MANIFEST).write_text(json.dumps(manifest))


def _first_weight(p: dict) -> None:
    weight = next(v for v in p["loss"].values() if v.is_floating_point())
    weight.view(-1)[0] = float("nan")


def _counter(name: str, value):
    def edit(p: dict) -> None:
        p["counters"][name] = value(p["counters"][name])

    return edit


@pytest.mark.parametrize(
    ("damage", "payload", "buffer_leaf", "error"),
    [
        ("none", lambda p: None, None, None),  # the edit itself is harmless
        ("NaN weight", _first_weight, None, r"checkpoint.pt: entry 'loss', '.*' holds NaN"),
        ("inf reward", None, ("next/reward", np.inf), r"buffer/ entry 'next/reward' holds NaN"),
        ("negative count", _counter("updates", lambda n: -1), None,
         r"counter 'updates' is -1, not a count"),
        ("more batches than steps", _counter("batches", lambda n: 10_000), None,
         r"counter 'batches' is 10000, more batches than the 320 steps"),
        ("updates above the ratio", _counter("updates", lambda n: n + 100), None,
         r"counter 'updates' is 132, more than the 32 gradient steps that utd_ratio 0.5"),
    ],
)  # fmt: skip
def test_counters_weights_and_buffer_data_no_run_could_write_are_refused(
    paused_dqn, tmp_path, damage, payload, buffer_leaf, error
):
    run, folder = _copy(paused_dqn, tmp_path / "run")
    _resave(folder, payload, buffer_leaf)
    if error is None:
        assert _resume(run)["frames"] == 512
        return
    before = _tree(run)
    with pytest.raises(ValueError, match=error):
        _resume(run)
    if damage != "updates above the ratio":  # refused at the first batch's count, not at start
        assert _tree(run) == before


def test_a_checkpoint_without_run_json_is_refused_unless_allowed(paused_dqn, tmp_path):
    run, folder = _copy(paused_dqn, tmp_path / "run")
    # as saved before checkpoints kept the run's settings
    (folder / "run.json").unlink(missing_ok=True)
    _resave(folder)
    before = _tree(run)
    with pytest.raises(RunFolderError, match="holds no run.json .* cannot be checked"):
        _resume(run)
    assert _tree(run) == before
    resumed = configure(dqn.Config, **DQN, log_dir=str(run), resume=True)
    assert dqn.main(configure(resumed, resume_allow_changes=True))["frames"] == 512


def test_a_checkpoint_saved_before_a_field_was_added_resumes_at_that_fields_old_value(
    paused_dqn, tmp_path
):
    from tdrl.trainers.run import check_same_run

    run, folder = _copy(paused_dqn, tmp_path / "run")
    saved = json.loads((folder / "run.json").read_text())
    assert saved["config"].pop("layout_seed") == -1  # as written before the flag existed
    (folder / "run.json").write_text(json.dumps(saved))
    _resave(folder)
    # against another value the missing field is a difference, named with its old value
    identity = {"recipe": "dqn", "config": {**saved["config"], "layout_seed": 3}}
    with pytest.raises(RunFolderError, match=r"layout_seed -1 -> 3"):
        check_same_run(folder, identity)
    # the evaluation mode may change on resume
    flipped = {"recipe": "dqn", "config": {**saved["config"], "layout_seed": -1,
                                           "eval_deterministic": False}}  # fmt: skip
    assert check_same_run(folder, flipped) == []
    assert _resume(run)["frames"] == 512


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        ("extra file", r"file 'notes.txt' is not in the manifest"),
        ("extra buffer file", r"file 'buffer/tensors/stray.memmap' is not in the manifest"),
        ("manifest of another step", r"the manifest is of step 256, the folder's name says 320"),
    ],
)
def test_a_checkpoint_folder_holds_exactly_what_its_manifest_lists(
    paused_dqn, tmp_path, damage, error
):
    run, folder = _copy(paused_dqn, tmp_path / "run")
    if damage == "extra file":
        (folder / "notes.txt").write_text("added later")
    elif damage == "extra buffer file":
        (folder / "buffer" / "tensors" / "stray.memmap").write_bytes(b"\0" * 8)
    else:
        manifest = json.loads((folder / MANIFEST).read_text())
        (folder / MANIFEST).write_text(json.dumps({**manifest, "step": 256}))
    before = _tree(run)
    with pytest.raises(ValueError, match=error):
        _resume(run)
    assert _tree(run) == before


class Killed(BaseException):
    """Stands for SIGKILL during a save (nothing after it runs)."""


@pytest.mark.workers
@pytest.mark.ray
def test_impala_on_ray_killed_mid_save_resumes_to_its_budget(tmp_path, local_ray, monkeypatch):
    pytest.importorskip("ray")
    from recipes import impala
    from tdrl.trainers import run as run_module

    cfg = configure(
        impala.Config, env_id="CartPole-v1", collector="ray", num_workers=2, num_envs=2,
        total_frames=640, frames_per_batch=64, eval_every=320, eval_episodes=2, eval_envs=2,
        checkpoint_every=128, hidden_sizes=(16, 16), log_dir=str(tmp_path), **QUIET,
    )  # fmt: skip
    real_save, real_replace, saves = run_module.save_run, os.replace, []

    def replace(src, dst):  # the third save dies at the rename that would complete it
        if len(saves) == 3 and Path(src).suffix == ".tmp" and Path(src).is_dir():
            raise Killed
        return real_replace(src, dst)

    def save(*args, **kwargs):
        saves.append(1)
        return real_save(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(run_module, "save_run", save)
        m.setattr(os, "replace", replace)
        with pytest.raises(Killed):
            impala.main(cfg)
    checkpoints = sorted(p.name for p in (tmp_path / CHECKPOINTS).iterdir())
    assert checkpoints == ["000000000256", "000000000384.tmp"]

    before = _tree(tmp_path)
    with pytest.raises(RunFolderError, match=r"rho_thresh 1.0 -> 0.5"):
        impala.main(configure(cfg, resume=True, rho_thresh=0.5))
    assert _tree(tmp_path) == before  # the unfinished save too: a refused resume removes nothing

    result = impala.main(configure(cfg, resume=True))
    assert result["frames"] == 640
    assert sorted(p.name for p in (tmp_path / CHECKPOINTS).iterdir()) == ["000000000640"]
    assert [r["step"] for r in read_csv(tmp_path / "eval.csv")] == [320, 640]
    train = read_csv(tmp_path / "train.csv")
    steps = [r["step"] for r in train]
    assert steps == sorted(set(steps)) and steps[-1] == 640  # no row of the killed run twice
    assert [r["updates"] for r in train] == list(range(1, len(train) + 1))
