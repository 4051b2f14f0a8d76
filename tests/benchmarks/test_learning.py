"""benchmarks/learning.py: results file, skip-on-rerun, recovery, report maths, recipe wiring.

The orchestration is tested with a fake launcher (no training); two tiny in-process tdrl runs
check that the script drives the real recipes (budget, seed, eval protocol, final return).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.bench_scripts import load

ROOT = Path(__file__).resolve().parents[2]
learning = load("learning")
RunSpec = learning.RunSpec


def specs(seeds: tuple[int, ...] = (0, 1)) -> list[Any]:
    return [
        RunSpec("sac", "HalfCheetah-v5", lib, seed, 3000, 1500, learning_starts=1000)
        for seed in seeds
        for lib in ("tdrl", "sb3")
    ]


class FakeLaunch:
    """Records launches; writes an eval.csv and returns a row like the child does."""

    def __init__(self, fail: set[tuple[Any, ...]] = frozenset()) -> None:
        self.calls: list[Any] = []
        self.fail = fail

    def __call__(self, spec: Any, run_dir: Path) -> dict[str, Any]:
        assert list(run_dir.iterdir()) == [], "a run must start in an empty folder"
        self.calls.append(spec)
        if spec.key in self.fail:
            raise RuntimeError("boom")
        (run_dir / "eval.csv").write_text("step,return_mean\n1500,1.0\n3000,2.0\n")
        result = {"final_return": 10.0 * spec.seed, "final_return_std": 0.0, "wall_s": 5.0}
        return learning.result_row(spec, result)


def lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / learning.RESULTS).read_text().splitlines()]


def test_each_run_appends_one_line_and_a_rerun_skips_it(tmp_path: Path) -> None:
    stale = specs()[0].run_dir(tmp_path)
    stale.mkdir(parents=True)
    (stale / "eval.csv").write_text("step,return_mean\n99,-1\n")  # a run killed earlier
    launch = FakeLaunch()
    assert learning.execute(specs(), tmp_path, jobs=2, launch=launch) == 0
    assert len(launch.calls) == 4
    rows = lines(tmp_path)
    assert sorted(learning.result_key(r) for r in rows) == sorted(s.key for s in specs())
    assert "99" not in (stale / "eval.csv").read_text()
    again = FakeLaunch()
    assert learning.execute(specs(seeds=(0, 1, 2)), tmp_path, jobs=1, launch=again) == 0
    assert [s.seed for s in again.calls] == [2, 2]  # only the new seed runs
    assert len(lines(tmp_path)) == 6


def test_a_finished_run_whose_line_was_lost_is_recovered_not_rerun(tmp_path: Path) -> None:
    spec = specs()[1]
    spec.run_dir(tmp_path).mkdir(parents=True)
    row = learning.result_row(spec, {"final_return": 7.0, "final_return_std": 0.0, "wall_s": 1.0})
    (spec.run_dir(tmp_path) / "result.json").write_text(json.dumps(row))
    launch = FakeLaunch()
    learning.execute(specs(), tmp_path, jobs=1, launch=launch)
    assert spec not in launch.calls and len(launch.calls) == 3
    assert [r["final_return"] for r in lines(tmp_path) if r["lib"] == "sb3" and r["seed"] == 0] == [
        7.0
    ]


def test_a_failed_run_is_not_recorded_and_runs_again_next_time(tmp_path: Path) -> None:
    bad = specs()[2]
    assert learning.execute(specs(), tmp_path, 2, launch=FakeLaunch(fail={bad.key})) == 1
    assert bad.key not in {learning.result_key(r) for r in lines(tmp_path)}
    retry = FakeLaunch()
    assert learning.execute(specs(), tmp_path, 2, launch=retry) == 0
    assert retry.calls == [bad]


def test_tdrl_settings_are_part_of_the_run_identity(tmp_path: Path) -> None:
    base = RunSpec("sac", "HalfCheetah-v5", "tdrl", 0, 3000, 1500)
    tuned = RunSpec(
        "sac", "HalfCheetah-v5", "tdrl", 0, 3000, 1500, tdrl_set=(("actor_lr", "3e-4"),)
    )
    sb3 = RunSpec("sac", "HalfCheetah-v5", "sb3", 0, 3000, 1500, tdrl_set=(("actor_lr", "3e-4"),))
    assert base.key != tuned.key and base.run_dir(tmp_path) != tuned.run_dir(tmp_path)
    assert sb3.lib_settings == ""  # tdrl overrides do not make a different SB3 run


def row(lib: str, seed: int, ret: float, wall: float) -> dict[str, Any]:
    spec = RunSpec("td3", "Hopper-v5", lib, seed, 100_000, 10_000)
    return learning.result_row(spec, {"final_return": ret, "final_return_std": 0.0, "wall_s": wall})


def test_report_means_stds_and_ratios(tmp_path: Path) -> None:
    rows = [row("tdrl", 0, 1.0, 10.0), row("tdrl", 1, 2.0, 20.0), row("tdrl", 2, 3.0, 30.0)]
    rows += [row("sb3", 0, 2.0, 40.0), row("sb3", 1, 4.0, 40.0), row("sb3", 1, 4.0, 40.0)]
    group = learning.summarize(rows)[("td3", "Hopper-v5", 100_000, "")]
    assert group["tdrl"]["seeds"] == [0, 1, 2] and group["sb3"]["seeds"] == [0, 1]
    # sample std over seeds: tdrl sqrt(((1-2)^2 + 0 + (3-2)^2) / 2) = 1; sb3 sqrt(2 * 1^2 / 1)
    assert group["tdrl"]["return_std"] == pytest.approx(1.0)
    assert group["sb3"]["return_mean"] == pytest.approx(3.0)
    assert group["sb3"]["return_std"] == pytest.approx(math.sqrt(2.0))
    table = learning.markdown_table(learning.summarize(rows))
    tdrl_line = next(x for x in table.splitlines() if "| tdrl |" in x)
    # return 2 / 3 = 0.67; wall 20 / 40 = 0.50
    assert "2.0 ± 1.0" in tdrl_line and "| 0.67 | 0.50 |" in tdrl_line


def test_report_curve_is_the_mean_over_seeds_at_common_steps(tmp_path: Path) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("step,return_mean\n10,1\n20,3\n30,5\n")
    b.write_text("step,return_mean\n10,3\n20,5\n")
    steps, mean, std = learning.mean_curve([a, b])
    assert steps == [10.0, 20.0] and mean == [2.0, 4.0]
    assert std == pytest.approx([math.sqrt(2.0)] * 2)


@pytest.mark.parametrize(
    ("algo", "env", "settings"),
    [
        ("sac", "Pendulum-v1", (("hidden_sizes", "16,16"),)),
        ("ppo", "Pendulum-v1", (("num_envs", "2"), ("frames_per_batch", "100"))),
    ],
)
def test_tdrl_run_follows_budget_seed_and_eval_protocol(
    tmp_path: Path, algo: str, env: str, settings: tuple[tuple[str, str], ...]
) -> None:
    sys.path.insert(0, str(ROOT))
    starts = 100 if algo == "sac" else None
    spec = RunSpec(algo, env, "tdrl", 3, 400, 200, learning_starts=starts, tdrl_set=settings)
    result = learning.run_tdrl(spec, tmp_path)
    evals = (tmp_path / "eval.csv").read_text().splitlines()
    header, last = evals[0].split(","), evals[-1].split(",")
    final = dict(zip(header, last, strict=True))
    assert float(final["step"]) >= 400 and len(evals) == 1 + 2  # at 200 and after the budget
    assert float(final["n_episodes"]) == learning.EVAL_EPISODES
    assert result["final_return"] == float(final["return_mean"])
    assert 0 < result["wall_s"] < 120
    assert not (tmp_path / "buffer").exists()  # no intermediate checkpoint for off-policy runs
