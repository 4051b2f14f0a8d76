"""benchmarks/offline_table.py: the offline suite on mujoco_table's machinery. Its cells, one
tiny real cell per library on a tiny random Hopper dataset made here (tdrl's in the driver's
subprocess, 40 gradient steps evaluated twice on 10 episodes; TorchRL's IQL and, where the bench
extra is installed, Tianshou's CQL in this process), the normalized scores, the rerun skip and
the rendered page.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the driver imports mujoco_table as a sibling
import offline_table as ot  # noqa: E402

mt = ot.mt  # mujoco_table: the machinery
pytest.importorskip("minari", reason="Minari datasets are the offline extra")
TINY, BARE = "tdrl/hopper-tiny-v0", "tdrl/hopper-bare-v0"
REF_MIN, REF_MAX = -20.0, 3000.0


def test_the_cells_are_six_tdrl_algorithms_and_three_peer_runs() -> None:
    cells = ot.build_cells(list(ot.DATASETS), list(ot.ALGOS), [0, 1, 2], list(ot.LIBRARIES))
    assert len(cells) == 3 * 3 * (6 + 3)
    runs = {(c.library, c.algorithm) for c in cells}
    assert {r for r in runs if r[0] != "tdrl"} == {
        ("torchrl", "cql"), ("torchrl", "iql"), ("tianshou", "cql")
    }  # fmt: skip
    # seed 0 of every algorithm of the first dataset comes first
    first = cells[:9]
    assert {c.seed for c in first} == {0} and {c.task for c in first} == {ot.DATASETS[0]}
    assert {(c.steps, c.eval_every, c.eval_episodes) for c in cells} == {(10_000, 1_000, 10)}
    assert ot.OFFLINE.table == ROOT / "docs" / "benchmarks" / "offline_table.jsonl"


def tiny(library: str, algorithm: str) -> Any:
    return mt.Cell(library, algorithm, TINY, 0, 40, 20, 10)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Two random Hopper datasets of 500 steps: one with reference returns, one without."""
    from recipes import make_dataset as md

    folder = tmp_path_factory.mktemp("offline")
    previous = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(folder / "minari")  # the subprocess inherits it
    for dataset_id, refs in ((TINY, (REF_MIN, REF_MAX)), (BARE, (None, None))):
        md.main(md.Config(
            kind="random", env_id="Hopper-v5", steps=500, num_envs=2, dataset_id=dataset_id,
            ref_min_score=refs[0], ref_max_score=refs[1],
        ))  # fmt: skip
    yield folder
    if previous is None:
        del os.environ["MINARI_DATASETS_PATH"]
    else:
        os.environ["MINARI_DATASETS_PATH"] = previous


@pytest.fixture(scope="module")
def table(datasets: Path) -> tuple[Path, Path]:
    """tdrl's BC in ``offline_table.py --child`` as the driver runs it, TorchRL's IQL and
    (bench extra) Tianshou's CQL in this process; the lines in one table."""
    table, work = datasets / "docs" / "offline_table.jsonl", datasets / "work"
    launch = functools.partial(mt.launch_subprocess, script=ot.OFFLINE.script)
    assert mt.run_cells([tiny("tdrl", "bc")], table, work, launch=launch) == 0
    peers = [tiny("torchrl", "iql")]
    if HAVE_TIANSHOU:
        peers.append(tiny("tianshou", "cql"))
    for cell in peers:
        mt.append_line(table, ot.run_cell(cell, cell.folder(work)))
    return table, work


try:
    import tianshou  # noqa: F401

    HAVE_TIANSHOU = True
except ImportError:
    HAVE_TIANSHOU = False


@pytest.mark.table
def test_each_library_trains_and_scores_the_d4rl_way(table: tuple[Path, Path]) -> None:
    lines = {line["library"]: line for line in mt.read_lines(table[0])}
    assert set(lines) == {"tdrl", "torchrl"} | ({"tianshou"} if HAVE_TIANSHOU else set())
    for line in lines.values():
        curve = line["curve"]
        assert curve["steps"] == [20, 40] and line["env_steps"] == 40
        assert (line["ref_min_score"], line["ref_max_score"]) == (REF_MIN, REF_MAX)
        assert line["env_id"] == "Hopper-v5" and line["task"] == TINY
        expected = [100 * (r - REF_MIN) / (REF_MAX - REF_MIN) for r in curve["returns"]]
        assert curve["scores"] == pytest.approx(expected)
        assert line["final_score"] == pytest.approx(expected[-1])
        assert line["best_score"] == pytest.approx(max(expected))
        assert len(curve["eval_s"]) == 2 and 0 < sum(curve["eval_s"]) < line["wall_s"]
        assert ot.steps_per_second(line) > 0
    assert lines["tdrl"]["settings"]["algo"] == "bc"
    assert lines["tdrl"]["settings"]["dataset"] == TINY
    assert lines["torchrl"]["settings"]["batch_size"] == 256


@pytest.mark.table
def test_a_rerun_skips_the_done_cells(
    table: tuple[Path, Path], capsys: pytest.CaptureFixture
) -> None:
    before = table[0].read_text()

    def never(*args: Any) -> dict[str, Any]:
        raise AssertionError("a done cell ran again")

    assert mt.run_cells([tiny("tdrl", "bc"), tiny("torchrl", "iql")], *table, launch=never) == 0
    assert table[0].read_text() == before
    assert capsys.readouterr().out.count("in the table, skipped") == 2


@pytest.mark.table
def test_the_page_shows_the_normalized_scores(table: tuple[Path, Path]) -> None:
    lines = mt.read_lines(table[0])
    bc = next(line for line in lines if line["library"] == "tdrl")
    page = ot.markdown(lines)
    assert f"| {TINY} | BC | 40 | {bc['final_score']:.1f} | {bc['best_score']:.1f} | 1 |" in page
    assert f"- {TINY} (40 steps): " in page  # the ordering line of tdrl's algorithms
    assert "| IQL | torchrl | -20.0 | 3000.0 |" in page
    # versions and machine stated once, from the lines; the lines' dates stay off the page
    torch_version = next(x for x in lines if x["library"] == "torchrl")["versions"]["torchrl"]
    assert page.count("Versions: ") == 1 and f"torchrl {torch_version}" in page
    assert f"Machine: {os.cpu_count()} CPUs." in page
    assert not re.search(r"\d{4}-\d{2}-\d{2}", page) and not re.search(r"[Ii]ssue \d", page)
    assert "No cell has finished yet." in ot.markdown([])
    assert ot.paper_ordering({"hopper-medium-replay", "walker2d-medium"}) == [
        "- IQL paper (Table 1), hopper-medium-replay-v2, 1M steps: "
        "CQL 95.0 > IQL 94.7 > TD3+BC 60.9 > BC 18.1"
    ]


def test_a_dataset_without_references_is_refused(datasets: Path) -> None:
    cell = mt.Cell("tdrl", "bc", BARE, 0, 40, 20, 10)
    with pytest.raises(ValueError, match="stores no reference returns"):
        ot.run_cell(cell, datasets / "bare")


@pytest.mark.table
def test_make_datasets_writes_the_four_kinds_from_its_source_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the driver's dataset step end to end on source runs of a few hundred steps: the expert
    # and medium policies recorded from their run folders, the medium run's replay, random
    import minari

    from tdrl.trainers import read_csv

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    monkeypatch.setattr(ot, "WORKDIR", tmp_path)
    common = {"env_id": "Hopper-v5", "seed": 0, "threads": 1, "progress": False}
    tiny_sources = {
        "expert": ("ppo", common | dict(total_frames=256, frames_per_batch=128, num_envs=2)),
        "medium": ("sac", common | dict(total_frames=300, init_random_frames=100,
                                        checkpoint_every=300, eval_every=100, eval_episodes=1)),
    }  # fmt: skip
    monkeypatch.setattr(ot, "sources", lambda env_id: tiny_sources)
    monkeypatch.setattr(ot, "RANDOM_EPISODES", 5)
    made = ot.make_datasets("Hopper-v5", steps=64)
    version = ot.DATASET_VERSION["Hopper-v5"]
    assert made == {k: f"tdrl/hopper-{k}-v{version}" for k in
                    ("expert", "medium", "medium-replay", "random")}  # fmt: skip
    # the medium run stops at its first evaluation >= 0.3 x the expert's return: its replay
    # holds the steps up to there
    medium = read_csv(tmp_path / "sources" / "medium-Hopper-v5" / "eval.csv")
    assert (
        medium[-1]["return_mean"]
        >= ot.MEDIUM_FRACTION * ot.last_eval(tmp_path / "sources" / "expert-Hopper-v5")
        or medium[-1]["step"] == 300
    )
    for kind, dataset_id in made.items():
        dataset = minari.load_dataset(dataset_id)
        steps = int(medium[-1]["step"]) if kind == "medium-replay" else 64
        assert dataset.total_steps == steps, kind
        ref_min, ref_max = ot.references(dataset)
        assert ref_max == pytest.approx(ot.last_eval(tmp_path / "sources" / "expert-Hopper-v5"))
        assert ref_min < ref_max
