"""Learning-curve PNGs from the CSV logs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from tdrl.trainers.logger import read_csv

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


# What a column is, on a plot's axis.
AXIS_LABELS = {"return_mean": "evaluation return", "episode_return": "training episode return"}


def plot_band(
    ax: Axes,
    x: Sequence[float],
    mean: Sequence[float],
    std: Sequence[float],
    *,
    alpha: float = 0.2,
    **line: Any,
) -> None:
    """Plot ``mean`` against ``x`` (``line``: ``ax.plot``'s keywords) with a +-``std`` band in
    the line's color."""
    if len(x) == 1:  # one evaluation: a point and its error bar (a band of one x is empty)
        ax.errorbar(x, mean, yerr=std, fmt="o", capsize=4, **line)
        return
    (drawn,) = ax.plot(x, mean, **line)
    lo = [m - s for m, s in zip(mean, std, strict=True)]
    hi = [m + s for m, s in zip(mean, std, strict=True)]
    ax.fill_between(x, lo, hi, color=drawn.get_color(), alpha=alpha)


def save_png(fig: Figure, png_path: str | os.PathLike) -> Path:
    """Lay ``fig`` out tightly, write it to ``png_path`` (100 dpi; folders made) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    png_path = Path(png_path)
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return png_path


class CurveOptions(TypedDict, total=False):
    """What :func:`learning_curve_figure` plots (its keyword arguments, defaults there)."""

    y: str
    y_std: str | None
    x: str
    title: str
    extra: Sequence[tuple[str, str | os.PathLike]]


def plot_learning_curve(
    csv_path: str | os.PathLike, png_path: str | os.PathLike, **options: Unpack[CurveOptions]
) -> Path:
    """:func:`learning_curve_figure` of ``csv_path``, saved to ``png_path``."""
    return save_png(learning_curve_figure(csv_path, **options), png_path)


def learning_curve_figure(
    csv_path: str | os.PathLike,
    *,
    y: str = "return_mean",
    y_std: str | None = "return_std",
    x: str = "step",
    title: str = "",
    extra: Sequence[tuple[str, str | os.PathLike]] = (),
) -> Figure:
    """Plot ``y`` against ``x`` from a log CSV (with a +-``y_std`` band when the column exists;
    a single row shows as a point with an error bar).

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
        if y_std is not None and all(y_std in r for r in rows):
            plot_band(ax, xs, ys, [r[y_std] for r in rows], label=label)
        else:
            ax.plot(xs, ys, marker="o" if len(xs) == 1 else None, label=label)
    ax.set_xlabel("env steps" if x == "step" else x)
    ax.set_ylabel(AXIS_LABELS.get(y, y))
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if extra:
        ax.legend()
    return fig
