"""On-policy recipes: each ``main`` runs in seconds with a tiny config and writes its outputs;
resuming from a checkpoint continues exactly like an uninterrupted run; PPO solves CartPole."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from recipes import a2c, impala, ppg, ppo, reinforce, trpo
from tdrl.trainers import configure, latest_checkpoint, read_csv
from tdrl.trainers.config import flat_dict
from tests.tiny_envs import register_test_envs

# NPG is trpo.py with --algo npg (one recipe for both natural-gradient methods).
RECIPES = {"reinforce": reinforce, "a2c": a2c, "ppo": ppo, "npg": trpo, "trpo": trpo}
# Recurrent actors: ppo.py / a2c.py with --recurrent.
RECIPES |= {"ppo_lstm": ppo, "a2c_gru": a2c}
# sb3-contrib's RecurrentPPO as the zoo sets it up: a critic LSTM too, and gSDE.
RECIPES |= {"ppo_zoo": ppo}
# IMPALA with tdrl's local Collector here; on Ray workers in tests/recipes/test_impala.py.
RECIPES |= {"impala": impala}
# IMPALA with an LSTM actor and critic: the collector stores both states, the update trains on
# whole sequences.
RECIPES |= {"impala_lstm": impala}
# PPO with the zoo's Atari clip schedule.
RECIPES |= {"ppo_clip_decay": ppo}
# PPG: PPO's policy phase and, every policy_iterations rollouts, the auxiliary phase.
RECIPES |= {"ppg": ppg}

# Small enough for seconds, large enough for episode ends, resets and several batches.
TINY = dict(
    total_frames=384,
    num_envs=2,
    frames_per_batch=64,
    eval_every=192,
    eval_episodes=2,
    eval_envs=2,
    hidden_sizes=(16, 16),
    progress=False,
    tensorboard=False,
)
TINY_EXTRA = {
    "ppo": dict(epochs=2, minibatch_size=32),
    "a2c": dict(log_every=1),
    "npg": dict(algo="npg"),
    "ppo_lstm": dict(epochs=2, minibatch_size=32, recurrent="lstm", seq_len=8),
    "a2c_gru": dict(log_every=1, recurrent="gru", seq_len=16),
    "ppo_zoo": dict(
        epochs=2,
        minibatch_size=32,
        recurrent="lstm",
        seq_len=8,
        recurrent_critic=True,
        sde_sample_freq=4,
    ),
    "impala": dict(collector="local"),
    "ppo_clip_decay": dict(epochs=2, minibatch_size=32, clip_decay=True, clip_epsilon=0.1),
    "ppg": dict(minibatch_size=32, policy_iterations=2, aux_minibatch_size=64),
    "impala_lstm": dict(collector="local", recurrent="lstm", seq_len=8, recurrent_critic=True),
}


def tiny(name: str, tmp_path: Path, **overrides) -> object:
    module = RECIPES[name]
    fields = set(flat_dict(module.Config()))
    values = {**TINY, **TINY_EXTRA.get(name, {}), "log_dir": str(tmp_path), **overrides}
    return configure(module.Config, **{k: v for k, v in values.items() if k in fields})


@pytest.mark.parametrize(
    ("env_id", "name"),
    [
        # on CartPole (discrete actions) PPO and A2C in the default run, the rest with -m variants
        pytest.param(env_id, name, marks=[pytest.mark.variants] * variant)
        for env_id in ("Hopper-v5", "CartPole-v1")
        for name in sorted(RECIPES)
        for variant in [env_id == "CartPole-v1" and name not in ("ppo", "a2c")]
    ],
)
def test_recipe_runs_tiny(name: str, env_id: str, tmp_path: Path, device: str) -> None:
    cfg = tiny(name, tmp_path, env_id=env_id, device=device)
    result = RECIPES[name].main(cfg)
    assert result["frames"] == cfg.run.total_frames
    assert result["eval_n_episodes"] == cfg.run.eval_episodes
    assert torch.isfinite(torch.tensor(list(result.values()))).all(), result
    train = read_csv(tmp_path / "train.csv")
    evals = read_csv(tmp_path / "eval.csv")
    assert [row["step"] for row in evals] == [192, 384]
    assert train[-1]["step"] == cfg.run.total_frames
    assert any(key.startswith("loss_") for key in train[-1])
    assert (tmp_path / "curve.png").stat().st_size > 1000
    assert (latest_checkpoint(tmp_path) / "checkpoint.pt").is_file()


@pytest.mark.parametrize("name", ["ppo", "ppg", "a2c", "trpo", "reinforce", "impala"])
def test_on_policy_recipes_learn_from_frames_through_a_cnn(name: str, tmp_path: Path) -> None:
    """MinAtar's uint8 frames run through a CNN under both heads, with the recipe's defaults
    (--normalize-observations on: it does not apply to frames, which the CNN scales)."""
    pytest.importorskip("minatar")  # the pixels extra
    cfg = tiny(name, tmp_path, env_id="MinAtar/Breakout-v1", normalize_observations=True)
    result = RECIPES[name].main(cfg)
    assert result["frames"] == cfg.run.total_frames
    assert torch.isfinite(torch.tensor(list(result.values()))).all(), result


def test_ppo_takes_its_network_flag_on_frames(tmp_path: Path) -> None:
    """--network impala puts the IMPALA ResNet under both heads; --network mlp on frames is
    refused by name (it was once ignored)."""
    pytest.importorskip("minatar")  # the pixels extra
    from tdrl.envs import make_vec_env
    from tdrl.modules import ImpalaCNN

    cfg = tiny("ppo", tmp_path / "impala", env_id="MinAtar/Breakout-v1", network="impala")
    result = ppo.main(cfg)
    assert result["frames"] == cfg.run.total_frames
    with make_vec_env("MinAtar/Breakout-v1", 2, seed=0) as env:
        nets = cfg.net.build(env.observation_spec, env.action_spec, network="impala")
    assert isinstance(nets.actor.net[0], ImpalaCNN) and nets.actor.net[0] is nets.critic.net[0]
    flat = r"one flat 'observation' entry, got torch.uint8 \(4, 10, 10\); frames \[C, H, W\]"
    with pytest.raises(ValueError, match=flat):
        ppo.main(tiny("ppo", tmp_path / "mlp", env_id="MinAtar/Breakout-v1", network="mlp"))


def test_curve_off_writes_no_png(tmp_path: Path) -> None:
    result = ppo.main(tiny("ppo", tmp_path, curve=False, env_id="CartPole-v1"))
    assert result["frames"] == TINY["total_frames"]
    assert (tmp_path / "eval.csv").is_file()
    assert not (tmp_path / "curve.png").exists()


def _losses(path: Path) -> list[dict[str, float]]:
    # Everything but wall-clock times must match.
    return [{k: v for k, v in row.items() if k != "time"} for row in read_csv(path)]


@pytest.mark.parametrize(
    ("name", "env_id"),
    [
        ("ppo", "Hopper-v5"),
        ("ppo", "CartPole-v1"),
        ("trpo", "Pendulum-v1"),
        ("a2c", "Hopper-v5"),
        ("impala", "Hopper-v5"),
        ("ppg", "Hopper-v5"),  # the stored rollouts of the auxiliary phase are checkpointed
        ("ppo_clip_decay", "Hopper-v5"),  # the clip follows the (checkpointed) lr schedule
        ("ppo_lstm", "CartPoleNoVel-v1"),  # the LSTM state is in the checkpoint
        ("ppo_lstm", "HopperNoVel-v5"),
        ("ppo_zoo", "PendulumNoVel-v1"),  # the critic's LSTM state and the gSDE noise too
        ("ppo", "tdrl/BitFlipping5-v0"),  # a dict observation: its entries concatenated
        ("ppo", "tdrl-test/DotDict-v0"),  # a frame and a vector: the shared CNN encoder's weights
        ("ppg", "tdrl-test/DotDict-v0"),  # an encoder each, the auxiliary head on the actor's
        ("a2c", "tdrl-test/DotDict-v0"),  # the critic's value head rescaled, not its encoder's
        pytest.param("ppo_lstm", "tdrl/BitFlipping5-v0", marks=pytest.mark.variants),
    ],
)
def test_resume_continues_exactly(name: str, env_id: str, tmp_path: Path, device: str) -> None:
    """N batches straight == k batches, checkpoint, fresh objects, resume, N - k batches."""
    module = RECIPES[name]
    register_test_envs()
    common = dict(env_id=env_id, total_frames=640, device=device)
    straight = tiny(name, tmp_path / "straight", **common)
    module.main(straight)
    first = tiny(name, tmp_path / "resumed", **common, stop_after_frames=192)
    module.main(first)
    assert len(read_csv(tmp_path / "resumed" / "train.csv")) == 3
    torch.manual_seed(12345)  # disturb the global RNG: the checkpoint must restore it
    torch.rand(10)
    module.main(configure(first, stop_after_frames=0, resume=True))
    expected = _losses(tmp_path / "straight" / "train.csv")
    got = _losses(tmp_path / "resumed" / "train.csv")
    assert len(expected) == 10
    assert got == expected
    # Episodes ended in the straight run, so the env state (resets included) was restored.
    assert any("episode_return" in row for row in expected[3:])


def test_a_run_trains_the_same_whichever_way_it_evaluates(tmp_path: Path) -> None:
    # A sampled evaluation draws its actions from a stream of its own, seeded per evaluation:
    # the training rows match a run that evaluates the mode, step by step.
    common = dict(env_id="Hopper-v5", total_frames=640, eval_every=128)
    a2c.main(tiny("a2c", tmp_path / "mode", **common))
    a2c.main(tiny("a2c", tmp_path / "sampled", **common, eval_deterministic=False))
    assert _losses(tmp_path / "sampled" / "train.csv") == _losses(tmp_path / "mode" / "train.csv")
    evaluations = [read_csv(tmp_path / run / "eval.csv") for run in ("mode", "sampled")]
    assert len(evaluations[0]) == len(evaluations[1]) >= 4
    assert [r["return_mean"] for r in evaluations[0]] != [r["return_mean"] for r in evaluations[1]]


def test_recurrent_sequence_length_must_divide_the_rollout(tmp_path: Path) -> None:
    cfg = tiny("ppo_lstm", tmp_path, env_id="CartPoleNoVel-v1", seq_len=5)  # 32 steps per env
    with pytest.raises(ValueError, match=r"seq_len=5 does not divide the rollout's 32 steps"):
        ppo.main(cfg)


RECURRENT_CARTPOLE = dict(
    env_id="CartPoleNoVel-v1", total_frames=150_000, num_envs=8, frames_per_batch=1024,
    minibatch_size=256, epochs=4, lr=3e-3, lr_decay=False, gamma=0.98, lmbda=0.8,
    critic_coeff=0.5, normalize_observations=False, eval_every=10_240, progress=False,
    tensorboard=False, curve=False, normalize_advantage=True, scale_rewards=False,
)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_recurrent_ppo_solves_cartpole_without_velocities_and_mlp_ppo_does_not(seed, tmp_path):
    memory = ppo.main(configure(ppo.Config, **RECURRENT_CARTPOLE, recurrent="lstm", seq_len=16,
                                seed=seed, log_dir=str(tmp_path / "lstm")))  # fmt: skip
    plain = ppo.main(
        configure(ppo.Config, **RECURRENT_CARTPOLE, seed=seed, log_dir=str(tmp_path / "mlp"))
    )
    assert memory["best_eval_return"] >= 450, memory
    assert plain["best_eval_return"] < 200, plain


@pytest.mark.slow
def test_ppo_solves_cartpole(tmp_path: Path) -> None:
    cfg = configure(
        ppo.Config,
        env_id="CartPole-v1",
        total_frames=100_000,
        num_envs=8,
        frames_per_batch=1024,
        eval_every=4096,
        stop_at_return=500.0,
        log_dir=str(tmp_path),
        progress=False,
    )
    result = ppo.main(cfg)
    assert result["eval_return_mean"] >= 475, result


@pytest.mark.parametrize("backend", ["torchrl", "envpool"])
@pytest.mark.parametrize("env_id", ["Hopper-v5", "CartPole-v1"])
def test_recipes_run_on_other_env_backends(backend: str, env_id: str, tmp_path: Path) -> None:
    if backend == "envpool":
        pytest.importorskip("envpool")
        if env_id == "CartPole-v1":
            pytest.skip("envpool's CartPole is v1 of its own; the MuJoCo task is the case here")
    cfg = tiny("ppo", tmp_path, env_id=env_id, env_backend=backend)
    result = ppo.main(cfg)
    assert result["frames"] == cfg.run.total_frames
    assert torch.isfinite(torch.tensor(result["eval_return_mean"]))
    train = read_csv(tmp_path / "train.csv")
    assert any("episode_return" in row for row in train)  # episodes ended and were counted


def test_ppo_trains_on_mujoco_warp_worlds_and_resumes(tmp_path: Path, device: str) -> None:
    """--env-backend mujoco_warp: the worlds on --device, a DeviceCollector, evaluation on
    gymnasium's Hopper; a resume restores the counters and starts fresh episodes."""
    pytest.importorskip("mujoco_warp")
    cfg = tiny("ppo", tmp_path, env_backend="mujoco_warp", device=device)
    result = ppo.main(cfg)
    assert result["frames"] == cfg.run.total_frames
    assert torch.isfinite(torch.tensor(result["eval_return_mean"]))
    train = read_csv(tmp_path / "train.csv")
    assert any(row.get("episodes", 0) > 0 for row in train)  # the worlds' episodes were counted
    longer = tiny("ppo", tmp_path, env_backend="mujoco_warp", device=device, resume=True,
                  total_frames=2 * cfg.run.total_frames)  # fmt: skip
    assert ppo.main(longer)["frames"] == 2 * cfg.run.total_frames


def test_device_flag_runs_on_cpu_and_refuses_a_missing_gpu(tmp_path: Path) -> None:
    for device in ("cpu", "auto"):
        cfg = tiny("ppo", tmp_path / device, env_id="CartPole-v1", device=device)
        assert ppo.main(cfg)["frames"] == cfg.run.total_frames
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="--device 'cuda': this machine has no CUDA device"):
            tiny("ppo", tmp_path, device="cuda")
    with pytest.raises(ValueError, match="--device must be cpu, cuda"):
        tiny("ppo", tmp_path, device="meta")


@pytest.mark.workers
@pytest.mark.ray
def test_impala_on_ray_workers_sees_ratios_away_from_one_only_when_stale(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    for collector in ("ray", "local"):
        cfg = tiny("impala", tmp_path / collector, env_id="CartPole-v1", collector=collector)
        result = impala.main(configure(cfg, total_frames=1_600, log_every=1))
        assert result["frames"] == 1_600
        rows = read_csv(tmp_path / collector / "train.csv")
        deviation = [row["rho_deviation"] for row in rows]
        if collector == "ray":
            # Two workers act while the learner steps: a rollout acted by older weights (lag > 0)
            # has V-trace ratios pi/mu away from 1; one acted by the learner's own, exactly 1.
            lag = [row["policy_lag"] for row in rows]
            assert sum(a > 0 for a in lag) >= len(rows) // 2 and max(lag) <= cfg.max_policy_lag
            assert all((d > 1e-4) == (a > 0) for d, a in zip(deviation, lag, strict=True))
            assert all(d < 1e-5 for d, a in zip(deviation, lag, strict=True) if a == 0)
        else:  # tdrl's own Collector: the learner's weights acted every rollout
            assert max(deviation) < 1e-5


@pytest.mark.workers
@pytest.mark.parametrize("collector", [pytest.param("ray", marks=pytest.mark.ray), "process"])
def test_ppo_collects_on_workers(collector: str, tmp_path: Path) -> None:
    if collector == "ray":
        pytest.importorskip("ray")
    cfg = tiny("ppo", tmp_path, env_id="CartPole-v1", collector=collector, num_workers=2)
    result = ppo.main(cfg)  # 64 frames a batch: 2 workers x 2 envs x 16 steps
    assert result["frames"] == cfg.run.total_frames and result["updates"] == 6 * 2 * 2
    assert [row["step"] for row in read_csv(tmp_path / "eval.csv")] == [192, 384]


def test_scale_rewards_in_every_on_policy_recipe_resumes_exactly(tmp_path: Path) -> None:
    """--scale-rewards (the recipes' RewardScaling) changes what the critic learns, its
    statistics go in the checkpoint (a resumed run equals a straight one), and the recipes it
    does not apply to refuse it."""
    straight = tiny("trpo", tmp_path / "straight", env_id="Hopper-v5", total_frames=640,
                    scale_rewards=True)  # fmt: skip
    trpo.main(straight)
    plain = configure(straight, scale_rewards=False, log_dir=str(tmp_path / "plain"))
    trpo.main(plain)
    scaled_rows, plain_rows = (read_csv(tmp_path / d / "train.csv") for d in ("straight", "plain"))
    assert scaled_rows[0]["loss_critic"] != plain_rows[0]["loss_critic"]
    first = configure(straight, log_dir=str(tmp_path / "resumed"), stop_after_frames=192)
    trpo.main(first)
    assert "reward_scaler" in torch.load(
        latest_checkpoint(tmp_path / "resumed") / "checkpoint.pt", weights_only=False
    )
    trpo.main(configure(first, stop_after_frames=0, resume=True))
    assert _losses(tmp_path / "resumed" / "train.csv") == _losses(
        tmp_path / "straight" / "train.csv"
    )
    with pytest.raises(ValueError, match="--scale-rewards does not apply to IMPALA"):
        impala.main(tiny("impala", tmp_path / "impala", env_id="Hopper-v5", scale_rewards=True))


def test_ppo_with_rnd_learns_its_predictor_resumes_exactly_and_refuses_bad_coefficients(
    tmp_path: Path,
) -> None:
    """--intrinsic-coeff adds RND: its losses are logged, the predictor's error falls, its
    statistics and the intrinsic critic go in the checkpoint (a resumed run equals a straight
    one), and a negative or NaN coefficient is refused, naming the flag."""
    rnd = dict(env_id="CartPole-v1", total_frames=640, intrinsic_coeff=1.0, extrinsic_coeff=2.0)
    straight = tiny("ppo", tmp_path / "straight", **rnd)
    ppo.main(straight)
    rows = read_csv(tmp_path / "straight" / "train.csv")
    assert rows[-1]["loss_rnd"] < rows[0]["loss_rnd"] and "loss_intrinsic_value" in rows[-1]
    first = configure(straight, log_dir=str(tmp_path / "resumed"), stop_after_frames=192)
    ppo.main(first)
    saved = torch.load(latest_checkpoint(tmp_path / "resumed") / "checkpoint.pt",
                       weights_only=False)  # fmt: skip
    assert {"bonus", "intrinsic_critic"} <= set(saved)
    torch.manual_seed(12345)
    ppo.main(configure(first, stop_after_frames=0, resume=True))
    assert _losses(tmp_path / "resumed" / "train.csv") == _losses(
        tmp_path / "straight" / "train.csv"
    )
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="--intrinsic-coeff \\(a loss weight\\) must be"):
            configure(straight, intrinsic_coeff=bad)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_ppo_with_icm_runs_on_discrete_and_continuous_actions(env_id: str, tmp_path: Path) -> None:
    cfg = tiny("ppo", tmp_path, env_id=env_id, intrinsic_coeff=1.0, intrinsic="icm")
    ppo.main(cfg)
    rows = read_csv(tmp_path / "train.csv")
    assert {"loss_icm_forward", "loss_icm_inverse", "loss_intrinsic_value"} <= set(rows[-1])


def test_a2c_with_icm_trains_its_models_and_resumes_exactly(tmp_path: Path) -> None:
    """A2C takes the bonuses as PPO does (ICM's paper trains A3C): the models' losses are logged,
    the forward model's error falls, and a resumed run equals a straight one."""
    icm = dict(env_id="CartPole-v1", total_frames=640, intrinsic_coeff=1.0, intrinsic="icm")
    straight = tiny("a2c", tmp_path / "straight", **icm)
    a2c.main(straight)
    rows = read_csv(tmp_path / "straight" / "train.csv")
    assert {"loss_icm_forward", "loss_icm_inverse", "loss_intrinsic_value"} <= set(rows[-1])
    assert rows[-1]["loss_icm_forward"] < rows[0]["loss_icm_forward"]
    first = configure(straight, log_dir=str(tmp_path / "resumed"), stop_after_frames=192)
    a2c.main(first)
    torch.manual_seed(12345)
    a2c.main(configure(first, stop_after_frames=0, resume=True))
    assert _losses(tmp_path / "resumed" / "train.csv") == _losses(
        tmp_path / "straight" / "train.csv"
    )


def test_a2c_value_target_scaling_changes_the_critic_loss_and_resumes_exactly(tmp_path: Path):
    """--scale-value-targets (ValueTargetScaling): the critic regresses on scaled targets, the
    statistics go in the checkpoint, and a resumed run equals a straight one."""
    straight = tiny("a2c", tmp_path / "straight", env_id="Hopper-v5", total_frames=640,
                    scale_value_targets=True, scale_rewards=False)  # fmt: skip
    a2c.main(straight)
    plain = configure(straight, scale_value_targets=False, log_dir=str(tmp_path / "p"))
    a2c.main(plain)
    tianshou = configure(straight, preserve_value_outputs=False, log_dir=str(tmp_path / "t"))
    a2c.main(tianshou)
    scaled_rows, plain_rows, tianshou_rows = (
        read_csv(tmp_path / d / "train.csv") for d in ("straight", "p", "t")
    )
    # Tianshou's order: the first batch's scale is 1, from the second on the targets are divided
    # by the std; preserving outputs, the first batch is divided by its own targets' std already
    assert tianshou_rows[0]["loss_critic"] == plain_rows[0]["loss_critic"]
    assert scaled_rows[0]["loss_critic"] < plain_rows[0]["loss_critic"]
    assert tianshou_rows[-1]["loss_critic"] < plain_rows[-1]["loss_critic"]
    assert scaled_rows[-1]["loss_critic"] < plain_rows[-1]["loss_critic"]
    first = configure(straight, log_dir=str(tmp_path / "resumed"), stop_after_frames=192)
    a2c.main(first)
    state = torch.load(latest_checkpoint(tmp_path / "resumed") / "checkpoint.pt",
                       weights_only=False)  # fmt: skip
    assert float(state["value_target_scaling"]["return_stats.count"]) > 1
    a2c.main(configure(first, stop_after_frames=0, resume=True))
    assert _losses(tmp_path / "resumed" / "train.csv") == _losses(
        tmp_path / "straight" / "train.csv"
    )


def test_a_stop_between_evaluations_and_a_resume_without_checkpoint_read_like_a_straight_run(
    tmp_path: Path,
) -> None:
    # A stop_after_frames stop is a pause: it makes no evaluation the straight run does not
    # make (an extra one moved the RNG and the eval log); a --resume that finds no checkpoint
    # starts from frame 0, and the logs of the killed attempt go.
    import shutil

    from tdrl.trainers.run import CHECKPOINTS

    common = dict(env_id="CartPole-v1", total_frames=384)
    ppo.main(tiny("ppo", tmp_path / "straight", **common))
    expected = _losses(tmp_path / "straight" / "train.csv")
    first = tiny("ppo", tmp_path / "paused", **common, stop_after_frames=128)  # eval_every 192
    ppo.main(first)
    assert not (tmp_path / "paused" / "eval.csv").exists()  # no evaluation at the pause
    ppo.main(configure(first, stop_after_frames=0, resume=True))
    assert [row["step"] for row in read_csv(tmp_path / "paused" / "eval.csv")] == [192, 384]
    assert _losses(tmp_path / "paused" / "train.csv") == expected
    # killed before its first checkpoint: as if the checkpoint folder were never written
    killed = tiny("ppo", tmp_path / "killed", **common, stop_after_frames=256)
    ppo.main(killed)
    shutil.rmtree(tmp_path / "killed" / CHECKPOINTS)
    ppo.main(configure(killed, stop_after_frames=0, resume=True))
    assert [row["step"] for row in read_csv(tmp_path / "killed" / "eval.csv")] == [192, 384]
    assert _losses(tmp_path / "killed" / "train.csv") == expected


def test_a_fresh_run_refuses_a_used_folder_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    # Without --resume, a second run into the same folder would append its rows to the first
    # run's logs (two runs in one eval.csv); it is refused before anything is written.
    cfg = tiny("ppo", tmp_path / "run", env_id="CartPole-v1", total_frames=384)
    ppo.main(cfg)
    before = {p.name: p.read_bytes() for p in (tmp_path / "run").glob("*.csv")}
    assert "eval.csv" in before
    with pytest.raises(FileExistsError, match=r"holds a previous run \(eval.csv, .*--resume"):
        ppo.main(cfg)
    assert {p.name: p.read_bytes() for p in (tmp_path / "run").glob("*.csv")} == before
    ppo.main(configure(cfg, resume=True))  # continuing it is allowed: already done
    assert [row["step"] for row in read_csv(tmp_path / "run" / "eval.csv")] == [192, 384]


@pytest.mark.parametrize(
    ("name", "flag"), [("reinforce", "recurrent"), ("trpo", "sde_sample_freq")]
)
def test_reinforce_and_trpo_refuse_recurrent_and_gsde_policies(name, flag, tmp_path) -> None:
    value = "lstm" if flag == "recurrent" else 4
    cfg = tiny(name, tmp_path, env_id="Pendulum-v1", **{flag: value})
    with pytest.raises(ValueError, match=f"{name}.py has no --{flag.replace('_', '-')} policies"):
        RECIPES[name].main(cfg)


def test_an_on_policy_recipe_refuses_steps_per_batch_it_would_ignore(tmp_path: Path) -> None:
    cfg = tiny("ppo", tmp_path, steps_per_batch=4)
    with pytest.raises(ValueError, match="--steps-per-batch 4 sets the batches of the off-policy"):
        ppo.main(cfg)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"bonus_hidden_sizes": ()}, "--bonus-hidden-sizes needs at least one width"),
        ({"rnd_update_proportion": 0.0}, r"--rnd-update-proportion must be in \(0, 1\], got 0.0"),
        ({"icm_beta": 2.0}, r"--icm-beta must lie in \[0, 1\], got 2.0"),
        ({"intrinsic_gamma": 1.5}, r"--intrinsic-gamma must lie in \[0, 1\], got 1.5"),
        (
            {"intrinsic": "icm", "rnd_first_visit": True},
            "--rnd-first-visit is for --intrinsic rnd, not icm",
        ),
        (
            {"intrinsic": "rnd", "icm_first_visit": True},
            "--icm-first-visit is for --intrinsic icm, not rnd",
        ),
    ],
)
def test_bad_exploration_bonus_flags_are_named(flags, message) -> None:
    with pytest.raises(ValueError, match=message):
        configure(ppo.Config, **flags)


@pytest.mark.variants
@pytest.mark.parametrize("name", ["ppo", "a2c", "reinforce", "impala"])
def test_recipe_runs_its_update_step_compiled(name: str, tmp_path: Path) -> None:
    result = RECIPES[name].main(tiny(name, tmp_path, compile=True))
    assert torch.isfinite(torch.tensor(list(result.values()))).all(), result
    assert read_csv(tmp_path / "train.csv")[-1]["step"] == result["frames"]


@pytest.mark.parametrize("name", ["a2c_gru", "impala_lstm"])
def test_recurrent_networks_refuse_cudagraphs(name: str, tmp_path: Path) -> None:
    """A recurrent network cuts its sequences where an episode starts, read on the host: no CUDA
    graph captures that (--compile alone takes it)."""
    cfg = tiny(name, tmp_path, device="auto", cudagraphs=True)
    with pytest.raises(ValueError, match="--cudagraphs: .*'s --recurrent .* networks cut"):
        RECIPES[name].main(cfg)


def test_ppg_and_gail_refuse_the_ppo_flags_they_do_not_run(tmp_path: Path) -> None:
    from recipes import gail

    with pytest.raises(ValueError, match="--compile: PPG's recipe does not run its update steps"):
        ppg.main(tiny("ppg", tmp_path, compile=True))  # its steps are not compiled_step's

    with pytest.raises(ValueError, match="ppg.py has no --recompute-advantage"):
        ppg.main(tiny("ppg", tmp_path, recompute_advantage=True))
    with pytest.raises(ValueError, match="= 448 env steps before the first auxiliary phase, more"):
        ppg.main(tiny("ppg", tmp_path, policy_iterations=7))  # 7 x 64 > 384: it would never run
    with pytest.raises(ValueError, match="gail.py has no --clip-decay"):
        gail.main(configure(gail.Config, clip_decay=True, log_dir=str(tmp_path / "gail")))


def test_ppo_takes_the_pixel_options_frame_stacks_and_clipped_rewards(tmp_path: Path) -> None:
    """--frame-stack and --clip-rewards reach ppo.py: the batches the learner sees hold stacks of
    2 MinAtar frames (4 channels each) and pass through the reward clipping."""
    pytest.importorskip("minatar")
    from tdrl.envs import RewardClipping

    cfg = tiny("ppo", tmp_path, env_id="MinAtar/Breakout-v1", frame_stack=2, clip_rewards=True)
    seen: list[tuple[int, bool]] = []
    original = RewardClipping.forward

    def spy(self, batch):  # the batch the learner sees, after the clipping
        out = original(self, batch)
        reward = out["next", "reward"]
        seen.append((out["observation"].shape[-3], bool(((reward >= -1) & (reward <= 1)).all())))
        return out

    RewardClipping.forward = spy  # type: ignore[method-assign]
    try:
        result = RECIPES["ppo"].main(cfg)
    finally:
        RewardClipping.forward = original  # type: ignore[method-assign]
    assert result["frames"] == cfg.run.total_frames and len(seen) >= 2
    assert all(channels == 8 and clipped for channels, clipped in seen)


@pytest.mark.parametrize(
    "name",
    [
        "ppo",
        "a2c",
        *(pytest.param(n, marks=pytest.mark.variants) for n in ("reinforce", "trpo", "ppg")),
    ],
)
def test_on_policy_recipes_read_a_dict_observation_concatenated(name: str, tmp_path: Path) -> None:
    """A goal env's dict observation (3 entries of 5 bits): the actor, the critic and the
    observation normalizer read the entries concatenated, the rollout carries the
    concatenation the collector's policy wrote, and evaluation acts on the env's own dict."""
    cfg = tiny(name, tmp_path, env_id="tdrl/BitFlipping5-v0", normalize_observations=True)
    result = RECIPES[name].main(cfg)
    assert result["frames"] == cfg.run.total_frames
    assert result["eval_n_episodes"] == cfg.run.eval_episodes
    state = torch.load(latest_checkpoint(tmp_path) / "checkpoint.pt", weights_only=True)
    norm = [v for k, v in state["actor"].items() if k.endswith("obs_norm.mean")]
    assert norm and all(v.shape == (15,) for v in norm)  # 3 entries x 5 bits


@pytest.mark.parametrize("env_id", ["tdrl-test/DotDict-v0", "tdrl/BitFlipping5-v0"])
def test_an_exploration_bonus_on_a_dict_observation_is_refused_by_name(env_id, tmp_path):
    register_test_envs()
    cfg = tiny("ppo", tmp_path, env_id=env_id, intrinsic_coeff=1.0)
    with pytest.raises(ValueError, match="bonuses read one 'observation' entry .* has \\['"):
        ppo.main(cfg)
