"""The multi-agent table: tdrl's MAPPO, IPPO (``recipes/mappo.py``), QMIX and VDN
(``recipes/qmix.py``) beside BenchMARL's, on VMAS navigation and MPE simple_spread, at the same
settings: BenchMARL 1.5.1's own defaults, which are the recipes'.

BenchMARL runs in its own virtual environment (it needs the TorchRL it was released with; see
``benchmarks/benchmarl_cell.py``), made once with

    python -m venv /tmp/benchmarl && /tmp/benchmarl/bin/pip install torch==2.13.0 \\
        torchrl==0.10.1 tensordict==0.10.0 benchmarl==1.5.1 vmas==1.5.2 mpe2==1.1.1

Both libraries run one torch thread a run, evaluate every ``--eval-every`` frames on 10
deterministic episodes (tdrl: separate envs seeded with seed + 10,000; BenchMARL: its test env)
and report the mean over episodes and agents of each agent's return. Each finished run is one
JSON line of ``docs/benchmarks/marl_table.jsonl``; ``--render`` writes ``marl_table.md`` and the
curves. Runs go one after another (cells of a table never share a core).

    python benchmarks/marl_table.py --algos mappo --tasks vmas/navigation --seeds 0 1 2
    python benchmarks/marl_table.py --render
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "benchmarks" / "marl_table.jsonl"
LIBRARIES = ("tdrl", "BenchMARL")
# the recipe of each algorithm and the flags that make it
ALGOS = {
    "mappo": ("mappo", {"critic": "central"}),
    "ippo": ("mappo", {"critic": "local"}),
    "qmix": ("qmix", {"mixer": "qmix"}),
    "vdn": ("qmix", {"mixer": "vdn"}),
}
TASKS = ("vmas/navigation", "mpe2/simple_spread_v3")
# QMIX's mixer reads the global state, which VMAS does not give: its tasks
NEEDS_STATE, STATE_TASKS = {"qmix"}, {"mpe2/simple_spread_v3"}
STEPS, EVAL_EVERY = 300_000, 30_000


def cell_key(line: dict[str, Any]) -> tuple[Any, ...]:
    return line["library"], line["algorithm"], line["task"], line["seed"], line["steps"]


def run_tdrl(algorithm: str, task: str, seed: int, steps: int, every: int, folder: Path) -> dict:
    """The recipe's ``main`` in a fresh Python with one thread (``--child``)."""
    payload = dict(algorithm=algorithm, task=task, seed=seed, steps=steps, every=every,
                   folder=str(folder))  # fmt: skip
    env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    with (folder / "log.txt").open("w") as log:
        done = subprocess.run([sys.executable, __file__, "--child", json.dumps(payload)],
                              stdout=log, stderr=subprocess.STDOUT, env=env)  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"tdrl run failed; see {folder / 'log.txt'}")
    return json.loads((folder / "result.json").read_text())


def child(payload: dict[str, Any]) -> None:
    import importlib
    from importlib.metadata import version

    from tdrl.trainers import configure, read_csv
    from tdrl.trainers.config import flat_dict

    name, flags = ALGOS[payload["algorithm"]]
    recipe = importlib.import_module(f"recipes.{name}")
    folder = Path(payload["folder"]) / "run"
    cfg = configure(
        recipe.Config, env_id=payload["task"], seed=payload["seed"], log_dir=str(folder),
        total_frames=payload["steps"], eval_every=payload["every"], progress=False,
        tensorboard=False, checkpoint_every=0, **flags,
    )  # fmt: skip
    start = time.perf_counter()
    recipe.main(cfg)
    wall = time.perf_counter() - start
    rows = read_csv(folder / "eval.csv")
    result = {
        "steps": [int(r["step"]) for r in rows], "returns": [r["return_mean"] for r in rows],
        "eval_wall_s": [r["time"] for r in rows], "wall_s": wall,
        "settings": json.loads(json.dumps(flat_dict(cfg), default=str)),
        "versions": {p: version(p) for p in ("torch", "tensordict", "torchrl", "vmas", "mpe2")},
    }  # fmt: skip
    (Path(payload["folder"]) / "result.json").write_text(json.dumps(result))


def run_benchmarl(
    algorithm: str, task: str, seed: int, steps: int, every: int, folder: Path, python: str
) -> dict:
    command = [python, str(ROOT / "benchmarks" / "benchmarl_cell.py"), "--algorithm", algorithm,
               "--task", task, "--seed", str(seed), "--frames", str(steps), "--eval-every",
               str(every), "--folder", str(folder / "run")]  # fmt: skip
    with (folder / "log.txt").open("w") as log:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True,
                              env=os.environ | {"OMP_NUM_THREADS": "1"})  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"BenchMARL run failed; see {folder / 'log.txt'}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def read_table() -> list[dict[str, Any]]:
    if not TABLE.exists():
        return []
    return [json.loads(line) for line in TABLE.read_text().splitlines() if line.strip()]


def mean_std(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.2f}" if values else ""
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def groups_of(lines: list[dict[str, Any]]) -> dict[tuple[str, str, int], dict[str, list[dict]]]:
    """The lines by (algorithm, task, budget), then by library."""
    groups: dict[tuple[str, str, int], dict[str, list[dict]]] = {}
    for line in lines:
        key = (line["algorithm"], line["task"], line["steps"])
        groups.setdefault(key, {}).setdefault(line["library"], []).append(line)
    return groups


def markdown(lines: list[dict[str, Any]]) -> str:
    """The page: settings, then a row per (algorithm, task, budget) with both libraries."""
    rows = []
    for (algorithm, task, steps), by_library in sorted(groups_of(lines).items()):
        cells = []
        for library in LIBRARIES:
            runs = sorted(by_library.get(library, []), key=lambda r: r["seed"])
            finals = [r["final_return"] for r in runs]
            walls = [r["wall_s"] for r in runs]
            seeds = ",".join(str(r["seed"]) for r in runs)
            cells += [mean_std(finals), seeds, f"{statistics.mean(walls):.0f}" if walls else ""]
        rows.append(
            f"| {task} | {algorithm.upper()} | {steps // 1000}k | " + " | ".join(cells) + " |"
        )
    page = [
        "# Multi-agent benchmark table", "",
        "Written by `python benchmarks/marl_table.py --render` from `marl_table.jsonl`. tdrl's",
        "`recipes/mappo.py` beside BenchMARL 1.5.1 (TorchRL 0.10.1, in its own environment) at",
        "BenchMARL's defaults (the recipe's): 6000 frames a batch from 10 envs, 45 passes over",
        "it in minibatches of 400, Adam 5e-5, gamma 0.99, GAE lambda 0.9, clip 0.2, 256x256 Tanh",
        "MLPs, parameters shared, a TanhNormal policy; BenchMARL's task configs. Final: the last",
        "evaluation (10 deterministic episodes, the mean over agents of each agent's return),",
        "mean ± std over",
        "seeds; wall: seconds a run, one torch thread. The runs went one after another, but for",
        "MAPPO and IPPO on simple_spread, whose walls were measured with concurrent load (two",
        "runs at a time on 2 cores): no clean speed comparison. QMIX and VDN",
        "(`recipes/qmix.py`) at BenchMARL's defaults too: 1000 gradient steps of 128 a batch, a",
        "1M buffer, epsilon 0.8 -> 0.01 over 400k frames, Adam 5e-5, soft targets (tau 0.005),",
        "the team reward the agents' mean.", "",
        "| task | algorithm | budget | tdrl final | seeds | wall s | BenchMARL final | seeds |"
        " wall s |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows, "",
    ]  # fmt: skip
    return "\n".join(page)


def render() -> None:
    """``marl_table.md`` and a curve per (algorithm, task, budget)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = read_table()
    for (algorithm, task, _), by_library in sorted(groups_of(lines).items()):
        figure, axis = plt.subplots(figsize=(6, 4))
        for library in LIBRARIES:
            for i, run in enumerate(by_library.get(library, [])):
                color = "C0" if library == "tdrl" else "C1"
                axis.plot(run["curve"]["steps"], run["curve"]["returns"], color=color, alpha=0.7,
                          label=library if i == 0 else None)  # fmt: skip
        axis.set(xlabel="env steps", ylabel="evaluation return (agents' mean)",
                 title=f"{algorithm.upper()} on {task}")  # fmt: skip
        axis.legend()
        figure.tight_layout()
        figure.savefig(TABLE.parent / f"marl_{algorithm}_{task.replace('/', '_')}.png", dpi=80)
        plt.close(figure)
    (TABLE.parent / "marl_table.md").write_text(markdown(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description="Multi-agent benchmark table")
    parser.add_argument("--algos", nargs="+", choices=list(ALGOS), default=list(ALGOS))
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--libraries", nargs="+", choices=LIBRARIES, default=list(LIBRARIES))
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--eval-every", type=int, default=EVAL_EVERY)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/tdrl_marl_table"))
    parser.add_argument("--benchmarl-python", default="/tmp/benchmarl/bin/python")
    parser.add_argument("--render", action="store_true")
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return 0
    if args.render:
        render()
        return 0
    done = {cell_key(line) for line in read_table()}
    for algorithm in args.algos:
        for task in args.tasks:
            if algorithm in NEEDS_STATE and task not in STATE_TASKS:
                print("skip", algorithm, task, "(no global state)", flush=True)
                continue
            for seed in args.seeds:
                for library in args.libraries:
                    key = (library, algorithm, task, seed, args.steps)
                    if key in done:
                        continue
                    folder = args.workdir / "_".join(map(str, key)).replace("/", "-")
                    folder.mkdir(parents=True, exist_ok=True)
                    print("start", key, flush=True)
                    cell = (algorithm, task, seed, args.steps, args.eval_every, folder)
                    if library == "tdrl":
                        result = run_tdrl(*cell)
                    else:
                        result = run_benchmarl(*cell, args.benchmarl_python)
                    curve = {name: result.pop(name) for name in ("steps", "returns")}
                    curve["wall_s"] = result.pop("eval_wall_s")
                    names = ("library", "algorithm", "task", "seed", "steps")
                    line = dict(zip(names, key, strict=True), eval_every=args.eval_every)
                    line.update(final_return=curve["returns"][-1], curve=curve, **result)
                    with TABLE.open("a") as f:
                        f.write(json.dumps(line) + "\n")
                    print("done", key, f"final {line['final_return']:.3f}", flush=True)
    render()
    return 0


if __name__ == "__main__":
    sys.exit(main())
