"""benchmarks/plain_torch.py, the plain-PyTorch peers of benchmarks/compiled_e2e.py: each loop
runs to its budget and logs the rows compiled_e2e times; a captured mode without CUDA is
refused."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tests.bench_scripts import load

plain_torch = load("plain_torch")


def _main(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *flags: str) -> None:
    monkeypatch.setattr(sys, "argv", ["plain_torch.py", "--log-dir", str(tmp_path), *flags])
    threads = torch.get_num_threads()
    try:
        plain_torch.main()
    finally:
        torch.set_num_threads(threads)


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
def test_each_loop_runs_and_logs_its_rows(algo, flags, tmp_path, monkeypatch) -> None:
    _main(monkeypatch, tmp_path, "--algo", algo, *flags)
    rows = (tmp_path / "train.csv").read_text().splitlines()
    assert rows[0] == "step,time" and len(rows) == 4  # three rows a run: steady_rate's minimum
    steps = [int(r.split(",")[0]) for r in rows[1:]]
    assert steps == sorted(steps) and steps[-1] == int(flags[1])


def test_captured_modes_need_cuda(tmp_path: Path, monkeypatch, capsys) -> None:
    with pytest.raises(SystemExit):
        _main(monkeypatch, tmp_path, "--algo", "sac", "--mode", "cudagraphs", "--device", "cpu")
    assert "needs --device cuda" in capsys.readouterr().err
