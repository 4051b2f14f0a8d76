"""Learning-curve PNGs from the CSV logs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from tdrl.trainers.logger import read_csv


def plot_learning_curve(
    csv_path: str | os.PathLike,
    png_path: str | os.PathLike,
    *,
    y: str = "return_mean",
    y_std: str | None = "return_std",
    x: str = "step",
    title: str = "",
    extra: Sequence[tuple[str, str | os.PathLike]] = (),
) -> Path:
    """Plot ``y`` against ``x`` from a log CSV (with a +-``y_std`` band when the column exists).

    ``extra`` adds more curves as ``(label, csv_path)`` pairs, e.g. other seeds or libraries.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, path in [("tdrl", csv_path), *extra]:
        rows = [r for r in read_csv(path) if x in r and y in r]
        if not rows:
            continue
        xs = [r[x] for r in rows]
        ys = [r[y] for r in rows]
        ax.plot(xs, ys, label=label)
        if y_std is not None and all(y_std in r for r in rows):
            lo = [r[y] - r[y_std] for r in rows]
            hi = [r[y] + r[y_std] for r in rows]
            ax.fill_between(xs, lo, hi, alpha=0.2)
    ax.set_xlabel("env steps" if x == "step" else x)
    ax.set_ylabel(y)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if extra:
        ax.legend()
    fig.tight_layout()
    png_path = Path(png_path)
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return png_path
