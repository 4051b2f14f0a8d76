"""tdrl.tune: search spaces, the checks at the door, and a study that survives a kill."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tdrl.tune import Param, Study, flags, parse_param, parse_space_toml

optuna = pytest.importorskip("optuna")

RECIPES = Path(__file__).parents[1] / "recipes"
TINY = ["--env-id", "CartPole-v1", "--total-frames", "512", "--frames-per-batch", "128",
        "--num-envs", "2", "--eval-every", "256", "--eval-episodes", "2", "--eval-envs", "2",
        "--minibatch-size", "64", "--epochs", "1", "--no-tensorboard", "--no-curve"]  # fmt: skip


def test_flags_and_toml_give_the_same_space():
    from_flags = [
        parse_param("lr=log:1e-4:1e-2"),
        parse_param("gamma=float:0.9:0.999"),
        parse_param("epochs=int:2:10"),
        parse_param("hidden-sizes=cat:64,64|256,256"),
    ]
    from_toml = parse_space_toml(
        "[lr]\nlog = [1e-4, 1e-2]\n[gamma]\nfloat = [0.9, 0.999]\n[epochs]\nint = [2, 10]\n"
        "[hidden_sizes]\nchoices = [[64, 64], [256, 256]]\n"
    )
    assert from_flags == from_toml
    assert from_flags[3] == Param("hidden_sizes", "cat", choices=((64, 64), (256, 256)))
    assert flags({"hidden_sizes": (64, 64), "lr": 0.001, "normalize_advantage": False}) == [
        "--hidden-sizes", "64", "64", "--lr", "0.001", "--no-normalize-advantage"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "text, match",
    [
        ("lr", "expected NAME=KIND:LOW:HIGH"),
        ("lr=uniform:0:1", "expected NAME=KIND:LOW:HIGH"),
        ("lr=log:0:1e-2", "LOW > 0 for log"),
        ("gamma=float:0.99:0.9", "needs LOW < HIGH"),
        ("epochs=int:1.5:3", "must be int numbers"),
    ],
)
def test_a_bad_space_entry_is_named(text, match):
    with pytest.raises(ValueError, match=match):
        parse_param(text)


def test_unknown_fields_ranges_the_recipe_refuses_and_another_recipes_study_are_named(tmp_path):
    ppo = RECIPES / "ppo.py"
    with pytest.raises(ValueError, match="ppo has no field 'learning_rate'"):
        Study(ppo, [parse_param("learning_rate=log:1e-4:1e-2")], tmp_path / "a", args=TINY)
    with pytest.raises(ValueError, match=r"gamma=1.5 is refused by ppo's config"):
        Study(ppo, [parse_param("gamma=float:0.9:1.5")], tmp_path / "a", args=TINY)
    with pytest.raises(ValueError, match="sets --seed, --log-dir and --resume itself"):
        Study(ppo, [parse_param("lr=log:1e-4:1e-2")], tmp_path / "a", args=[*TINY, "--seed", "3"])
    study = Study(ppo, [parse_param("lr=log:1e-4:1e-2")], tmp_path / "b", args=TINY)
    study.close()
    a2c = RECIPES / "a2c.py"
    other = r"holds a study of 'ppo' with other args, recipe, space: .*'a2c' here"
    with pytest.raises(ValueError, match=other):
        Study(a2c, [parse_param("lr=log:1e-3:1e-1")], tmp_path / "b", args=TINY[:8])


@pytest.mark.workers
def test_a_killed_study_resumes_and_leaves_no_runs_behind(tmp_path):
    folder = tmp_path / "study"
    command = [sys.executable, str(RECIPES / "tune.py"), "--recipe", "ppo", "--trials", "4",
               "--pruner", "none", "--study-dir", str(folder), "--space", "lr=log:1e-4:1e-2",
               "--", *TINY]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    # kill it while its second trial runs (the first one's summary is written)
    while not (folder / "trials" / "1").exists() and time.monotonic() < deadline:
        assert first.poll() is None, first.stderr.read().decode()[-2000:]
        time.sleep(0.2)
    time.sleep(1.0)
    first.kill()
    first.wait()
    time.sleep(2.5)  # the trial's run notices its parent is gone within a second
    ps = subprocess.run(["pgrep", "-f", f"tdrl.tune .*{folder}"], capture_output=True, text=True)
    assert ps.stdout.strip() == "", f"orphaned trial runs: {ps.stdout}"
    # the rest two at a time (a queued trial is never taken by both workers)
    command = [*command[:2], "--workers", "2", *command[2:]]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    study = optuna.load_study(study_name="tdrl", storage=f"sqlite:///{folder / 'study.db'}")
    states = [t.state.name for t in study.trials]
    assert states.count("COMPLETE") == 4 and states.count("FAIL") == 1, states  # the killed one
    assert study.trials[0].params["lr"] == pytest.approx(3e-4)  # trial 0: the recipe's default
    assert "best: trial" in done.stdout and "recipes/ppo.py" in done.stdout
    assert (folder / "summary.png").is_file()


@pytest.mark.workers
def test_trials_run_as_ray_actors(tmp_path, local_ray):
    pytest.importorskip("ray")
    study = Study(RECIPES / "ppo.py", [parse_param("lr=log:1e-4:1e-2")], tmp_path / "study",
                  args=TINY, pruner="none", ray_address="local")  # fmt: skip
    study.optimize(2, workers=2)
    states = [t.state.name for t in study.study.trials]
    assert states == ["COMPLETE", "COMPLETE"], [t.user_attrs for t in study.study.trials]
    for n in (0, 1):  # each run wrote its folder (here: this machine's Ray)
        assert (tmp_path / "study" / "trials" / str(n) / "seed0" / "eval.csv").is_file()
    study.close()
