"""The run kit's configs and run folder: composed configs with flat flags, configure, the saved
config.json, and the one-line refusal of a used run folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tdrl.collectors import Collector
from tdrl.trainers import Run, configclass, configure, make_envs, parse
from tdrl.trainers.config import (
    LogConfig,
    ReplayConfig,
    RunConfig,
    RunFolderError,
    _one_line_errors,
    flat_dict,
)


@configclass
class Config:
    """A recipe's config: its own field and two groups."""

    run: RunConfig = RunConfig(env_id="CartPole-v1", total_frames=16, eval_every=0)
    replay: ReplayConfig = ReplayConfig(batch_size=32)
    lr: float = 1e-3
    """learning rate."""


def test_configure_sets_flat_names_in_their_groups_and_keeps_the_other_defaults():
    cfg = configure(Config, env_id="Pendulum-v1", batch_size=8, lr=0.5, progress=False)
    assert (cfg.run.env_id, cfg.run.total_frames, cfg.run.eval_every) == ("Pendulum-v1", 16, 0)
    assert (cfg.replay.batch_size, cfg.replay.buffer_size, cfg.lr) == (8, 1_000_000, 0.5)
    assert cfg.run.log.progress is False and cfg.run.log.tensorboard is True
    copy = configure(cfg, seed=3)  # an instance: a changed copy
    assert (copy.run.seed, copy.run.env_id, copy.replay.batch_size) == (3, "Pendulum-v1", 8)
    with pytest.raises(TypeError, match=r"Config has no field\(s\) \['batch', 'seed_'\]"):
        configure(Config, batch="x", seed_=1)
    with pytest.raises(ValueError, match=r"--batch-size must be >= 1, got 0"):
        configure(Config, batch_size=0)  # the group checks its fields
    with pytest.raises(ValueError, match=r"--lr \(a learning rate\) must be finite and > 0"):
        configure(Config, lr=-1.0)  # and the recipe's own
    assert flat_dict(cfg)["batch_size"] == 8 and "run" not in flat_dict(cfg)
    # a whole group and a field of it by name: the field applies on top of the group
    both = configure(Config, log=LogConfig(curve=False), progress=False)
    assert (both.run.log.curve, both.run.log.progress) == (False, False)
    both = configure(Config, run=RunConfig(env_id="Acrobot-v1"), seed=3)
    assert (both.run.env_id, both.run.seed, both.run.total_frames) == ("Acrobot-v1", 3, 200_000)


def test_the_command_line_is_flat_and_help_shows_the_description(capsys):
    cfg = parse(Config, ["--env-id", "Acrobot-v1", "--batch-size", "4", "--no-progress"])
    assert (cfg.run.env_id, cfg.replay.batch_size, cfg.run.log.progress) == ("Acrobot-v1", 4, False)
    with pytest.raises(SystemExit):
        parse(Config, ["--help"], description="Trains X.\n\n    python recipes/x.py --lr 1")
    out = capsys.readouterr().out
    assert "Trains X." in out and "python recipes/x.py --lr 1" in out and "--batch-size" in out
    with pytest.raises(SystemExit):
        parse(Config, ["--run.env-id", "CartPole-v1"])  # no prefixes on the command line


def _run(cfg: Config, *, whole: bool = False, state: dict | None = None) -> Run:
    """A run of ``cfg.run`` (``whole``: of the recipe config ``cfg``, which it saves)."""
    from tdrl.modules import actor_critic

    env, eval_env = make_envs(cfg.run)
    actor, _, _ = actor_critic(env.observation_spec, env.action_spec, hidden_sizes=(8,))
    given = cfg if whole else cfg.run
    run = Run.from_config(given, "X", state or {}, eval_env=eval_env, policy=actor)
    return run, Collector(env, None, 8, cfg.run.total_frames, init_random_frames=16)


def test_a_run_saves_its_config_and_a_used_folder_is_refused_naming_the_way_out(tmp_path):
    quiet = LogConfig(progress=False, tensorboard=False, curve=False)
    cfg = configure(Config, log_dir=str(tmp_path), log=quiet, checkpoint_every=8)
    run, collector = _run(cfg, whole=True)
    with run:
        for _ in run.resume(collector):
            run.step()
        run.report()
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["batch_size"] == 32 and saved["env_id"] == "CartPole-v1"
    assert saved["stop_at_return"] == "inf" and saved["lr"] == 1e-3
    again, collector = _run(cfg)
    with pytest.raises(RunFolderError, match=r"pass --resume to continue it from step 16"):
        with again:
            next(again.resume(collector))
    crashed = tmp_path / "crashed"  # logs, no checkpoint: only --log-dir applies
    crashed.mkdir()
    (crashed / "eval.csv").write_text("step,return_mean\n8,1.0\n")
    fresh, collector = _run(configure(cfg, log_dir=str(crashed)))
    with pytest.raises(RunFolderError, match=r"no checkpoint to resume from: pass --log-dir"):
        with fresh:
            next(fresh.resume(collector))


def test_a_train_row_holds_the_mean_of_the_recorded_steps_and_keeps_earlier_metrics(tmp_path):
    import torch

    from tdrl.trainers import read_csv

    quiet = LogConfig(progress=False, tensorboard=False, curve=False)
    cfg = configure(Config, log_dir=str(tmp_path), log=quiet, total_frames=32)
    run, collector = _run(cfg)
    steps = [
        [{"loss": torch.tensor(1.0), "q": 2.0}, {"loss": torch.tensor(3.0), "q": 4.0}],
        [],  # no gradient step in this batch: the row keeps the last values
        [{"loss": torch.tensor(5.0), "td_error": torch.ones(4)}],  # per-sample entries left out
        [{"loss": torch.tensor([7.0])}],
    ]
    with run:
        for batch, recorded in zip(run.resume(collector), steps, strict=True):
            for metrics in recorded:
                run.record(metrics)
            run.step({"epsilon": 0.5, "loss": 9.0} if batch.numel() and not recorded else None)
        result = run.report()
    rows = read_csv(tmp_path / "train.csv")
    assert [(row["loss"], row["q"]) for row in rows] == [(2.0, 3.0), (9.0, 3.0), (5.0, 3.0),
                                                         (7.0, 3.0)]  # fmt: skip
    assert rows[1]["epsilon"] == rows[3]["epsilon"] == 0.5 and "td_error" not in rows[2]
    assert result["loss"] == 7.0 and result["q"] == 3.0


def _losses_per_batch(run: Run, collector: Collector, values: list[list[float]]) -> dict:
    import torch

    with run:
        for _, recorded in zip(run.resume(collector), values, strict=False):
            for value in recorded:
                run.record({"loss": torch.tensor(value), "n": 1.0})
            if run.step():
                break
        return run.report()


def test_a_row_logged_every_few_batches_averages_all_their_steps_across_a_resume(tmp_path):
    """log_every 32 over batches of 8: each row is the mean of its four batches' steps, and a
    run paused at step 24 (mid-interval) and resumed logs the same rows as a straight run."""
    from tdrl.trainers import read_csv

    values = [[1.0, 3.0], [5.0], [], [7.0, 9.0, 11.0], [2.0], [4.0], [6.0], [8.0]]
    quiet = LogConfig(progress=False, tensorboard=False, curve=False)
    cfg = configure(Config, log=quiet, total_frames=64, log_every=32, checkpoint_every=8)
    run, collector = _run(configure(cfg, log_dir=str(tmp_path / "straight")))
    result = _losses_per_batch(run, collector, values)
    rows = read_csv(tmp_path / "straight" / "train.csv")
    assert [row["loss"] for row in rows] == [6.0, 5.0]  # (1+3+5+7+9+11)/6, (2+4+6+8)/4
    assert result["loss"] == 5.0
    paused = configure(cfg, log_dir=str(tmp_path / "paused"), stop_after_frames=24)
    run, collector = _run(paused)
    _losses_per_batch(run, collector, values)
    run, collector = _run(configure(paused, stop_after_frames=0, resume=True))
    _losses_per_batch(run, collector, values[3:])
    again = read_csv(tmp_path / "paused" / "train.csv")
    assert [row["loss"] for row in again] == [6.0, 5.0]


def test_on_the_command_line_a_refused_folder_is_one_line_not_a_traceback(capsys):
    error = RunFolderError("the run folder 'x' holds a previous run (eval.csv): pass --log-dir")
    _one_line_errors(RunFolderError, error, None)
    assert capsys.readouterr().err == f"error: {error}\n"
    try:
        raise ValueError("other errors keep their traceback")
    except ValueError as other:
        _one_line_errors(ValueError, other, other.__traceback__)
    assert "Traceback" in capsys.readouterr().err


def test_a_run_keeps_one_replay_buffer_from_its_state_and_refuses_two(tmp_path):
    from tdrl.data import ReplayBuffer

    cfg = configure(Config, log_dir=str(tmp_path))
    one, two = ReplayBuffer(8), ReplayBuffer(8)
    run, collector = _run(cfg, state={"replay": one, "n": torch.nn.Linear(1, 1)})
    assert run.buffer is one and set(run.state) == {"n"}  # checkpointed apart from the rest
    collector.shutdown()
    run.close()
    with pytest.raises(ValueError, match=r"2 replay buffers \['a', 'b'\]"):
        Run(tmp_path, {"a": one, "b": two}, eval_env=None, policy=None, title="t",
            total_frames=8, eval_every=0)  # fmt: skip


def test_a_checkpoint_holds_only_the_filled_part_of_a_large_replay_buffer(tmp_path):
    from tdrl.data import ReplayBuffer, transitions

    quiet = LogConfig(progress=False, tensorboard=False, curve=False)
    cfg = configure(Config, log_dir=str(tmp_path), log=quiet, checkpoint_every=16)
    buffer = ReplayBuffer(1_000_000)  # 1M transitions of CartPole: ~60 MB if stored whole
    run, collector = _run(cfg, state={"buffer": buffer})
    with run:
        for batch in run.resume(collector):
            buffer.extend(transitions(batch))
            run.step()
        run.report()
    folder = next((tmp_path / "checkpoints").iterdir())
    size = sum(f.stat().st_size for f in (folder / "buffer").rglob("*") if f.is_file())
    assert len(buffer) == 16 and size < 100_000


def test_every_recipe_answers_help_without_loading_torch():
    """A recipe parses its command line before the library loads: ``--help`` prints the recipe's
    text without importing torch, tensordict or TorchRL (it answers in about a second)."""
    recipes = sorted((Path(__file__).parents[2] / "recipes").glob("*.py"))
    code = (
        "import contextlib, io, runpy, sys\n"
        "for path in sys.argv[1:]:\n"
        "    sys.argv = [path, '--help']\n"
        "    text = io.StringIO()\n"
        "    with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):\n"
        "        runpy.run_path(path, run_name='__main__')\n"
        "    assert 'usage' in text.getvalue(), path\n"
        "heavy = sorted(m for m in ('torch', 'tensordict', 'torchrl') if m in sys.modules)\n"
        "print('loaded:', heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, recipes)], capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "loaded: []" in done.stdout, done.stdout
    assert len(recipes) >= 17


def test_gradient_steps_keep_the_update_ratio_and_count_in_the_run(tmp_path):
    quiet = LogConfig(progress=False, tensorboard=False, curve=False)
    cfg = configure(Config, log_dir=str(tmp_path), log=quiet, total_frames=64, checkpoint_every=0)
    run, collector = _run(cfg)
    seen: list[int] = []
    with run:
        for _ in run.resume(collector):
            before = run.updates
            steps = list(run.gradient_steps(learning_starts=16, utd_ratio=0.5))
            assert steps == list(range(before + 1, run.updates + 1))
            seen += steps
            # none before learning_starts, then one per two env steps since it
            assert run.updates == max(0, collector.frames - 16) // 2
            run.step()
    assert seen == list(range(1, 25))


def test_the_clip_range_decays_over_the_run_only_when_asked():
    from tdrl.trainers.config import PPOConfig

    assert PPOConfig(clip_epsilon=0.1).clip_range(512, 1024) == 0.1
    decaying = PPOConfig(clip_epsilon=0.1, clip_decay=True)
    clips = [decaying.clip_range(f, 1024) for f in (0, 256, 768)]
    assert clips == pytest.approx([0.1, 0.075, 0.025])
    assert decaying.clip_range(2048, 1024) == 0.0  # never negative


def test_per_beta_anneals_linearly_to_one_and_leaves_a_uniform_buffer_alone():
    from tdrl.data import PrioritizedReplayBuffer, ReplayBuffer
    from tdrl.trainers.config import PERConfig

    per = PERConfig(prioritized=True, per_beta=0.4)
    buffer = PrioritizedReplayBuffer(100, alpha=0.6, beta=per.per_beta)
    betas = []
    for frames in (0, 500, 1000, 2000):
        per.anneal(buffer, frames, total_frames=1000)
        betas.append(buffer.beta)
    assert betas == pytest.approx([0.4, 0.7, 1.0, 1.0])
    uniform = ReplayBuffer(100)
    per.anneal(uniform, 500, total_frames=1000)
    assert not hasattr(uniform, "beta")
    assert per.buffer_kwargs() == dict(prioritized=True, alpha=0.6, beta=0.4, n_steps=1)


@pytest.mark.parametrize("deterministic", [True, False])
def test_the_evaluation_acts_by_the_policys_mode_or_its_samples_as_configured(
    tmp_path, deterministic
):
    from tensordict.nn.probabilistic import InteractionType, interaction_type

    quiet = LogConfig(progress=False, tensorboard=False, curve=False)
    cfg = configure(Config, log_dir=str(tmp_path), log=quiet, eval_episodes=2,
                    eval_deterministic=deterministic)  # fmt: skip
    run, collector = _run(cfg)
    actor, seen = run.policy, []

    def policy(td):
        seen.append(interaction_type())
        return actor(td)

    run.policy = policy
    with run:
        for _ in run.resume(collector):
            run.step()
        run.report()
    want = InteractionType.DETERMINISTIC if deterministic else InteractionType.RANDOM
    assert seen and set(seen) == {want}  # the final evaluation's every step
