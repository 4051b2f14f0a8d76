"""recipes/qmix.py: QMIX and VDN run in seconds on MPE with a tiny config, a hard target copy
works as the soft one, a task without a global state is refused for QMIX, and a paused run
resumes to its end."""

from __future__ import annotations

import pytest

from recipes import qmix
from tdrl.trainers import configure, read_csv

pytest.importorskip("mpe2")
pytest.importorskip("vmas")

TINY = dict(
    total_frames=240, num_envs=4, frames_per_batch=120, batch_size=32, utd_ratio=0.1,
    eval_every=120, log_every=120, eval_episodes=2, eval_envs=2, hidden_sizes=(16,),
    eps_frames=200, progress=False, tensorboard=False,
)  # fmt: skip


@pytest.mark.parametrize("extra", [{}, {"mixer": "vdn"}, {"tau": 0.0, "target_update_interval": 5}],
                         ids=["qmix", "vdn", "qmix-hard-targets"])  # fmt: skip
def test_the_recipe_trains_and_evaluates(tmp_path, extra):
    cfg = configure(qmix.Config, log_dir=str(tmp_path), **TINY, **extra)
    result = qmix.main(cfg)
    assert result["updates"] == 24 and result["eval_n_episodes"] == 2
    rows = read_csv(tmp_path / "train.csv")
    assert [row["step"] for row in rows] == [120, 240] and rows[-1]["epsilon"] < 1.0


def test_qmix_on_a_task_without_a_global_state_is_refused(tmp_path):
    cfg = configure(qmix.Config, env_id="vmas/navigation", log_dir=str(tmp_path), **TINY)
    with pytest.raises(ValueError, match=r"--mixer qmix reads the global state"):
        qmix.main(cfg)
    result = qmix.main(configure(cfg, mixer="vdn", log_dir=str(tmp_path / "vdn")))
    assert result["updates"] == 24


def test_a_paused_run_resumes_to_its_end(tmp_path):
    cfg = configure(qmix.Config, log_dir=str(tmp_path), checkpoint_every=120, **TINY)
    qmix.main(configure(cfg, stop_after_frames=120))
    result = qmix.main(configure(cfg, resume=True))
    assert result["updates"] == 24
    assert [row["step"] for row in read_csv(tmp_path / "eval.csv")] == [120, 240]
