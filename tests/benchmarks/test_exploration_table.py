"""benchmarks/exploration_table.py: PPO with and without the exploration bonuses on MiniGrid, on
mujoco_table's machinery: its cells and the settings each row hands recipes/ppo.py."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the driver imports mujoco_table as a sibling
import exploration_table as et  # noqa: E402

mt = et.mt


def test_the_cells_are_seven_tdrl_rows_of_ppo_on_doorkey():
    cells = mt.build_cells(et.EXPLORATION, list(et.ALGOS), et.TASKS, [0, 1, 2])
    assert len(cells) == 21 and {c.library for c in cells} == {"tdrl"}
    assert {c.algorithm for c in cells} == {
        "ppo", "ppo_rnd", "ppo_rnd_first_visit", "ppo_rnd_first_visit_tuned", "ppo_icm",
        "ppo_icm_first_visit", "ppo_rnd_cleanrl",
    }  # fmt: skip
    assert {(c.steps, c.eval_every) for c in cells} == {(1_000_000, 50_000)}


def test_each_row_configures_ppo_with_its_bonus():
    from recipes import ppo
    from tdrl.trainers import configure
    from tdrl.trainers.config import flat_dict

    cfg = {name: flat_dict(configure(ppo.Config, **dict(algo.preset)))
           for name, algo in et.ALGOS.items()}  # fmt: skip
    assert cfg["ppo"]["intrinsic_coeff"] == 0.0
    assert (cfg["ppo_rnd"]["intrinsic"], cfg["ppo_rnd"]["intrinsic_coeff"]) == ("rnd", 1.0)
    assert cfg["ppo_rnd"]["extrinsic_coeff"] == 2.0  # CleanRL's
    assert not cfg["ppo_rnd"]["rnd_first_visit"] and cfg["ppo_rnd_first_visit"]["rnd_first_visit"]
    fv = {k: v for k, v in cfg["ppo_rnd_first_visit"].items() if k != "rnd_first_visit"}
    assert fv == {k: v for k, v in cfg["ppo_rnd"].items() if k != "rnd_first_visit"}
    tuned = cfg["ppo_rnd_first_visit_tuned"]
    assert tuned["intrinsic_coeff"] == 0.1 and tuned["rnd_first_visit"]
    assert not any(c["eval_deterministic"] for c in cfg.values())  # sampled-action evaluations
    assert (cfg["ppo_icm"]["intrinsic"], cfg["ppo_icm"]["icm_beta"]) == ("icm", 0.2)
    icm_fv = cfg["ppo_icm_first_visit"]
    assert icm_fv["icm_first_visit"] and icm_fv["intrinsic_coeff"] == 0.1
    changed = ("icm_first_visit", "intrinsic_coeff")
    assert {k: v for k, v in icm_fv.items() if k not in changed} == {
        k: v for k, v in cfg["ppo_icm"].items() if k not in changed
    }
    clean = cfg["ppo_rnd_cleanrl"]
    assert (clean["lr"], clean["gamma"], clean["clip_epsilon"]) == (1e-4, 0.999, 0.1)
    assert clean["rnd_update_proportion"] == 0.25
    for name in ("num_envs", "frames_per_batch", "epochs", "entropy_coeff", "lr"):
        assert cfg["ppo_rnd"][name] == cfg["ppo_icm"][name] == cfg["ppo"][name], name
