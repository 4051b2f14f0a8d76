"""Subnormal flushing: on while a run trains (``RunConfig.flush_denormal``), the previous float
mode back when it finishes."""

import pytest
import torch

from tdrl.collectors import Collector
from tdrl.trainers import Run, make_envs
from tdrl.trainers.config import LogConfig, RunConfig
from tdrl.trainers.run import flushing_denormals

SUBNORMAL = 1e-40  # below float32's smallest normal, 1.18e-38
QUIET = {"log": LogConfig(curve=False, tensorboard=False, progress=False)}


def _product() -> float:
    return (torch.tensor([SUBNORMAL], dtype=torch.float32) * 2.0).item()


@pytest.mark.parametrize("flush", [True, False])
def test_run_flushes_subnormals_from_start_to_finish(flush: bool, tmp_path) -> None:
    cfg = RunConfig(env_id="CartPole-v1", flush_denormal=flush, log_dir=str(tmp_path), **QUIET)
    env, eval_env = make_envs(cfg)
    run = Run.from_config(cfg, "random", {}, eval_env=eval_env, policy=lambda td: td)
    assert not flushing_denormals() and _product() == pytest.approx(2 * SUBNORMAL, rel=1e-2)
    try:
        run.start(Collector(env, None, 8, 8, init_random_frames=8))
        assert flushing_denormals() is flush
        assert (_product() == 0.0) is flush
    finally:
        run.finish()
    # torch's default comes back, whatever the run did.
    assert not flushing_denormals() and _product() == pytest.approx(2 * SUBNORMAL, rel=1e-2)


def test_finish_restores_a_mode_the_caller_had_set(tmp_path) -> None:
    cfg = RunConfig(env_id="CartPole-v1", flush_denormal=True, log_dir=str(tmp_path), **QUIET)
    env, eval_env = make_envs(cfg)
    run = Run.from_config(cfg, "random", {}, eval_env=eval_env, policy=lambda td: td)
    torch.set_flush_denormal(True)
    try:
        run.start(Collector(env, None, 8, 8, init_random_frames=8))
        run.finish()
        assert flushing_denormals()
    finally:
        torch.set_flush_denormal(False)


def test_a_run_that_raises_inside_with_restores_the_mode_and_closes_its_logs(tmp_path) -> None:
    from tdrl.trainers import read_csv

    cfg = RunConfig(
        env_id="CartPole-v1", flush_denormal=True, log_dir=str(tmp_path), log_every=0, **QUIET
    )
    env, eval_env = make_envs(cfg)
    collector = Collector(env, None, 8, 64, init_random_frames=64)
    with pytest.raises(RuntimeError, match="boom"):
        with Run.from_config(cfg, "random", {}, eval_env=eval_env, policy=lambda td: td) as run:
            for _ in run.resume(collector):
                run.step({"loss": 1.0})
                if collector.frames >= 24:
                    raise RuntimeError("boom")
    assert not flushing_denormals()  # the float mode came back
    assert env.closed and eval_env.closed
    rows = read_csv(tmp_path / "train.csv")  # written and closed: the rows are on disk
    assert [row["step"] for row in rows] == [8, 16, 24]
