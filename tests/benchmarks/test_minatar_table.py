"""benchmarks/minatar_table.py: the MinAtar suite on mujoco_table's machinery. Its cells and
settings, one tiny real cell per library (tdrl's in a subprocess as the driver runs it: 300
env steps of Breakout, all uniform random since learning starts at 5k, evaluated twice on 10
greedy episodes), skipped on a rerun, and the page rendered from their lines.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the driver imports mujoco_table as a sibling
import minatar_table as mn  # noqa: E402

mt = mn.mt  # mujoco_table: the machinery
BREAKOUT = "MinAtar/Breakout-v1"


def test_the_cells_are_two_games_three_seeds_and_six_runs(capsys: pytest.CaptureFixture) -> None:
    cells = mt.build_cells(mn.MINATAR, list(mn.ALGOS), mn.TASKS, [0, 1, 2])
    assert len(cells) == 36
    runs = {(c.library, c.algorithm) for c in cells}
    assert runs == {("tdrl", "dqn"), ("SB3", "dqn"), ("tdrl", "rainbow"), ("tdrl", "ppo"),
                    ("SB3", "ppo"), ("tdrl", "ppg")}  # fmt: skip
    assert {(c.steps, c.eval_every, c.eval_episodes) for c in cells} == {(500_000, 25_000, 10)}
    assert f"rainbow {BREAKOUT}: no SB3 class, tdrl only" in capsys.readouterr().out
    assert mn.MINATAR.table == ROOT / "docs" / "benchmarks" / "minatar_table.jsonl"


def test_both_libraries_get_the_published_settings() -> None:
    from recipes import dqn, rainbow
    from tdrl.trainers import configure
    from tdrl.trainers.config import flat_dict

    assert (mn.ALGOS["dqn"].recipe, mn.ALGOS["rainbow"].recipe) == ("dqn", "rainbow")
    cfg = flat_dict(configure(dqn.Config, **dict(mn.ALGOS["dqn"].preset)))
    published = (32, 100_000, 2.5e-4, 0.99, 1.0, 0.1, 100_000, 1000, 5000, 1, 1.0)
    names = (
        "batch_size", "buffer_size", "lr", "gamma", "eps_init", "eps_end", "eps_frames",
        "target_update_interval", "init_random_frames", "frames_per_batch", "utd_ratio",
    )  # fmt: skip
    assert tuple(cfg[name] for name in names) == published
    assert (cfg["double_dqn"], cfg["checkpoint_every"]) == (False, 0)
    rainbow_cfg = flat_dict(configure(rainbow.Config, **dict(mn.ALGOS["rainbow"].preset)))
    names = ("algo", "noisy", "dueling", "prioritized", "n_steps", "double_dqn")
    assert tuple(rainbow_cfg[name] for name in names) == ("c51", True, True, True, 3, True)
    for name, _ in mn.PUBLISHED:
        assert rainbow_cfg[name] == cfg[name], name
    assert mn.sb3_settings("dqn", BREAKOUT) == {
        "learning_rate": 2.5e-4, "buffer_size": 100_000, "learning_starts": 5000,
        "batch_size": 32, "gamma": 0.99, "train_freq": 1, "gradient_steps": 1,
        "target_update_interval": 1000, "exploration_initial_eps": 1.0,
        "exploration_final_eps": 0.1, "max_grad_norm": cfg["max_grad_norm"],
    }  # fmt: skip
    assert mn.sb3_settings("rainbow", BREAKOUT) is None


def test_ppo_runs_the_zoos_atari_settings_in_both_libraries_and_ppg_adds_its_phases() -> None:
    from recipes import ppg, ppo
    from tdrl.trainers import configure
    from tdrl.trainers.config import flat_dict

    cfg = flat_dict(configure(ppo.Config, **dict(mn.ALGOS["ppo"].preset)))
    sb3 = mn.sb3_settings("ppo", BREAKOUT)
    assert sb3 == {
        "n_envs": 8, "n_steps": 128, "n_epochs": 4, "batch_size": 256, "learning_rate": 2.5e-4,
        "clip_range": 0.1, "vf_coef": 0.5, "ent_coef": 0.01, "gamma": 0.99, "gae_lambda": 0.95,
        "max_grad_norm": 0.5, "normalize_advantage": True,
    }  # fmt: skip
    assert cfg["num_envs"] * sb3["n_steps"] == cfg["frames_per_batch"] == 1024
    assert (cfg["clip_decay"], cfg["lr_decay"], cfg["scale_rewards"]) == (True, True, False)
    assert (cfg["adam_eps"], cfg["normalize_advantage"]) == (1e-5, True)  # SB3's
    assert mn.sb3_cell_settings(mt.Cell("SB3", "ppo", BREAKOUT, 0, 300, 150, 10)) == sb3
    ppg_cfg = flat_dict(configure(ppg.Config, **dict(mn.ALGOS["ppg"].preset)))
    # PPO's policy phase (its 4 epochs too), then the paper's auxiliary phase
    assert (ppg_cfg["epochs"], ppg_cfg["policy_iterations"], ppg_cfg["aux_epochs"]) == (4, 32, 6)
    for name in ("lr", "clip_epsilon", "entropy_coeff", "critic_coeff", "minibatch_size", "epochs"):
        assert ppg_cfg[name] == cfg[name], name


def tiny(library: str) -> Any:
    return mt.Cell(library, "dqn", BREAKOUT, 0, 300, 150, 10)


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tdrl cell in ``minatar_table.py --child`` as the driver runs it, and where SB3 is
    installed (the bench extra) the SB3 cell in this process (a second fresh Python would double
    the time), the lines in one table."""
    pytest.importorskip("minatar", reason="MinAtar is the pixels extra")
    folder = tmp_path_factory.mktemp("minatar")
    table, work = folder / "docs" / "minatar_table.jsonl", folder / "work"
    launch = functools.partial(mt.launch_subprocess, script=mn.MINATAR.script)
    assert mt.run_cells([tiny("tdrl")], table, work, launch=launch) == 0
    if HAVE_SB3:
        mt.append_line(table, mt.run_cell(tiny("SB3"), tiny("SB3").folder(work), mn.MINATAR))
    return table, work


HAVE_SB3 = importlib.util.find_spec("stable_baselines3") is not None
needs_sb3 = pytest.mark.skipif(not HAVE_SB3, reason="SB3 is the bench extra")


def line_of(table: Path, library: str) -> dict[str, Any]:
    def reject(name: str) -> None:
        raise ValueError(f"not strict JSON: {name}")

    lines = [json.loads(x, parse_constant=reject) for x in table.read_text().splitlines()]
    (line,) = [x for x in lines if x["library"] == library]
    assert mt.line_key(line) == tiny(library).key
    assert line["env_steps"] == 300 and line["curve"]["steps"] == [150, 300]
    assert line["final_return"] == line["curve"]["returns"][-1]
    assert line["best_return"] == max(line["curve"]["returns"])
    assert "minatar" in line["versions"] and "mujoco" not in line["versions"]
    return line


@pytest.mark.table
def test_a_tiny_tdrl_cell_runs_the_recipe_with_the_preset(table: tuple[Path, Path]) -> None:
    from recipes import dqn
    from tdrl.trainers import configure
    from tdrl.trainers.config import flat_dict

    line = line_of(table[0], "tdrl")
    folder = tiny("tdrl").folder(table[1])
    expected = configure(dqn.Config, **dict(mn.ALGOS["dqn"].preset) | dict(
        env_id=BREAKOUT, seed=0, total_frames=300, log_dir=str(folder), eval_every=150,
        eval_episodes=10,
    ))  # fmt: skip
    assert line["settings"] == mt.finite(flat_dict(expected))


@pytest.mark.table
@needs_sb3
def test_a_tiny_sb3_cell_has_tdrls_q_network(table: tuple[Path, Path]) -> None:
    from tdrl.modules import MinAtarCNN

    line = line_of(table[0], "SB3")
    breakout = MinAtarCNN(4, 3)  # Breakout-v1: 4 channels, 3 actions
    assert line["settings"]["q_network_parameters"] == sum(p.numel() for p in breakout.parameters())
    hyper = line["settings"]["hyperparameters"]
    assert hyper["exploration_fraction"] == 100_000 / 300  # epsilon decays over 100k env steps
    assert line["settings"]["eval_envs"] == 5
    # the real lines read as current; a changed epsilon decay (set per cell, from the budget)
    # reads as stale
    assert mt.settings_drift(line, mn.MINATAR) == ([], [])
    line["settings"]["hyperparameters"]["exploration_fraction"] = 0.1
    assert mt.settings_drift(line, mn.MINATAR)[0] == [
        f"exploration_fraction: 0.1 then, {100_000 / 300!r} now"
    ]
    tdrl_line = line_of(table[0], "tdrl")
    assert mt.settings_drift(tdrl_line, mn.MINATAR) == ([], [])


@pytest.mark.table
@needs_sb3
def test_a_rerun_skips_the_done_cells_and_the_page_renders(table: tuple[Path, Path]) -> None:
    path, work = table
    again: list[Any] = []
    mt.run_cells([tiny("tdrl"), tiny("SB3")], path, work, launch=lambda c, *_: again.append(c))
    assert again == [] and len(path.read_text().splitlines()) == 2
    md_path, pngs = mt.render(path, mn.MINATAR)
    md = md_path.read_text()
    assert md_path.name == "minatar_table.md" and md.startswith("# MinAtar benchmark table")
    main_table = md.split("Seed by seed")[0].split("Run conditions")[0]
    (row,) = [x for x in main_table.splitlines() if x.startswith("| MinAtar")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:3] == [BREAKOUT, "DQN", "300"] and len(cells) == 14  # no reference column
    assert cells[5] == cells[9] == "1"  # one seed of each library
    assert [p.name for p in pngs] == ["minatar_Breakout-v1.png"]
    # versions and machine stated once, from the lines; the lines' dates stay off the page
    minatar = line_of(path, "SB3")["versions"]["minatar"]
    assert md.count("Versions: ") == 1 and f"SB3: python {sys.version.split()[0]}" in md
    assert f"minatar {minatar}" in md and "Machine: " in md
    assert not re.search(r"\d{4}-\d{2}-\d{2}", md) and not re.search(r"[Ii]ssue \d", md)


def ablation_line(seed: int, finals: list[float], **overrides: Any) -> dict[str, Any]:
    steps = [25_000 * (i + 1) for i in range(len(finals))]
    return {
        "library": "tdrl", "algorithm": "rainbow", "task": BREAKOUT, "seed": seed,
        "steps": steps[-1], "eval_every": 25_000, "eval_episodes": 10,
        "final_return": finals[-1], "best_return": max(finals), "wall_s": 100.0 + seed,
        "curve": {"steps": steps, "returns": finals}, "overrides": overrides,
        "versions": {"python": "3.11.7", "minatar": "1.0.15"}, "cpus": 2,
    }  # fmt: skip


def ablation_rows(lines: list[dict[str, Any]]) -> list[list[str]]:
    rows = [x for x in mn.ablation_markdown(lines).splitlines() if x.startswith("| Min")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows]


def test_the_ablation_rows_put_each_ingredient_beside_the_full_agent() -> None:
    lines = [
        ablation_line(0, [2.0, 8.0]),
        ablation_line(1, [3.0, 7.0]),
        ablation_line(1, [4.0, 10.0]),  # the same cell appended again: the later line counts
        ablation_line(1, [3.0, 2.0], prioritized="false"),  # typed as the driver types it
        ablation_line(0, [5.0, 4.0], prioritized=False),
        ablation_line(0, [1.0, 6.0], algo="dqn"),
        ablation_line(7, [1.0, 6.0], dueling=False),  # a seed the full agent did not run
    ]
    cells = ablation_rows(lines)
    assert [c[2] for c in cells] == [
        "Rainbow",
        "- prioritized replay",
        "- distributional (scalar Q, Huber loss)",
        "- dueling",
    ]  # Rainbow's order, whatever the lines'
    # final and best: sample std over seeds; peak: the population std (Tianshou's way)
    assert cells[0][1:] == [
        "50k", "Rainbow", "0, 1", "9.0 ± 1.4", "9.0 ± 1.4", "9.0 ± 1.0", "100", "—", "—"
    ]  # fmt: skip
    # finals 4 and 2 over Rainbow's 8 and 10; bests 5 and 3 over 8 and 10
    assert cells[1][3:5] == ["0, 1", "3.0 ± 1.4"] and cells[1][8:] == ["0.33", "0.44"]
    # seed 0 alone: 6 over 8, both final and best, on one of the full agent's two seeds
    assert cells[2][4] == "6.0" and cells[2][8:] == ["0.75 (1 seed)", "0.75 (1 seed)"]
    assert cells[3][3] == "7" and cells[3][8:] == ["—", "—"]  # no seed in common
    page = mn.ablation_markdown(lines)
    assert "Versions: tdrl: python 3.11.7, minatar 1.0.15. Machine: 2 CPUs." in page


@pytest.mark.parametrize(
    ("line", "match"),
    [
        (ablation_line(0, [1.0], prioritized=False, n_steps=1), "not one of Rainbow's ablations"),
        (ablation_line(0, [1.0], hidden_sizes=[64, 64]), "not one of Rainbow's ablations"),
        (ablation_line(0, [1.0]) | {"algorithm": "dqn"}, "tdrl dqn .* seed 0: the ablation rows"),
        (ablation_line(0, [1.0]) | {"library": "SB3"}, "SB3 rainbow .* the ablation rows"),
        (ablation_line(0, [1.0]) | {"eval_episodes": 5}, "5 evaluation episodes, not 10"),
    ],
)
def test_a_line_that_is_no_ablation_of_tdrls_rainbow_is_refused_by_name(line, match) -> None:
    with pytest.raises(ValueError, match=match):
        mn.ablation_markdown([line])


def test_an_ablation_line_evaluated_on_another_schedule_is_refused() -> None:
    other = ablation_line(2, [1.0, 2.0], dueling=False) | {"eval_every": 10_000}
    with pytest.raises(ValueError, match="seed 2 '- dueling': evaluated every 10000 steps"):
        mn.ablation_markdown([ablation_line(0, [2.0, 8.0]), other])
