"""Learning figures: final evaluation return and wall time per run, tdrl against Stable-Baselines3.

One run = (algorithm, env, library, seed, env-step budget). tdrl runs ``recipes/<algo>.py``'s
``main(Config(...))`` with the recipe's own defaults (its tuned settings); SB3 2.9.2 runs the
rl-baselines3-zoo hyperparameters for that env (``SB3_ZOO`` below, SAC and TD3 only). Protocol,
the same for both libraries:
  * evaluation: 10 deterministic episodes on a separate env of 10 copies (one episode each, seeds
    ``seed + 10_000``) every ``--eval-every`` env steps and once after the budget; the figure is
    that final evaluation's mean return;
  * wall time: around the whole run (envs, networks, training, every evaluation), one process per
    run, one torch thread (``torch.set_num_threads(1)``, OMP/MKL threads 1);
  * no TensorBoard, no progress bar; tdrl writes no checkpoints (SB3 writes none).

The runs in docs/learning: ``--algo ppo`` (Hopper-v5, 1M steps, tdrl); ``--algo sac``
(HalfCheetah-v5) and ``--algo td3`` (Hopper-v5), 100k steps, tdrl against SB3; tdrl's TD3
with the td3 recipe's 100k settings (``--tdrl-set init_random_frames=5000 actor_lr=1e-3
critic_lr=1e-3``). Short-budget curves: reinforce, a2c, npg, trpo, ddpg, redq, discrete_sac,
dqn (tdrl only).

    python benchmarks/learning.py --algo sac --seeds 0 1 2 --libs tdrl sb3 --frames 100000 \
        --jobs 2 --out runs/learning
    python benchmarks/learning.py --report --out runs/learning     # table + PNGs in docs/curves

Every finished run appends one JSON line to ``<out>/results.jsonl``; a rerun skips the runs found
there (so an interrupted batch is resumed by running the same command again; a run cut short
starts over). A run's identity is (algo, env, lib, seed, budget, --learning-starts, --tdrl-set);
``--eval-every`` is recorded but does not make a new run. ``--jobs 2`` runs two runs at once in
subprocesses (tdrl and SB3 of one seed side by side). Absolute times are noise on a shared
machine; the tdrl/SB3 ratios are the figure.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import fcntl
import importlib
import json
import shutil
import statistics
import sys
import textwrap
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # when a test loads this file
from harness import learn_sb3, run_child  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EVAL_EPISODES, EVAL_SEED_OFFSET = 10, 10_000
RESULTS = "results.jsonl"

# algo -> (default env, default env-step budget); SB3 settings exist only for sac and td3.
ALGOS: dict[str, tuple[str, int]] = {
    "ppo": ("Hopper-v5", 1_000_000),
    "sac": ("HalfCheetah-v5", 100_000),
    "td3": ("Hopper-v5", 100_000),
    "reinforce": ("Hopper-v5", 100_000),
    "a2c": ("Hopper-v5", 100_000),
    "npg": ("Hopper-v5", 100_000),
    "trpo": ("Hopper-v5", 100_000),
    "ddpg": ("HalfCheetah-v5", 100_000),
    "redq": ("HalfCheetah-v5", 20_000),  # UTD 20 after 10k random steps: 200k critic updates
    "discrete_sac": ("CartPole-v1", 50_000),
    "dqn": ("CartPole-v1", 50_000),
}

# rl-baselines3-zoo (DLR-RM/rl-baselines3-zoo, hyperparams/*.yml) "&mujoco-defaults" entries,
# shared by HalfCheetah, Ant, Hopper, Walker2d and Humanoid (-v4; v5 has the same dynamics API):
#   sac.yml: n_timesteps 1e6, policy MlpPolicy, learning_starts 10000; everything else SB3's SAC
#            defaults (lr 3e-4, buffer 1e6, batch 256, tau 0.005, gamma 0.99, train_freq 1,
#            gradient_steps 1, ent_coef "auto", net [256, 256]).
#   td3.yml: n_timesteps 1e6, policy MlpPolicy, learning_starts 10000, noise_type normal,
#            noise_std 0.1, train_freq 1, gradient_steps 1, learning_rate 1e-3, batch_size 256,
#            policy_kwargs dict(net_arch=[400, 300]); the rest SB3's TD3 defaults (buffer 1e6,
#            tau 0.005, gamma 0.99, policy_delay 2, target_policy_noise 0.2, target_noise_clip 0.5).
ZOO_MUJOCO_ENVS = ("HalfCheetah", "Ant", "Hopper", "Walker2d", "Humanoid")
SB3_ZOO: dict[str, dict[str, Any]] = {
    "sac": {"learning_starts": 10_000},
    "td3": {
        "learning_starts": 10_000,
        "noise_std": 0.1,
        "train_freq": 1,
        "gradient_steps": 1,
        "learning_rate": 1e-3,
        "batch_size": 256,
        "net_arch": [400, 300],
    },
}


Key = tuple[str, str, str, int, int, str, str]


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run. ``learning_starts`` (both libraries) and ``tdrl_set`` (tdrl's Config) are the
    non-default settings; they are part of the run's identity."""

    algo: str
    env: str
    lib: str
    seed: int
    frames: int
    eval_every: int
    learning_starts: int | None = None
    tdrl_set: tuple[tuple[str, str], ...] = ()

    @property
    def variant(self) -> str:
        """Settings shared by both libraries (runs compared in one table row group)."""
        return "" if self.learning_starts is None else f"learning_starts={self.learning_starts}"

    @property
    def lib_settings(self) -> str:
        """Settings of this library only (tdrl Config overrides)."""
        return ",".join(f"{k}={v}" for k, v in self.tdrl_set) if self.lib == "tdrl" else ""

    @property
    def key(self) -> Key:
        return (
            self.algo,
            self.env,
            self.lib,
            self.seed,
            self.frames,
            self.variant,
            self.lib_settings,
        )

    def run_dir(self, out: Path) -> Path:
        return run_dir_of(out, *self.key)


def result_key(row: dict[str, Any]) -> Key:
    return (
        row["algo"],
        row["env"],
        row["lib"],
        row["seed"],
        row["frames"],
        row["variant"],
        row["lib_settings"],
    )


def run_dir_of(
    out: Path, algo: str, env: str, lib: str, seed: int, frames: int, variant: str, settings: str
) -> Path:
    """``<out>/runs/<algo>-<env>-<frames>[-<variant>]/<lib>[-<settings>]/seed<seed>``."""
    group = "-".join(filter(None, [algo, env, str(frames), variant]))
    lib_dir = "-".join(filter(None, [lib, settings]))
    clean = str.maketrans({"=": "", ",": "-", "/": "_", " ": ""})
    return out / "runs" / group.translate(clean) / lib_dir.translate(clean) / f"seed{seed}"


# ----------------------------------------------------------------------------- one run (child)


def last_eval(run_dir: Path) -> tuple[float, float]:
    """Mean and std of the last row of ``eval.csv`` (the final evaluation)."""
    with (run_dir / "eval.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise RuntimeError(f"{run_dir / 'eval.csv'} has no evaluation rows")
    return float(rows[-1]["return_mean"]), float(rows[-1].get("return_std") or "nan")


# Algorithms that are a setting of another recipe, at their own defaults (the recipes'
# docstrings): NPG is recipes/trpo.py with --algo npg, DDPG td3.py with --algo ddpg at
# Tianshou's lr 1e-3, REDQ sac.py with --algo redq at Tianshou's REDQ settings.
RECIPE_OF: dict[str, tuple[str, dict[str, Any]]] = {
    "npg": ("trpo", {"algo": "npg"}),
    "ddpg": ("td3", {"algo": "ddpg", "actor_lr": 1e-3, "critic_lr": 1e-3}),
    "redq": ("sac", {"algo": "redq", "num_critics": 10, "utd_ratio": 20.0, "policy_delay": 20}),
}


def run_tdrl(spec: RunSpec, run_dir: Path) -> dict[str, float]:
    """``recipes/<algo>.py``'s ``main`` with its defaults, the budget, seed and eval protocol."""
    from tdrl.trainers import configure
    from tdrl.trainers.config import flat_dict

    recipe, preset = RECIPE_OF.get(spec.algo, (spec.algo, {}))
    module = importlib.import_module(f"recipes.{recipe}")
    defaults = flat_dict(module.Config())  # by flat name, as on the command line
    types = set(defaults)
    settings: dict[str, Any] = {
        **preset,
        "env_id": spec.env,
        "total_frames": spec.frames,
        "seed": spec.seed,
        "log_dir": str(run_dir),
        "eval_every": spec.eval_every,
        "eval_episodes": EVAL_EPISODES,
    }
    missing = [k for k in settings if k not in types]
    if missing:
        raise TypeError(f"recipes/{recipe}.py Config lacks the fields {missing}")
    # Same conditions as SB3: one thread, no TensorBoard/progress bar, no checkpoints at all
    # (checkpoint_every=0: not even the final one, which would copy a replay buffer to disk).
    optional = {"threads": 1, "tensorboard": False, "progress": False, "resume": False}
    optional["checkpoint_every"] = 0
    settings |= {k: v for k, v in optional.items() if k in types}
    if spec.learning_starts is not None:
        if "init_random_frames" not in types:
            raise TypeError(f"recipes/{recipe}.py has no init_random_frames (learning starts)")
        settings["init_random_frames"] = spec.learning_starts
    for name, text in spec.tdrl_set:
        if name not in types:
            raise TypeError(f"recipes/{recipe}.py Config has no field {name!r}")
        settings[name] = _convert(text, defaults[name])
    start = time.perf_counter()
    module.main(configure(module.Config, **settings))
    wall = time.perf_counter() - start
    final, final_std = last_eval(run_dir)
    return {"final_return": final, "final_return_std": final_std, "wall_s": wall}


def _convert(text: str, default: Any) -> Any:
    """``text`` as the type of the field's default (``--tdrl-set lr=1e-3``)."""
    if isinstance(default, bool):
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"expected a bool, got {text!r}")
        return text.lower() in ("true", "1")
    if isinstance(default, tuple):
        return tuple(type(default[0])(x) if default else int(x) for x in text.split(","))
    return type(default)(text)


def run_sb3(spec: RunSpec, run_dir: Path) -> dict[str, float]:
    """SB3 SAC or TD3 with the zoo's MuJoCo settings, evaluated like the tdrl recipes."""
    import numpy as np
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    start = time.perf_counter()
    env = make_vec_env(spec.env, n_envs=1, seed=spec.seed)
    eval_env = make_vec_env(spec.env, n_envs=EVAL_EPISODES, seed=spec.seed + EVAL_SEED_OFFSET)
    kwargs = dict(sb3_settings(spec.algo, spec.env))
    if spec.learning_starts is not None:
        kwargs["learning_starts"] = spec.learning_starts
    if (noise_std := kwargs.pop("noise_std", None)) is not None:
        n = env.action_space.shape[-1]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(n), noise_std * np.ones(n))
    if (net_arch := kwargs.pop("net_arch", None)) is not None:
        kwargs["policy_kwargs"] = {"net_arch": net_arch}
    cls = {"sac": SAC, "td3": TD3}[spec.algo]
    model = cls("MlpPolicy", env, seed=spec.seed, device="cpu", **kwargs)
    rows: list[dict[str, float]] = []

    def write_rows(curve: dict[str, list[float]]) -> None:  # eval.csv after every evaluation
        step, mean, std, seconds = (values[-1] for values in curve.values())
        rows.append({"step": int(step), "return_mean": mean, "return_std": std, "time": seconds})
        write_eval_csv(run_dir / "eval.csv", rows)

    learn_sb3(
        model, eval_env, steps=spec.frames, eval_every=spec.eval_every, episodes=EVAL_EPISODES,
        eval_seed=spec.seed + EVAL_SEED_OFFSET, start=start, on_eval=write_rows,
    )  # fmt: skip
    wall = time.perf_counter() - start
    env.close()
    eval_env.close()
    return {
        "final_return": rows[-1]["return_mean"],
        "final_return_std": rows[-1]["return_std"],
        "wall_s": wall,
    }


def sb3_settings(algo: str, env: str) -> dict[str, Any]:
    if algo not in SB3_ZOO:
        raise ValueError(f"no SB3 zoo settings for {algo!r} here (only {sorted(SB3_ZOO)})")
    if not env.startswith(ZOO_MUJOCO_ENVS):
        raise ValueError(f"no SB3 zoo settings for {algo} on {env!r} (only {ZOO_MUJOCO_ENVS})")
    return SB3_ZOO[algo]


def write_eval_csv(path: Path, rows: list[dict[str, float]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def child(spec_json: str) -> None:
    """Run one spec in this process; write its result row to ``result.json`` in its folder."""
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT))
    raw = json.loads(spec_json)
    run_dir = Path(raw.pop("run_dir"))
    spec = RunSpec(**{**raw, "tdrl_set": tuple(tuple(p) for p in raw["tdrl_set"])})
    run_dir.mkdir(parents=True, exist_ok=True)
    row = result_row(spec, (run_tdrl if spec.lib == "tdrl" else run_sb3)(spec, run_dir))
    (run_dir / "result.json").write_text(json.dumps(row))
    print(f"result: {json.dumps(row)}")


def result_row(spec: RunSpec, result: dict[str, float]) -> dict[str, Any]:
    """The line of ``results.jsonl`` for a finished run."""
    return {
        "algo": spec.algo,
        "env": spec.env,
        "lib": spec.lib,
        "seed": spec.seed,
        "frames": spec.frames,
        "variant": spec.variant,
        "lib_settings": spec.lib_settings,
        **result,
        "eval_every": spec.eval_every,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


# ----------------------------------------------------------------------------- orchestration


def read_results(out: Path) -> list[dict[str, Any]]:
    """Rows of ``results.jsonl`` (a torn last line, from a killed writer, is skipped)."""
    path = out / RESULTS
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            print(f"skipping an unreadable line of {path}: {line[:80]!r}")
    return rows


def append_result(out: Path, row: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / RESULTS).open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # one line per run, whole, even with several writers
        f.write(json.dumps(row) + "\n")
        f.flush()
        fcntl.flock(f, fcntl.LOCK_UN)


def launch_subprocess(spec: RunSpec, run_dir: Path) -> dict[str, Any]:
    """Run ``spec`` in a fresh Python process (log in ``run_dir/log.txt``); its result row."""
    payload = dataclasses.asdict(spec) | {"run_dir": str(run_dir)}
    return run_child(__file__, payload, run_dir, "result.json")


def execute(
    specs: Iterable[RunSpec],
    out: Path,
    jobs: int,
    launch: Callable[[RunSpec, Path], dict[str, Any]] = launch_subprocess,
) -> int:
    """Run the specs not yet in ``results.jsonl``, ``jobs`` at a time; returns the failures.

    A run folder that holds a ``result.json`` for the same run (its writer was killed before
    appending) is appended without running again; any other leftover folder is cleared first.
    """
    done = {result_key(r) for r in read_results(out)}
    todo = []
    for spec in specs:
        if spec.key in done:
            print(f"skip (in {RESULTS}): {spec.key}")
            continue
        run_dir = spec.run_dir(out)
        saved = run_dir / "result.json"
        if saved.exists() and result_key(row := json.loads(saved.read_text())) == spec.key:
            append_result(out, row)
            print(f"recovered {saved}")
            continue
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        todo.append(spec)
    lock, failures = threading.Lock(), []

    def one(spec: RunSpec) -> None:
        try:
            row = launch(spec, spec.run_dir(out))
        except Exception as error:  # one failed run must not stop the others
            with lock:
                failures.append(spec)
                print(f"FAILED {spec.key}: {error}", flush=True)
            return
        with lock:
            append_result(out, row)
            print(
                f"{spec.algo} {spec.env} {spec.lib} seed {spec.seed} {spec.frames} steps: "
                f"final return {row['final_return']:.1f}, {row['wall_s']:.0f} s",
                flush=True,
            )

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, todo))
    return len(failures)


# ----------------------------------------------------------------------------- report


def _mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation over seeds (0 for one seed)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


Group = tuple[str, str, int, str]


def label(row: dict[str, Any]) -> str:
    return f"{row['lib']} [{row['lib_settings']}]" if row["lib_settings"] else row["lib"]


def summarize(rows: list[dict[str, Any]]) -> dict[Group, dict[str, dict[str, Any]]]:
    """(algo, env, frames, variant) -> library label -> seeds, return mean/std, mean wall."""
    runs: dict[Group, dict[str, dict[int, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:  # keyed by seed: a run appended twice counts once
        runs[(r["algo"], r["env"], r["frames"], r["variant"])][label(r)][r["seed"]] = r
    groups: dict[Group, dict[str, dict[str, Any]]] = {}
    for group in sorted(runs):
        groups[group] = {}
        for lib in sorted(runs[group], key=lambda name: (name == "sb3", name)):  # tdrl first
            by_seed = runs[group][lib]
            mean, std = _mean_std([r["final_return"] for r in by_seed.values()])
            groups[group][lib] = {
                "seeds": sorted(by_seed),
                "return_mean": mean,
                "return_std": std,
                "wall_mean": statistics.fmean(r["wall_s"] for r in by_seed.values()),
                "run_dirs": [run_dir_of(Path("."), *result_key(r)) for r in by_seed.values()],
            }
    return groups


def markdown_table(groups: dict[Group, dict[str, dict[str, Any]]]) -> str:
    """One row per (group, library); tdrl rows carry tdrl/SB3 ratios of return and wall time."""
    lines = [
        "| algo | env | env steps | lib | seeds | final eval return (mean ± std) | wall s (mean)"
        " | return / SB3 | wall / SB3 |",
        "|---|---|---:|---|---|---:|---:|---:|---:|",
    ]
    for (algo, env, frames, variant), libs in groups.items():
        name = f"{env} ({variant})" if variant else env
        ref = libs.get("sb3")
        for lib, s in libs.items():
            ret_ratio = wall_ratio = ""
            if ref is not None and lib != "sb3":
                # a ratio of returns means "fraction of SB3's score" only when SB3's is positive
                ret_ratio = (
                    f"{s['return_mean'] / ref['return_mean']:.2f}"
                    if ref["return_mean"] > 0
                    else "n/a"
                )
                wall_ratio = f"{s['wall_mean'] / ref['wall_mean']:.2f}"
            seeds = ",".join(map(str, s["seeds"]))
            lines.append(
                f"| {algo} | {name} | {frames:,} | {lib} | {seeds} | "
                f"{s['return_mean']:.1f} ± {s['return_std']:.1f} | {s['wall_mean']:.0f} | "
                f"{ret_ratio} | {wall_ratio} |"
            )
    return "\n".join(lines)


def mean_curve(csv_paths: list[Path]) -> tuple[list[float], list[float], list[float]]:
    """Steps evaluated in every run, with the mean and std over runs of the eval return."""
    per_run = []
    for path in csv_paths:
        with path.open(newline="") as f:
            per_run.append({float(r["step"]): float(r["return_mean"]) for r in csv.DictReader(f)})
    steps = sorted(set.intersection(*(set(c) for c in per_run))) if per_run else []
    stats = [_mean_std([c[s] for c in per_run]) for s in steps]
    return steps, [m for m, _ in stats], [s for _, s in stats]


def frames_label(frames: int) -> str:
    if frames % 1_000_000 == 0:
        return f"{frames // 1_000_000}M"
    return f"{frames // 1000}k" if frames % 1000 == 0 else str(frames)


def plot_curves(
    groups: dict[Group, dict[str, dict[str, Any]]], out: Path, curves_dir: Path
) -> list[Path]:
    """One PNG per (algo, env, budget, variant): eval return against env steps, the mean over
    seeds of every library, with a +-1 std (over seeds) band; named
    ``<algo>_<env>_<budget>[_<variant>]_seeds.png`` (not to overwrite single-seed recipe curves)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tdrl.trainers.plotting import plot_band, save_png

    pngs = []
    for (algo, env, frames, variant), libs in groups.items():
        fig, ax = plt.subplots(figsize=(7, 5))
        for lib, s in libs.items():
            paths = [out / d / "eval.csv" for d in s["run_dirs"]]
            steps, mean, std = mean_curve([p for p in paths if p.exists()])
            if not steps:
                continue
            n = len(s["seeds"])
            # Long tdrl settings go on lines of their own, so the legend stays in the figure.
            shown = lib.replace(" [", "\n[").replace(",", ", ")
            label = textwrap.fill(
                f"{shown} (mean of {n} seed{'s' * (n > 1)})", 60, replace_whitespace=False
            )
            plot_band(ax, steps, mean, std, label=label)
        ax.set_xlabel("env steps")
        ax.set_ylabel("eval return (10 deterministic episodes)")
        ax.set_title(f"{algo.upper()} {env}" + (f" ({variant})" if variant else ""))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="upper left")
        name = "_".join(
            filter(
                None,
                [
                    algo,
                    env.lower().replace("-", "_"),
                    frames_label(frames),
                    variant.replace("=", "").replace(",", "_"),
                    "seeds",
                ],
            )
        )
        pngs.append(save_png(fig, curves_dir / f"{name}.png"))
    return pngs


def report(out: Path, curves_dir: Path) -> None:
    rows = read_results(out)
    if not rows:
        print(f"no results in {out / RESULTS}")
        return
    groups = summarize(rows)
    table = markdown_table(groups)
    print(table)
    (out / "report.md").write_text(table + "\n")
    for png in plot_curves(groups, out, curves_dir):
        print(f"curve: {png}")


# ----------------------------------------------------------------------------- command line


def build_specs(args: argparse.Namespace) -> list[RunSpec]:
    tdrl_set = tuple(tuple(kv.split("=", 1)) for kv in args.tdrl_set)
    if any(len(p) != 2 for p in tdrl_set):
        raise SystemExit(f"--tdrl-set takes name=value pairs, got {args.tdrl_set}")
    specs = []
    for algo in args.algo:
        env, frames = ALGOS[algo]
        env, frames = args.env or env, args.frames or frames
        libs = args.libs or (["tdrl", "sb3"] if algo in SB3_ZOO else ["tdrl"])
        if "sb3" in libs:
            sb3_settings(algo, env)  # fail now, not after hours of tdrl runs
        eval_every = args.eval_every or max(frames // 10, 1)
        for seed in args.seeds:  # seed-major: with --jobs 2, both libraries of a seed run together
            for lib in libs:
                specs.append(
                    RunSpec(
                        algo, env, lib, seed, frames, eval_every, args.learning_starts, tdrl_set
                    )
                )
    return specs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algo", nargs="+", choices=sorted(ALGOS), default=[])
    parser.add_argument("--env", help="gymnasium id (default: the algorithm's benchmark env)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--libs", nargs="+", choices=["tdrl", "sb3"])
    parser.add_argument("--frames", type=int, help="env steps per run (default: per algorithm)")
    parser.add_argument("--eval-every", type=int, help="env steps between evaluations (budget/10)")
    parser.add_argument(
        "--learning-starts",
        type=int,
        help="random steps before learning, both libraries (default: their own)",
    )
    parser.add_argument(
        "--tdrl-set",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="override fields of the tdrl recipe's Config",
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (one core each)")
    parser.add_argument("--out", type=Path, default=Path("runs/learning"))
    parser.add_argument("--curves-dir", type=Path, default=ROOT / "docs" / "curves")
    parser.add_argument("--report", action="store_true", help="only print the table and PNGs")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    failures = 0
    if not args.report:
        if not args.algo:
            parser.error("--algo is required unless --report")
        failures = execute(build_specs(args), args.out, args.jobs)
    report(args.out, args.curves_dir)
    if failures:
        raise SystemExit(f"{failures} run(s) failed; rerun the same command to retry them")


if __name__ == "__main__":
    main()
