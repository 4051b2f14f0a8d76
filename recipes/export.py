"""Export a run's policy for a process without tdrl: a torch.export program (policy.pt2, needs only
torch), ONNX (policy.onnx, needs only onnxruntime; the export extra) and policy.json (inputs,
outputs, action box). The policy maps the raw observation to the action the env executes: the
observation normalization, the deterministic action and the clip to the action box are inside;
a recurrent policy also takes ``is_init`` and its state and returns the next state.

The run folder's newest checkpoint says which recipe wrote it and with what settings (its
run.json); the recipe's own code rebuilds the networks, so every recipe exports. Nothing in the
run folder changes. The files are checked against the policy on random inputs as they are
written.

    python recipes/export.py --run runs/ppo/Hopper-v5/seed0
    python recipes/export.py --run runs/dqn/MinAtar-Breakout-v1/seed0 --out breakout-policy
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tdrl import trainers


@trainers.configclass
class Config:
    run: str = ""
    """the run folder (its newest checkpoint is exported)."""
    out: str = ""
    """where the files go (default <run>/export)."""
    onnx: bool = True
    """also write policy.onnx (the export extra: onnx, onnxscript, onnxruntime)."""


def recipe_config(module: Any, saved: dict[str, Any], run: Path) -> Any:
    """The recipe's config with the checkpoint's settings (JSON lists back to tuples, "inf" back
    to a float), logging off, in the run folder."""
    from tdrl.trainers.config import flat_dict

    defaults = flat_dict(module.Config())
    values: dict[str, Any] = {}
    for name, value in saved.items():
        if name not in defaults:
            raise ValueError(
                f"{str(run)!r}: the checkpoint's setting {name!r} is not a field of "
                f"{module.__name__}'s config (written by another version of the recipe?)"
            )
        if isinstance(value, list):
            value = tuple(value)
        elif isinstance(value, str) and isinstance(defaults[name], float):
            value = float(value)  # JSON has no inf or nan: they were written as strings
        values[name] = value
    quiet = dict(tensorboard=False, wandb=False, video=False, progress=False, curve=False)
    return trainers.configure(module.Config, **{**values, **quiet, "log_dir": str(run)})


def trained_run(folder: str) -> tuple[Any, Any, Path]:
    """The recipe module that wrote the run ``folder``, its config with the run's settings
    (:func:`recipe_config`), and the newest checkpoint: what rebuilds the trained policy
    (``with exporting(...): module.main(config)``)."""
    import importlib

    from tdrl.trainers.run import RUN_FILE

    run = Path(folder)
    checkpoint = trainers.latest_checkpoint(run) if folder else None
    if checkpoint is None:
        raise FileNotFoundError(f"--run {folder!r} is not a run folder with a checkpoint")
    if not (checkpoint / RUN_FILE).is_file():
        raise FileNotFoundError(
            f"checkpoint {str(checkpoint)!r} has no {RUN_FILE} (written before tdrl recorded "
            "the recipe and its settings there): its networks cannot be rebuilt"
        )
    written = json.loads((checkpoint / RUN_FILE).read_text())
    recipe = written.get("recipe")
    if not isinstance(recipe, str) or not (Path(__file__).parent / f"{recipe}.py").is_file():
        raise ValueError(
            f"checkpoint {str(checkpoint)!r} was written by an unknown recipe {recipe!r}"
        )
    if str(Path(__file__).parent) not in sys.path:
        sys.path.insert(0, str(Path(__file__).parent))
    module = importlib.import_module(recipe)
    return module, recipe_config(module, written["config"], run), checkpoint


def main(cfg: Config) -> Path:
    """Export; returns the folder of the files."""
    from tdrl.trainers.run import exporting

    module, config, checkpoint = trained_run(cfg.run)
    out = Path(cfg.out) if cfg.out else Path(cfg.run) / "export"
    with exporting(out, onnx=cfg.onnx) as exported:
        module.main(config)
    files = exported["files"]  # checked against the policy as they were written
    recipe = module.__name__.rsplit(".", 1)[-1]
    print(f"{recipe} policy of {str(checkpoint)!r} exported to {out}: " + ", ".join(
        p.name for p in (files.program, files.onnx, files.meta) if p is not None))  # fmt: skip
    return out


if __name__ == "__main__":
    main(trainers.parse(Config, description=__doc__))
