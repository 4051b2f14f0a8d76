"""IMPALA on Ray workers against PPO on the same budget, learning curves to docs/.

IMPALA runs ``recipes/impala.py`` (2 Ray workers x 4 envs, 20-step rollouts, asynchronous) with
its defaults, and on MuJoCo ``--lr 3e-4`` (PPO's MuJoCo rate, chosen before any Hopper run; the
CartPole default 2e-3 collapsed on 2 of 3 Hopper seeds). PPO runs ``recipes/ppo.py``: on
CartPole-v1 with the README's CartPole settings, on MuJoCo with its defaults. Deterministic
evaluation of 10 episodes. A run whose folder already holds a finished ``eval.csv`` is read, not
run again.

    python benchmarks/impala_curves.py --env-id CartPole-v1 --total-frames 200000 --seeds 0 1 2
    python benchmarks/impala_curves.py --env-id Hopper-v5 --total-frames 300000 --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pomdp_curves import plot  # noqa: E402

from recipes import impala, ppo  # noqa: E402
from tdrl.trainers import configure, read_csv  # noqa: E402

CARTPOLE_PPO = dict(
    frames_per_batch=256, minibatch_size=256, lr=3e-3, lr_decay=False, gamma=0.98, lmbda=0.8,
    critic_coeff=0.5, normalize_observations=False,
)  # fmt: skip


def settings(name: str, env_id: str) -> tuple[object, dict[str, object]]:
    if name == "IMPALA":
        return impala, ({} if env_id == "CartPole-v1" else {"lr": 3e-4})
    return ppo, (CARTPOLE_PPO if env_id == "CartPole-v1" else {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="CartPole-v1")
    parser.add_argument("--total-frames", type=int, default=200_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--eval-every", type=int, default=20_000)
    parser.add_argument("--out", default="docs/benchmarks")
    parser.add_argument("--runs", default="runs/impala_curves")
    args = parser.parse_args()
    curves: dict[str, list[list[dict[str, float]]]] = {"IMPALA": [], "PPO": []}
    for seed in args.seeds:
        for name in curves:
            log_dir = Path(args.runs) / args.env_id / name / f"seed{seed}"
            done = log_dir / "eval.csv"
            if not (done.is_file() and read_csv(done)[-1]["step"] >= args.total_frames):
                shutil.rmtree(log_dir, ignore_errors=True)  # an unfinished run starts over
                module, extra = settings(name, args.env_id)
                cfg = configure(
                    module.Config,  # type: ignore[attr-defined]
                    env_id=args.env_id, total_frames=args.total_frames, seed=seed,
                    log_dir=str(log_dir), eval_every=args.eval_every, progress=False,
                    tensorboard=False, curve=False, checkpoint_every=0, **extra,
                )  # fmt: skip
                start = time.perf_counter()
                with contextlib.redirect_stdout(io.StringIO()):
                    module.main(cfg)  # type: ignore[attr-defined]
                print(f"{name} seed {seed}: {time.perf_counter() - start:.0f} s", flush=True)
            curves[name].append(read_csv(done))
    stem = f"impala_{args.env_id}"
    plot(curves, args, stem=stem, title="IMPALA (2 Ray workers) vs PPO")
    lines = []
    for name, runs in curves.items():  # wall time, and the first evaluation at the best return
        walls = [run[-1]["time"] for run in runs]
        first = [
            next(
                (r["step"] for r in run if r["return_mean"] >= max(x["return_mean"] for x in run)),
                0,
            )
            for run in runs
        ]
        lines.append(f"{name}: wall time per run {', '.join(f'{w:.0f}' for w in walls)} s; "
                     f"first evaluation at its best return at steps {first}")  # fmt: skip
    with (Path(args.out) / f"{stem}.txt").open("a") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
