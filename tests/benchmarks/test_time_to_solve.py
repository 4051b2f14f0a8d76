"""benchmarks/time_to_solve.py: the settings tables build valid recipe configs, the SB3 mapping
says what SB3 does, and a run that cannot solve within its budget counts as unsolved (inf)."""

from __future__ import annotations

import math

import pytest

from tdrl.trainers.config import flat_dict
from tests.bench_scripts import load

tts = load("time_to_solve")

PAIRS = [(algo, task) for algo, tasks in tts.TASKS.items() for task in tasks]
# SB3 and sb3-contrib have no C51, IQN, Rainbow or FQF.
SB3_PAIRS = [(a, t) for a, t in PAIRS if a in ("ppo", "dqn", "sac", "ppo_lstm", "qrdqn")]


def test_every_algo_task_pair_has_settings_for_every_library() -> None:
    assert set(tts.TDRL_TUNED) == set(PAIRS)
    assert set(tts.SB3_ZOO) == set(SB3_PAIRS)
    # Tianshou has no recurrent PPO runner here: sb3-contrib is the recurrent peer.
    assert set(tts.TIANSHOU) == {(a, t) for a, t in PAIRS if a != "ppo_lstm"}
    assert {"c51", "qrdqn", "iqn", "rainbow"} <= set(tts.DISTRIBUTIONAL)
    assert set(tts.RUNNERS) == set(tts.RECIPES) == set(tts.TASKS) == set(tts.MAX_STEPS)
    for algo, comparisons in tts.RUNNERS.items():
        with_sb3 = (algo, tts.TASKS[algo][0]) in tts.SB3_ZOO
        assert set(comparisons) == ({"tuned", "same settings"} if with_sb3 else {"tuned"})
        for runners in comparisons.values():
            assert runners[0][0].startswith("tdrl"), "ratios are taken against the first entry"


@pytest.mark.parametrize(
    ("algo", "task", "table"),
    [(a, t, "tuned") for a, t in PAIRS] + [(a, t, "sb3") for a, t in SB3_PAIRS],
)
def test_settings_build_the_recipe_config(algo: str, task: str, table: str) -> None:
    settings = tts.TDRL_TUNED[(algo, task)] if table == "tuned" else tts.sb3_settings(algo, task)
    cfg = tts.tdrl_config(algo, task, 3, 10_000, "unused", **settings)
    run = cfg.run
    assert (run.env_id, run.seed, run.total_frames) == (task, 3, 10_000)
    assert run.eval_every == tts.EVAL_EVERY and run.eval_episodes == tts.EVAL_EPISODES
    assert run.stop_at_return == tts.THRESHOLD[task]
    assert (run.checkpoint_every, run.log.tensorboard, run.log.progress, run.log.curve) == (
        0,
        False,
        False,
        False,
    )
    fields = flat_dict(cfg)
    for name, value in settings.items():
        assert fields[name] == value


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


def test_distributional_settings_follow_the_recipe_and_the_zoo() -> None:
    for algo in tts.DISTRIBUTIONAL:
        assert tts.MAX_STEPS[algo] == tts.MAX_STEPS["dqn"] and tts.TASKS[algo] == ["CartPole-v1"]
    rainbow = tts.TDRL_TUNED[("rainbow", "CartPole-v1")]
    assert rainbow["algo"] == "c51" and rainbow["noisy"] and rainbow["prioritized"]
    assert rainbow["n_steps"] == 3 and rainbow["dueling"] is tts.RAINBOW_DUELING
    assert rainbow["noisy_layers"] == "heads" and rainbow["hidden_sizes"] == (128, 128)
    assert tts.TDRL_TUNED[("qrdqn", "CartPole-v1")] == {
        "algo": "qrdqn", "num_quantiles": 10, "target_update_interval": 32,
    }  # fmt: skip
    label = tts.RUNNERS["rainbow"]["tuned"][0][0]
    assert label.endswith(", dueling)" if tts.RAINBOW_DUELING else ", no dueling)")
    # The zoo's QR-DQN entry is its DQN entry plus 10 quantiles; sb3-contrib clips nothing.
    qrdqn, dqn = tts.sb3_settings("qrdqn", "CartPole-v1"), tts.sb3_settings("dqn", "CartPole-v1")
    assert (qrdqn.pop("algo"), qrdqn.pop("num_quantiles"), qrdqn.pop("max_grad_norm")) == (
        "qrdqn",
        10,
        math.inf,
    )
    assert qrdqn == {k: v for k, v in dqn.items() if k != "max_grad_norm"}


def test_tianshou_epsilon_schedule_follows_its_tests() -> None:
    class Policy:
        def set_eps_training(self, eps: float) -> None:
            self.eps = eps

    policy = Policy()
    schedule = tts.tianshou_eps_schedule(policy, 0.1, 10_000, 50_000)
    for env_step, eps in [(0, 0.1), (10_000, 0.1), (30_000, 0.055), (50_000, 0.01), (60_000, 0.01)]:
        schedule(0, env_step)
        assert policy.eps == pytest.approx(eps)


@pytest.mark.parametrize("algo", ["c51", "qrdqn", "iqn", "rainbow", "fqf"])
def test_tianshou_distributional_settings_build_its_algorithm(algo: str) -> None:
    pytest.importorskip("tianshou")  # the bench extra
    if algo not in tts.DISTRIBUTIONAL:
        pytest.skip(f"recipes/rainbow.py has no --algo {algo}")
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    s = tts.TIANSHOU[(algo, "CartPole-v1")]
    algorithm = tts.TIANSHOU_BUILDERS[algo](s, env.observation_space, env.action_space)
    assert type(algorithm).__name__ == {"rainbow": "RainbowDQN", "qrdqn": "QRDQN"}.get(
        algo, algo.upper()
    )


@pytest.mark.table
def test_tiny_distributional_runs_return_a_result() -> None:
    pytest.importorskip("tianshou")
    # Rainbow (noisy, prioritized, 3-step; dueling where the recipe has it), with gradient steps
    # on the second batch of 256.
    settings = dict(tts.TDRL_TUNED[("rainbow", "CartPole-v1")], init_random_frames=256)
    result = tts.tdrl_run("rainbow", "CartPole-v1", 0, 300, **settings)
    assert math.isinf(result.seconds) and result.steps == 512
    # Tianshou's Rainbow: 8 x 64 steps collected first, then one epoch of 300 (38 x 8 steps).
    result = tts.tianshou_run("rainbow", "CartPole-v1", 0, 300)
    assert math.isinf(result.seconds) and result.steps == 512 + 304


def test_a_budget_too_small_to_solve_counts_as_inf() -> None:
    result = tts.tdrl_run("dqn", "CartPole-v1", 0, 300, **tts.TDRL_TUNED[("dqn", "CartPole-v1")])
    assert math.isinf(result.seconds) and result.steps == 512  # two batches of 256


@pytest.mark.table
def test_a_budget_too_small_to_solve_counts_as_inf_for_sb3() -> None:
    pytest.importorskip("stable_baselines3")  # the bench extra; CI installs test and dev only
    result = tts.sb3_run("dqn", "CartPole-v1", 0, 300)
    assert math.isinf(result.seconds) and result.steps == 512  # SB3 collects 256 at a time too


@pytest.mark.table
def test_a_budget_too_small_to_solve_counts_as_inf_for_sb3_contrib_qrdqn() -> None:
    pytest.importorskip("sb3_contrib")  # the bench extra
    result = tts.sb3_run("qrdqn", "CartPole-v1", 0, 300)
    assert math.isinf(result.seconds) and result.steps == 512


@pytest.mark.table
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


def test_recurrent_zoo_mapping_takes_sb3s_policy_defaults() -> None:
    # ortho_init False, a Gaussian in the env's units (no [-1, 1] rescaling), Adam eps 1e-5
    for task in tts.TASKS["ppo_lstm"]:
        zoo = tts.sb3_settings("ppo_lstm", task)
        assert (zoo["ortho_init"], zoo["rescale_actions"], zoo["adam_eps"]) == (False, False, 1e-5)
    pendulum = tts.sb3_settings("ppo_lstm", "PendulumNoVel-v1")
    assert (pendulum["sde_sample_freq"], pendulum["seq_len"], pendulum["minibatch_size"]) == (
        4,
        128,
        128,
    )


def test_report_shows_only_the_rows_that_ran(capsys: pytest.CaptureFixture) -> None:
    # --rows "zoo settings": only tdrl's zoo-settings row, no tuned table, no ratio
    R = tts.Result
    tts.report("ppo_lstm", "PendulumNoVel-v1", {"tdrl PPO-LSTM (zoo settings)": [R(3.0, 9)]})
    out = capsys.readouterr().out
    assert "(tuned)" not in out and "(same settings)" in out
    assert "[3.0]" in out and "]  ratio" not in out and "sb3-contrib" not in out


def test_report_gives_no_ratio_to_tdrl_s_own_ablation_row(capsys: pytest.CaptureFixture) -> None:
    # the MLP row is tdrl against tdrl: no "inf (only tdrl solved)" when it does not solve
    R = tts.Result
    tts.report("ppo_lstm", "PendulumNoVel-v1", {
        "tdrl PPO-LSTM (tuned)": [R(10.0, 9)],
        "sb3-contrib RecurrentPPO (zoo)": [R(30.0, 9)],
        "tdrl PPO, MLP (no memory)": [R(math.inf, 9)],
    })  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert "peer median / tdrl median" in lines[1]
    zoo = next(line for line in lines if line.strip().startswith("sb3-contrib"))
    mlp = next(line for line in lines if "MLP (no memory)" in line)
    assert zoo.endswith("ratio 3.00x") and "ratio" not in mlp
