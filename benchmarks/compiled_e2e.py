"""End-to-end training speed of the recipes with their update steps eager, compiled
(``--compile``) and captured in CUDA graphs (``--cudagraphs``): env steps per second of whole
training runs (collection, buffer, updates, logging), each mode a separate process on the same
task, seed and budget, with the ratio to the eager run of the same recipe.

The rate is the steady one: env steps between the train.csv row at a third of the run and its last
row over the seconds between them, so compilation and capture (in the first updates) and the
random warm-up steps are outside it. The peers' figure it answers is LeanRL's (CleanRL's scripts
with torch.compile and CUDA graphs, its README, H100): SAC 5.7x, TD3 3.4x, PPO continuous 2.7x
its eager scripts. ``--peers`` runs ``benchmarks/plain_torch.py`` beside each recipe and mode:
the same loop in plain PyTorch, LeanRL's way, at the same settings and budget ("plain" rows).

    python benchmarks/compiled_e2e.py --device cuda          # SAC, TD3, PPO on HalfCheetah-v5
    python benchmarks/compiled_e2e.py --device cpu --quick   # eager and compiled on the CPU
    python benchmarks/compiled_e2e.py --device cuda --peers  # beside plain-PyTorch loops
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# recipe -> the run's settings besides the mode (full, --quick)
RUNS = {
    "sac": ["--total-frames", "4000", "--init-random-frames", "1000", "--log-every", "250"],
    "td3": ["--total-frames", "4000", "--init-random-frames", "1000", "--log-every", "250"],
    "ppo": ["--total-frames", "16384", "--num-envs", "8", "--frames-per-batch", "2048"],
}
QUICK = {
    "sac": ["--total-frames", "1600", "--init-random-frames", "400", "--log-every", "100"],
    "td3": ["--total-frames", "1600", "--init-random-frames", "400", "--log-every", "100"],
    "ppo": ["--total-frames", "8192", "--num-envs", "4", "--frames-per-batch", "1024",
            "--epochs", "2"],
}  # fmt: skip
MODES = {
    "eager": [],
    "compiled": ["--compile"],
    "cudagraphs": ["--cudagraphs"],
    "compiled+graphs": ["--compile", "--cudagraphs"],
}


def steady_rate(train_csv: Path) -> float:
    """Env steps per second from the row at a third of the run to the last row."""
    with train_csv.open() as f:
        rows = [(int(r["step"]), float(r["time"])) for r in csv.DictReader(f)]
    if len(rows) < 3:
        raise RuntimeError(f"{train_csv}: {len(rows)} rows; the run logged too rarely to time")
    first, last = rows[len(rows) // 3], rows[-1]
    return (last[0] - first[0]) / (last[1] - first[1])


def run(recipe: str, mode: str, args: argparse.Namespace, folder: Path) -> float | str:
    """A recipe's run (``recipe``), or its plain-PyTorch peer's (``plain-<recipe>``)."""
    plain = recipe.startswith("plain-")
    algo = recipe.removeprefix("plain-")
    settings = (QUICK if args.quick else RUNS)[algo]
    log_dir = folder / f"{recipe}-{mode}"
    if plain:
        command = [
            sys.executable, str(ROOT / "benchmarks" / "plain_torch.py"), "--algo", algo,
            "--mode", mode, "--env-id", args.env_id, "--device", args.device,
            "--log-dir", str(log_dir), *settings,
        ]  # fmt: skip
    else:
        command = [
            sys.executable, str(ROOT / "recipes" / f"{recipe}.py"), "--env-id", args.env_id,
            "--device", args.device, "--eval-every", "0", "--eval-episodes", "1",
            "--checkpoint-every", "0", "--no-progress", "--log-dir", str(log_dir),
            *settings, *MODES[mode],
        ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        tail = [line for line in done.stderr.splitlines() if line.strip()][-3:]
        print(f"  {recipe} {mode}: failed\n    " + "\n    ".join(tail), flush=True)
        return "failed: " + (tail or ["(no output)"])[-1][:160]
    rate = steady_rate(log_dir / "train.csv")
    print(f"  {recipe} {mode}: {rate:,.0f} steps/s ({time.perf_counter() - start:.0f} s in all)",
          flush=True)  # fmt: skip
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--env-id", default="HalfCheetah-v5")
    parser.add_argument("--recipes", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--modes", nargs="+", default=None, choices=list(MODES))
    parser.add_argument("--quick", action="store_true", help="shorter runs (a smoke)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    parser.add_argument("--peers", action="store_true", help="plain-PyTorch loops beside them")
    args = parser.parse_args()
    modes = args.modes or [m for m in MODES if args.device.startswith("cuda") or "graphs" not in m]
    print(f"{args.env_id}, --device {args.device}: steady env steps/s of whole training runs")
    with tempfile.TemporaryDirectory() as tmp:
        # eager and the fastest mode of every recipe first (a cut-off run has those)
        order = [*modes[:1], *modes[:0:-1]]
        recipes = [x for r in args.recipes for x in (r, f"plain-{r}")[: 1 + args.peers]]
        done = {(r, m): run(r, m, args, Path(tmp)) for m in order for r in recipes}
        rates = {(r, m): done[r, m] for r in recipes for m in modes}
    print(f"{'recipe':<10} {'mode':<16} {'steps/s':>9} {'vs eager':>9}")
    for (recipe, mode), rate in rates.items():
        eager = rates.get((recipe, "eager"))
        if isinstance(rate, str):
            print(f"{recipe:<10} {mode:<16} {rate}")
            continue
        ratio = f"{rate / eager:.2f}" if isinstance(eager, float) else "-"
        print(f"{recipe:<10} {mode:<16} {rate:>9,.0f} {ratio:>9}")


if __name__ == "__main__":
    main()
