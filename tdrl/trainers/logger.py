"""Run logs: one CSV file per metric group, TensorBoard event files, and a console line.

A recipe logs a dict of scalars under a group (``"train"``, ``"eval"``) at an env-step count.
Each group has its own CSV (``<log_dir>/<group>.csv``) whose columns are the union of every key
logged to it so far: when a later row brings a new key the file is rewritten with the wider header,
so nothing logged is ever dropped. TensorBoard receives ``<group>/<key>`` scalars.
"""

from __future__ import annotations

import csv
import math
import numbers
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

Scalar = float | int | torch.Tensor


WANDB_ID = "wandb_id"  # the run folder's W&B run id


def _to_float(name: str, value: Scalar) -> float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"metric {name!r} must be a scalar, got a tensor of shape {tuple(value.shape)}"
            )
        return float(value.item())
    if isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(
        f"metric {name!r} must be a number or a one-element tensor, got {type(value).__name__}"
    )


class Logger:
    """CSV + TensorBoard logger.

    Args:
        log_dir: folder for ``<group>.csv`` files and the TensorBoard run.
        tensorboard: write TensorBoard event files too.
        wandb: ``(project, config)``: log to Weights & Biases too; the run's id is kept in
            ``log_dir/wandb_id``, so a resumed run continues the same W&B run.
        resume_step: the env step a resumed run continues from: TensorBoard discards the
            events logged after it (``purge_step``); None for a new run.

    The CSV files are flushed on every call, so a run that is killed keeps what it logged.
    """

    def __init__(
        self,
        log_dir: str | os.PathLike,
        *,
        tensorboard: bool = True,
        wandb: tuple[str, dict[str, Any]] | None = None,
        resume_step: int | None = None,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._columns: dict[str, list[str]] = {}
        self._writer = None
        self._wandb: Any = None
        if wandb is not None:
            try:
                import wandb as wandb_module
            except ImportError as err:
                raise ImportError(
                    "W&B logging needs the wandb extra: pip install 'tdrl[wandb]'"
                ) from err
            project, config = wandb
            # one W&B run per run folder: its id is kept in the folder, so a resumed run
            # continues it (an id made from the path could meet another machine's run)
            id_file = self.log_dir / WANDB_ID
            if not id_file.is_file():
                id_file.write_text(secrets.token_hex(6))
            self._wandb = wandb_module.init(
                project=project,
                dir=str(self.log_dir),
                config=config,
                name=self.log_dir.name,
                id=id_file.read_text().strip(),
                resume="allow",
            )
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # resumed: TensorBoard drops the events the cut run logged after the checkpoint
            self._writer = SummaryWriter(log_dir=str(self.log_dir), purge_step=resume_step)
        # Resuming a run: carry on the existing CSV files.
        for path in self.log_dir.glob("*.csv"):
            with path.open(newline="") as f:
                header = next(csv.reader(f), None)
            if header:
                self._columns[path.stem] = header

    def csv_path(self, group: str) -> Path:
        return self.log_dir / f"{group}.csv"

    def log(self, group: str, step: int, metrics: Mapping[str, Scalar]) -> None:
        """Append ``metrics`` at env step ``step`` to ``group``."""
        row = {"step": float(step)}
        row.update({k: _to_float(k, v) for k, v in metrics.items()})
        path = self.csv_path(group)
        columns = self._columns.get(group)
        if columns is None:
            columns = list(row)
            with path.open("w", newline="") as f:
                csv.writer(f).writerow(columns)
        elif any(k not in columns for k in row):
            columns = columns + [k for k in row if k not in columns]
            rewrite_csv(path, columns, read_csv(path))
        self._columns[group] = columns
        with path.open("a", newline="") as f:
            csv.DictWriter(f, fieldnames=columns, restval="").writerow(
                {k: format_cell(v) for k, v in row.items()}
            )
        if self._writer is not None:
            for k, v in row.items():
                if k != "step":
                    self._writer.add_scalar(f"{group}/{k}", v, int(step))
        if self._wandb is not None:
            self._wandb.log(
                {f"{group}/{k}": v for k, v in row.items() if k != "step"}, step=int(step)
            )

    def video(self, name: str, path: str | os.PathLike, frames: int) -> None:
        """Attach a recorded MP4 to the W&B run (the file itself stays in the run folder)."""
        if self._wandb is not None:
            import wandb as wandb_module

            self._wandb.log({name: wandb_module.Video(str(path), format="mp4"), "frames": frames})

    def close(self) -> None:
        # detached first: a second close (or one after a failed close) does nothing
        writer, wandb_run, self._writer, self._wandb = self._writer, self._wandb, None, None
        if writer is not None:
            writer.close()
        if wandb_run is not None:
            wandb_run.finish()

    def __enter__(self) -> Logger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def format_cell(value: float) -> str:
    """How a number is written in a log CSV (the one format for every row and column)."""
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def rewrite_csv(path: Path, columns: list[str], rows: list[dict[str, float]]) -> None:
    """Replace ``path`` by ``columns`` and ``rows`` in one step: written to a temporary file
    beside it, flushed to disk, then renamed over it, so a kill leaves the old file or the new
    one, never a cut one."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns, restval="")
            writer.writeheader()
            for row in rows:
                writer.writerow({k: format_cell(v) for k, v in row.items()})
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_csv(path: str | os.PathLike, *, partial_last_row: bool = False) -> list[dict[str, float]]:
    """Rows of a log CSV as dicts of floats (empty cells are left out).

    ``partial_last_row``: a last row cut short (a run killed while writing it: too few cells or
    a number cut in the middle) is dropped instead of raising.
    """
    with Path(path).open(newline="") as f:
        raw = list(csv.DictReader(f))
    rows = []
    for i, row in enumerate(raw):
        try:
            if None in row.values() or None in row:
                raise ValueError("a row with the wrong number of cells")
            rows.append({k: float(v) for k, v in row.items() if v != ""})
        except (ValueError, TypeError) as err:
            if partial_last_row and i == len(raw) - 1:
                break
            raise ValueError(f"{str(path)!r}, data row {i + 1}: {err}") from None
    return rows


def format_metrics(metrics: Mapping[str, Scalar], digits: int = 4) -> str:
    """``key=value`` pairs for a progress bar or a console line."""
    return " ".join(f"{k}={_to_float(k, v):.{digits}g}" for k, v in metrics.items())
