"""Recurrent PPO against MLP PPO on a MuJoCo task without velocities, learning curves to docs/.

Both run ``recipes/ppo.py`` with its MuJoCo defaults (Tianshou's PPO benchmark settings: 8 envs
x 256 steps, 10 epochs of minibatch 64, lr 3e-4 decayed, observation normalization); the
recurrent one adds ``--recurrent lstm --seq-len 16`` (an LSTM of 64 on the normalized
observation, then the 64x64 head; the critic stays feed-forward). Deterministic evaluation of 10
episodes every 20k steps. Seeds 1-3 by default (nothing was tuned on them).

    python benchmarks/pomdp_curves.py --env-id HopperNoVel-v5 --total-frames 300000 --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recipes import ppo  # noqa: E402
from tdrl.trainers import configure, read_csv  # noqa: E402
from tdrl.trainers.plotting import save_png  # noqa: E402

VARIANTS = {"PPO-LSTM": dict(recurrent="lstm", seq_len=16), "PPO (MLP)": {}}
# the recipe's advantage and reward handling when docs/benchmarks/pomdp_*.png were made (its
# MuJoCo defaults became raw advantages of scaled rewards later)
BEFORE = dict(normalize_advantage=True, scale_rewards=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="HopperNoVel-v5")
    parser.add_argument("--total-frames", type=int, default=300_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--out", default="docs/benchmarks")
    parser.add_argument("--runs", default="runs/pomdp_curves")
    args = parser.parse_args()
    curves: dict[str, list[list[dict[str, float]]]] = {name: [] for name in VARIANTS}
    for seed in args.seeds:
        for name, extra in VARIANTS.items():
            log_dir = Path(args.runs) / args.env_id / name.replace(" ", "_") / f"seed{seed}"
            shutil.rmtree(log_dir, ignore_errors=True)  # each invocation runs its cells afresh
            cfg = configure(
                ppo.Config, env_id=args.env_id, total_frames=args.total_frames, seed=seed,
                log_dir=str(log_dir), progress=False, tensorboard=False, curve=False,
                checkpoint_every=0, **BEFORE, **extra,
            )  # fmt: skip
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                result = ppo.main(cfg)
            print(f"{name} seed {seed}: final eval {result['eval_return_mean']:.0f}, best "
                  f"{result['best_eval_return']:.0f}, {time.perf_counter() - start:.0f} s",
                  flush=True)  # fmt: skip
            curves[name].append(read_csv(log_dir / "eval.csv"))
    plot(curves, args)


def plot(
    curves: dict[str, list[list[dict[str, float]]]],
    args: argparse.Namespace,
    stem: str = "",
    title: str = "recurrent vs MLP PPO",
) -> None:
    """Mean (and per-seed) eval-return curves to ``<out>/<stem>.png``, figures to ``.txt``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = stem or f"pomdp_{args.env_id}"
    fig, ax = plt.subplots(figsize=(6, 4))
    lines = [f"{args.env_id}, {args.total_frames} steps, seeds {args.seeds}: "
             "deterministic eval return (10 episodes) at each step"]  # fmt: skip
    for name, runs in curves.items():
        steps = [row["step"] for row in runs[0]]
        per_step = [[run[i]["return_mean"] for run in runs] for i in range(len(steps))]
        mean = [statistics.mean(v) for v in per_step]
        ax.plot(steps, mean, label=name)
        for run in runs:
            ax.plot(steps, [row["return_mean"] for row in run], color=ax.lines[-1].get_color(),
                    alpha=0.25, linewidth=0.8)  # fmt: skip
        finals = [run[-1]["return_mean"] for run in runs]
        lines.append(f"{name}: final {statistics.mean(finals):.0f} (per seed "
                     f"{', '.join(f'{x:.0f}' for x in finals)}); mean curve "
                     f"{', '.join(f'{m:.0f}' for m in mean)}")  # fmt: skip
    ax.set_xlabel("env steps")
    ax.set_ylabel("eval return")
    ax.set_title(f"{args.env_id}: {title} (mean of {len(args.seeds)} seeds)")
    ax.legend()
    save_png(fig, out / f"{stem}.png")
    (out / f"{stem}.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
