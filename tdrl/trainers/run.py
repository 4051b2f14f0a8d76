"""The bookkeeping a recipe's loop calls, on-policy and off-policy alike: seeding and envs
(:func:`make_envs`), collectors (:func:`make_collector`), and :class:`Run`: the run folder, its
saved config, progress, logs, the evaluation schedule, resumable checkpoints (modules,
optimizers, RNG, collector and env state, the replay buffer) and the final report.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Literal, Protocol

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.data import Bounded
from tqdm import tqdm

from tdrl import keys
from tdrl.collectors import (
    AnyCollector,
    Collector,
    DeviceCollector,
    ProcessCollector,
    RayCollector,
    evaluate,
)
from tdrl.collectors.multiagent import MultiAgentCollector
from tdrl.data import ReplayBuffer, truncate_streams, updates_due
from tdrl.envs import VecEnv, from_torchrl, make_vec_env
from tdrl.envs.multiagent import MultiAgentVecEnv
from tdrl.trainers.checkpoint import (
    CHECKPOINTS,
    latest_checkpoint_dir,
    load_checkpoint,
    nonfinite_entry,
    remove_unfinished,
    save_checkpoint,
    write_checkpoint_dir,
)
from tdrl.trainers.config import (
    RESUME_MAY_CHANGE,
    RunConfig,
    RunFolderError,
    WorkersConfig,
    added_field,
    flat_dict,
)
from tdrl.trainers.lock import lock_run_folder
from tdrl.trainers.logger import Logger, read_csv, rewrite_csv
from tdrl.trainers.plotting import plot_learning_curve
from tdrl.trainers.video import record_video

CHECKPOINT = "checkpoint.pt"  # inside each checkpoint folder, beside buffer/ and the manifest
# also inside each checkpoint folder: the recipe, its config and its dataset, which --resume checks
RUN_FILE = "run.json"
BUFFER_DIR = "buffer"
# Evaluation envs are seeded apart from the training envs (and reset with this seed every time).
EVAL_SEED_OFFSET = 10_000
CONFIG_FILE = "config.json"  # in the run folder: the whole config of the run, by flat names
WARNINGS_LOG = "warnings.log"  # in the run folder: the Python warnings shown during the run
# Set inside `exporting(...)`: runs made there export their policy instead of training.
_export: dict[str, Any] | None = None
# Warnings shown while make_envs() made the envs (MuJoCo's, for instance), for the next run's log.
_setup_warnings: list[str] = []


def _warning_line(
    message: Warning | str, category: type[Warning], filename: str, lineno: int
) -> str:
    return f"{category.__name__}: {message} ({filename}:{lineno})\n"


@contextmanager
def _recording_warnings() -> Iterator[None]:
    """Show warnings as usual and keep a line of each for the next run's ``warnings.log``."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:  # type: ignore[assignment]
            yield
    finally:
        for w in caught:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)
            _setup_warnings.append(_warning_line(w.message, w.category, w.filename, w.lineno))


class CollectorLike(Protocol):
    """What a :class:`Run` reads of its collector: tdrl's ``Collector``, a ``WorkerCollector``,
    or ``tdrl.trainers.offline.OfflineSteps`` (gradient steps as ``frames``)."""

    frames: int
    episodes: TensorDictBase

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> bool: ...

    def shutdown(self) -> None: ...


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (networks' init, action sampling, minibatch shuffles)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_envs(
    cfg: RunConfig,
    actions: Literal["continuous", "discrete"] | None = None,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    train_env_kwargs: Mapping[str, Any] | None = None,
) -> tuple[VecEnv, VecEnv]:
    """Step 1 of a recipe: torch threads, :func:`seed_everything`, then the training envs
    (``num_envs`` in ``mode``, seed ``seed``) and a separate evaluation env (sync, at most
    ``eval_envs`` and ``eval_episodes`` envs, seed ``seed + 10000``). ``actions``: the action
    space the recipe handles; another one is an error that names both, before any training.
    ``env_kwargs`` go to both envs' makers (``frame_stack=4``), ``train_env_kwargs`` to the
    training envs' only (``terminal_on_life_loss=True``: evaluation plays whole games)."""
    torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    both = dict(env_kwargs or {})
    with _recording_warnings():  # MuJoCo warns while it loads a model: into the run's log too
        return _make_envs(cfg, actions, both, {**both, **(train_env_kwargs or {})})


def _make_envs(
    cfg: RunConfig,
    actions: Literal["continuous", "discrete"] | None,
    eval_kwargs: dict[str, Any],
    train_kwargs: dict[str, Any],
) -> tuple[VecEnv, VecEnv]:
    n_eval = max(min(cfg.eval_envs, cfg.eval_episodes), 1)
    eval_env = make_vec_env(cfg.env_id, n_eval, seed=cfg.seed + EVAL_SEED_OFFSET, **eval_kwargs)
    if actions is not None:
        continuous = isinstance(eval_env.action_spec, Bounded)
        if continuous != (actions == "continuous"):
            eval_env.close()
            need = "a continuous (Box)" if actions == "continuous" else "a discrete"
            spec = eval_env.action_spec
            raise ValueError(
                f"this recipe needs {need} action space; {cfg.env_id} has "
                f"{type(spec).__name__} actions of shape {tuple(spec.shape[1:])}"
            )
    env = training_envs(cfg, **train_kwargs)
    return env, eval_env


def make_collector(
    cfg: RunConfig,
    env: VecEnv,
    policy: Any,
    frames_per_batch: int | None = None,
    *,
    workers: WorkersConfig | None = None,
    init_random_frames: int = 0,
    sync: bool = True,
    max_policy_lag: int = 1,
) -> AnyCollector:
    """tdrl's :class:`Collector` over ``env``, or with ``workers.collector`` ``"ray"`` or
    ``"process"`` a :class:`RayCollector` or :class:`ProcessCollector` of
    ``workers.num_workers`` workers with ``cfg.num_envs`` envs each, seeded like ``env`` (which
    is then closed: the workers make their own). ``frames_per_batch`` counts all workers'
    frames (default: ``workers.steps_per_batch`` steps of every env of every worker)."""
    if frames_per_batch is not None and workers is not None and workers.steps_per_batch != 1:
        env.close()  # the recipe's training envs (async: subprocesses) end here
        raise ValueError(
            f"--steps-per-batch {workers.steps_per_batch} sets the batches of the off-policy "
            "recipes; this recipe collects --frames-per-batch frames a batch"
        )
    if frames_per_batch is None:
        if workers is None:
            raise ValueError("make_collector: give frames_per_batch, or workers to count them")
        remote = workers.num_workers if workers.collector != "local" else 1
        frames_per_batch = cfg.num_envs * workers.steps_per_batch * remote
    if isinstance(env, MultiAgentVecEnv):
        if workers is not None and workers.collector != "local":
            env.close()
            raise ValueError(f"--collector {workers.collector}: multi-agent envs collect locally")
        if cfg.torch_device.type != "cpu":
            env.close()
            raise ValueError(
                f"--device {cfg.device}: the multi-agent recipes keep their networks, losses and "
                "buffer on the CPU; pass --device cpu"
            )
        return MultiAgentCollector(  # type: ignore[return-value]
            env, policy, frames_per_batch, cfg.total_frames, init_random_frames
        )
    if cfg.env_backend == "mujoco_warp":
        if workers is not None and workers.collector != "local":
            env.close()
            raise ValueError(
                f"--collector {workers.collector}: MuJoCo Warp's worlds collect locally"
            )
        return DeviceCollector(  # type: ignore[return-value]
            env, policy, frames_per_batch, cfg.total_frames, init_random_frames
        )
    if workers is None or workers.collector == "local":
        return Collector(env, policy, frames_per_batch, cfg.total_frames, init_random_frames)
    if cfg.env_backend != "gymnasium":
        raise ValueError(
            f"--collector {workers.collector} makes gymnasium envs in its workers, not "
            f"--env-backend {cfg.env_backend}"
        )
    env.close()
    kwargs: dict[str, Any] = dict(
        num_workers=workers.num_workers, num_envs=cfg.num_envs, seed=cfg.seed, sync=sync,
        max_policy_lag=max_policy_lag, init_random_frames=init_random_frames,
        env_kwargs={"mode": cfg.mode},
    )  # fmt: skip
    if workers.collector == "process":
        return ProcessCollector(cfg.env_id, policy, frames_per_batch, cfg.total_frames, **kwargs)
    return RayCollector(
        cfg.env_id, policy, frames_per_batch, cfg.total_frames,
        address=workers.ray_address or None, **kwargs,
    )  # fmt: skip


def training_envs(cfg: RunConfig, **make_kwargs: Any) -> VecEnv:
    """The training envs of ``cfg`` on its ``env_backend`` (evaluation always uses gymnasium);
    ``make_kwargs`` go to each gymnasium env's maker (envpool: translated for tdrl's Atari ids,
    :func:`tdrl.envs.envpool_backend.envpool_task`)."""
    if make_kwargs and cfg.env_backend == "torchrl":
        raise ValueError(
            f"env options {sorted(make_kwargs)} are for gymnasium envs, not --env-backend "
            f"{cfg.env_backend}"
        )
    if cfg.env_backend == "torchrl":
        from torchrl.envs import GymEnv, SerialEnv

        if cfg.mode != "sync":
            raise ValueError("env_backend='torchrl' runs TorchRL's SerialEnv: use mode='sync'")

        def make() -> GymEnv:  # index actions, as tdrl's envs take them (not one-hot)
            return GymEnv(cfg.env_id, categorical_action_encoding=True)

        torchrl_env = make() if cfg.num_envs == 1 else SerialEnv(cfg.num_envs, make)
        return from_torchrl(torchrl_env, seed=cfg.seed)
    if cfg.env_backend == "mujoco_warp":  # the worlds live where the networks do
        make_kwargs["device"] = cfg.torch_device
    return make_vec_env(
        cfg.env_id,
        cfg.num_envs,
        mode=cfg.mode,
        seed=cfg.seed,
        step_timeout=cfg.step_timeout,
        backend=cfg.env_backend,
        **make_kwargs,
    )


def _crossed(frames: int, previous: int, every: int) -> bool:
    """Whether a multiple of ``every`` lies in ``(previous, frames]`` (``every <= 0``: never)."""
    return every > 0 and frames // every > previous // every


def run_dir(log_dir: str, algo: str, env_id: str, seed: int) -> Path:
    """``log_dir`` if given, else ``runs/<algo>/<env_id>/seed<seed>``."""
    return Path(log_dir) if log_dir else Path("runs") / algo / env_id / f"seed{seed}"


def flushing_denormals() -> bool:
    """Whether the CPU flushes subnormal floats to zero now (torch has a setter, no getter)."""
    return bool((torch.full((1,), 1e-40) * 2.0).item() == 0.0)


def progress_bar(total: int, *, initial: int = 0, disable: bool = False, desc: str = "") -> tqdm:
    """A tqdm bar counting env steps."""
    return tqdm(total=total, initial=initial, unit="step", disable=disable, desc=desc, leave=False)


def episode_metrics(episodes: TensorDictBase) -> dict[str, float]:
    """Mean return and length of ``episodes`` (a collector's ``episodes``), and their count;
    empty when there are none."""
    if len(episodes) == 0:
        return {}
    return {
        keys.EPISODE_RETURN: float(episodes[keys.EPISODE_RETURN].mean()),
        keys.EPISODE_LENGTH: float(episodes[keys.EPISODE_LENGTH].float().mean()),
        "episodes": float(len(episodes)),
    }


def evaluate_and_log(
    logger: Logger,
    env: VecEnv,
    policy: Callable[[TensorDictBase], TensorDictBase],
    *,
    step: int,
    n_episodes: int,
    seed: int,
    elapsed: float,
    deterministic: bool = True,
) -> dict[str, float]:
    """Evaluation on ``env`` (reset with ``seed`` every time, so two evaluations differ only by
    the policy; exploration modules are inactive; ``deterministic``: the policy's mode, else its
    samples), logged to ``eval.csv`` with its own duration and the run time."""
    start = time.perf_counter()
    result = evaluate(env, policy, n_episodes, deterministic=deterministic, seed=seed)
    result["eval_time"] = time.perf_counter() - start
    result["time"] = elapsed + result["eval_time"]
    logger.log("eval", step, result)
    return result


# the checkpoint entries beside the counters: the last update's metrics, and the sums and counts
# of the steps recorded since the last train row (a resumed row averages the same steps)
SAVED_METRICS = "metrics"
SAVED_RECORDED = "recorded"


def save_run(
    root: Path,
    collector: CollectorLike,
    counters: Mapping[str, Any],
    buffer: ReplayBuffer | None = None,
    *,
    identity: Mapping[str, Any] | None = None,
    **objects: Any,
) -> Path:
    """Checkpoint at a batch boundary into ``root/checkpoints/<frames>/``, one unit: the objects
    (modules, optimizers, schedulers by their ``state_dict``), ``counters``, the RNG states,
    ``collector.state_dict()``, the replay ``buffer`` and ``identity`` (``run.json``: what
    :func:`check_same_run` compares on a resume), then a manifest of every file's size and
    SHA-256, then one rename that makes the folder complete; the previous checkpoint is removed
    only after that (:func:`tdrl.trainers.checkpoint.write_checkpoint_dir`). A kill at any
    moment leaves a complete checkpoint to resume from. Returns the folder."""

    def write(folder: Path) -> None:
        if identity is not None:
            (folder / RUN_FILE).write_text(json.dumps(identity, indent=1) + "\n")
        if buffer is not None:
            buffer.save(folder / BUFFER_DIR)
        state = collector.state_dict()
        save_checkpoint(folder / CHECKPOINT, collector=state, counters=dict(counters), **objects)

    return write_checkpoint_dir(Path(root) / CHECKPOINTS, int(collector.frames), write)


def latest_checkpoint(root: Path) -> Path | None:
    """The newest complete checkpoint folder of the run folder ``root`` (checked against its
    manifest), or None."""
    return latest_checkpoint_dir(Path(root) / CHECKPOINTS)


def resume_run(
    root: Path,
    collector: CollectorLike,
    buffer: ReplayBuffer | None = None,
    *,
    identity: Mapping[str, Any] | None = None,
    allow_changes: bool = False,
    **objects: Any,
) -> dict[str, Any] | None:
    """Load the newest complete checkpoint of the run folder ``root`` into fresh objects;
    returns its counters (None when there is no checkpoint: the run starts from frame 0, and
    the rows a run killed before its first checkpoint logged are dropped).

    Refused before anything in ``root`` changes: a checkpoint of another run (``identity``
    given: :func:`check_same_run`, unless ``allow_changes``), and one whose objects' tensors or
    buffer data hold NaN or infinities, or whose counters disagree with each other or with the
    collector's step count (a ``ValueError`` naming the file and the entry). When the collector
    cannot be restored exactly (async envs: fresh episodes follow), the buffer's newest step of
    every stream is marked truncated (:func:`truncate_streams`). CSV rows logged after the
    checkpoint (by a run killed later) are dropped, so the logs of a resumed run read like those
    of an uninterrupted one.
    """
    folder = latest_checkpoint(root)
    if folder is not None and identity is not None:
        check_same_run(folder, identity, allow_changes=allow_changes)
    remove_unfinished(Path(root) / CHECKPOINTS)
    if folder is None:  # the run starts again from frame 0: so do its logs
        drop_rows_after(root, 0)
        return None
    payload = load_checkpoint(folder / CHECKPOINT, **objects)
    where = f"checkpoint {str(folder)!r}: {CHECKPOINT}"
    for name in objects:
        bad = nonfinite_entry(payload[name])
        if bad is not None:
            raise ValueError(
                f"{where}: entry {name!r}, {bad!r} holds NaN or infinite values (the run "
                "diverged before this save): resume from another run or start anew"
            )
    exact = collector.load_state_dict(payload["collector"])
    step = int(folder.name.split(".")[0])
    if collector.frames != step:
        raise ValueError(
            f"{where}: entry 'collector' is at frame {collector.frames}, the folder's step is "
            f"{step} (a checkpoint.pt of another checkpoint)"
        )
    check_counters(payload["counters"], collector.frames, where)
    if buffer is not None:
        if not (folder / BUFFER_DIR).is_dir():
            raise FileNotFoundError(f"checkpoint {str(folder)!r} has no replay buffer")
        buffer.load(folder / BUFFER_DIR)
        storage = buffer.stream_storage
        if storage is not None:  # the rows [0, size) hold data
            leaves = zip(storage.keys, storage.leaves, strict=True)
            bad = nonfinite_entry({"/".join(k): x[: storage.size] for k, x in leaves})
            if bad is not None:
                raise ValueError(
                    f"checkpoint {str(folder)!r}: {BUFFER_DIR}/ entry {bad!r} holds NaN or "
                    "infinite values"
                )
        if not exact:
            truncate_streams(buffer)
    if not exact:
        print("resume: async envs were re-seeded; the run continues, not bit-identically")
    drop_rows_after(root, collector.frames)
    return payload["counters"]


# Counters of a Run that are counts (whole numbers >= 0) and amounts (finite, >= 0).
_COUNTS = ("batches", "updates", "episodes")
_AMOUNTS = ("time", "episode_length_sum")


def check_counters(counters: Mapping[str, Any], frames: int, where: str) -> None:
    """Refuse loaded :class:`Run` counters that no run could have written: a count that is not
    a whole number >= 0, a time or sum that is negative or not finite, a NaN best return, more
    batches than ``frames`` (every batch has a step). ``where`` starts the error (the file)."""

    def bad(name: str, why: str) -> ValueError:
        return ValueError(f"{where}: counter {name!r} is {counters[name]!r}, {why}")

    for name in _COUNTS:
        value = counters.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise bad(name, "not a count (a whole number >= 0)")
    for name in _AMOUNTS:
        value = counters.get(name, 0.0)
        if not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise bad(name, "not a finite number >= 0")
    for name in ("episode_return_sum", "best_return", "next_eval"):
        value = counters.get(name, 0.0)
        if not isinstance(value, (int, float)) or math.isnan(value):
            raise bad(name, "not a number")
    if counters.get("batches", 0) > frames:
        raise bad("batches", f"more batches than the {frames} steps of the collector")


def _shown(value: Any) -> str:
    return "(none)" if value is None else repr(value)


def check_same_run(
    folder: Path, identity: Mapping[str, Any], *, allow_changes: bool = False
) -> list[str]:
    """Compare what wrote checkpoint ``folder`` (its ``run.json``: recipe, config by flat
    names, dataset) with ``identity``, this process's; returns the differences. Fields in
    :data:`tdrl.trainers.config.RESUME_MAY_CHANGE` may differ; a field the saved config lacks
    counts as the value runs had before it was added (:func:`~tdrl.trainers.config.added_field`).
    Any other difference (or a checkpoint without ``run.json``) is a :class:`RunFolderError` that
    names every differing field with its checkpoint and current values; with ``allow_changes`` a
    warning instead."""
    try:
        saved = json.loads((folder / RUN_FILE).read_text())
    except FileNotFoundError:
        saved = None
    except ValueError as err:
        raise ValueError(f"checkpoint {str(folder)!r}: unreadable {RUN_FILE}: {err}") from None
    if saved is not None and not isinstance(saved, dict):
        raise ValueError(f"checkpoint {str(folder)!r}: {RUN_FILE} holds no object: {saved!r}")
    now = json.loads(json.dumps(identity))  # as run.json reads back: tuples are lists
    if saved is None:
        reason = (
            f"holds no {RUN_FILE} (it was saved before tdrl kept the run's settings in its "
            "checkpoints), so its recipe and settings cannot be checked"
        )
        differences = [RUN_FILE]
    elif saved.get("recipe") != now.get("recipe"):
        reason = (
            f"was written by the recipe {_shown(saved.get('recipe'))}, this is "
            f"{_shown(now.get('recipe'))}"
        )
        differences = ["recipe"]
    else:
        differences = []
        for group, prefix in (("config", ""), ("dataset", "dataset ")):
            old, new = saved.get(group) or {}, now.get(group) or {}
            for name in sorted(set(old) | set(new)):
                # a config saved before a field was added ran with that field's old value
                added = added_field(name, saved.get("recipe")) if group == "config" else None
                was = old.get(name, added)
                if was != new.get(name) and name not in RESUME_MAY_CHANGE:
                    differences.append(f"{prefix}{name} {_shown(was)} -> {_shown(new.get(name))}")
        if not differences:
            return []
        reason = f"was written with other settings (checkpoint -> now): {', '.join(differences)}"
    if allow_changes:
        warnings.warn(
            f"--resume-allow-changes: the checkpoint {str(folder)!r} {reason}; the run "
            "continues with the new ones",
            stacklevel=2,
        )
        return differences
    raise RunFolderError(
        f"--resume: the checkpoint {str(folder)!r} {reason}. Resume with the settings it was "
        "written with, pass --log-dir to start a new run, or pass --resume-allow-changes to "
        "continue it with the new ones"
    )


def recipe_name(config: Any) -> str:
    """The recipe a config belongs to: the name of the file that defines its class without
    ``.py`` (``recipes/dqn.py`` -> ``"dqn"``: run as a script, with ``-m``, or imported)."""
    module = type(config).__module__
    file = getattr(sys.modules.get(module), "__file__", None)
    return Path(file).stem if file else module.rpartition(".")[2]


def refuse_used_folder(log_dir: Path) -> None:
    """A fresh run must not write into a previous run's folder: its rows would be appended to
    the old logs (two runs in one eval.csv) and a later ``--resume`` would load the old run's
    checkpoint. :class:`RunFolderError` names the folder, what it holds, and the way out that
    applies (``--resume`` only where a checkpoint exists)."""
    held = sorted(p.name for p in log_dir.glob("*.csv"))
    checkpoint = latest_checkpoint(log_dir)
    if checkpoint is not None:
        held.append(f"{CHECKPOINTS}/")
    if not held:
        return
    if checkpoint is not None:
        step = int(checkpoint.name)
        way = f"pass --resume to continue it from step {step}, or --log-dir for a new folder"
    else:
        way = "it has no checkpoint to resume from: pass --log-dir for a new folder, or remove it"
    raise RunFolderError(
        f"the run folder {str(log_dir)!r} holds a previous run ({', '.join(held)}): {way}"
    )


def drop_rows_after(log_dir: str | os.PathLike, step: int) -> None:
    """Remove rows with ``step`` > ``step`` from every CSV log in ``log_dir``."""
    for path in Path(log_dir).glob("*.csv"):
        with path.open(newline="") as f:
            header = next(csv.reader(f), None)
        if not header:
            continue
        rows = read_csv(path, partial_last_row=True)  # a kill may have cut the last row
        rewrite_csv(path, header, [r for r in rows if r.get("step", 0.0) <= step])


def finish_run(log_dir: Path, title: str) -> Path:
    """The learning-curve PNG (``curve.png``) from ``eval.csv``."""
    return plot_learning_curve(log_dir / "eval.csv", log_dir / "curve.png", title=title)


def _plain(config: Mapping[str, Any]) -> dict[str, Any]:
    """Settings as JSON takes them: tuples as lists, infinities and NaN as strings."""

    def plain(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        return value

    return {k: plain(v) for k, v in config.items()}


def _write_config(path: Path, config: Mapping[str, Any]) -> None:
    """The run's settings as JSON (:func:`_plain`), written anew on a resume (the flags of the
    resumed process: ``--resume`` itself, a new ``--total-frames``)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(_plain(config), indent=1) + "\n")
    os.replace(tmp, path)


def _scalars(metrics: Any) -> dict[str, Any]:
    # Detached, so that a loss output does not keep its graph alive until the next log row.
    return {
        str(k): v.detach() if isinstance(v, torch.Tensor) else v
        for k, v in metrics.items()
        if not isinstance(v, torch.Tensor) or v.numel() == 1
    }


@contextmanager
def exporting(folder: str | os.PathLike | None, *, onnx: bool = True) -> Iterator[dict[str, Any]]:
    """Within this block a :class:`Run` exports instead of training: :meth:`Run.resume` loads
    the modules of its run folder's newest checkpoint, writes the evaluation policy with
    :func:`tdrl.export.export_policy` into ``folder`` (None: writes nothing) and yields no
    batch; :meth:`Run.report` only closes. Nothing in the run folder changes (no lock, no logs).
    So a recipe's own ``main`` rebuilds its trained policy for ``recipes/export.py`` and
    ``recipes/make_dataset.py``. The yielded dict gets the policy (its checkpoint's weights)
    under ``"policy"``, the evaluation env's make arguments (``frame_stack``, ...) under
    ``"env_kwargs"``, the checkpoint under ``"checkpoint"`` and, with a folder, the
    :class:`tdrl.export.ExportedFiles` under ``"files"``."""
    global _export
    if _export is not None:
        raise RuntimeError("exporting(...) blocks do not nest")
    _export = {"folder": None if folder is None else Path(folder), "onnx": onnx}
    try:
        yield _export
    finally:
        _export = None


class Run:
    """The bookkeeping of one recipe run, so each recipe's loop shows only the algorithm.

    Holds the run folder, the logger, the progress bar, the counters (batches, gradient
    ``updates``, run time, next evaluation step, episode statistics since the last log row, best
    evaluation) and the objects to checkpoint. :meth:`start` resumes from the folder's checkpoint;
    after every batch's updates the recipe calls :meth:`end_batch`, which logs a ``train`` row
    (the metrics, the mean return/length of the episodes ended since the last row, the time),
    evaluates when due (``eval_episodes`` on ``eval_env``; always after the last
    batch), writes a checkpoint when due (and after the last batch) and says whether to stop;
    :meth:`finish` reports. All periods are env steps; the run time counts evaluation time.

    Args:
        log_dir: run folder (CSV, TensorBoard, ``checkpoint.pt``, ``buffer/``, ``curve.png``).
        state: name -> what a checkpoint keeps: objects with ``state_dict`` (modules,
            optimizers, schedulers) and at most one replay buffer (off-policy; its filled part
            is saved beside them, its streams are cut when a worker restarts). The ``train``
            rows show ``lr``, the learning rate of the batch's updates, where ``state`` holds an
            LR scheduler (its first group's).
        eval_env: evaluation env (not the collector's).
        policy: the policy to evaluate.
        title: learning-curve title and console prefix.
        total_frames: env steps of the whole run.
        eval_every: env steps between evaluations (0: only at the end).
        eval_episodes: episodes per evaluation.
        eval_seed: reset seed of every evaluation (the same states every time).
        eval_deterministic: evaluate the policy's deterministic action (else its samples).
        checkpoint_every: env steps between checkpoints, one also at the end (0: never).
        log_every: env steps between ``train`` rows (0: every batch).
        stop_after_frames: end this process after this many env steps of its own (0: never;
            a resumed run counts from where it resumed).
        stop_at_return: end once an evaluation's mean return reaches this.
        resume: :meth:`start` resumes from ``log_dir``'s checkpoint when there is one.
        tensorboard: also write TensorBoard event files.
        progress: show a progress bar.
        curve: plot ``curve.png`` at :meth:`finish`.
        wandb: ``(project, config)`` to log to Weights & Biases too, or None.
        config: the run's settings by name, written to ``config.json`` at :meth:`start` and
            with every checkpoint (``run.json``), which a resume compares
            (:func:`check_same_run`).
        recipe: the recipe's name, kept and compared like ``config``.
        allow_changes: resume although the recipe, the config or the dataset differ from the
            checkpoint's (a warning names them).
        video: an env id: :meth:`finish` records one deterministic episode of ``policy`` to
            ``video/final.mp4`` (and W&B), or None.
        flush_denormal: flush subnormal floats to zero from :meth:`start` to :meth:`finish`
            (``torch.set_flush_denormal``, process-wide; the previous mode comes back at
            :meth:`finish`). Adam's moments of dead ReLU units decay into subnormals, which the
            CPU handles tens of times slower.
    """

    def __init__(
        self,
        log_dir: Path,
        state: Mapping[str, Any],
        *,
        eval_env: VecEnv,
        policy: Callable[[TensorDictBase], TensorDictBase],
        title: str,
        total_frames: int,
        eval_every: int,
        eval_episodes: int = 10,
        eval_seed: int = 0,
        eval_deterministic: bool = True,
        checkpoint_every: int = 0,
        log_every: int = 0,
        stop_after_frames: int = 0,
        stop_at_return: float = float("inf"),
        resume: bool = False,
        tensorboard: bool = True,
        progress: bool = True,
        curve: bool = True,
        flush_denormal: bool = False,
        wandb: tuple[str, dict[str, Any]] | None = None,
        video: str | None = None,
        config: Mapping[str, Any] | None = None,
        recipe: str | None = None,
        allow_changes: bool = False,
    ) -> None:
        self.log_dir = Path(log_dir)
        buffers = [name for name, part in state.items() if isinstance(part, ReplayBuffer)]
        if len(buffers) > 1:
            raise ValueError(
                f"state holds {len(buffers)} replay buffers {buffers}; a run keeps one"
            )
        self.buffer = state[buffers[0]] if buffers else None
        self.state = {name: part for name, part in state.items() if name not in buffers}
        self._schedulers = [
            part
            for part in self.state.values()
            if isinstance(part, torch.optim.lr_scheduler.LRScheduler)
        ]
        self.eval_env, self.policy, self.title = eval_env, policy, title
        self.total_frames, self.eval_every = total_frames, eval_every
        self.eval_episodes, self.eval_seed = eval_episodes, eval_seed
        self.eval_deterministic = eval_deterministic
        self.checkpoint_every, self.log_every = checkpoint_every, log_every
        self.stop_after_frames, self.stop_at_return = stop_after_frames, stop_at_return
        self.resume_checkpoint = resume
        self.tensorboard, self.progress, self.curve = tensorboard, progress, curve
        self.flush_denormal = flush_denormal
        self.wandb, self.video = wandb, video
        self.config = None if config is None else dict(config)
        self.recipe, self.allow_changes = recipe, allow_changes
        # what wrote this run's checkpoints (run.json), set by start() from the collector too
        self.identity: dict[str, Any] = {}
        # the step a resume started at, until the first updates_due() checks `updates` there
        self._resumed_at: int | None = None
        self.done = False
        self._closed = False
        self._lock: IO[str] | None = None
        self._flush_before: bool | None = None
        self.counters: dict[str, Any] = {
            "batches": 0,
            "updates": 0,
            "time": 0.0,
            "next_eval": eval_every if eval_every > 0 else float("inf"),
            "best_return": -float("inf"),
            "episodes": 0,
            "episode_return_sum": 0.0,
            "episode_length_sum": 0.0,
        }
        self.last_eval: dict[str, float] = {}
        self._lr: dict[str, float] = {}  # the learning rate of the batch resume() yielded last
        self.metrics: dict[str, Any] = {}
        # per metric, the sum and count of the steps recorded since the last train row (record())
        self._recorded: dict[str, list[Any]] = {}
        self.frames = 0
        # worker restarts the buffer has been told of (Run.resume cuts the streams)
        self.restarts_seen = 0
        self.collector: CollectorLike | None = None
        self._logger: Logger | None = None
        self._bar: tqdm | None = None
        self._start = 0.0
        self._showwarning: Callable[..., None] | None = None

    @classmethod
    def from_config(
        cls,
        cfg: Any,
        algo: str,
        state: Mapping[str, Any],
        *,
        eval_env: VecEnv,
        policy: Callable[[TensorDictBase], TensorDictBase],
    ) -> Run:
        """A run configured by ``cfg.run`` (or by ``cfg`` itself, a bare :class:`RunConfig`),
        titled ``"<algo> <env_id>"``, in ``log_dir`` or ``runs/<algo in lower case, '_' for
        spaces>/<env_id>/seed<seed>``. A recipe passes its whole config: it is saved as
        ``config.json`` in the run folder (and sent to W&B) and with each checkpoint beside the
        recipe's name (:func:`recipe_name`), which ``--resume`` compares
        (``--resume-allow-changes`` lets them differ). ``state``: as the constructor's."""
        run_cfg: RunConfig = cfg if isinstance(cfg, RunConfig) else cfg.run
        config = None if run_cfg is cfg else cfg
        asked = [f"--{f}" for f in ("compile", "cudagraphs") if getattr(run_cfg, f)]
        # a config whose steps run through trainers.compiled_step says so (compiled_steps)
        if asked and not getattr(cfg, "compiled_steps", False):
            raise ValueError(
                f"{' and '.join(asked)}: {algo}'s recipe does not run its update steps through "
                "trainers.compiled_step (every training recipe but trpo.py, ppg.py and gail.py "
                "does)"
            )
        folder = run_dir(
            run_cfg.log_dir, algo.lower().replace(" ", "_"), run_cfg.env_id, run_cfg.seed
        )
        settings = flat_dict(cfg)
        log = run_cfg.log
        return cls(
            folder, state, eval_env=eval_env, policy=policy, title=f"{algo} {run_cfg.env_id}",
            total_frames=run_cfg.total_frames, eval_every=run_cfg.eval_every,
            eval_episodes=run_cfg.eval_episodes, eval_seed=run_cfg.seed + EVAL_SEED_OFFSET,
            eval_deterministic=run_cfg.eval_deterministic,
            checkpoint_every=run_cfg.checkpoint_every, log_every=run_cfg.log_every,
            stop_after_frames=run_cfg.stop_after_frames, stop_at_return=run_cfg.stop_at_return,
            resume=run_cfg.resume, tensorboard=log.tensorboard, progress=log.progress,
            curve=log.curve, flush_denormal=run_cfg.flush_denormal,
            wandb=(log.wandb_project, settings) if log.wandb else None,
            video=run_cfg.env_id if log.video else None, config=settings,
            recipe=None if config is None else recipe_name(config),
            allow_changes=run_cfg.resume_allow_changes,
        )  # fmt: skip

    @property
    def checkpoint_path(self) -> Path | None:
        """The newest complete checkpoint folder of this run (None before the first)."""
        return latest_checkpoint(self.log_dir)

    @property
    def updates(self) -> int:
        """Gradient steps taken (checkpointed; off-policy loops keep their update ratio by it)."""
        return int(self.counters["updates"])

    @updates.setter
    def updates(self, value: int) -> None:
        self.counters["updates"] = value

    def resume(self, collector: Iterable[Any]) -> Iterator[Any]:
        """Start the run on ``collector`` (resuming from the folder's newest checkpoint with
        ``--resume``) and yield its batches until the run is done: ``total_frames`` reached,
        ``stop_after_frames`` of this process, or ``stop_at_return`` met at an evaluation
        (:meth:`step` says so). A batch a worker collector made after restarting a dead worker
        first cuts the replay streams (:func:`tdrl.data.truncate_streams`): its envs started
        new episodes."""
        if _export is not None:
            self._export_policy(collector, _export)
            return
        self.start(collector)  # type: ignore[arg-type]
        for batch in collector:
            restarts = getattr(collector, "restarts", 0)
            if restarts != self.restarts_seen:
                if self.buffer is not None:
                    truncate_streams(self.buffer)
                self.restarts_seen = restarts
            self._lr = (
                {"lr": float(self._schedulers[0].get_last_lr()[0])} if self._schedulers else {}
            )
            yield batch
            if self.done:
                break

    def _export_policy(self, collector: Any, export: dict[str, Any]) -> None:
        """:func:`exporting`'s work: the newest checkpoint's modules, then the policy out."""
        from tdrl.export import export_policy

        self.collector = collector
        folder = latest_checkpoint(self.log_dir)
        if folder is None:
            raise RunFolderError(f"run folder {str(self.log_dir)!r} has no checkpoint to export")
        modules = {k: v for k, v in self.state.items() if isinstance(v, torch.nn.Module)}
        load_checkpoint(folder / CHECKPOINT, restore_rng=False, **modules)
        extra = {"recipe": self.recipe, "title": self.title, "checkpoint": str(folder)}
        if export["folder"] is not None:
            export["files"] = export_policy(
                self.policy, self.eval_env, export["folder"], onnx=export["onnx"], extra=extra
            )
        export["checkpoint"], export["policy"] = folder, self.policy
        export["env_kwargs"] = dict(getattr(self.eval_env, "make_kwargs", {}))
        self.frames = int(folder.name.split(".")[0])
        self.done = True

    def record(self, metrics: Any) -> None:
        """Keep one gradient step's metrics (a mapping or a loss output; entries of more than one
        element, a per-sample ``"td_error"``, are left out): each ``train`` row shows their mean
        over the steps recorded since the previous row (tensors stay on their device)."""
        for key, value in _scalars(metrics).items():
            if isinstance(value, torch.Tensor):
                value = value.reshape(()).float()
            kept = self._recorded.get(key)
            if kept is None:
                self._recorded[key] = [value, 1]
            else:
                kept[0] = kept[0] + value
                kept[1] += 1

    def step(self, metrics: Any = None) -> bool:
        """After a batch's updates: push the new weights to the collector's workers (its
        ``update_policy_weights_``, where it has one), log a ``train`` row when due, evaluate
        when due (and after the last batch), checkpoint when due; returns whether the run is
        done. The row holds the latest value of every metric: the mean of those :meth:`record`
        kept since the previous row, then ``metrics`` (a mapping or a loss output), over the
        earlier ones (an interval without a gradient step keeps them)."""
        assert self.collector is not None, "iterate over run.resume(collector) first"
        push = getattr(self.collector, "update_policy_weights_", None)
        if push is not None:
            push()
        new = {key: total / count for key, (total, count) in self._recorded.items()}
        new.update(self._lr)
        if metrics is not None:
            new.update(_scalars(metrics))
        self.done = self.end_batch(self.collector, {**self.metrics, **new} if new else None)
        return self.done

    def gradient_steps(self, learning_starts: int, utd_ratio: float) -> Iterator[int]:
        """The gradient steps due now (:meth:`updates_due`), each counted in :attr:`updates`
        as it starts; yields the run's count of gradient steps, this one included."""
        for _ in range(self.updates_due(learning_starts, utd_ratio)):
            self.updates += 1
            yield self.updates

    def updates_due(self, learning_starts: int, utd_ratio: float) -> int:
        """Gradient steps due now at ``utd_ratio`` per env step since ``learning_starts``,
        counted against :attr:`updates` (:func:`tdrl.data.updates_due`): a resumed run keeps
        the ratio. The first call after a resume refuses a loaded :attr:`updates` above what
        the ratio gives at the checkpoint's step."""
        assert self.collector is not None, "iterate over run.resume(collector) first"
        if self._resumed_at is not None:
            frames, self._resumed_at = self._resumed_at, None
            most = updates_due(frames, 0, learning_starts=learning_starts, utd_ratio=utd_ratio)
            if self.updates > most:
                raise ValueError(
                    f"checkpoint {str(self.log_dir / CHECKPOINTS / f'{frames:012d}')!r}: "
                    f"{CHECKPOINT}: counter 'updates' is {self.updates}, more than the {most} "
                    f"gradient steps that utd_ratio {utd_ratio} from step {learning_starts} "
                    f"gives by step {frames}"
                )
        return updates_due(
            self.collector.frames,
            self.updates,
            learning_starts=learning_starts,
            utd_ratio=utd_ratio,
        )

    def start(self, collector: CollectorLike, *, resume: bool | None = None) -> None:
        """Resume from the folder's checkpoint (when ``resume``, default the constructor's, and
        one exists); open the logs, flush subnormals if asked and start the clock."""
        self.collector = collector
        if self._lock is None:
            self._lock = lock_run_folder(self.log_dir)
        if self.flush_denormal and self._flush_before is None:
            self._flush_before = flushing_denormals()
            torch.set_flush_denormal(True)
        resuming = self.resume_checkpoint if resume is None else resume
        self.identity = {"recipe": self.recipe, "config": _plain(self.config or {})}
        dataset = getattr(collector, "dataset_identity", None)  # OfflineSteps: id, size, digest
        if dataset is not None:
            self.identity["dataset"] = dict(dataset)
        if resuming:
            with _recording_warnings():  # --resume-allow-changes: the changes, in warnings.log
                loaded = resume_run(
                    self.log_dir, collector, self.buffer, identity=self.identity,
                    allow_changes=self.allow_changes, **self.state,
                )  # fmt: skip
            if loaded is not None:
                # the last update's metrics: a batch without an update logs them again
                self.metrics = dict(loaded.pop(SAVED_METRICS, {}))
                self._recorded = {k: list(v) for k, v in loaded.pop(SAVED_RECORDED, {}).items()}
                self.counters.update(loaded)
                self._resumed_at = None if self.allow_changes else collector.frames
        else:
            refuse_used_folder(self.log_dir)
        self.frames = collector.frames
        # stop_after_frames counts this process's env steps (a resumed run starts mid-way)
        self._stop_frames = self.frames + self.stop_after_frames if self.stop_after_frames else 0
        self.restarts_seen = getattr(collector, "restarts", 0)
        self._logger = Logger(
            self.log_dir, tensorboard=self.tensorboard, wandb=self.wandb,
            resume_step=self.frames + 1 if resuming else None,  # no checkpoint: frames 0
        )  # fmt: skip
        self._log_warnings()
        if self.config is not None:
            _write_config(self.log_dir / CONFIG_FILE, self.config)
        self._bar = progress_bar(self.total_frames, initial=self.frames, disable=not self.progress)
        self._start = time.perf_counter() - self.counters["time"]

    def end_batch(self, collector: CollectorLike, metrics: Any = None) -> bool:
        """Log, evaluate and checkpoint after a batch's updates; returns True to stop.

        ``metrics`` (a mapping or a flat TensorDict of floats or one-element tensors, e.g. a loss
        output; from :meth:`step`: the batch's), logged with the next ``train`` row and returned by
        :meth:`finish`; entries of more than one element (a per-sample ``"td_error"``) are left
        out; ``None`` (no update in this batch) keeps the previous metrics.
        """
        assert self._logger is not None and self._bar is not None, "call start() first"
        counters, previous, frames = self.counters, self.frames, collector.frames
        self._bar.update(frames - previous)
        self.frames = frames
        if metrics is not None:
            self.metrics = _scalars(metrics)
        counters["batches"] += 1
        episodes = collector.episodes
        if len(episodes):
            counters["episodes"] += len(episodes)
            counters["episode_return_sum"] += float(episodes[keys.EPISODE_RETURN].sum())
            counters["episode_length_sum"] += float(episodes[keys.EPISODE_LENGTH].sum())
        counters["time"] = time.perf_counter() - self._start
        finished = frames >= self.total_frames
        if self.log_every <= 0 or _crossed(frames, previous, self.log_every) or finished:
            self._log_train(frames)  # and at the end: the steps since the last row
            self._recorded = {}
        # a stop_after_frames stop is a pause: no evaluation a straight run would not make
        done = finished or 0 < self._stop_frames <= frames
        if frames >= counters["next_eval"] or finished:
            self.last_eval = evaluate_and_log(
                self._logger, self.eval_env, self.policy, step=frames,
                n_episodes=self.eval_episodes, seed=self.eval_seed, elapsed=counters["time"],
                deterministic=self.eval_deterministic,
            )  # fmt: skip
            if self.eval_every > 0:
                counters["next_eval"] = (frames // self.eval_every + 1) * self.eval_every
            ret = self.last_eval["return_mean"]
            counters["best_return"] = max(counters["best_return"], ret)
            done = done or ret >= self.stop_at_return
            self._bar.set_postfix(eval_return=f"{ret:.1f}")
        counters["time"] = time.perf_counter() - self._start
        if self.checkpoint_every > 0 and (
            _crossed(frames, previous, self.checkpoint_every) or done
        ):
            metrics = {k: float(v) for k, v in self.metrics.items()}
            recorded = {k: [float(total), count] for k, (total, count) in self._recorded.items()}
            save_run(
                self.log_dir,
                collector,
                {**counters, SAVED_METRICS: metrics, SAVED_RECORDED: recorded},
                self.buffer,
                identity=self.identity,
                **self.state,
            )
        return done

    def _log_train(self, frames: int) -> None:
        assert self._logger is not None
        counters = self.counters
        row = {**self.metrics, "time": counters["time"]}
        if counters["updates"]:
            row["updates"] = counters["updates"]
        if n := counters["episodes"]:
            row[keys.EPISODE_RETURN] = counters["episode_return_sum"] / n
            row[keys.EPISODE_LENGTH] = counters["episode_length_sum"] / n
            row["episodes"] = n
        counters.update(episodes=0, episode_return_sum=0.0, episode_length_sum=0.0)
        self._logger.log("train", frames, row)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        """Leaving a ``with Run(...) as run:`` block closes what is open: the float mode, the
        logs, the envs (no report: :meth:`report` reports; after it nothing is left to do)."""
        self.close()

    def _log_warnings(self) -> None:
        """From now to :meth:`close`, every warning shown is also appended to the run folder's
        ``warnings.log``, after those :func:`make_envs` saw while it made the envs."""
        path = self.log_dir / WARNINGS_LOG
        with path.open("a") as file:
            file.writelines(_setup_warnings)
        _setup_warnings.clear()
        if self._showwarning is not None:
            return
        shown = self._showwarning = warnings.showwarning

        def showwarning(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: Any = None,
            line: str | None = None,
        ) -> None:
            with path.open("a") as log:
                log.write(_warning_line(message, category, filename, lineno))
            shown(message, category, filename, lineno, file, line)

        warnings.showwarning = showwarning

    def close(self) -> None:
        """Restore the float mode and the warnings display, close the progress bar, the logs and
        the envs (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._showwarning is not None:
            warnings.showwarning = self._showwarning
            self._showwarning = None
        if self._flush_before is not None:
            torch.set_flush_denormal(self._flush_before)
            self._flush_before = None
        bar, logger, self._bar, self._logger = self._bar, self._logger, None, None
        if bar is not None:
            bar.close()
        if logger is not None:
            logger.close()
        if self.collector is not None:
            self.collector.shutdown()
        self.eval_env.close()
        if self._lock is not None:  # the folder is free for the next process
            self._lock.close()
            self._lock = None

    def report(self) -> dict[str, float]:
        """The end of a run: see :meth:`finish`."""
        return self.finish()

    def finish(self) -> dict[str, float]:
        """Close the logs and the envs (the collector's and ``eval_env``), plot ``curve.png``
        (unless ``curve`` is off).

        Returns:
            The last evaluation (``eval_*``: ``eval_return_mean``, ...), ``best_eval_return``,
            the last update's metrics, ``frames``, ``updates`` and ``time``.
        """
        if _export is not None:  # nothing ran: no video, curve or report line
            self.close()
            return {"frames": float(self.frames)}
        if self.video is not None:
            frames = record_video(
                self.video,
                self.policy,
                self.log_dir / "video" / "final.mp4",
                seed=self.eval_seed,
                env_kwargs=getattr(self.eval_env, "make_kwargs", None),
            )
            print(f"{self.title}: video frames {frames}")
            if self._logger is not None:
                self._logger.video("eval/final", self.log_dir / "video" / "final.mp4", frames)
        self.close()
        report = "logs"
        if self.curve and (self.log_dir / "eval.csv").exists():  # none yet at an early pause
            report += f" and {finish_run(self.log_dir, self.title).name}"
        result = {
            "frames": float(self.frames),
            "updates": float(self.counters["updates"]),
            "time": float(self.counters["time"]),
            "best_eval_return": float(self.counters["best_return"]),
        }
        result.update({k: float(v) for k, v in self.metrics.items()})
        result.update({f"eval_{k}": v for k, v in self.last_eval.items()})
        if self.last_eval:
            ret, std = self.last_eval["return_mean"], self.last_eval["return_std"]
            evaluated = f"eval return {ret:.1f} +- {std:.1f}"
        else:  # a pause (stop_after_frames) before this process's first evaluation
            evaluated = "paused before an evaluation (--resume goes on)"
        print(
            f"{self.title}: {self.frames} steps in {self.counters['time']:.0f} s, {evaluated}; "
            f"{report} in {self.log_dir}"
        )
        return result
