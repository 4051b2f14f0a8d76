"""recipes/mappo.py: MAPPO and IPPO run in seconds on VMAS and MPE with a tiny config, write
their logs, and a paused run resumes to the end (with fresh episodes: the simulators' states are
not checkpointed)."""

from __future__ import annotations

import pytest

from recipes import mappo
from tdrl.trainers import configure, read_csv

pytest.importorskip("vmas")
pytest.importorskip("mpe2")

TINY = dict(
    total_frames=240, num_envs=4, frames_per_batch=120, minibatch_size=40, epochs=2,
    eval_every=120, log_every=120, eval_episodes=2, eval_envs=2, hidden_sizes=(16,), progress=False,
    tensorboard=False,
)  # fmt: skip


@pytest.mark.parametrize(
    "env_id, extra",
    [
        ("vmas/navigation", {}),
        ("vmas/navigation", {"critic": "local", "share_params": False}),
        ("mpe2/simple_spread_v3", {"discrete": True}),
    ],
    ids=["mappo-vmas", "ippo-vmas-own-params", "mappo-mpe-discrete"],
)
def test_the_recipe_trains_and_evaluates(tmp_path, env_id, extra):
    cfg = configure(mappo.Config, env_id=env_id, log_dir=str(tmp_path), **TINY, **extra)
    result = mappo.main(cfg)
    assert result["eval_n_episodes"] == 2 and result["updates"] == 2 * 2 * 3  # 2 batches
    rows = read_csv(tmp_path / "train.csv")
    assert [row["step"] for row in rows] == [120, 240]
    assert all(row["loss_critic"] > 0 for row in rows)
    assert [row["step"] for row in read_csv(tmp_path / "eval.csv")] == [120, 240]


def test_a_paused_run_resumes_to_its_end(tmp_path):
    cfg = configure(mappo.Config, log_dir=str(tmp_path), checkpoint_every=120, **TINY)
    mappo.main(configure(cfg, stop_after_frames=120))
    assert [row["step"] for row in read_csv(tmp_path / "eval.csv")] == [120]
    result = mappo.main(configure(cfg, resume=True))
    assert result["updates"] == 12
    assert [row["step"] for row in read_csv(tmp_path / "train.csv")] == [120, 240]
