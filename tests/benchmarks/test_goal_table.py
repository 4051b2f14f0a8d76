"""benchmarks/goal_table.py: DQN with and without hindsight replay on bit flipping, and SAC with
HER on PointMaze, beside SB3, on mujoco_table's machinery: its cells and the settings each row
hands the recipes and SB3."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the driver imports mujoco_table as a sibling
import goal_table as gt  # noqa: E402

mt = gt.mt


def test_the_bit_flipping_cells_pair_each_row_with_sb3():
    cells = mt.build_cells(gt.GOALS, ["dqn", "dqn_her"], gt.TASKS, [0, 1, 2])
    assert len(cells) == 24 and {c.library for c in cells} == {"tdrl", "SB3"}
    assert {c.task for c in cells} == {"tdrl/BitFlipping15-v0", "tdrl/BitFlipping25-v0"}
    assert {(c.steps, c.eval_every) for c in cells} == {(50_000, 5_000)}


def test_both_libraries_get_the_same_settings():
    from recipes import dqn, sac
    from tdrl.trainers import configure
    from tdrl.trainers.config import flat_dict

    her = flat_dict(configure(dqn.Config, **dict(gt.ALGOS["dqn_her"].preset)))
    plain = flat_dict(configure(dqn.Config, **dict(gt.ALGOS["dqn"].preset)))
    assert (her["her"], her["her_goals"], plain["her"]) == ("future", 4, "off")
    sb3 = gt.sb3_cell_settings(mt.Cell("SB3", "dqn_her", gt.TASKS[0], 0, 50_000, 5_000, 10))
    assert sb3 is not None
    assert sb3["replay_buffer_kwargs"] == {"n_sampled_goal": 4, "goal_selection_strategy": "future"}
    assert (sb3["gamma"], sb3["learning_rate"], sb3["batch_size"]) == (
        her["gamma"], her["lr"], her["batch_size"]
    )  # fmt: skip
    assert sb3["exploration_fraction"] * 50_000 == her["eps_frames"]
    assert sb3["gradient_steps"] / sb3["train_freq"] == her["utd_ratio"]
    assert her["double_dqn"] is False  # SB3's DQN has no double Q
    sac_her = flat_dict(configure(sac.Config, **dict(gt.ALGOS["sac_her"].preset)))
    sb3_sac = gt.sb3_settings("sac_her", gt.POINT_MAZE)
    assert sb3_sac is not None and sac_her["her"] == "future"
    assert (sac_her["gamma"], sac_her["actor_lr"], sac_her["alpha_lr"]) == (0.95, 1e-3, 1e-3)
    assert sb3_sac["learning_starts"] == sac_her["init_random_frames"] == 1000
