import csv

import pytest
import torch

from tdrl.trainers.logger import Logger, read_csv, rewrite_csv
from tdrl.trainers.plotting import plot_learning_curve


def test_csv_rows_and_widened_header(tmp_path):
    with Logger(tmp_path, tensorboard=False) as log:
        log.log("train", 10, {"loss": 1.5})
        log.log("train", 20, {"loss": torch.tensor(0.5), "kl": 0.01})
        log.log("train", 30, {"kl": 0.02})
    rows = read_csv(tmp_path / "train.csv")
    assert [r["step"] for r in rows] == [10, 20, 30]
    assert rows[0] == {"step": 10, "loss": 1.5}
    assert rows[1] == {"step": 20, "loss": 0.5, "kl": 0.01}
    assert rows[2] == {"step": 30, "kl": 0.02}
    with (tmp_path / "train.csv").open() as f:
        assert next(csv.reader(f)) == ["step", "loss", "kl"]


def test_resume_appends(tmp_path):
    with Logger(tmp_path, tensorboard=False) as log:
        log.log("eval", 1, {"return_mean": 3.0})
    with Logger(tmp_path, tensorboard=False) as log:
        log.log("eval", 2, {"return_mean": 4.0})
    assert [r["return_mean"] for r in read_csv(tmp_path / "eval.csv")] == [3.0, 4.0]


def test_tensorboard_files_written(tmp_path):
    with Logger(tmp_path) as log:
        log.log("train", 1, {"loss": 1.0})
    assert list(tmp_path.glob("events.out.tfevents.*"))


def test_bad_metric_names_the_key(tmp_path):
    with Logger(tmp_path, tensorboard=False) as log:
        with pytest.raises(ValueError, match="'loss'.*shape \\(2,\\)"):
            log.log("train", 1, {"loss": torch.zeros(2)})
        with pytest.raises(TypeError, match="'name'"):
            log.log("train", 1, {"name": "abc"})


def test_plot_writes_png(tmp_path):
    with Logger(tmp_path, tensorboard=False) as log:
        for step in range(5):
            log.log("eval", step * 100, {"return_mean": step, "return_std": 0.5})
    png = plot_learning_curve(tmp_path / "eval.csv", tmp_path / "curve.png", title="t")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


def test_a_rewrite_that_fails_midway_leaves_the_old_file_whole(tmp_path):
    logger = Logger(tmp_path, tensorboard=False)
    for step in range(3):
        logger.log("eval", step, {"return": float(step)})
    path = tmp_path / "eval.csv"
    before = path.read_bytes()
    rows = read_csv(path) + [{"step": 3.0, "unknown": 1.0}]  # the last row cannot be written
    with pytest.raises(ValueError, match="unknown"):
        rewrite_csv(path, ["step", "return"], rows)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["eval.csv"]
    rewrite_csv(path, ["step", "return"], read_csv(path)[:2])
    assert [r["step"] for r in read_csv(path)] == [0.0, 1.0]


def test_a_resumed_logger_replaces_the_tensorboard_events_after_its_checkpoint(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with Logger(tmp_path) as log:  # a run cut after step 4, its checkpoint at step 2
        for step in range(1, 5):
            log.log("train", step, {"loss": float(step)})
    with Logger(tmp_path, resume_step=3) as log:  # resumed: steps 3 and 4 again, then 5
        for step in range(3, 6):
            log.log("train", step, {"loss": 10.0 * step})
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    scalars = [(e.step, e.value) for e in events.Scalars("train/loss")]
    assert scalars == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0), (5, 50.0)]


def test_the_curve_names_its_axes_and_shows_a_single_evaluation_as_a_point(tmp_path):
    import matplotlib.pyplot as plt

    from tdrl.trainers.plotting import learning_curve_figure

    (tmp_path / "eval.csv").write_text("step,return_mean,return_std\n1000,12.5,2.0\n")
    fig = learning_curve_figure(tmp_path / "eval.csv")
    ax = fig.axes[0]
    assert ax.get_ylabel() == "evaluation return" and ax.get_xlabel() == "env steps"
    points = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert len(points) == 1 and list(points[0].get_ydata()) == [12.5]
    plt.close(fig)
    (tmp_path / "eval.csv").write_text("step,return_mean,return_std\n1,1.0,0.0\n2,2.0,0.0\n")
    fig = learning_curve_figure(tmp_path / "eval.csv")
    (line,) = fig.axes[0].get_lines()
    assert line.get_marker() in ("None", None, "") and len(line.get_xdata()) == 2
    plt.close(fig)
