"""benchmarks/plain_torch.py, the plain-PyTorch peers of benchmarks/compiled_e2e.py: each loop
runs to its budget and logs the rows compiled_e2e times; a captured mode without CUDA is
refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "plain_torch.py"


def _run(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--log-dir", str(tmp_path), *flags],
                          capture_output=True, text=True, timeout=240)  # fmt: skip


@pytest.mark.parametrize(
    ("algo", "flags"),
    [
        ("sac", ["--total-frames", "300", "--init-random-frames", "200", "--log-every", "100"]),
        pytest.param("td3", ["--total-frames", "300", "--init-random-frames", "200",
                             "--log-every", "100"], marks=pytest.mark.variants),
        pytest.param("ppo", ["--total-frames", "768", "--num-envs", "2", "--frames-per-batch",
                             "256", "--epochs", "1"], marks=pytest.mark.variants),
    ],
)  # fmt: skip
def test_each_loop_runs_and_logs_its_rows(algo: str, flags: list[str], tmp_path: Path) -> None:
    done = _run(tmp_path, "--algo", algo, *flags)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = (tmp_path / "train.csv").read_text().splitlines()
    assert rows[0] == "step,time" and len(rows) == 4  # three rows a run: steady_rate's minimum
    steps = [int(r.split(",")[0]) for r in rows[1:]]
    assert steps == sorted(steps) and steps[-1] == int(flags[1])


def test_captured_modes_need_cuda(tmp_path: Path) -> None:
    done = _run(tmp_path, "--algo", "sac", "--mode", "cudagraphs", "--device", "cpu")
    assert done.returncode != 0 and "needs --device cuda" in done.stderr
