"""benchmarks/mujoco_table.py: which cells run (skip, recovery, failures, --jobs), one tiny real
cell per library, the zoo settings, and the table's arithmetic.

The orchestration runs with a fake launcher (no training); the real cells are a few thousand env
steps on Hopper-v5 with 2-episode evaluations.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tdrl.trainers import configure
from tdrl.trainers.config import flat_dict
from tests.bench_scripts import load

ROOT = Path(__file__).resolve().parents[2]
mt = load("mujoco_table")


def cell(library: str = "tdrl", algorithm: str = "ppo", task: str = "Hopper-v5", **kw: Any) -> Any:
    fields = dict(seed=0, steps=4096, eval_every=2048, eval_episodes=2) | kw
    return mt.Cell(library, algorithm, task, **fields)


def fake_line(c: Any, returns: list[float], wall: float = 1.0) -> dict[str, Any]:
    """A line shaped like run_cell's, with a curve at every eval_every."""
    steps = [c.eval_every * (i + 1) for i in range(len(returns))]
    curve = {"steps": steps, "returns": returns, "stds": [1.0] * len(returns), "wall_s": steps}
    return {
        **dataclasses.asdict(c), **mt.curve_summary(curve), "env_steps": c.steps,
        "wall_s": wall, "curve": curve, "settings": {}, "versions": {}, "commit": "0" * 40,
        "dirty": False, "date": "2026-11-25T09:00:00", "load_start": [1.0, 1.0, 1.0],
        "load_end": [2.0, 2.0, 2.0], "jobs": 1, "running_at_start": 1, "cpus": 2,
    }  # fmt: skip


class FakeLaunch:
    """Records the cells it is asked to run and the running counts; can fail some cells."""

    def __init__(self, fail: tuple[Any, ...] = (), pause: float = 0.0) -> None:
        self.calls: list[Any] = []
        self.running: list[int] = []
        self.fail, self.pause = fail, pause
        self.lock = threading.Lock()

    def __call__(self, c: Any, folder: Path, jobs: int, running: int) -> dict[str, Any]:
        assert list(folder.iterdir()) == [], "a cell must start in an empty run folder"
        with self.lock:
            self.calls.append(c)
            self.running.append(running)
        time.sleep(self.pause)
        if c in self.fail:
            raise RuntimeError("boom")
        return fake_line(c, [float(c.seed)])


def keys(table: Path) -> list[tuple[Any, ...]]:
    return [mt.line_key(line) for line in mt.read_lines(table)]


def test_a_cell_in_the_table_is_not_rerun(tmp_path: Path) -> None:
    table, work = tmp_path / "table.jsonl", tmp_path / "work"
    done, new = cell(seed=0), cell(seed=1)
    mt.append_line(table, fake_line(done, [5.0]))
    with table.open("a") as f:
        f.write('{"library": "tdrl", "algori')  # a writer killed in the middle of a line
    stale = new.folder(work)
    stale.mkdir(parents=True)
    (stale / "eval.csv").write_text("step,return_mean\n99,-1\n")  # a run cut short
    launch = FakeLaunch()
    assert mt.run_cells([done, new], table, work, launch=launch) == 0
    assert launch.calls == [new]
    assert keys(table) == [done.key, new.key]  # the torn line is left out, the new one whole
    again = FakeLaunch()
    assert mt.run_cells([done, new], table, work, launch=again) == 0
    assert again.calls == []
    # another budget or evaluation protocol is another cell
    other = [dataclasses.replace(done, steps=8192), dataclasses.replace(done, eval_episodes=10)]
    third = FakeLaunch()
    mt.run_cells([done, *other], table, work, launch=third)
    assert third.calls == other


def test_a_failed_cell_is_not_recorded_and_runs_next_time(tmp_path: Path) -> None:
    table, work = tmp_path / "table.jsonl", tmp_path / "work"
    cells = [cell(seed=s) for s in range(3)]
    assert mt.run_cells(cells, table, work, launch=FakeLaunch(fail=(cells[1],))) == 1
    assert keys(table) == [cells[0].key, cells[2].key]
    retry = FakeLaunch()
    assert mt.run_cells(cells, table, work, launch=retry) == 0
    assert retry.calls == [cells[1]]


def test_a_finished_cell_whose_line_was_lost_is_recovered_not_rerun(tmp_path: Path) -> None:
    table, work = tmp_path / "table.jsonl", tmp_path / "work"
    finished, other, old = cell(seed=0), cell(seed=1), cell(seed=2)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=mt.ROOT, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip
    for c, value in ((finished, 7.0), (other, 8.0), (old, 9.0)):
        c.folder(work).mkdir(parents=True)
        # other's folder holds the result of a different cell, old's one of other code (a
        # commit whose tdrl/ and recipes/ differ from HEAD's; here one git does not know): both
        # must run
        saved = fake_line(c if c is not other else dataclasses.replace(c, steps=1), [value])
        saved["commit"] = head if c is not old else "f" * 40
        (c.folder(work) / mt.RESULT).write_text(json.dumps(saved))
    launch = FakeLaunch()
    mt.run_cells([finished, other, old], table, work, launch=launch)
    assert launch.calls == [other, old]
    lines = mt.read_lines(table)
    assert [(mt.line_key(x), x["final_return"]) for x in lines] == [
        (finished.key, 7.0),
        (other.key, 1.0),
        (old.key, 2.0),
    ]


def test_jobs_bounds_the_cells_running_at_once(tmp_path: Path) -> None:
    launch = FakeLaunch(pause=0.2)
    cells = [cell(seed=s) for s in range(4)]
    assert mt.run_cells(cells, tmp_path / "t.jsonl", tmp_path / "w", jobs=2, launch=launch) == 0
    assert sorted(launch.calls, key=lambda c: c.seed) == cells
    assert max(launch.running) == 2


def test_cells_follow_the_selection_and_the_recipe_defaults(capsys: pytest.CaptureFixture) -> None:
    cells = mt.build_cells(
        mt.MUJOCO, ["ppo", "reinforce", "sac", "redq"], ["Hopper-v5", "Reacher-v5"], [0, 1]
    )
    hopper = [(c.library, c.algorithm, c.seed) for c in cells if c.task == "Hopper-v5"]
    assert hopper == [
        ("tdrl", "ppo", 0), ("SB3", "ppo", 0), ("tdrl", "ppo", 1), ("SB3", "ppo", 1),
        ("tdrl", "reinforce", 0), ("tdrl", "reinforce", 1),
        ("tdrl", "sac", 0), ("SB3", "sac", 0), ("tdrl", "sac", 1), ("SB3", "sac", 1),
        ("tdrl", "redq", 0), ("tdrl", "redq", 1),
    ]  # fmt: skip
    # the zoo tuned PPO for Reacher-v2, but has no SAC entry for it: tdrl only
    reacher = {(c.library, c.algorithm) for c in cells if c.task == "Reacher-v5"}
    assert ("SB3", "ppo") in reacher and ("SB3", "sac") not in reacher
    assert "sac Reacher-v5: no SB3 settings" in capsys.readouterr().out
    budget = {c.algorithm: (c.steps, c.eval_every, c.eval_episodes) for c in cells}
    assert budget == {
        "ppo": (1_000_000, 20_000, 10), "reinforce": (1_000_000, 20_000, 10),
        "sac": (100_000, 10_000, 10), "redq": (30_000, 10_000, 10),
    }  # fmt: skip
    npg = mt.build_cells(
        mt.MUJOCO, ["npg"], ["Hopper-v5"], [0], steps=5000, eval_every=0, eval_episodes=3
    )
    assert [c.key for c in npg] == [("tdrl", "npg", "Hopper-v5", 0, 5000, 0, 3)]


def test_dry_run_lists_only_the_cells_left(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    table = tmp_path / "t.jsonl"
    done = mt.Cell("tdrl", "td3", "Hopper-v5", 1, 100_000, 10_000, 10)
    mt.append_line(table, fake_line(done, [1.0]))
    args = ["--algos", "td3", "--tasks", "Hopper-v5", "--seeds", "0", "1", "--table", str(table)]
    assert mt.main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    listed = [x for x in out if x.startswith("Cell(")]
    assert len(listed) == 3 and str(done) not in listed and "3 of 4 cells to run" in out


def test_set_changes_recipe_fields_on_top_of_the_preset_in_their_types(tmp_path: Path) -> None:
    sets = ["update_order=joint", "hidden-sizes=(64, 64)", "eval_deterministic=false",
            "actor_lr=1e-3", "stop_at_return=inf", "batch_size=128.0"]  # fmt: skip
    overrides = mt.parse_sets(sets)
    assert overrides["hidden_sizes"] == (64, 64) and overrides["eval_deterministic"] == "false"
    tqc = mt.Cell("tdrl", "tqc", "Hopper-v5", 50, 100_000, 10_000, 10)
    preset = flat_dict(mt.tdrl_config(tqc, tmp_path, mt.MUJOCO))
    # as the child gets them: through JSON, tuples as lists
    tuned = flat_dict(mt.tdrl_config(tqc, tmp_path, mt.MUJOCO, mt.json_form(overrides)))
    assert preset["update_order"] == "critics_first" and tuned["update_order"] == "joint"
    assert tuned["hidden_sizes"] == (64, 64) and tuned["eval_deterministic"] is False
    assert tuned["stop_at_return"] == math.inf and tuned["batch_size"] == 128
    assert type(tuned["batch_size"]) is int and type(tuned["actor_lr"]) is float
    changed = {k for k in preset if preset[k] != tuned[k]}
    # (stop_at_return's default is inf already: the string "inf" read as that float)
    assert changed == {"update_order", "hidden_sizes", "eval_deterministic", "actor_lr",
                       "batch_size"}  # fmt: skip
    for bad, match in [
        ({"seed": 3}, "a cell's own fields"),  # the cell's own fields come from the cell
        ({"resume": True}, "where a run is"),
        ({"eval_deterministic": "yes"}, "expected True or False"),
        ({"batch_size": 1.5}, "expected an integer"),
        ({"actor_lr": True}, "expected a number"),
        ({"hidden_sizes": 64}, "expected a tuple"),
    ]:
        with pytest.raises(ValueError, match=match):
            mt.tdrl_config(tqc, tmp_path, mt.MUJOCO, bad)
    with pytest.raises(ValueError, match="FIELD=VALUE"):
        mt.parse_sets(["update_order"])


def test_set_runs_stay_out_of_the_table_and_reach_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["--algos", "tqc", "--tasks", "Hopper-v5", "--seeds", "50", "--dry-run"]
    own = ["--table", str(tmp_path / "tune.jsonl"), "--workdir", str(tmp_path / "runs")]
    joint = ["--set", "update_order=joint"]
    with pytest.raises(SystemExit, match="--libraries tdrl"):  # SB3's cells have no such field
        mt.main([*args, *own, *joint])
    beside = str(mt.MUJOCO.table.parent / "tune.jsonl")  # --render would redraw the page's PNGs
    with pytest.raises(SystemExit, match="stay out of the table's folder"):
        mt.main([*args, "--libraries", "tdrl", *joint, "--table", beside, "--workdir", "/tmp/x"])
    with pytest.raises(SystemExit, match="a folder of its own"):
        mt.main([*args, "--libraries", "tdrl", *joint, "--table", str(tmp_path / "t.jsonl")])
    with pytest.raises(SystemExit, match=r"no field\(s\) \['update_ordre'\]"):
        mt.main([*args, *own, "--libraries", "tdrl", "--set", "update_ordre=joint"])
    assert mt.main([*args, *own, "--libraries", "tdrl", *joint]) == 0
    # one setting a table: its lines are keyed by the cell alone
    tqc = mt.Cell("tdrl", "tqc", "Hopper-v5", 50, 100_000, 10_000, 10)
    mt.append_line(tmp_path / "tune.jsonl", fake_line(tqc, [1.0]) | {"overrides": {"lr": 1e-3}})
    for other in (joint, []):
        with pytest.raises(SystemExit, match=r"holds lines run with --set \{'lr': 0.001\}"):
            mt.main([*args, *own, "--libraries", "tdrl", *other])
    # the launcher's payload carries the fields, the child and run_cell hand them to the run
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(mt, "run_child", lambda script, payload, *a, **k: sent.append(payload))
    mt.launch_subprocess(tqc, tmp_path, 1, 1, overrides={"update_order": "joint"})
    received: list[Any] = []

    def run_tdrl(c: Any, folder: Path, suite: Any, **kw: Any) -> dict[str, Any]:
        received.append((c, kw))
        return {"final_return": 0.0, "wall_s": 0.0}

    monkeypatch.setattr(mt, "run_tdrl", run_tdrl)
    mt.child(json.dumps(sent[0] | {"folder": str(tmp_path / "cell")}), mt.MUJOCO)
    assert received == [(tqc, {"resume": False, "overrides": {"update_order": "joint"}})]


def test_a_set_run_resumes_and_recovers_only_its_own_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tdrl.trainers

    c, joint = cell(algorithm="tqc"), {"update_order": "joint"}
    folder = c.folder(tmp_path / "work")
    folder.mkdir(parents=True)
    record = {"cell": dataclasses.asdict(c), "commit": "0" * 40, "overrides": joint}
    (folder / mt.STARTED).write_text(json.dumps(record))
    monkeypatch.setattr(tdrl.trainers, "latest_checkpoint", lambda root: root)  # one is there
    assert mt.resumable(folder, c, joint)
    assert not mt.resumable(folder, c, {"update_order": "critics_first"})
    assert not mt.resumable(folder, c)  # the preset: the folder is cleared, not resumed
    # a finished run's result of another setting is not this command's line
    (folder / mt.RESULT).write_text(json.dumps(fake_line(c, [3.0]) | {
        "commit": mt.git_commit()["commit"], "overrides": joint}))  # fmt: skip
    launch = FakeLaunch()
    mt.run_cells([c], tmp_path / "other.jsonl", tmp_path / "work", launch=launch, overrides={})
    assert launch.calls == [c]
    (folder / mt.RESULT).write_text(json.dumps(fake_line(c, [3.0]) | {
        "commit": mt.git_commit()["commit"], "overrides": joint}))  # fmt: skip
    again = FakeLaunch()
    mt.run_cells([c], tmp_path / "same.jsonl", tmp_path / "work", launch=again, overrides=joint)
    assert again.calls == [] and mt.read_lines(tmp_path / "same.jsonl")[0]["final_return"] == 3.0


def test_a_field_added_since_counts_as_the_value_runs_had_before_it(tmp_path: Path) -> None:
    # A line written before sac.py took --update-order ran the joint step, and one written
    # before it took --algo ran its own row's algorithm: neither is "not recorded". The SAC line
    # matches its cell (joint), the TQC line is stale (its preset asks for critics_first) and
    # matches a preset without the order.
    lines = {}
    for algorithm in ("tqc", "sac"):
        cell = mt.Cell("tdrl", algorithm, "HalfCheetah-v5", 0, 100_000, 10_000, 10)
        settings = mt.finite(flat_dict(mt.tdrl_config(cell, tmp_path, mt.MUJOCO)))
        lines[algorithm] = fake_line(cell, [1.0])
        lines[algorithm]["settings"] = json.loads(json.dumps(settings))
        del lines[algorithm]["settings"]["update_order"]
    del lines["sac"]["settings"]["algo"]
    assert mt.settings_drift(lines["sac"], mt.MUJOCO) == ([], [])
    changed, _ = mt.settings_drift(lines["tqc"], mt.MUJOCO)
    assert changed == ["update_order: 'joint' then, 'critics_first' now"]
    tqc = mt.MUJOCO.algos["tqc"]
    preset = tuple(item for item in tqc.preset if item[0] != "update_order")
    suite = dataclasses.replace(
        mt.MUJOCO, algos={**mt.MUJOCO.algos, "tqc": dataclasses.replace(tqc, preset=preset)}
    )
    assert mt.settings_drift(lines["tqc"], suite) == ([], [])


def test_a_line_run_with_other_settings_is_reported_stale_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # The cell key holds no settings: a changed preset, recipe default or zoo entry is found by
    # comparing what a line recorded with what its cell would run now.
    td3 = mt.Cell("tdrl", "td3", "Hopper-v5", 0, 100_000, 10_000, 10)
    line = fake_line(td3, [1.0])
    settings = mt.finite(flat_dict(mt.tdrl_config(td3, tmp_path, mt.MUJOCO)))
    line["settings"] = json.loads(json.dumps(settings))  # as run_tdrl records it
    assert mt.settings_drift(line, mt.MUJOCO) == ([], [])  # log_dir is the place, not a setting
    line["settings"]["actor_lr"] = 3e-4  # the recipe's 1M default, not the table's preset
    del line["settings"]["critic_lr"]
    line["settings"]["sigma"] = 0.2  # a field since removed
    line["settings"]["noisy"] = False  # retired at the value the recipe always has now
    changed, unrecorded = mt.settings_drift(line, mt.MUJOCO)
    assert changed == ["actor_lr: 0.0003 then, 0.001 now", "sigma: 0.2 then, gone now"]
    assert unrecorded == ["critic_lr"]
    line["settings"]["noisy"] = True  # retired, but the run used what is gone
    assert mt.settings_drift(line, mt.MUJOCO)[0][-1] == "noisy: True then, gone now"
    del line["settings"]["sigma"], line["settings"]["noisy"]
    # a field renamed for one algorithm is compared under its name now on that algorithm's
    # lines: REDQ's (its own recipe's actor_delay and num_qvalue_nets, sac.py's names now)
    redq = mt.Cell("tdrl", "redq", "Hopper-v5", 0, 30_000, 10_000, 10)
    redq_line = fake_line(redq, [1.0])
    redq_line["settings"] = json.loads(
        json.dumps(mt.finite(flat_dict(mt.tdrl_config(redq, tmp_path, mt.MUJOCO))))
    )
    for old, new in (("actor_delay", "policy_delay"), ("num_qvalue_nets", "num_critics")):
        redq_line["settings"][old] = redq_line["settings"].pop(new)
    assert mt.settings_drift(redq_line, mt.MUJOCO)[0] == []
    redq_line["settings"]["num_qvalue_nets"] = 5
    assert mt.settings_drift(redq_line, mt.MUJOCO)[0] == ["num_critics: 5 then, 10 now"]
    # on another algorithm's line the old name is a field that is gone
    line["settings"]["actor_delay"] = 2
    assert mt.settings_drift(line, mt.MUJOCO)[0][-1] == "actor_delay: 2 then, gone now"
    del line["settings"]["actor_delay"]
    sb3 = mt.Cell("SB3", "sac", "Hopper-v5", 0, 100_000, 10_000, 10)
    sb3_line = fake_line(sb3, [1.0])
    zoo = json.loads(json.dumps(mt.zoo_hyperparameters("sac", "Hopper-v5")))
    sb3_line["settings"] = {"hyperparameters": zoo | {"learning_starts": 1}, "eval_envs": 5}
    assert mt.settings_drift(sb3_line, mt.MUJOCO)[0][0].startswith("learning_starts: 1 then")
    table = tmp_path / "t.jsonl"
    for x in (line, sb3_line):
        mt.append_line(table, x)
    args = ["--algos", "td3", "sac", "--tasks", "Hopper-v5", "--seeds", "0", "--table", str(table)]
    assert mt.main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("STALE") == 2 and "2 stale line(s) count as done" in out
    assert "not recorded in 1 line(s), added since: tdrl td3: critic_lr" in out
    md, _ = mt.render(table, mt.MUJOCO)  # the page lists them too, with what changed
    page = md.read_text()
    assert "## Stale lines" in page and "2 line(s) above ran with other settings" in page
    assert "- tdrl td3 Hopper-v5 seed 0: actor_lr: 0.0003 then, 0.001 now" in page
    assert "- SB3 sac Hopper-v5 seed 0: learning_starts: 1 then" in page


def test_zoo_entries_are_the_yml_values() -> None:
    for algo in ("ppo", "a2c", "trpo", "sac", "td3", "ddpg"):
        for task in mt.TASKS:
            assert mt.zoo_hyperparameters(algo, task) is not None, (algo, task)
    hopper = mt.zoo_hyperparameters("ppo", "Hopper-v5")
    assert hopper["learning_rate"] == 9.80828e-05 and hopper["n_steps"] == 512
    assert hopper["policy_kwargs"]["net_arch"] == {"pi": [256, 256], "vf": [256, 256]}
    hopper["policy_kwargs"]["net_arch"]["pi"].append(1)  # a copy: the table is untouched
    assert mt.ZOO[("ppo", "Hopper")]["policy_kwargs"]["net_arch"]["pi"] == [256, 256]
    cheetah = mt.zoo_hyperparameters("trpo", "HalfCheetah-v5")
    assert cheetah["target_kl"] == 0.04 and cheetah["n_critic_updates"] == 20
    assert "target_kl" not in mt.zoo_hyperparameters("trpo", "Hopper-v5")
    assert mt.zoo_hyperparameters("td3", "Ant-v5")["policy_kwargs"] == {"net_arch": [400, 300]}
    assert mt.zoo_hyperparameters("a2c", "Walker2d-v5") == {"normalize": True}
    assert mt.zoo_hyperparameters("sac", "Reacher-v5") is None
    # published agents (benchmark.md): a figure where the zoo has a MuJoCo entry, else n/a
    assert mt.zoo_1m("trpo", "HalfCheetah-v5") == "1785.5±68.7"
    assert mt.zoo_1m("a2c", "Ant-v5") == mt.zoo_1m("ddpg", "Hopper-v5") == "n/a"
    assert mt.zoo_1m("npg", "Hopper-v5") == "n/a"


def strict_json(text: str) -> dict[str, Any]:
    def reject(name: str) -> None:
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=reject)


@pytest.mark.table  # a 4,096-step PPO cell through the driver; the SB3 cells stay as smokes
def test_a_tiny_tdrl_cell_writes_a_well_formed_line(tmp_path: Path) -> None:
    """PPO, Hopper-v5, two 2,048-step batches, in a subprocess as the driver runs it."""
    from recipes import ppo

    table, work = tmp_path / "table.jsonl", tmp_path / "work"
    c = cell("tdrl", "ppo", "Hopper-v5", seed=3)
    assert mt.run_cells([c], table, work) == 0
    (text,) = table.read_text().splitlines()
    line = strict_json(text)
    assert mt.line_key(line) == c.key
    assert line["env_steps"] == 4096
    assert line["curve"]["steps"] == [2048, 4096]
    assert line["final_return"] == line["curve"]["returns"][-1]
    assert line["final_return_std"] == line["curve"]["stds"][-1] >= 0
    assert line["best_return"] == max(line["curve"]["returns"])
    # the recipe's own defaults but for the task, seed, budget, run folder and protocol
    expected = flat_dict(
        configure(
            ppo.Config, env_id="Hopper-v5", seed=3, total_frames=4096,
            log_dir=str(c.folder(work)), eval_every=2048, eval_episodes=2,
        )
    )  # fmt: skip
    assert line["settings"] == mt.finite(expected)
    assert line["settings"]["stop_at_return"] == "inf"  # strict JSON has no inf
    assert re.fullmatch("[0-9a-f]{40}", line["commit"]) and isinstance(line["dirty"], bool)
    assert len(line["load_start"]) == len(line["load_end"]) == 3
    assert (line["jobs"], line["running_at_start"]) == (1, 1)
    assert 0 < line["curve"]["wall_s"][-1] <= line["wall_s"]
    assert "torch" in line["versions"]
    assert (c.folder(work) / "eval.csv").exists()
    assert not (c.folder(work) / "checkpoints").exists()  # replay buffers and weights go
    rerun = FakeLaunch()
    mt.run_cells([c], table, work, launch=rerun)
    assert rerun.calls == [] and len(table.read_text().splitlines()) == 1


@pytest.mark.table
def test_a_tdrl_cell_cut_after_a_checkpoint_resumes_and_ends_as_a_straight_run(
    tmp_path: Path,
) -> None:
    """The driver keeps a cut tdrl cell's folder and resumes it (a REDQ cell can outlast the
    driver's process); the line says so and its result is the uninterrupted run's (sync envs resume
    exactly)."""
    from recipes import ppo

    table, work = tmp_path / "table.jsonl", tmp_path / "work"
    c = cell("tdrl", "ppo", "Hopper-v5", seed=4)
    folder = c.folder(work)
    folder.mkdir(parents=True)
    fields = dict(env_id="Hopper-v5", seed=4, total_frames=4096, eval_every=2048,
                  eval_episodes=2, progress=False)  # fmt: skip
    straight = ppo.main(configure(ppo.Config, **fields, log_dir=str(tmp_path / "straight")))
    # the cut: the driver's first start wrote cell.json; the run stopped after one checkpoint
    (folder / mt.STARTED).write_text(json.dumps({"cell": dataclasses.asdict(c), "commit": "x"}))
    ppo.main(configure(ppo.Config, **fields, log_dir=str(folder), stop_after_frames=2048))
    assert mt.resumable(folder, c) and not mt.resumable(folder, dataclasses.replace(c, seed=5))
    assert mt.run_cells([c], table, work) == 0
    (line,) = mt.read_lines(table)
    assert line["resumed"]["from_frames"] == 2048 and line["resumed"]["first_commit"] == "x"
    assert 0 < line["resumed"]["run_clock_s"] < line["wall_s"]
    assert line["env_steps"] == 4096 and line["curve"]["steps"] == [2048, 4096]
    assert line["final_return"] == pytest.approx(straight["eval_return_mean"], rel=1e-9)
    assert line["settings"]["resume"] is False  # the settings are the cell's, as run straight


@pytest.mark.parametrize(
    ("algorithm", "steps", "every", "evaluated"),
    [
        ("ppo", 1024, 512, [512, 1024]),  # 1 env x 512 steps per rollout, VecNormalize
        ("td3", 300, 150, [150, 300]),  # action noise and a 400x300 net (random steps only)
        ("trpo", 2048, 2048, [2048]),  # sb3-contrib: 2 envs x 1024 steps
    ],
)
def test_a_tiny_sb3_cell_follows_the_zoo_and_the_protocol(
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    algorithm: str,
    steps: int,
    every: int,
    evaluated: list[int],
) -> None:
    pytest.importorskip("stable_baselines3", reason="SB3 is the bench extra")
    if algorithm == "trpo":
        pytest.importorskip("sb3_contrib", reason="TRPO is sb3-contrib's (the bench extra)")
    c = cell("SB3", algorithm, "Hopper-v5", seed=1, steps=steps, eval_every=every)
    line = mt.run_cell(c, tmp_path / "run", mt.MUJOCO)
    assert strict_json((tmp_path / "run" / mt.RESULT).read_text()) == line
    assert mt.line_key(line) == c.key
    assert line["env_steps"] == steps
    assert line["curve"]["steps"] == evaluated
    assert line["final_return"] == line["curve"]["returns"][-1]
    assert line["best_return"] == max(line["curve"]["returns"])
    assert line["settings"]["hyperparameters"] == mt.zoo_hyperparameters(algorithm, "Hopper-v5")
    assert line["settings"]["eval_envs"] == 2
    assert "stable_baselines3" in line["versions"]
    # the run's log shows its progress: one line per evaluation
    progress = [x for x in capsys.readouterr().out.splitlines() if " steps: return " in x]
    assert [int(x.split()[0]) for x in progress] == evaluated
    assert progress[-1].startswith(f"{steps} steps: return {line['final_return']:.1f} +- ")


def test_tianshou_cells_run_its_a2c_script_in_tuning_tables_only(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    cells = mt.build_cells(mt.MUJOCO, ["a2c", "ppo"], ["Hopper-v5"], [0], ["tdrl", "Tianshou"])
    assert [(c.library, c.algorithm) for c in cells] == [
        ("tdrl", "a2c"), ("Tianshou", "a2c"), ("tdrl", "ppo")
    ]  # fmt: skip
    assert "ppo Hopper-v5: no Tianshou script here" in capsys.readouterr().out
    args = ["--algos", "a2c", "--tasks", "Hopper-v5", "--seeds", "0", "--dry-run"]
    with pytest.raises(SystemExit, match="--libraries Tianshou: tuning lines stay out"):
        mt.main([*args, "--libraries", "Tianshou"])  # the table's own file
    with pytest.raises(SystemExit, match="a folder of its own"):
        mt.main([*args, "--libraries", "Tianshou", "--table", str(tmp_path / "t.jsonl")])
    # a line is stale where the script's settings moved since
    c = mt.Cell("Tianshou", "a2c", "Hopper-v5", 0, 1_000_000, 20_000, 10)
    now = {"hyperparameters": mt.json_form(mt.TIANSHOU["a2c"])}
    assert mt.settings_drift(fake_line(c, [1.0]) | {"settings": now}, mt.MUJOCO) == ([], [])
    then = {"hyperparameters": now["hyperparameters"] | {"lr": 1e-3}}
    changed, _ = mt.settings_drift(fake_line(c, [1.0]) | {"settings": then}, mt.MUJOCO)
    assert changed == ["lr: 0.001 then, 0.0007 now"]


def test_a_tiny_tianshou_cell_trains_its_a2c_and_follows_the_protocol(tmp_path: Path) -> None:
    pytest.importorskip("tianshou", reason="Tianshou is the bench extra")
    c = cell("Tianshou", "a2c", "Hopper-v5", seed=1, steps=800, eval_every=320)
    line = mt.run_cell(c, tmp_path / "run", mt.MUJOCO)
    assert strict_json((tmp_path / "run" / mt.RESULT).read_text()) == line
    assert line["env_steps"] == 800  # 16 envs x 5 steps a batch, 10 batches
    assert line["curve"]["steps"] == [320, 640, 800]  # after the batch that crosses each 320
    assert line["settings"]["hyperparameters"] == mt.TIANSHOU["a2c"]
    assert "tianshou" in line["versions"]


def table_line(library: str, algorithm: str, task: str, seed: int, **kw: Any) -> dict[str, Any]:
    c = mt.Cell(library, algorithm, task, seed, 1_000_000, 10, kw.pop("episodes", 10))
    return fake_line(c, kw.pop("returns"), kw.pop("wall", 1.0)) | kw


def row_of(md: str, task: str, algorithm: str) -> list[str]:
    # the seed and conditions tables below repeat the first cells
    main_table = md.split("Seed by seed")[0].split("Run conditions")[0]
    (row,) = [x for x in main_table.splitlines() if x.startswith(f"| {task} | {algorithm} | 1M |")]
    return [cell.strip() for cell in row.strip("|").split("|")]


def test_the_table_means_stds_ratios_and_references(tmp_path: Path) -> None:
    lines = [
        table_line("tdrl", "ppo", "Hopper-v5", 0, returns=[500.0, 400.0], wall=10.0),
        table_line("tdrl", "ppo", "Hopper-v5", 1, returns=[100.0, 200.0], wall=20.0),
        table_line("tdrl", "ppo", "Hopper-v5", 2, returns=[300.0, 600.0], wall=30.0),
        table_line("SB3", "ppo", "Hopper-v5", 0, returns=[0.0, 100.0], wall=40.0),
        table_line("SB3", "ppo", "Hopper-v5", 1, returns=[0.0, 400.0], wall=40.0),
        # another protocol (2 episodes): left out of the table
        table_line("tdrl", "ppo", "Hopper-v5", 3, returns=[1e6, 1e6], episodes=2),
        table_line("tdrl", "reinforce", "Hopper-v5", 0, returns=[50.0]),
        table_line("tdrl", "ppo", "Reacher-v5", 0, returns=[-5.0], wall=3.0),
        table_line("SB3", "ppo", "Reacher-v5", 0, returns=[-10.0], wall=6.0),
    ]
    table = tmp_path / "docs" / "mujoco_table.jsonl"
    for line in lines:
        mt.append_line(table, line)
    md_path, pngs = mt.render(table, mt.MUJOCO)
    md = md_path.read_text()
    assert md_path == tmp_path / "docs" / "mujoco_table.md"
    assert "1 line(s) of another evaluation protocol left out: 2 evaluation episodes, not 10." in md
    # tdrl finals 400, 200, 600: 400 ± 200 (sample std); bests 500, 200, 600: 433.3 ± 208.2;
    # SB3 finals 100, 400: 250 ± 212.1. The ratios pair the seeds both ran (0 and 1): returns
    # (400 + 200) / 2 / 250 = 1.20; wall (10 + 20) / 2 / 40 = 0.38. The seed-mean curve is
    # (300, 400): its peak 400 at the last step, with Tianshou's population std there: 163.3.
    assert row_of(md, "Hopper-v5", "PPO") == [
        "Hopper-v5", "PPO", "1M", "400.0 ± 200.0", "433.3 ± 208.2", "3", "20",
        "250.0 ± 212.1", "250.0 ± 212.1", "2", "40", "1.20 (2 seeds)", "0.38 (2 seeds)",
        "400.0 ± 163.3", "2609.3±700.8", "2410.4±10.0",
    ]  # fmt: skip
    # one seed: the mean alone; a negative SB3 score gives no return ratio
    assert row_of(md, "Reacher-v5", "PPO")[3:] == [
        "-5.0", "-5.0", "1", "3", "-10.0", "-10.0", "1", "6", "n/a", "0.50", "-5.0",
        "-4.1±0.3", "n/a",
    ]  # fmt: skip
    # no SB3 class and no published 1M REINFORCE figure
    assert row_of(md, "Hopper-v5", "REINFORCE")[7:] == ["—"] * 6 + ["50.0", "n/a", "n/a"]
    assert [p.name for p in pngs] == ["mujoco_Hopper-v5.png", "mujoco_Reacher-v5.png"]
    assert all(p.stat().st_size > 10_000 for p in pngs)


def test_seed_pairs_give_ratios_overlap_and_the_pairs_where_tdrl_is_behind(
    tmp_path: Path,
) -> None:
    later = "2026-11-25T10:00:00+0000"  # after the tdrl run of seed 1 (30 s from 09:00) ended
    lines = [
        table_line("tdrl", "td3", "Hopper-v5", 0, returns=[400.0], wall=100.0),
        table_line("SB3", "td3", "Hopper-v5", 0, returns=[100.0], wall=200.0),
        table_line("tdrl", "td3", "Hopper-v5", 1, returns=[200.0], wall=30.0),
        table_line("SB3", "td3", "Hopper-v5", 1, returns=[400.0], wall=20.0, date=later),
        table_line("tdrl", "td3", "Hopper-v5", 2, returns=[300.0], wall=10.0),  # no SB3 seed 2
        table_line("tdrl", "td3", "Reacher-v5", 0, returns=[-5.0], wall=3.0),
        table_line("SB3", "td3", "Reacher-v5", 0, returns=[-10.0], wall=6.0),
    ]
    table = tmp_path / "t.jsonl"
    for line in lines:
        mt.append_line(table, line)
    md = mt.render(table, mt.MUJOCO)[0].read_text()
    section = md.split("Seed by seed")[1].split("Run conditions")[0]
    rows = [
        [c.strip() for c in x.strip("|").split("|")]
        for x in section.splitlines()
        if x.startswith("| ") and not x.startswith("| task")
    ]
    assert rows == [
        ["Hopper-v5", "TD3", "1M", "0", "400.0", "100.0", "4.00", "100", "200", "0.50", "100%"],
        ["Hopper-v5", "TD3", "1M", "1", "200.0", "400.0", "0.50", "30", "20", "1.50", "0%"],
        ["Reacher-v5", "TD3", "1M", "0", "-5.0", "-10.0", "n/a", "3", "6", "0.50", "100%"],
    ]
    assert (
        "tdrl's final return below SB3's: 1 of 3 pairs: Hopper-v5 TD3 1M seed 1 (200.0 against "
        "400.0)." in section
    )
    assert (
        "tdrl's run longer than SB3's: 1 of 3 pairs: Hopper-v5 TD3 1M seed 1 (30 s against 20 s)."
        in section
    )


def test_an_empty_table_renders_a_page_that_says_so(tmp_path: Path) -> None:
    md, pngs = mt.render(tmp_path / "none.jsonl", mt.MUJOCO)
    assert "No cell has finished yet." in md.read_text() and pngs == []


def test_a_line_records_the_commit_its_run_started_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # HEAD may move while a cell runs (work goes on beside it): the line must name the code the
    # run started with, since a saved result is recovered only for that code.
    head = ["a" * 40]
    monkeypatch.setattr(mt, "git_commit", lambda: {"commit": head[0], "dirty": False})
    c = cell("SB3", "sac", seed=0)

    def run_sb3(run: Any, folder: Path) -> dict[str, Any]:
        head[0] = "b" * 40  # a commit lands while the run goes
        line = fake_line(run, [1.0, 2.0])
        names = ("final_return", "final_return_std", "best_return", "env_steps", "wall_s", "curve")
        return {k: line[k] for k in (*names, "settings", "versions")}

    suite = dataclasses.replace(mt.MUJOCO, run_sb3=run_sb3)
    line = mt.run_cell(c, tmp_path / "run", suite)
    assert line["commit"] == "a" * 40


def test_a_row_keeps_one_evaluation_protocol_and_a_diverged_run_renders(tmp_path: Path) -> None:
    every_500k = dict(eval_every=500_000)
    lines = [
        table_line("tdrl", "ppo", "Hopper-v5", 0, returns=[100.0, 300.0]),
        table_line("tdrl", "ppo", "Hopper-v5", 1, returns=[200.0, 500.0]),
        # seed 0 again, evaluated every 500k steps: its best and curve do not compare; it must
        # neither replace seed 0's line nor shrink the curve's common steps
        table_line("tdrl", "ppo", "Hopper-v5", 0, returns=[9000.0], **every_500k),
        table_line("SB3", "ppo", "Hopper-v5", 0, returns=[100.0, 200.0]),
        table_line("SB3", "ppo", "Hopper-v5", 1, returns=[100.0, 200.0]),
        # a diverged run: finite() writes its nan return as a string
        table_line("tdrl", "a2c", "Hopper-v5", 0, returns=[10.0, math.nan]),
        table_line("SB3", "a2c", "Hopper-v5", 0, returns=[10.0, 20.0]),
    ]
    lines[-2]["final_return"] = math.nan  # curve_summary took the last, as run_cell does
    table = tmp_path / "t.jsonl"
    for line in lines:
        mt.append_line(table, line)
    assert '"final_return": "nan"' in table.read_text()
    md = mt.render(table, mt.MUJOCO)[0].read_text()
    assert (
        "1 line(s) of another evaluation protocol left out: tdrl ppo Hopper-v5 seed 0: evaluated "
        "every 500000 steps, the row's other lines every 10." in md
    )
    # finals 300 and 500; the mean curve (150, 400) peaks at 400, population std 100 there
    assert row_of(md, "Hopper-v5", "PPO")[3:7] == ["400.0 ± 141.4", "400.0 ± 141.4", "2", "1"]
    assert row_of(md, "Hopper-v5", "PPO")[11:14] == ["2.00", "1.00", "400.0 ± 100.0"]
    assert row_of(md, "Hopper-v5", "A2C")[3] == "nan"
    assert "Hopper-v5 A2C 1M seed 0 (nan against 20.0)" in md  # counted behind, not skipped


def test_a_resumed_line_shows_both_commits_and_no_overlap(tmp_path: Path) -> None:
    ours = table_line("tdrl", "sac", "Hopper-v5", 0, returns=[100.0], wall=50.0)
    ours["resumed"] = {"from_frames": 3000, "run_clock_s": 20.0, "first_commit": "1" * 40,
                       "first_date": "2026-11-24T08:00:00+0000"}  # fmt: skip
    theirs = table_line("SB3", "sac", "Hopper-v5", 0, returns=[50.0], wall=60.0)
    table = tmp_path / "t.jsonl"
    for line in (ours, theirs):
        mt.append_line(table, line)
    md = mt.render(table, mt.MUJOCO)[0].read_text()
    pair = [x for x in md.split("Seed by seed")[1].splitlines() if x.startswith("| Hopper")]
    assert pair[0].rstrip(" |").endswith("resumed")
    conditions = md.split("Run conditions")[1]
    (row,) = [x for x in conditions.splitlines() if x.startswith("| Hopper-v5 | SAC | 1M | tdrl")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells == ["Hopper-v5", "SAC", "1M", "tdrl", "0", "11111111→00000000", "1 (1)",
                     "1.00 → 2.00"]  # fmt: skip


DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def test_the_page_states_versions_and_machine_once_and_no_dates(tmp_path: Path) -> None:
    # the lines' dates (start times, a resumed run's first start) stay in the store, not the page
    lines = [
        table_line("tdrl", "sac", "Hopper-v5", 0, returns=[100.0], cpus=4,
                   versions={"python": "3.11.7", "torch": "2.13.0"}),
        table_line("tdrl", "sac", "Hopper-v5", 1, returns=[200.0],
                   versions={"python": "3.11.7", "torch": "2.12.0"}),
        table_line("SB3", "sac", "Hopper-v5", 0, returns=[50.0],
                   versions={"python": "3.11.7", "stable_baselines3": "2.9.2"}),
    ]  # fmt: skip
    lines[1]["resumed"] = {"from_frames": 3000, "run_clock_s": 20.0, "first_commit": "1" * 40,
                           "first_date": "2026-11-24T08:00:00+0000"}  # fmt: skip
    table = tmp_path / "t.jsonl"
    for line in lines:
        mt.append_line(table, line)
    md = mt.render(table, mt.MUJOCO)[0].read_text()
    statement = (
        "Versions: tdrl: python 3.11.7, torch 2.12.0 / 2.13.0; SB3: python 3.11.7, "
        "stable_baselines3 2.9.2. Machine: 2 or 4 CPUs."
    )
    assert md.count("Versions: ") == 1 and statement in md
    assert md.count("python benchmarks/mujoco_table.py --render") == 1  # the command, once
    assert not DATE.search(md) and not re.search(r"[Ii]ssue \d", md)  # the header's prose too


def test_a_cell_another_driver_runs_is_skipped_not_cleared(tmp_path: Path) -> None:
    import fcntl

    table, work = tmp_path / "table.jsonl", tmp_path / "work"
    busy, free = cell(seed=0), cell(seed=1)
    folder = busy.folder(work)
    folder.mkdir(parents=True)
    (folder / "eval.csv").write_text("step,return_mean\n2048,1\n")  # the other driver's run
    with (folder.parent / f"{folder.name}.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        launch = FakeLaunch()
        assert mt.run_cells([busy, free], table, work, launch=launch) == 0
        assert launch.calls == [free]
        assert (folder / "eval.csv").exists()
    again = FakeLaunch()  # once the other driver is gone (its lock let go), the cell runs
    mt.run_cells([busy, free], table, work, launch=again)
    assert again.calls == [busy]
