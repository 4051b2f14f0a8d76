"""recipes/export.py: a run folder's policy, rebuilt by its own recipe, exported; the ONNX model,
run by a process that imports neither tdrl nor torch, scores the run's own final evaluation."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from recipes import export, ppo
from tdrl.data.integrity import file_records
from tdrl.trainers import configure, read_csv
from tdrl.trainers.checkpoint import MANIFEST
from tdrl.trainers.config import RunFolderError

pytest.importorskip("onnxruntime")

TINY = dict(
    total_frames=1024, num_envs=4, frames_per_batch=256, epochs=2, minibatch_size=128,
    eval_every=512, eval_episodes=3, eval_envs=3, checkpoint_every=512, progress=False,
    tensorboard=False,
)  # fmt: skip

# Evaluates policy.onnx as tdrl's final evaluation does (env i reset with seed + i, one episode
# each, float32 observations), with gymnasium and onnxruntime only; prints the mean return.
STANDALONE = """
import json, sys
import gymnasium as gym, numpy as np, onnxruntime as ort
folder, env_id, seed, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
meta = json.load(open(folder + "/policy.json"))
session = ort.InferenceSession(folder + "/policy.onnx")
returns = []
for i in range(n):
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed + i)
    total, done = 0.0, False
    while not done:
        feed = {meta["inputs"][0]["name"]: obs.astype(np.float32)[None]}
        action = session.run(None, feed)[0][0]
        obs, reward, terminated, truncated, _ = env.step(action)
        total, done = total + float(reward), terminated or truncated
    returns.append(total)
assert "tdrl" not in sys.modules and "torch" not in sys.modules
print(json.dumps(sum(returns) / n))
"""


def test_an_exported_ppo_policy_scores_the_runs_evaluation_without_tdrl(tmp_path):
    run = tmp_path / "run"
    ppo.main(configure(ppo.Config, **TINY, log_dir=str(run)))
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    out = export.main(configure(export.Config, run=str(run)))
    assert out == run / "export"
    assert sorted(p.name for p in out.iterdir()) == ["policy.json", "policy.onnx", "policy.pt2"]
    meta = json.loads((out / "policy.json").read_text())
    assert meta["recipe"] == "ppo" and meta["checkpoint"].endswith("000000001024")
    assert meta["inputs"] == [{"name": "observation", "shape": ["B", 11], "dtype": "float32"}]
    assert meta["action_low"] == [-1.0] * 3 and meta["action_high"] == [1.0] * 3
    # nothing in the run folder changed but the export folder
    after = sorted(p.relative_to(run) for p in run.rglob("*") if "export" not in p.parts)
    assert after == before
    final = read_csv(run / "eval.csv")[-1]
    seed = 0 + 10_000  # the recipe's evaluation seed: --seed + EVAL_SEED_OFFSET
    done = subprocess.run(
        [sys.executable, "-c", STANDALONE, str(out), "Hopper-v5", str(seed), "3"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == pytest.approx(final["return_mean"], rel=1e-6)


def test_what_cannot_be_exported_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a run folder with a checkpoint"):
        export.main(configure(export.Config, run=str(tmp_path)))
    run = tmp_path / "run"
    ppo.main(configure(ppo.Config, **{**TINY, "total_frames": 512}, log_dir=str(run)))
    (folder,) = (run / "checkpoints").iterdir()
    written = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps({**written, "recipe": "nope"}))
    manifest = json.loads((folder / MANIFEST).read_text())  # a consistent checkpoint
    manifest["files"] = {k: v for k, v in file_records(folder).items() if k != MANIFEST}
    (folder / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="written by an unknown recipe 'nope'"):
        export.main(configure(export.Config, run=str(run)))
    (folder / "run.json").unlink()
    del manifest["files"]["run.json"]
    (folder / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(FileNotFoundError, match="has no run.json"):
        export.main(configure(export.Config, run=str(run)))
    from tdrl.trainers.run import exporting

    with (
        exporting(tmp_path / "out"),
        pytest.raises(RunFolderError, match="no checkpoint to export"),
    ):
        ppo.main(configure(ppo.Config, **TINY, log_dir=str(tmp_path / "empty")))


@pytest.mark.variants
def test_a_recurrent_policy_and_a_q_network_export_from_their_recipes(tmp_path):
    from recipes import dqn

    recurrent = tmp_path / "lstm"
    ppo.main(configure(ppo.Config, **TINY, env_id="CartPoleNoVel-v1", recurrent="lstm",
                       recurrent_size=8, log_dir=str(recurrent)))  # fmt: skip
    meta = json.loads(
        (export.main(configure(export.Config, run=str(recurrent))) / "policy.json").read_text()
    )
    assert [i["name"] for i in meta["inputs"]][:2] == ["observation", "is_init"]
    assert len(meta["outputs"]) == len(meta["inputs"]) - 1  # the action, then each next state
    q = tmp_path / "dqn"
    dqn.main(configure(dqn.Config, total_frames=600, init_random_frames=200, eval_every=300,
                       eval_episodes=2, checkpoint_every=300, progress=False, tensorboard=False,
                       log_dir=str(q)))  # fmt: skip
    meta = json.loads(
        (export.main(configure(export.Config, run=str(q))) / "policy.json").read_text()
    )
    assert meta["outputs"] == [{"name": "action", "shape": ["B"], "dtype": "int64"}]
    assert "action_low" not in meta
