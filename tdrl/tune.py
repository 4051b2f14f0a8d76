"""Hyperparameter search over a recipe's config with Optuna (Akiba et al. 2019, arXiv 1907.10902).

A study runs trials; a trial runs the recipe once per seed, each in a child process
(``python -m tdrl.tune RECIPE ARGS VALUES``), with the recipe's fixed command-line ``args`` and
the trial's sampled ``values``, and reads the evaluations the recipe writes to its ``eval.csv``
as they come: each is reported to the pruner, which may stop the trial early. The trial's value
is the mean over its seeds of the final evaluation return (``objective="final"``) or of the mean
over all evaluations (``"mean"``, the area under the curve: faster learning scores higher).

Everything lives in the study folder: ``study.db`` (Optuna's SQLite storage: a killed study
resumes where it stopped, its unfinished trials marked failed), ``trials/<n>/seed<s>/`` (the run
folders), and after each trial ``summary.txt`` / ``summary.png`` (the best trial as a recipe
command line, the parameters' importances, the history). The folder is locked while a study runs.

A search space is a list of :class:`Param`, from flags (:func:`parse_param`:
``lr=log:1e-5:1e-2``, ``gamma=float:0.9:0.999``, ``epochs=int:1:20``,
``hidden_sizes=cat:64,64|256,256``) or a TOML file (:func:`parse_space_toml`).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

__all__ = ["Param", "Study", "load_recipe", "parse_param", "parse_space_toml"]

KINDS = ("float", "log", "int", "cat")


@dataclass(frozen=True)
class Param:
    """One searched field (its flat config name): a float range (``log``: sampled on a log
    scale), an int range, or categorical ``choices``."""

    name: str
    kind: Literal["float", "log", "int", "cat"]
    low: float | int | None = None
    high: float | int | None = None
    choices: tuple[Any, ...] = field(default=())

    def suggest(self, trial: Any) -> Any:
        if self.kind == "cat":
            index = trial.suggest_categorical(self.name, list(range(len(self.choices))))
            return self.choices[index]
        if self.kind == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high))  # type: ignore[arg-type]
        return trial.suggest_float(self.name, self.low, self.high, log=self.kind == "log")

    def values(self) -> list[Any]:
        """The values the config's checks must accept: both ends, or every choice."""
        return list(self.choices) if self.kind == "cat" else [self.low, self.high]

    def as_dict(self) -> dict[str, Any]:
        choices = [list(c) if isinstance(c, tuple) else c for c in self.choices]
        return {"name": self.name, "kind": self.kind, "low": self.low, "high": self.high,
                "choices": choices}  # fmt: skip


def _value(text: str) -> Any:
    """``"64,64"`` -> ``(64, 64)``; ``"true"`` -> True; numbers; else the string."""
    if "," in text:
        return tuple(_value(part) for part in text.split(","))
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_param(text: str) -> Param:
    """``NAME=KIND:LOW:HIGH`` (KIND float, log or int) or ``NAME=cat:A|B|C`` (a tuple value is
    written ``64,64``)."""
    name, sep, rest = text.partition("=")
    kind, _, bounds = rest.partition(":")
    if not sep or not name or kind not in KINDS or not bounds:
        raise ValueError(
            f"search space entry {text!r}: expected NAME=KIND:LOW:HIGH with KIND one of float, "
            "log, int, or NAME=cat:A|B|C"
        )
    name = name.strip().replace("-", "_")
    if kind == "cat":
        return Param(name, "cat", choices=tuple(_value(v) for v in bounds.split("|")))
    low_text, _, high_text = bounds.partition(":")
    try:
        low, high = (
            (int(low_text), int(high_text))
            if kind == "int"
            else (float(low_text), float(high_text))
        )
    except ValueError:
        raise ValueError(
            f"search space entry {text!r}: LOW and HIGH must be {kind} numbers"
        ) from None
    if not low < high or (kind == "log" and low <= 0):
        raise ValueError(f"search space entry {text!r}: needs LOW < HIGH (and LOW > 0 for log)")
    return Param(name, kind, low, high)  # type: ignore[arg-type]


def parse_space_toml(text: str) -> list[Param]:
    """A TOML table per field: ``[lr] log = [1e-5, 1e-2]``, ``[epochs] int = [1, 20]``,
    ``[gamma] float = [0.9, 0.999]``, ``[hidden_sizes] choices = [[64, 64], [256, 256]]``."""
    import tomllib  # Python >= 3.11

    space = []
    for name, entry in tomllib.loads(text).items():
        if not isinstance(entry, dict) or len(entry) != 1:
            raise ValueError(f"search space [{name}]: give exactly one of float, log, int, choices")
        ((kind, value),) = entry.items()
        if kind == "choices":
            choices = tuple(tuple(v) if isinstance(v, list) else v for v in value)
            space.append(Param(name, "cat", choices=choices))
        elif kind in ("float", "log", "int") and isinstance(value, list) and len(value) == 2:
            space.append(parse_param(f"{name}={kind}:{value[0]}:{value[1]}"))
        else:
            raise ValueError(
                f"search space [{name}]: {kind} = {value!r} is not a [low, high] range"
            )
    return space


def load_recipe(path: str | os.PathLike) -> ModuleType:
    """The recipe module at ``path`` (a ``recipes/*.py`` file with ``Config`` and ``main``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no recipe at {str(path)!r}")
    spec = importlib.util.spec_from_file_location(f"_tdrl_recipe_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))  # recipes may import their siblings
    spec.loader.exec_module(module)
    if not hasattr(module, "Config") or not hasattr(module, "main"):
        raise TypeError(f"{str(path)!r} is not a recipe: it has no Config and main")
    return module


def flags(values: dict[str, Any]) -> list[str]:
    """Recipe command-line flags for flat config values (``hidden_sizes=(64, 64)`` ->
    ``--hidden-sizes 64 64``; a bool -> ``--name`` or ``--no-name``)."""
    out: list[str] = []
    for name, value in values.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + name.replace("_", "-"))
        elif isinstance(value, (tuple, list)):
            out += [flag, *map(str, value)]
        else:
            out += [flag, repr(value) if isinstance(value, float) else str(value)]
    return out


class TrialFailed(RuntimeError):
    """A trial's recipe run exited with an error (the study goes on; the trial is marked failed)."""


class Study:
    """An Optuna study over ``space`` for the recipe at ``recipe``, kept in ``folder``.

    Args:
        recipe: path of the recipe file.
        space: the searched fields.
        folder: the study folder (made if missing; an existing study there is resumed, and
            refused if it was made for another recipe, space, fixed arguments, seeds or
            objective).
        args: the recipe's fixed command-line arguments (``--env-id CartPole-v1 ...``).
        seeds: each trial runs the recipe once per seed.
        objective: ``"final"`` or ``"mean"`` evaluation return (see the module docstring).
        pruner: ``"median"`` (Optuna's MedianPruner after 5 trials), ``"halving"`` (successive
            halving) or ``"none"``.
        sampler_seed: seed of the TPE sampler.
        ray_address: run each trial's recipe as a Ray actor (one CPU) on this cluster
            (``"auto"``, ``"host:port"``, or ``"local"`` for a Ray of this machine) instead of a
            child process; the run folders are written where the actors run.
    """

    def __init__(
        self,
        recipe: str | os.PathLike,
        space: Sequence[Param],
        folder: str | os.PathLike,
        *,
        args: Sequence[str] = (),
        seeds: Sequence[int] = (0,),
        objective: Literal["final", "mean"] = "final",
        pruner: Literal["median", "halving", "none"] = "median",
        sampler_seed: int = 0,
        ray_address: str | None = None,
    ) -> None:
        import optuna

        from tdrl.trainers.config import parse

        self.recipe = Path(recipe).resolve()
        self.module = load_recipe(self.recipe)
        self.space, self.args, self.seeds = list(space), list(args), list(seeds)
        self.objective = objective
        self.ray_address = ray_address or None
        if objective not in ("final", "mean"):
            raise ValueError(f"objective must be 'final' or 'mean', got {objective!r}")
        if not self.space:
            raise ValueError("the search space is empty: give at least one --space entry")
        if not self.seeds:
            raise ValueError("give at least one seed")
        if any(a in ("--seed", "--log-dir", "--resume") for a in self.args):
            raise ValueError("the study sets --seed, --log-dir and --resume itself: leave them out")
        base = parse(self.module.Config, self.args)  # the fixed arguments, checked by the recipe
        self.total_frames = int(base.run.total_frames)
        self._check_space(base)
        self.folder = Path(folder)
        from tdrl.trainers.lock import lock_run_folder

        self._lock = lock_run_folder(self.folder)
        identity = {"recipe": self.recipe.stem, "space": [p.as_dict() for p in self.space],
                    "args": self.args, "seeds": self.seeds, "objective": objective}  # fmt: skip
        pruners: dict[str, Any] = {
            "median": lambda: optuna.pruners.MedianPruner(n_startup_trials=5),
            "halving": optuna.pruners.SuccessiveHalvingPruner,
            "none": optuna.pruners.NopPruner,
        }
        if pruner not in pruners:
            raise ValueError(f"pruner must be one of {sorted(pruners)}, got {pruner!r}")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.create_study(
            study_name="tdrl", storage=f"sqlite:///{self.folder / 'study.db'}",
            load_if_exists=True, direction="maximize", pruner=pruners[pruner](),
            sampler=optuna.samplers.TPESampler(seed=sampler_seed),
        )  # fmt: skip
        saved = self.study.user_attrs.get("identity")
        if saved is None:
            self.study.set_user_attr("identity", identity)
            defaults = {p.name: self._default_index(base, p) for p in self.space}
            self.study.enqueue_trial(defaults)  # the recipe's defaults: the baseline, trial 0
        elif saved != identity:
            differ = sorted(k for k in identity if saved.get(k) != identity[k])
            raise ValueError(
                f"study folder {str(self.folder)!r} holds a study of {saved.get('recipe')!r} with "
                f"other {', '.join(differ)}: " + "; ".join(
                    f"{k}: {saved.get(k)!r} there, {identity[k]!r} here" for k in differ)
                + "; pass another folder"
            )  # fmt: skip
        self._fail_unfinished()

    def _check_space(self, base: Any) -> None:
        """Every searched field exists, and both ends (every choice) pass the recipe's checks."""
        from tdrl.trainers.config import configure

        for param in self.space:
            for value in param.values():
                try:
                    configure(base, **{param.name: value})
                except TypeError as error:
                    raise ValueError(
                        f"search space: {self.recipe.stem} has no field {param.name!r} ({error})"
                    ) from None
                except ValueError as error:
                    raise ValueError(
                        f"search space: {param.name}={value!r} is refused by "
                        f"{self.recipe.stem}'s config: {error}"
                    ) from None

    def _default_index(self, base: Any, param: Param) -> Any:
        """The recipe's value of ``param`` as the sampler's value (a choice's index; a value
        outside the range is clamped into it)."""
        from tdrl.trainers.config import flat_dict

        value = flat_dict(base)[param.name]
        if param.kind == "cat":
            return param.choices.index(value) if value in param.choices else 0
        assert param.low is not None and param.high is not None
        return min(max(value, param.low), param.high)

    def _fail_unfinished(self) -> None:
        """Trials left running by a killed study (the folder's lock says none runs now)."""
        from optuna.trial import TrialState

        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            self.study.tell(trial.number, state=TrialState.FAIL)

    def optimize(self, n_trials: int, *, workers: int = 1) -> Any:
        """Run trials until ``n_trials`` have finished (completed or pruned, over every session
        of the study), ``workers`` at a time; returns the Optuna study. A failed trial (the
        recipe raised; its log is kept) does not count, and another one runs in its place."""
        from optuna.trial import TrialState

        done = (TrialState.COMPLETE, TrialState.PRUNED)
        failures = 0
        # queued trials (the defaults) one at a time: parallel workers could both take one
        queued = len(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
        if queued:
            self.study.optimize(self._objective, n_trials=queued, catch=(TrialFailed,),
                                callbacks=[self._summarize])  # fmt: skip
        while (left := n_trials - len(self.study.get_trials(deepcopy=False, states=done))) > 0:
            before = len(self.study.get_trials(deepcopy=False, states=(TrialState.FAIL,)))
            self.study.optimize(self._objective, n_trials=left, n_jobs=workers,
                                catch=(TrialFailed,), callbacks=[self._summarize])  # fmt: skip
            failures += (
                len(self.study.get_trials(deepcopy=False, states=(TrialState.FAIL,))) - before
            )
            if failures >= max(3, n_trials // 2):
                raise TrialFailed(
                    f"{failures} trials failed (their logs: {self.folder / 'trials'}/*/seed*.log)"
                )
        return self.study

    def close(self) -> None:
        """Release the study folder's lock (the process ending does it too)."""
        self._lock.close()

    def _objective(self, trial: Any) -> float:
        import optuna

        values = {p.name: p.suggest(trial) for p in self.space}
        trial.set_user_attr("flags", flags(values))
        scores = []
        for index, seed in enumerate(self.seeds):
            evals = self._run(trial, values, seed, index)
            if not evals:
                raise TrialFailed(f"trial {trial.number}, seed {seed}: no evaluation was written")
            returns = [r for _, r in evals]
            scores.append(returns[-1] if self.objective == "final" else sum(returns) / len(returns))
        score = sum(scores) / len(scores)
        if not math.isfinite(score):
            raise optuna.TrialPruned(f"non-finite score {score}")
        return score

    def _run(
        self, trial: Any, values: dict[str, Any], seed: int, index: int
    ) -> list[tuple[int, float]]:
        """One recipe run, in a child process or a Ray actor; its evaluations, reported to the
        pruner as they come (step: this seed's frames after the earlier seeds' budgets)."""
        import optuna

        folder = self.folder / "trials" / str(trial.number) / f"seed{seed}"
        run_values = {**values, "seed": seed, "log_dir": str(folder), "progress": False}
        folder.mkdir(parents=True, exist_ok=True)
        log = folder.parent / f"seed{seed}.log"
        child: _ProcessRun | _RayRun
        if self.ray_address is None:
            child = _ProcessRun(self.recipe, self.args, run_values, log)
        else:
            child = _RayRun(self.ray_address, self.recipe, self.args, run_values)
        evals: list[tuple[int, float]] = []
        try:
            while True:
                finished = child.finished()
                for step, value in child.evals(folder)[len(evals) :]:
                    evals.append((step, value))
                    trial.report(value, index * self.total_frames + step)
                    if trial.should_prune():
                        raise optuna.TrialPruned(f"pruned at step {step} of seed {seed}")
                if finished:
                    break
                time.sleep(0.5)
        finally:
            child.stop()
        error = child.error()
        if error is not None:
            trial.set_user_attr("error", error)
            raise TrialFailed(f"trial {trial.number}, seed {seed} failed: {error}")
        return evals

    def _summarize(self, study: Any, trial: Any) -> None:
        (self.folder / "summary.txt").write_text(self.summary())

    def best_command(self) -> str:
        """The best trial as a recipe command line."""
        best = self.study.best_trial
        words = ["python", os.path.relpath(self.recipe), *self.args, *best.user_attrs["flags"]]
        return shlex.join(words)

    def summary(self, plot: bool = True) -> str:
        """The study in a few lines: trials by state, the best trial (value and command line),
        the parameters' importances; with ``plot`` also ``summary.png`` (trial values and the
        best so far)."""
        from optuna.trial import TrialState

        trials = self.study.get_trials(deepcopy=False)
        counts = {s.name.lower(): sum(t.state == s for t in trials) for s in TrialState}
        lines = [f"{len(trials)} trials: " + ", ".join(f"{n} {k}" for k, n in counts.items() if n)]
        complete = [t for t in trials if t.state == TrialState.COMPLETE]
        if not complete:
            return "\n".join(lines) + "\n"
        best = self.study.best_trial
        seeds = " ".join(map(str, self.seeds))
        lines += [
            f"best: trial {best.number}, {self.objective} evaluation return {best.value:.2f} "
            f"(mean over seeds {seeds})",
            f"  {self.best_command()}",
        ]
        if len(complete) >= 2 and len(self.space) >= 1:
            from optuna.importance import get_param_importances

            importances = get_param_importances(self.study)
            lines.append(
                "importances: " + ", ".join(f"{k} {v:.2f}" for k, v in importances.items())
            )
        if plot:
            _plot(complete, self.folder / "summary.png", self.objective)
        return "\n".join(lines) + "\n"


class _ProcessRun:
    """A trial's recipe run in a child process (``python -m tdrl.tune``), its output in ``log``."""

    def __init__(self, recipe: Path, args: list[str], values: dict[str, Any], log: Path):
        command = [sys.executable, "-m", "tdrl.tune", str(recipe), json.dumps(args),
                   json.dumps(values, default=list)]  # fmt: skip
        self.log = log
        with log.open("w") as out:
            self.child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    def finished(self) -> bool:
        return self.child.poll() is not None

    def evals(self, folder: Path) -> list[tuple[int, float]]:
        return _read_evals(folder / "eval.csv")

    def stop(self) -> None:
        if self.child.poll() is None:
            self.child.terminate()
            self.child.wait()

    def error(self) -> str | None:
        if self.child.returncode == 0:
            return None
        return f"exited {self.child.returncode}: {self.log.read_text()[-600:]}"


class _RecipeActor:
    """What a Ray actor runs: the recipe in its own process, and its evaluations on request
    (``max_concurrency=2``: the study asks while the run goes on)."""

    def __init__(self, recipe: str, args: list[str], values: dict[str, Any]) -> None:
        self.recipe, self.args, self.values = recipe, args, values

    def run(self) -> None:
        _run_recipe(self.recipe, self.args, self.values)

    def evals(self, folder: str) -> list[tuple[int, float]]:
        return _read_evals(Path(folder) / "eval.csv")


class _RayRun:
    """A trial's recipe run as a Ray actor (one CPU) on the cluster at ``address`` ("local":
    a Ray of this machine); ended with ``ray.kill`` when pruned."""

    def __init__(self, address: str, recipe: Path, args: list[str], values: dict[str, Any]):
        from tdrl.collectors.workers import _start_ray

        self.ray = ray = _start_ray(None if address == "local" else address, 1)
        actor = ray.remote(num_cpus=1, max_concurrency=2)(_RecipeActor)
        self.actor = actor.remote(str(recipe), args, values)
        self.done = self.actor.run.remote()
        self._error: str | None = None

    def finished(self) -> bool:
        ready, _ = self.ray.wait([self.done], timeout=0)
        return bool(ready)

    def evals(self, folder: Path) -> list[tuple[int, float]]:
        return list(self.ray.get(self.actor.evals.remote(str(folder))))

    def stop(self) -> None:
        if self.finished():
            try:
                self.ray.get(self.done)
            except Exception as err:  # the recipe's error, re-raised by Ray
                self._error = f"{type(err).__name__}: {str(err)[-600:]}"
        self.ray.kill(self.actor)

    def error(self) -> str | None:
        return self._error


def _read_evals(path: Path) -> list[tuple[int, float]]:
    """(step, return_mean) of every complete row of a run's eval.csv."""
    if not path.is_file():
        return []
    text = path.read_text()
    if not text.endswith("\n"):  # a row being written: up to the last complete one
        text = text[: text.rfind("\n") + 1]
    return [(int(float(row["step"])), float(row["return_mean"]))
            for row in csv.DictReader(text.splitlines())]  # fmt: skip


def _plot(trials: list[Any], path: Path, objective: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    numbers = [t.number for t in trials]
    values = [t.value for t in trials]
    best = [max(values[: i + 1]) for i in range(len(values))]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.scatter(numbers, values, s=12, label="trial")
    ax.step(numbers, best, where="post", color="C1", label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel(f"{objective} evaluation return")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _exit_with_parent() -> None:
    """A trial's process ends when the study's does (a killed study leaves no orphan runs)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _run_recipe(recipe: str, args: list[str], values: dict[str, Any]) -> None:
    """The recipe's ``main`` with its fixed command-line ``args`` and the trial's ``values``."""
    from tdrl.trainers.config import configure, parse

    module = load_recipe(recipe)
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    module.main(configure(parse(module.Config, args), **values))


def _trial_main(argv: Sequence[str]) -> None:
    """``python -m tdrl.tune RECIPE ARGS_JSON VALUES_JSON``: one run of a study's trial."""
    _exit_with_parent()
    _run_recipe(argv[0], json.loads(argv[1]), json.loads(argv[2]))


if __name__ == "__main__":
    _trial_main(sys.argv[1:])
