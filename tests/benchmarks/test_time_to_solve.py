"""benchmarks/time_to_solve.py: the settings tables build valid recipe configs, the SB3 mapping
says what SB3 does, and a run that cannot solve within its budget counts as unsolved (inf)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "time_to_solve", ROOT / "benchmarks" / "time_to_solve.py"
)
assert _spec is not None and _spec.loader is not None
tts = importlib.util.module_from_spec(_spec)
sys.modules["time_to_solve"] = tts
_spec.loader.exec_module(tts)

PAIRS = [(algo, task) for algo, tasks in tts.TASKS.items() for task in tasks]


def test_every_algo_task_pair_has_settings_for_every_library() -> None:
    for table in (tts.SB3_ZOO, tts.TDRL_TUNED):
        assert set(table) == set(PAIRS)
    # Tianshou has no recurrent PPO runner here: sb3-contrib is the recurrent peer.
    assert set(tts.TIANSHOU) == {(a, t) for a, t in PAIRS if a != "ppo_lstm"}
    for comparisons in tts.RUNNERS.values():
        assert set(comparisons) == {"tuned", "same settings"}
        for runners in comparisons.values():
            assert runners[0][0].startswith("tdrl"), "ratios are taken against the first entry"


@pytest.mark.parametrize(("algo", "task"), PAIRS)
@pytest.mark.parametrize("table", ["tuned", "sb3"])
def test_settings_build_the_recipe_config(algo: str, task: str, table: str) -> None:
    settings = tts.TDRL_TUNED[(algo, task)] if table == "tuned" else tts.sb3_settings(algo, task)
    cfg = tts.tdrl_config(algo, task, 3, 10_000, "unused", **settings)
    assert (cfg.env_id, cfg.seed, cfg.total_frames) == (task, 3, 10_000)
    assert cfg.eval_every == tts.EVAL_EVERY and cfg.eval_episodes == tts.EVAL_EPISODES
    assert cfg.stop_at_return == tts.THRESHOLD[task]
    assert (cfg.checkpoint_every, cfg.tensorboard, cfg.progress, cfg.curve) == (
        0,
        False,
        False,
        False,
    )
    for name, value in settings.items():
        assert getattr(cfg, name) == value


def test_sb3_mapping_follows_the_zoo() -> None:
    dqn = tts.sb3_settings("dqn", "CartPole-v1")
    # 128 gradient steps every 256 env steps; epsilon decays over 16% of the zoo's 50k steps.
    assert dqn["frames_per_batch"] == 256 and dqn["utd_ratio"] == 0.5
    assert dqn["eps_frames"] == 8_000 and dqn["double_dqn"] is False
    sac = tts.sb3_settings("sac", "Pendulum-v1")
    assert sac["actor_lr"] == sac["critic_lr"] == sac["alpha_lr"] == 1e-3
    assert (sac["init_random_frames"], sac["utd_ratio"], sac["batch_size"]) == (100, 1.0, 256)
    ppo = tts.sb3_settings("ppo", "CartPole-v1")
    assert (ppo["num_envs"], ppo["frames_per_batch"], ppo["minibatch_size"]) == (8, 256, 256)
    # The zoo's tuned ppo_lstm entry: LSTM 64 and one 64 layer, observations normalized.
    lstm = tts.sb3_settings("ppo_lstm", "CartPoleNoVel-v1")
    assert (lstm["recurrent_size"], lstm["hidden_sizes"], lstm["seq_len"]) == (64, (64,), 32)
    assert lstm["normalize_observations"] is True and lstm["frames_per_batch"] == 256


def test_a_budget_too_small_to_solve_counts_as_inf() -> None:
    result = tts.tdrl_run("dqn", "CartPole-v1", 0, 300, **tts.TDRL_TUNED[("dqn", "CartPole-v1")])
    assert math.isinf(result.seconds) and result.steps == 512  # two batches of 256


def test_a_budget_too_small_to_solve_counts_as_inf_for_sb3() -> None:
    pytest.importorskip("stable_baselines3")  # the bench extra; CI installs test and dev only
    result = tts.sb3_run("dqn", "CartPole-v1", 0, 300)
    assert math.isinf(result.seconds) and result.steps == 512  # SB3 collects 256 at a time too


def test_recurrent_sb3_runs_with_the_zoo_policy_and_normalization() -> None:
    pytest.importorskip("sb3_contrib")  # the bench extra
    result = tts.sb3_run("ppo_lstm", "CartPoleNoVel-v1", 0, 300)
    assert math.isinf(result.seconds) and result.steps == 512  # two rollouts of 8 x 32


def test_report_prints_medians_per_seed_times_and_ratios(capsys: pytest.CaptureFixture) -> None:
    R = tts.Result
    names = [name for runners in tts.RUNNERS["dqn"].values() for name, _ in runners]
    results = {name: [R(2.0, 10), R(4.0, 20), R(math.inf, 30)] for name in names}
    results[names[1]] = [R(6.0, 1), R(8.0, 2), R(10.0, 3)]  # SB3: median 8 vs tdrl's 4
    tts.report("dqn", "CartPole-v1", results)
    out = capsys.readouterr().out
    assert "DQN CartPole-v1 (tuned)" in out and "DQN CartPole-v1 (same settings)" in out
    assert "[2.0, 4.0, inf]" in out and "ratio 2.00x" in out
    assert tts.ratio(math.inf, math.inf).startswith("n/a")
    assert tts.ratio(math.inf, 3.0).startswith("inf") and tts.ratio(3.0, math.inf) == "0.00x"
